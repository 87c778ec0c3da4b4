"""gradcheck_rnn/targets/foreign/triton_cpu.py: Triton's interpreter for the duration of a call
only (issue 36): TRITON_INTERPRET and every autotuner's configurations are the user's again after."""

from __future__ import annotations

import os
import sys
import types

import pytest

from gradcheck_rnn.model.case import Outputs
from gradcheck_rnn.targets.foreign import LocalForeignTarget, triton_cpu

triton = pytest.importorskip("triton")


def _library_with_an_autotuner(name: str):
    """A fake library module holding one jit kernel behind an autotuner of three configurations."""
    import triton.language as tl

    def kernel(x, BLOCK: tl.constexpr):
        pass

    module = types.ModuleType(name)
    module.kernel = triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (1, 2, 4)], key=[])(triton.jit(kernel))
    return module


@pytest.mark.skipif(not triton_cpu.interpreted(), reason="on a CUDA machine the call is left alone")
def test_the_interpreter_and_one_config_hold_for_the_call_only(monkeypatch):
    module = _library_with_an_autotuner("fakelib.ops")
    monkeypatch.setitem(sys.modules, "fakelib.ops", module)
    monkeypatch.setenv(triton_cpu.INTERPRET, "0")
    with triton_cpu.interpreter_call("fakelib"):
        assert os.environ[triton_cpu.INTERPRET] == "1"
        assert [c.kwargs["BLOCK"] for c in module.kernel.configs] == [1]
    assert os.environ[triton_cpu.INTERPRET] == "0"
    assert [c.kwargs["BLOCK"] for c in module.kernel.configs] == [1, 2, 4]


@pytest.mark.parametrize("candidate, held", [(0, [1]), (2, [4]), (5, [4])])
def test_a_pinned_candidate_is_the_only_config_for_the_block_on_any_device(monkeypatch, candidate, held):
    """-kc.autotune.<i> (fla-recurrent): candidate i, the last where there are fewer; all three after."""
    module = _library_with_an_autotuner("fakelib.ops")
    monkeypatch.setitem(sys.modules, "fakelib.ops", module)
    assert triton_cpu.candidate_count("fakelib.ops") == 3
    with triton_cpu.pinned_candidate("fakelib", candidate):
        assert [c.kwargs["BLOCK"] for c in module.kernel.configs] == held
        with triton_cpu.interpreter_call("fakelib"):  # the interpreter's cut to one keeps the pinned one
            assert [c.kwargs["BLOCK"] for c in module.kernel.configs] == held
    assert [c.kwargs["BLOCK"] for c in module.kernel.configs] == [1, 2, 4]


def test_an_in_process_target_that_returns_outputs_keeps_its_packed_tails():
    """A packed target's Outputs (packed.packed_outputs) reach the judge with the tail rows of dx."""
    class Packed:
        name = "packed"

        def run(self, case):
            return Outputs(y=[[0.0]], hy=[[0.0]], grads={"x": [[0.0]]}, tails={"x": [[1.0]]})

    assert LocalForeignTarget(Packed()).run(None).tails == {"x": [[1.0]]}
