"""Targets for the mLSTM convention's tests (tests/test_conventions.py): mlstm_kernels' autograd
form, which computes the true derivative, declaring the ``head_norm`` convention. The true
derivative is exact under it, so any failure it gets there is a false alarm of the convention."""

from __future__ import annotations

from typing import Any

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
