"""The conv1d family (gradcheck_rnn/families/conv1d.py) and its fused kernel
(gradcheck_rnn/kernels/conv1d_cpu.py): case ids, the state's semantics (the last W−1 inputs, h0
passed through by a short sequence), both references against finite differences and one bucketed
program, the kernel equal to the float64 loop reference and judged correct by every check, and
each tracker mutant caught where it matters and hidden where it cannot show."""

import numpy as np
import pytest
import torch
from family_checks import assert_matches_central_differences, assert_one_bucketed_program_is_exact

import gradcheck_rnn as gr
from gradcheck_rnn import Case
from gradcheck_rnn.errors import UsageError
from gradcheck_rnn.kernels.conv1d_cpu import Conv1dCPUKernel
from gradcheck_rnn.model.case import as_mapping
from gradcheck_rnn.references import run_reference

# Every width, SiLU and bias both ways, lengths shorter than W − 1 (h0 passed through), zero
# lengths, a sequence of one step, stacked layers, and the variants.
F64_IDS = [
    "conv1d-L2-uni-I3-H4-W3-T7-B3-len7.1.4-f64-s1",
    "conv1d-L3-uni-I2-H3-W4-silu-nobias-T9-B4-len9.0.2.5-f64-s2",
    "conv1d-L1-uni-I1-H1-W2-T3-B2-len3.1-f64-s3-z",
    "conv1d-L2-uni-I2-H3-W4-silu-T5-B4-len0.1.2.5-f64-s4-gstates",
    "conv1d-L2-uni-I4-H2-W3-silu-T6-B3-len6.1.2-f64-s6-wparams-glast",
    "conv1d-L1-uni-I2-H3-W4-T4-B2-len0.0-f64-s5-winputs",
]


@pytest.mark.parametrize("case_id", F64_IDS)
def test_the_kernel_equals_the_float64_loop_reference(case_id):
    case = Case.from_id(case_id)
    expected = as_mapping(run_reference("loop", case))
    out = as_mapping(Conv1dCPUKernel().run(case, torch.float64))
    assert set(out) == {"y", "hy", *case.wants}
    for name, value in out.items():
        np.testing.assert_allclose(value.numpy(), expected[name], rtol=1e-12, atol=1e-13, err_msg=name)


@pytest.mark.parametrize("case_id", F64_IDS[:3])
def test_the_two_references_agree(case_id):
    case = Case.from_id(case_id)
    loop, jax = as_mapping(run_reference("loop", case)), as_mapping(run_reference("jax", case))
    assert set(loop) == set(jax)
    for name in loop:
        np.testing.assert_allclose(jax[name], loop[name], rtol=1e-12, atol=1e-13, err_msg=name)


@pytest.mark.parametrize("reference", ["loop", "jax"])
def test_both_references_match_central_differences(reference):
    # W = 4 with lengths 1 and 2: the final state passes two and one slots of h0 through
    case = Case.from_id("conv1d-L2-uni-I2-H2-W4-silu-T5-B3-len5.1.2-f64-s9")
    names = ["x", "h0", "l0.fwd.w_in", "l0.fwd.w_conv", "l0.fwd.b_conv", "l1.fwd.w_conv"]
    assert_matches_central_differences(reference, case, names, samples=3, valid_x=(1, 1))


def test_one_bucketed_jax_program_serves_every_width_and_switch_exactly():
    ids = ["conv1d-L2-uni-I3-H2-W2-silu-nobias-T6-B2-len6.0-f64-s3", "conv1d-L2-uni-I1-H4-W4-T3-B3-len3.1.2-f64-s4"]
    assert_one_bucketed_program_is_exact(ids, ids)


def test_the_final_state_is_the_last_inputs_oldest_first_and_h0_passes_through_a_short_sequence():
    """W = 4: a sequence of length 1 keeps h0's two newest slots and shifts its input in; one of
    length 0 keeps h0; a full one holds its last three inputs u_t = W_in x̂_t."""
    case = Case.from_id("conv1d-L1-uni-I2-H2-W4-T5-B3-len1.0.5-f64-s10")
    hy = as_mapping(run_reference("loop", case))["hy"][0].reshape(3, 2, 3)  # (B, H, W − 1)
    h0 = case.h0[0].reshape(3, 2, 3)
    x = case.x / np.sqrt((case.x ** 2).mean(-1, keepdims=True) + 1)
    u = x @ case.params["l0.fwd.w_in"].T  # (T, B, H)
    np.testing.assert_allclose(hy[0], np.concatenate([h0[0][:, 1:], u[0, 0][:, None]], 1), rtol=1e-12)
    np.testing.assert_array_equal(hy[1], h0[1])
    np.testing.assert_allclose(hy[2], u[2:, 2].T, rtol=1e-12)


