"""The old name of :mod:`gradcheck_rnn.model.packed`, kept so that imports written for it keep working."""

from .model.packed import *  # noqa: F401,F403
