"""``padding``: changing x and dy at padded steps changes nothing (MXNet #19323).

Compares the run on the case with padded steps redrawn against the base run, within the sum of
the two runs' tolerances (:func:`~gradcheck_rnn.judging.checks.base.compare_runs`).
"""

from __future__ import annotations

import numpy as np

from ...model.case import round_to_dtype, with_changes
from ...model.compare import TensorError
from ...model.tolerances import Tolerances
from .base import Check, Labels, Skip, compare_runs


def check_padding(context, call, tolerances: Tolerances) -> list[TensorError]:
    case = context.case
    padded = np.arange(case.config.max_len)[:, None] >= case.seq_lengths[None, :]
    if not padded.any():
        raise Skip("no padded steps: every sequence has length T")
    rng = CHECK.rng(case)
    mask = padded[:, :, None]
    x = np.where(mask, round_to_dtype(rng.standard_normal(case.x.shape) * 3, case.config.dtype), case.x)
    dy = np.where(mask, round_to_dtype(rng.standard_normal(case.dy.shape) * 3, case.config.dtype), case.dy)
    changed = call.run(with_changes(case, x=x, dy=dy))
    return compare_runs(case, changed, [call.base()], tolerances)


# salt 1 before issue 43, which was also the packed tail's (part of a case's data: kept)
CHECK = Check("padding", check_padding, order=30, labels=Labels("padded steps changed", "unchanged"), salt=9)
