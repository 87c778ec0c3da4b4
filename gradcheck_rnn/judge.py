"""The old name of :mod:`gradcheck_rnn.judging.judge`, kept so that imports written for it keep working."""

from .judging.judge import *  # noqa: F401,F403
