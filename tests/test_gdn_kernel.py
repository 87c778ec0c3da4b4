"""The fused chunkwise gdn kernel (gradcheck_rnn/kernels/gdn_cpu.py): equal to the float64 loop
reference at every chunk size, judged correct by every check in float32 (strong decay, long
memory, lengths at chunk edges, zero lengths, partial requests, head variants), and each of its
mutants caught where the correct kernel passes."""

import dataclasses

import numpy as np
import pytest
import torch

import gradcheck_rnn as gr
from gradcheck_rnn import Case
from gradcheck_rnn.case import as_mapping
from gradcheck_rnn.kernels.fused_cpu import FusedCPUTarget
from gradcheck_rnn.kernels.gdn_cpu import GDNCPUKernel
from gradcheck_rnn.references import run_reference

CHUNKS = [1, 2, 3, 4, 8]
# Lengths 9, 8, 5, 4, 3 sit at c−1, c, c+1 and 2c+1 of chunks 2, 4 and 8 (and cross chunk 3's
# edges); 0 is a sequence that never runs. Every family option, regime and variant appears once.
F64_IDS = [
    "gdn-L2-uni-I3-H4-NH2-K2-T9-B6-len9.8.5.4.3.0-f64-s1",
    "gdn-L3-uni-I2-H6-NH3-K3-strongdecay-T17-B4-len17.9.0.8-f64-s3",
    "gdn-L1-uni-I4-H2-K4-longmem-T9-B3-len9.5.4-f64-s4-z",
    "gdn-L2-uni-I1-H1-K1-nobias-T5-B3-len0.5.3-f64-s5-gstates",
    "gdn-L2-uni-I3-H4-NH4-K2-T13-B2-len13.4-f64-s6-wparams-glast",
    "gdn-L2-uni-I3-H4-NH2-K3-T9-B2-len9.3-f64-s7-winputs-gy",
    "gdn-L1-uni-I2-H3-K1-strongdecay-T12-B2-len12.7-f64-s8-wx",
]
F32_IDS = [
    "gdn-L3-uni-I2-H6-NH3-K3-strongdecay-T17-B4-len17.9.0.8-f32-s3",
    "gdn-L2-uni-I3-H4-NH2-K4-longmem-T13-B3-len13.4.5-f32-s11",
    "gdn-L2-uni-I1-H2-K2-nobias-T9-B3-len0.9.3-f32-s12-gstates-z",
    "gdn-L1-uni-I4-H4-NH4-K1-T8-B2-len8.7-f32-s13-winputs-glast",
]


@pytest.mark.parametrize("case_id", F64_IDS)
def test_the_kernel_equals_the_float64_loop_reference_at_every_chunk_size(case_id):
    case = Case.from_id(case_id)
    expected = as_mapping(run_reference("loop", case))
    for chunk in CHUNKS:
        out = as_mapping(GDNCPUKernel(chunk).run(case, torch.float64))
        assert set(out) == {"y", "hy", *case.wants}, chunk
        for name, value in out.items():
            # atol relative to the tensor's scale: a K = 1 key's L2 norm makes its map's gradient ~1e-6
            scale = np.abs(expected[name]).max()
            np.testing.assert_allclose(value.numpy(), expected[name], rtol=1e-10, atol=1e-12 * (1 + scale),
                                       err_msg=f"chunk {chunk}: {name}")


@pytest.mark.parametrize("case_id", F32_IDS)
@pytest.mark.parametrize("chunk", [4, pytest.param(16, marks=pytest.mark.slow)])  # chunk 16: strong decay over e^-64
def test_every_check_passes_the_float32_kernel(case_id, chunk):
    """Chunk 16 spans e^−64 of decay under -strongdecay: still finite, still right."""
    target = FusedCPUTarget(family_kernels={"gdn": GDNCPUKernel(chunk)})
    rows = gr.check(target, case_id, config="matrix")
    assert {r.status for r in rows} <= {"pass", "skip"}, [(r.check, r.status, r.message) for r in rows]
    assert [r.status for r in rows if r.check == "reference"] == ["pass"]


def test_fused_cpu_runs_gdn_computing_only_the_requested_gradients():
    case = Case.from_id("gdn-L2-uni-I3-H4-NH2-K2-T6-B2-len6.2-f32-s1-wx")
    assert set(FusedCPUTarget().run(case).grads) == {"x"}
    assert "f64 and f32 only" in FusedCPUTarget().supports(dataclasses.replace(case.config, dtype="f16"))
    rows = gr.check("fused-cpu", case.id, config="matrix", checks=["reference"])
    assert [r.status for r in rows] == ["pass"]


class _RecordingKernel(GDNCPUKernel):
    """Records what each layer's backward made: (dx made, weight gradients made), top layer first."""

    def __init__(self):
        super().__init__()
        self.made = []

    def layer_backward(self, cfg, p, layer, mask, dy, dhy, need_weights, need_x):
        dx, dh0, grads = super().layer_backward(cfg, p, layer, mask, dy, dhy, need_weights, need_x)
        self.made.append((dx is not None, bool(grads)))
        return dx, dh0, grads


@pytest.mark.parametrize("group, made", [("-wx", [(True, False), (True, False)]),
                                         ("-wparams", [(True, True), (False, True)])])
def test_weight_gradients_and_the_bottom_dx_are_made_only_when_requested(group, made):
    kernel = _RecordingKernel()
    kernel.run(Case.from_id(f"gdn-L2-uni-I2-H2-K2-T5-B2-len5.2-f64-s1{group}"), torch.float64)
    assert kernel.made == made


def test_a_chunk_below_one_is_refused():
    with pytest.raises(ValueError, match="chunk=0 must be >= 1"):
        GDNCPUKernel(0)


# ------------------------------------------------------------------ mutants
MUTANT_IDS = ["gdn-L2-uni-I3-H4-NH2-K2-T9-B3-len9.5.4-f32-s21", "gdn-L1-uni-I2-H2-K3-strongdecay-T6-B2-len6.3-f64-s22"]


@pytest.mark.parametrize("name", ["gdn-state-grad-no-householder", "gdn-sequence-start-gate-grad",
                                  "gdn-padded-gate-grad"])
@pytest.mark.parametrize("case_id", MUTANT_IDS)
def test_each_gdn_mutant_is_caught(name, case_id):
    assert [r.status for r in gr.check(f"mutant:{name}", case_id, config="matrix", checks=["reference"])] == ["fail"]


@pytest.mark.parametrize("case_id", MUTANT_IDS)
def test_the_correct_kernel_passes_where_the_mutants_are_caught(case_id):
    assert [r.status for r in gr.check("fused-cpu", case_id, config="matrix", checks=["reference"])] == ["pass"]


def test_the_sequence_start_mutant_hides_without_an_initial_state():
    # α at t = 0 scales h0 alone: from a zero state its gradient is 0, and zeroing it is exact
    rows = gr.check("mutant:gdn-sequence-start-gate-grad", MUTANT_IDS[0] + "-z", config="matrix", checks=["reference"])
    assert [r.status for r in rows] == ["pass"]


def test_the_padded_gate_mutant_hides_when_every_sequence_is_full():
    rows = gr.check("mutant:gdn-padded-gate-grad", "gdn-L2-uni-I3-H4-NH2-K2-T9-B2-len9.9-f32-s21", config="matrix",
                    checks=["reference"])
    assert [r.status for r in rows] == ["pass"]
