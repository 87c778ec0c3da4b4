"""fused-gpu's conv1d kernel (the Triton convolution of gradcheck_rnn/kernels/fused_gpu/conv_taps.py)
on CPU through the Triton interpreter.

As in tests/test_fused_gpu.py, ``TRITON_INTERPRET=1`` is set for the whole module before the
Triton convolution is first imported. The kernel is pinned to the CPU kernel it extends, in
float64 and float32, on cases of several row blocks and channel blocks (N > 32 rows, H > 64
channels), short and zero lengths and stacked layers; fused-gpu passes the reference check."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("triton")

from test_fused_gpu import interpreter  # noqa: F401  (the module's autouse fixture)

import gradcheck_rnn as gr
from gradcheck_rnn import Case
from gradcheck_rnn.kernels.conv1d_cpu import Conv1dCPUKernel
from gradcheck_rnn.model.case import as_mapping

KERNEL_IDS = ["conv1d-L2-uni-I3-H4-W3-silu-T9-B4-len9.0.2.7-f64-s31",
              "conv1d-L1-uni-I2-H70-W4-T40-B2-len40.1-f64-s32"]


@pytest.mark.parametrize("dtype, rtol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
@pytest.mark.parametrize("case_id", KERNEL_IDS)
def test_the_triton_convolution_equals_the_cpu_kernel(case_id, dtype, rtol):
    from gradcheck_rnn.kernels.fused_gpu.conv1d import Conv1dGPUKernel

    case = Case.from_id(case_id)
    expected = as_mapping(Conv1dCPUKernel().run(case, dtype))
    got = as_mapping(Conv1dGPUKernel().run(case, dtype))
    assert set(got) == set(expected)
    for name, value in got.items():
        np.testing.assert_allclose(value.numpy(), expected[name].numpy(), rtol=rtol, atol=rtol, err_msg=name)


def test_fused_gpu_passes_a_float32_conv1d_case():
    rows = gr.check("fused-gpu", "conv1d-L2-uni-I2-H3-W4-silu-T6-B3-len6.1.0-f32-s33", config="families",
                    checks=["reference"])
    assert [r.status for r in rows] == ["pass"], [r.message for r in rows]
