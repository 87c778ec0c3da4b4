"""The old name of :mod:`gradcheck_rnn.judging.compare`, kept so that imports written for it keep working."""

from .judging.compare import *  # noqa: F401,F403
