"""fused-gpu's rwkv7 kernel (gradcheck_rnn/kernels/fused_gpu/rwkv7.py: gdn's Triton hand-off across
steps) on CPU through the Triton interpreter, as tests/test_fused_gpu_matrix.py checks the other
matrix families: equal to the CPU kernel in float64, run by the fused-gpu target in float32, and
its mutant caught where the correct kernel passes. Cases stay tiny: a launch costs ~40 ms
interpreted, and the hand-off launches once per layer each way."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("triton")

from test_fused_cpu import outputs
from test_fused_gpu import interpreter  # noqa: F401  (the module's autouse fixture: TRITON_INTERPRET=1)

import gradcheck_rnn as gr
from gradcheck_rnn import Case
from gradcheck_rnn.kernels.fused_gpu import FusedGPUTarget
from gradcheck_rnn.kernels.rwkv7_cpu import RWKV7CPUKernel
from gradcheck_rnn.targets.kernel_bugs import GPU_FAMILY_MUTANTS, home_profile

MUTANT = "gpu-rwkv7-state-grad-reads-next-step"
CASE = "rwkv7-L1-uni-I3-H4-NH2-K2-T5-B2-len5.4-f32-s1"


@pytest.mark.parametrize("case_id", ["rwkv7-L2-uni-I3-H6-NH2-K3-T6-B3-len6.4.0-f64-s3",
                                     "rwkv7-L1-uni-I2-H3-K3-strongdecay-T5-B2-len5.2-f64-s5-z"])
def test_float64_kernel_equals_the_cpu_kernel(case_id):
    case = Case.from_id(case_id)
    kernel = FusedGPUTarget.family_kernel_classes()["rwkv7"]
    got, want = (outputs(k().run(case, torch.float64, "cpu")) for k in (kernel, RWKV7CPUKernel))
    assert set(got) == set(want) and case.wants <= set(got)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-12, atol=1e-13, err_msg=name)


def test_fused_gpu_runs_rwkv7_through_its_triton_kernel_and_its_mutant_is_caught():
    target = FusedGPUTarget()
    assert type(target.family_kernels["rwkv7"]).__name__ == "RWKV7GPUKernel"
    assert GPU_FAMILY_MUTANTS[MUTANT][0] == "rwkv7" and home_profile(MUTANT) == "matrix"
    results = gr.check([f"mutant:{MUTANT}", "fused-gpu"], CASE, checks=["reference"], in_process=True)
    assert {r.target: r.status for r in results} == {f"mutant:{MUTANT}": "fail", "fused-gpu": "pass"}


def test_the_gpu_mutant_is_the_correct_kernel_on_one_step():
    """The shifted read is clamped to the last step: with one step nothing is read from elsewhere."""
    case = Case.from_id("rwkv7-L1-uni-I3-H4-NH2-K2-T1-B2-len1.1-f32-s1")
    correct = FusedGPUTarget.family_kernel_classes()["rwkv7"]
    mutant = type("Mutant", (GPU_FAMILY_MUTANTS[MUTANT][1], correct), {})
    got, want = (outputs(kernel().run(case, torch.float32, "cpu")) for kernel in (mutant, correct))
    assert all(np.array_equal(got[name], want[name]) for name in want)
