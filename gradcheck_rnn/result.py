"""The old name of :mod:`gradcheck_rnn.rows.result`, kept so that imports written for it keep working
(the verdict and the judged ``Run`` it held are :mod:`gradcheck_rnn.rows.verdict`'s now)."""

from .rows.result import *  # noqa: F401,F403
from .rows.verdict import *  # noqa: F401,F403
