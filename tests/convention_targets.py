"""Targets for the mLSTM conventions' tests (tests/test_fla_mlstm.py): mlstm_kernels' autograd
form, which computes the true derivative, declaring the ``head_norm`` convention (the true
derivative is exact under it, so any failure it gets there is a false alarm of the convention),
and kernels that declare one ``stabiliser_start`` and compute the other."""

from __future__ import annotations

import dataclasses
from typing import Any

from gradcheck_rnn.model.case import with_changes
from gradcheck_rnn.targets import resolve_target


class ChunkwiseUnderHeadNorm:
    """``mlstm-chunkwise`` judged under ``normaliser_gradient = "head_norm"``."""

    name = "chunkwise-head-norm"
    normaliser_gradient = "head_norm"

    def __init__(self) -> None:
        self._target = resolve_target("mlstm-chunkwise")

    def supports(self, config: Any) -> bool | str:
        return self._target.supports(config)

    def supports_case(self, case: Any) -> bool | str:
        return self._target.supports_case(case)

    def run(self, case: Any) -> Any:
        return self._target.run(case)


chunkwise_head_norm = ChunkwiseUnderHeadNorm()


class CustbwDxOff(ChunkwiseUnderHeadNorm):
    """A kernel that follows the convention but is wrong inside it: dx 1% off."""

    name = "custbw-dx-off"

    def run(self, case: Any) -> Any:
        out = super().run(case)
        out.grads["x"] = out.grads["x"] * 1.01
        return out


custbw_dx_off = CustbwDxOff()


class ParallelFromZero:
    """``mlstm-parallel`` declaring the default ``stabiliser_start = "zero"``: the parallel form judged
    against the recurrent one (the unfair verdict the convention removes)."""

    name = "parallel-from-zero"
    stabiliser_start = "zero"

    def __init__(self) -> None:
        self._target = resolve_target("mlstm-parallel")

    def supports_case(self, case: Any) -> bool | str:
        return self._target.supports_case(case)

    def run(self, case: Any) -> Any:
        return self._target.run(case)


parallel_from_zero = ParallelFromZero()


class ChunkwiseFromZeroUnderMinusInfinity:
    """Declares ``stabiliser_start = "minus_infinity"`` but computes from m₀ = 0: mlstm_kernels'
    chunkwise kernel run on the case without -minf."""

    name = "chunkwise-from-zero-minus-infinity"
    stabiliser_start = "minus_infinity"

    def __init__(self) -> None:
        self._target = resolve_target("mlstm-chunkwise")

    def run(self, case: Any) -> Any:
        options = {**dict(case.config.options), "minus_inf_start": False}
        return self._target.run(with_changes(case, config=dataclasses.replace(case.config, options=options)))


chunkwise_from_zero_minus_infinity = ChunkwiseFromZeroUnderMinusInfinity()
