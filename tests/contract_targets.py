"""Planted targets for tests/test_contracts.py: packed kernels that declare fla's precondition
``T == cu_seqlens[-1]`` (gradcheck_rnn/targets/contracts.py) and break it outside, or inside, it."""

from __future__ import annotations

import numpy as np

from gradcheck_rnn.kernels.fused_cpu import FusedCPUTarget
from gradcheck_rnn.targets.packed import PackedAdapter
from gradcheck_rnn.targets.contracts import Contract

TAIL_CONTRACT = Contract("T == cu_seqlens[-1]", "cu_seqlens: consistent with the FlashAttention API",
                         "a planted test target", "leaves the dx rows past cu_seqlens[-1] unwritten")


class GarbageTail(PackedAdapter):
    """Correct inside its contract; past cu_seqlens[-1] its dx keeps whatever was there (x's values)."""

    contracts = (TAIL_CONTRACT,)

    def __init__(self) -> None:
        super().__init__(FusedCPUTarget(name="fused-cpu"), name="garbage-tail")

    def input_grad_buffer(self, x_packed: np.ndarray) -> np.ndarray:
        return x_packed.copy()


class WrongInside(GarbageTail):
    """The same, with dx 1% off at every real token: a failure inside the contract it declares."""

    def run(self, case):
        out = super().run(case)
        out.grads["x"] = out.grads["x"] * 1.01
        return out


class NaNEveryOtherCall(GarbageTail):
    """The same, with a parameter gradient NaN on every second call of a case past its contract (a
    gradient summed over unwritten rows: garbage that is finite in one run and NaN in the next)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def run(self, case):
        out = super().run(case)
        self.calls += 1
        if case.tail and self.calls % 2 == 0:
            name = next(k for k in out.grads if k.startswith("l0."))
            out.grads[name] = np.full_like(out.grads[name], np.nan)
        return out


garbage_tail = GarbageTail()
wrong_inside = WrongInside()
nan_every_other_call = NaNEveryOtherCall()
