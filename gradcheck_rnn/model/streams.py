"""The private random streams of a case: one salt per owner, so that no two features draw the same numbers.

A case's data is drawn from ``PCG64(seed)`` (:mod:`gradcheck_rnn.model.case`); everything else
that draws numbers for a case (a check's perturbations, the packed tail, the fd witness's
directions, the drift probe's noise, a kernel configuration) draws from its own generator
``SeedSequence([case.seed, salt])``, through :func:`case_rng`, with a salt its owner claims here
at import (:func:`claim`). Two owners of one salt once drew the same stream (the padding check
and the packed tail; the segments check and the drift probe): a second claim of a salt is now an
error at import, and ``tests/test_engine.py`` checks that no per-case stream is made elsewhere.
Changing a salt changes what its owner draws (a case's judged values), so salts never move.
"""

from __future__ import annotations

import numpy as np

_OWNERS: dict[int, str] = {}


def claim(salt: int, owner: str) -> int:
    """Reserve ``salt`` for ``owner`` (a few words naming who draws with it) and return it; a salt
    another owner holds is refused, so that two features never draw the same stream."""
    held = _OWNERS.setdefault(salt, owner)
    if held != owner:
        raise ValueError(f"salt {salt} of {owner} is already the salt of {held}: claim another")
    return salt


def owners() -> dict[int, str]:
    """Every claimed salt and its owner (those of the modules imported so far)."""
    return dict(_OWNERS)


def case_rng(seed: int, salt: int) -> np.random.Generator:
    """The private generator of a case's data seed and one owner's claimed salt."""
    if _OWNERS.get(salt) is None:
        raise ValueError(f"salt {salt} is claimed by no one (gradcheck_rnn.model.streams.claim)")
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(seed), salt])))
