"""Old name of :mod:`gradcheck_rnn.run.advice` (the ``next:`` hint is the engine's now), kept so
that imports written for it keep working."""

from ..run.advice import kinds, load, next_step  # noqa: F401
