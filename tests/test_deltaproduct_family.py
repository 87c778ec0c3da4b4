"""The ``deltaproduct`` family (gradcheck_rnn/families/deltaproduct.py) and its fused CPU kernel
(gradcheck_rnn/kernels/deltaproduct_cpu.py): its case ids and n-fold maps, gdn when n = 1, the
two references agreeing, the kernel equal to the float64 loop reference at every chunk size and
judged correct in float32, and each of its mutants caught where the correct kernel passes."""

import numpy as np
import pytest
import torch

import gradcheck_rnn as gr
from gradcheck_rnn import Case
from gradcheck_rnn.families import family
from gradcheck_rnn.families.ops import torch_ops
from gradcheck_rnn.judging.context import CaseContext
from gradcheck_rnn.kernels.deltaproduct_cpu import DeltaProductCPUKernel
from gradcheck_rnn.model.case import as_mapping
from gradcheck_rnn.references import run_reference

F64_IDS = [
    "deltaproduct-L2-uni-I3-H4-NH2-K2-n2-T9-B4-len9.8.5.0-f64-s1",
    "deltaproduct-L2-uni-I2-H6-NH3-K3-n3-strongdecay-T7-B3-len7.4.1-f64-s2",
    "deltaproduct-L1-uni-I4-H2-K4-n2-longmem-T6-B2-len6.5-f64-s3-z",
    "deltaproduct-L2-uni-I1-H2-K2-n1-nobias-T5-B3-len0.5.3-f64-s4-gstates",
    "deltaproduct-L1-uni-I3-H4-NH4-K2-n3-T5-B2-len5.2-f64-s5-wparams-glast",
]


def test_the_case_id_names_n_and_the_maps_are_n_fold():
    case = Case.from_id("deltaproduct-L2-uni-I3-H4-NH2-K3-n3-T5-B2-len5.2-f64-s1")
    assert case.id.startswith("deltaproduct-L2-uni-I3-H4-NH2-K3-n3-T5")
    shapes = {k: v.shape for k, v in case.params.items() if k.startswith("l1.")}
    assert shapes == {"l1.fwd.w_q": (6, 4), "l1.fwd.w_k": (18, 4), "l1.fwd.w_v": (12, 4), "l1.fwd.w_a": (2, 4),
                      "l1.fwd.b_a": (2,), "l1.fwd.w_b": (6, 4), "l1.fwd.b_b": (6,)}
    assert case.h0.shape == (2, 2, 2 * 3 * 2)
    with pytest.raises(gr.UsageError, match="n<Householder steps per token>"):
        Case.from_id("deltaproduct-L1-uni-I3-H4-K3-T5-B2-len5.2-f64-s1")


def test_with_one_step_it_is_gdn_on_the_same_parameters():
    case = Case.from_id("deltaproduct-L1-uni-I3-H4-NH2-K3-n1-T5-B2-len5.2-f64-s1")
    gdn_case = Case.from_id("gdn-L1-uni-I3-H4-NH2-K3-T5-B2-len5.2-f64-s1")
    p = {k.rpartition(".")[2]: torch.from_numpy(v) for k, v in case.params.items()}
    x, h = torch.randn(7, 3, dtype=torch.float64), torch.randn(7, 12, dtype=torch.float64)
    ours = family("deltaproduct").step(torch_ops(), p, x, h, None, case.config)
    theirs = family("gdn").step(torch_ops(), p, x, h, None, gdn_case.config)
    for a, b in zip(ours[:2], theirs[:2]):
        torch.testing.assert_close(a, b, rtol=1e-14, atol=1e-14)


