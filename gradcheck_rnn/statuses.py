"""The old name of :mod:`gradcheck_rnn.rows.statuses`, kept so that imports written for it keep working."""

from .rows.statuses import *  # noqa: F401,F403
