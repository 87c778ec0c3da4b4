"""``permutation``: permuting the batch permutes the outputs and input gradients and leaves the
parameter gradients unchanged."""

from __future__ import annotations

import numpy as np

from ...model.case import with_changes
from ...model.compare import TensorError
from ...model.tolerances import Tolerances
from .base import Check, Labels, Skip, compare_runs

# Tensors whose axis 1 is the batch; parameter gradients have no batch axis.
BATCHED = frozenset({"y", "x", "hy", "cy", "h0", "c0"})


def check_permutation(context, call, tolerances: Tolerances) -> list[TensorError]:
    case = context.case
    B = case.config.batch_size
    if B < 2:
        raise Skip("batch of one: nothing to permute")
    perm = CHECK.rng(case).permutation(B)
    if (perm == np.arange(B)).all():
        perm = np.roll(perm, 1)

    def permuted(a: np.ndarray | None) -> np.ndarray | None:
        return None if a is None else a[:, perm]

    moved = with_changes(case, x=permuted(case.x), seq_lengths=case.seq_lengths[perm], h0=permuted(case.h0),
                         c0=permuted(case.c0), dy=permuted(case.dy), dhy=permuted(case.dhy), dcy=permuted(case.dcy))
    expected = {k: (v[:, perm] if k in BATCHED else v) for k, v in call.base().items()}
    return compare_runs(case, call.run(moved), [expected], tolerances)


CHECK = Check("permutation", check_permutation, order=40, labels=Labels("permuted batch", "original, permuted"),
              salt=2)
