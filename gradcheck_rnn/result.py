"""The old name of :mod:`gradcheck_rnn.rows.result`, kept so that imports written for it keep working."""

from .rows.result import *  # noqa: F401,F403