@pytest.mark.parametrize("bad, words", [
    ("conv1d-L1-uni-I2-H2-W5-T3-B1-len3-f64-s1", "the window W is 2..4"),
    ("conv1d-L1-uni-I2-H2-T3-B1-len3-f64-s1", "W<window>"),
    ("conv1d-L1-bi-I2-H2-W3-T3-B1-len3-f64-s1", "forward in time only"),
    ("conv1d-L1-uni-I2-H2-W3-longmem-T3-B1-len3-f64-s1", "longmem is not allowed"),
])
def test_a_case_id_the_family_cannot_be_is_refused_in_one_sentence(bad, words):
    with pytest.raises(UsageError, match=words):
        Case.from_id(bad)


def test_a_case_id_round_trips():
    case_id = "conv1d-L2-uni-I3-H4-W2-silu-nobias-T7-B3-len7.1.4-f32-s1-wx-gy-z"
    assert Case.from_id(case_id).id == case_id


@pytest.mark.parametrize("case_id", ["conv1d-L2-uni-I3-H4-W4-silu-T9-B4-len9.1.0.6-f32-s11",
                                     "conv1d-L1-uni-I2-H3-W2-T6-B2-len2.6-f32-s12-winputs-glast"])
def test_every_check_passes_the_float32_kernel(case_id):
    rows = gr.check("fused-cpu", case_id, config="families")
    assert {r.status for r in rows} <= {"pass", "skip"}, [(r.check, r.status, r.message) for r in rows]
    assert [r.status for r in rows if r.check == "reference"] == ["pass"]


# ------------------------------------------------------------------ mutants
# name -> (a case where the bug matters, one where it cannot show)
MUTANT_CASES = {
    # lengths 1 and 2 under W = 4 pass h0 through; W = 2 has no sequence shorter than W − 1 = 1 but 0
    "conv1d-short-sequence-dh0-pass-through-dropped": ("conv1d-L1-uni-I2-H3-W4-T6-B3-len1.6.2-f64-s21",
                                                       "conv1d-L1-uni-I2-H3-W2-T6-B3-len1.6.2-f64-s21"),
    # several sequences; a batch of one sums its own rows however the range is read
    "conv1d-packed-dweight-whole-stream": ("conv1d-L2-uni-I2-H3-W3-T5-B2-len5.3-f32-s22",
                                           "conv1d-L2-uni-I2-H3-W3-T5-B1-len5-f32-s22"),
    # SiLU, a bias and an initial state; without the bias there is nothing to leave out
    "conv1d-initial-state-grad-without-bias": ("conv1d-L1-uni-I2-H3-W3-silu-T5-B2-len5.3-f64-s23",
                                               "conv1d-L1-uni-I2-H3-W3-silu-nobias-T5-B2-len5.3-f64-s23"),
    # the first sequence ends at packed row 2, its taps read rows 3 and 4 (the next block)
    "conv1d-backward-reads-next-sequence": ("conv1d-L1-uni-I2-H3-W3-T5-B2-len3.5-f32-s24",
                                            "conv1d-L1-uni-I2-H3-W3-T5-B1-len5-f32-s24"),
}


@pytest.mark.parametrize("name", list(MUTANT_CASES))
def test_each_conv1d_mutant_is_caught_where_it_matters_and_hides_where_it_cannot_show(name):
    caught, hidden = MUTANT_CASES[name]
    assert [r.status for r in gr.check(f"mutant:{name}", caught, config="families", checks=["reference"])] == ["fail"]
    assert [r.status for r in gr.check(f"mutant:{name}", hidden, config="families", checks=["reference"])] == ["pass"]


@pytest.mark.parametrize("case_id", sorted({ids[0] for ids in MUTANT_CASES.values()}))
def test_the_correct_kernel_passes_where_the_mutants_are_caught(case_id):
    assert [r.status for r in gr.check("fused-cpu", case_id, config="families", checks=["reference"])] == ["pass"]