def test_the_decay_is_applied_once_a_token_and_the_output_read_after_the_last_step():
    """One token (K = 2, V = 1) with β = 1 and the same key k̂ for both steps, from S = 0: the
    second write replaces what the first wrote along k̂, S = k̂ (v₂ + (1 − |k̂|²) v₁), and the read
    sees it. With β ≈ 0 the state h is only decayed, by α once, not αⁿ."""
    case = Case.from_id("deltaproduct-L1-uni-I2-H1-K2-n2-T1-B1-len1-f64-s1")
    key = [[1.0, 0.0], [0.0, 0.0]]
    p = {k: torch.tensor(v, dtype=torch.float64) for k, v in {
        "w_q": key, "w_k": key * 2, "w_v": [[2.0, 0.0], [0.0, 3.0]], "w_a": [[0.0, 0.0]], "b_a": [0.0],
        "w_b": [[0.0, 0.0]] * 2, "b_b": [40.0, 40.0]}.items()}
    x = torch.tensor([1.0, 1.0], dtype=torch.float64)  # x̂ = x / sqrt(mean(x²) + 1) = x / √2
    y, state, _ = family("deltaproduct").step(torch_ops(), p, x, torch.zeros(2, dtype=torch.float64), None,
                                              case.config)
    unit = (1 / np.sqrt(2)) / np.sqrt(0.5 + 1e-6)  # k̂'s first unit (fla's l2norm of [1/√2, 0])
    v1, v2 = 2 / np.sqrt(2), 3 / np.sqrt(2)
    written = unit * (v2 + (1 - unit ** 2) * v1)
    np.testing.assert_allclose(state.numpy(), [written, 0.0], rtol=1e-12)
    np.testing.assert_allclose(y.numpy(), [written * unit / np.sqrt(2)], rtol=1e-12)
    p["b_b"] = torch.full((2,), -60.0, dtype=torch.float64)
    decayed = family("deltaproduct").step(torch_ops(), p, x, torch.tensor([1.0, 2.0], dtype=torch.float64), None,
                                          case.config)[1]
    np.testing.assert_allclose(decayed.numpy(), [0.5, 1.0], rtol=1e-12)  # σ(0) once, not σ(0)²


@pytest.mark.parametrize("case_id", F64_IDS[:2])
def test_the_two_references_agree(case_id):
    assert CaseContext(Case.from_id(case_id)).disagreement is None


@pytest.mark.parametrize("case_id", F64_IDS)
def test_the_kernel_equals_the_float64_loop_reference_at_every_chunk_size(case_id):
    case = Case.from_id(case_id)
    expected = as_mapping(run_reference("loop", case))
    for chunk in (1, 2, 3, 4, 8):
        out = as_mapping(DeltaProductCPUKernel(chunk).run(case, torch.float64))
        assert set(out) == {"y", "hy", *case.wants}, chunk
        for name, value in out.items():
            scale = np.abs(expected[name]).max()
            np.testing.assert_allclose(value.numpy(), expected[name], rtol=1e-10, atol=1e-12 * (1 + scale),
                                       err_msg=f"chunk {chunk}: {name}")


@pytest.mark.parametrize("case_id", ["deltaproduct-L2-uni-I3-H4-NH2-K2-n2-T9-B3-len9.4.0-f32-s11",
                                     "deltaproduct-L1-uni-I2-H6-NH3-K3-n3-strongdecay-T6-B2-len6.5-f32-s12-gstates"])
def test_every_check_passes_the_float32_kernel(case_id):
    rows = gr.check("fused-cpu", case_id, config="matrix")
    assert {r.status for r in rows} <= {"pass", "skip"}, [(r.check, r.status, r.message) for r in rows]
    assert [r.status for r in rows if r.check == "reference"] == ["pass"]


# ------------------------------------------------------------------ mutants
MUTANTS = ["deltaproduct-backward-decays-every-sub-step", "deltaproduct-backward-reads-first-sub-step",
           "deltaproduct-state-grad-drops-second-householder"]
MUTANT_ID = "deltaproduct-L1-uni-I3-H4-NH2-K3-n2-T7-B2-len7.5-{dtype}-s21"


@pytest.mark.parametrize("name", MUTANTS)
@pytest.mark.parametrize("dtype", ["f64", "f32"])
def test_each_mutant_is_caught(name, dtype):
    rows = gr.check(f"mutant:{name}", MUTANT_ID.format(dtype=dtype), config="matrix", checks=["reference"])
    assert [r.status for r in rows] == ["fail"]


@pytest.mark.parametrize("dtype", ["f64", "f32"])
def test_the_correct_kernel_passes_where_the_mutants_are_caught(dtype):
    rows = gr.check("fused-cpu", MUTANT_ID.format(dtype=dtype), config="matrix", checks=["reference"])
    assert [r.status for r in rows] == ["pass"]


@pytest.mark.parametrize("name", MUTANTS)
def test_each_mutant_hides_with_one_step_a_token(name):
    # n = 1: no second sub-step, and the first is the last: every mutant is the correct kernel
    rows = gr.check(f"mutant:{name}", MUTANT_ID.format(dtype="f64").replace("-n2-", "-n1-"), config="matrix",
                    checks=["reference"])
    assert [r.status for r in rows] == ["pass"]
