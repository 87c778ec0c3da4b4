"""The slstm family: its case ids and draws, both references against finite differences, the fused
kernel's hand-written BPTT, the stabiliser-gradient convention a target declares, and the mutants."""

import dataclasses

import numpy as np
import pytest
import torch
from family_checks import (
    assert_matches_central_differences,
    assert_one_bucketed_program_is_exact,
)

import gradcheck_rnn as gr
from gradcheck_rnn import Case
from gradcheck_rnn.model.case import as_mapping
from gradcheck_rnn.errors import UsageError
from gradcheck_rnn.families import family
from gradcheck_rnn.model.profiles import draw_cases, load_profile
from gradcheck_rnn.judging.judge import judged_case
from gradcheck_rnn.kernels.fused_cpu import FusedCPUTarget
from gradcheck_rnn.kernels.slstm_cpu import SLSTMCPUKernel
from gradcheck_rnn.references import run_reference
from gradcheck_rnn.targets import as_target

# Shapes of one bucketed JAX program (I, H <= 4, T, B <= 8): compiled once for the whole file.
CASE_ID = "slstm-L2-bi-I3-H4-NH2-T5-B3-len5.2.0-f64-s3"
KERNEL_IDS = [CASE_ID, "slstm-L1-uni-I2-H3-expf-T4-B2-len4.3-f64-s1-z",
              "slstm-L3-bi-I2-H4-NH4-expf-nobias-T6-B4-len6.1.0.3-f64-s7-gstates",
              "slstm-L2-uni-I1-H2-T7-B2-len3.7-f32-s8-winputs"]
DTYPES = {"f64": torch.float64, "f32": torch.float32}


def test_case_id_round_trip_shapes_and_valid_initial_states():
    case = Case.from_id("slstm-L2-bi-I3-H4-NH2-expf-nobias-T7-B3-len7.4.1-f32-s9-wx")
    assert case.id == "slstm-L2-bi-I3-H4-NH2-expf-nobias-T7-B3-len7.4.1-f32-s9-wx"
    assert case.config.option("heads") == 2 and case.config.option("exp_forget")
    assert {k: v.shape for k, v in case.params.items() if k.startswith("l1.bwd")} == {
        "l1.bwd.w_ih": (16, 8), "l1.bwd.w_hh": (16, 2)}
    assert case.h0.shape == (4, 3, 4) and case.c0.shape == case.dcy.shape == (4, 3, 12)
    c, n = case.c0[..., :4], case.c0[..., 4:8]
    assert (n >= 1).all() and (np.abs(c) <= n).all()
    assert np.array_equal(Case.from_id(case.id).c0, case.c0)


@pytest.mark.parametrize("bad_id, words", [
    ("slstm-L1-uni-I3-H4-NH3-T7-B1-len7-f32-s9", "heads=3 is not allowed with hidden_size=4"),
    ("slstm-L1-uni-I3-H4-P2-T7-B1-len7-f32-s9", "projections are LSTM only"),
    ("slstm-L1-uni-I3-H4-expf-NH2-T7-B1-len7-f32-s9", "'NH2'"),
])
def test_bad_slstm_ids_raise_one_clear_error(bad_id, words):
    with pytest.raises(UsageError, match=words):
        Case.from_id(bad_id)


def test_the_generator_draws_heads_that_divide_h_and_never_the_convention_token():
    profile = dataclasses.replace(load_profile("families"), modes={"slstm": 1.0})
    cases = list(draw_cases(profile, 0, 60))
    assert all(c.config.hidden_size % c.config.option("heads") == 0 for c in cases)
    assert {c.config.option("exp_forget") for c in cases} == {c.config.bidirectional for c in cases} == {True, False}
    assert any(c.config.option("heads") > 1 for c in cases)
    assert not any(c.config.option("m_constant") for c in cases)
    assert all(Case.from_id(c.id).id == c.id for c in cases)


@pytest.mark.parametrize("reference", ["loop", "jax"])
def test_references_match_central_differences(reference):
    case = Case.from_id(CASE_ID)
    assert_matches_central_differences(reference, case, ["x", "h0", "c0", *case.params], 1, (2, 1))
    # padding: a padded step outputs 0 and has no input gradient; a length-0 sequence keeps its states
    out = run_reference(reference, case)
    assert not out.y[2:, 1].any() and not out.grads["x"][2:, 1].any() and not out.y[:, 2].any()
    assert np.array_equal(out.cy[:, 2], case.c0[:, 2]) and np.array_equal(out.grads["c0"][:, 2], case.dcy[:, 2])


@pytest.mark.parametrize("case_id", KERNEL_IDS)
def test_kernel_matches_the_loop_reference(case_id):
    case = Case.from_id(case_id)
    expected = {k: v for k, v in as_mapping(run_reference("loop", case)).items()
                if k in ("y", "hy", "cy") or k in case.wants}
    out = as_mapping(SLSTMCPUKernel().run(case, torch.float64))
    assert set(out) == set(expected)
    for name, value in out.items():
        np.testing.assert_allclose(value.numpy(), expected[name], rtol=1e-12, atol=1e-13, err_msg=name)


BUCKET_IDS = ["slstm-L2-bi-I3-H4-NH2-T6-B2-len6.0-f64-s3", "slstm-L2-bi-I1-H3-expf-nobias-T3-B3-len3.1.2-f64-s4",
              "slstm-L2-bi-I2-H2-NH2-mconst-T4-B1-len4-f64-s5"]


def test_one_bucketed_jax_program_serves_other_sizes_heads_and_switches():
    assert_one_bucketed_program_is_exact(BUCKET_IDS, [])


@pytest.mark.slow  # an exact-shape program per id: a compile each (~5 s)
def test_the_bucketed_jax_program_equals_the_exact_shape_one():
    assert_one_bucketed_program_is_exact(BUCKET_IDS, BUCKET_IDS)


class HeldStabilizer:
    """A correct kernel whose backward treats each step's m as a constant, and says so."""

    stabilizer_gradient = "constant"

    def run(self, case):
        return SLSTMCPUKernel(hold_stabilizer=True).run(case, DTYPES[case.config.dtype])


class ClaimsTrueDerivative(HeldStabilizer):
    """The same kernel judged as if it computed the true derivative."""

    stabilizer_gradient = "true"


def test_a_target_declaring_the_constant_stabilizer_is_judged_on_the_mconst_case_and_passes():
    rows = gr.check(HeldStabilizer(), CASE_ID, checks=["reference", "fd"])
    assert [r.status for r in rows] == ["pass", "pass"]
    assert {r.case_id for r in rows} == {CASE_ID.replace("NH2-", "NH2-mconst-")}
    # the -mconst references differ from the true ones exactly through the head gradient on cy
    true, held = (run_reference("loop", Case.from_id(i)).grads["x"] for i in (CASE_ID, rows[0].case_id))
    assert not np.allclose(true, held)


def test_the_same_kernel_claiming_the_true_derivative_fails_on_cy_heads_only():
    assert [r.status for r in gr.check(ClaimsTrueDerivative(), CASE_ID, checks=["reference"])] == ["fail"]
    assert [r.status for r in gr.check(ClaimsTrueDerivative(), CASE_ID + "-gy", checks=["reference"])] == ["pass"]
    assert [r.status for r in gr.check(FusedCPUTarget(), CASE_ID.replace("NH2-", "NH2-mconst-"),
                                       checks=["reference"])] == ["pass"]  # judged on the case it follows


def test_an_unknown_convention_is_an_error_row_naming_the_allowed_ones():
    class Odd(HeldStabilizer):
        stabilizer_gradient = "approximate"

    assert "allowed: 'true', 'constant'" in judged_case(Case.from_id(CASE_ID), as_target(Odd()))
    rows = gr.check(Odd(), CASE_ID, checks=["reference"])
    assert [r.status for r in rows] == ["error"] and "stabilizer_gradient='approximate'" in rows[0].message


def test_requested_gradients_only_and_half_skipped():
    case = Case.from_id("slstm-L1-uni-I2-H3-T5-B2-len5.2-f32-s1-wx")
    assert set(FusedCPUTarget().run(case).grads) == {"x"}
    assert "f64 and f32 only" in FusedCPUTarget().supports(dataclasses.replace(case.config, dtype="f16"))


@pytest.mark.parametrize("name", ["slstm-stabilizer-grad-to-forget", "slstm-lower-layer-recurrent-grad",
                                  "slstm-padded-step-updates-n"])
def test_each_slstm_mutant_is_caught_by_the_reference_check(name):
    rows = gr.check(f"mutant:{name}", CASE_ID, checks=["reference"])
    assert [r.status for r in rows] == ["fail"]


def test_the_stabilizer_mutant_needs_a_head_gradient_on_cy():
    # dL/dm_t is 0 for every loss through y and hy: the wrong route is exact there
    assert [r.status for r in gr.check("mutant:slstm-stabilizer-grad-to-forget", CASE_ID + "-gy",
                                       checks=["reference"])] == ["pass"]
    assert family("slstm").c_size(Case.from_id(CASE_ID).config) == 12


def test_the_hypothesis_strategy_draws_valid_slstm_cases_and_leaves_the_convention_to_the_judge():
    from hypothesis import given, settings

    from gradcheck_rnn.strategies import cases

    seen = set()

    @settings(max_examples=20, deadline=None, database=None, derandomize=True)
    @given(cases(modes=("slstm",), no_bias=True, zero_lengths=True))
    def draw(case):
        assert case.config.hidden_size % case.config.option("heads") == 0 and not case.config.option("m_constant")
        assert Case.from_id(case.id).id == case.id
        seen.add((case.config.option("heads") > 1, case.config.option("exp_forget"), case.config.bidirectional))

    draw()
    assert {s[0] for s in seen} == {s[1] for s in seen} == {s[2] for s in seen} == {True, False}


@pytest.mark.slow
def test_loop_and_jax_agree_on_200_slstm_cases_under_both_conventions():
    from gradcheck_rnn.judging.context import CaseContext

    profile = dataclasses.replace(load_profile("families"), modes={"slstm": 1.0}, wants={"all": 1.0})
    for i, case in enumerate(draw_cases(profile, 2026, 200)):
        if i % 4 == 0:  # a quarter of them with the stabiliser held constant
            case = judged_case(case, as_target(HeldStabilizer()))
        assert CaseContext(case).disagreement is None, case.id


@pytest.mark.slow
def test_a_families_sweep_passes_fused_cpu_and_catches_every_slstm_mutant():
    mutants = ["slstm-stabilizer-grad-to-forget", "slstm-lower-layer-recurrent-grad", "slstm-padded-step-updates-n"]
    run = gr.sweep(["fused-cpu", HeldStabilizer, *(f"mutant:{m}" for m in mutants)], cases=40, config="families",
                   modes=["slstm"])
    by_target = {}
    for row in run.results:
        by_target.setdefault(row.target, set()).add(row.status)
    assert by_target["fused-cpu"] <= {"pass", "skip"}
    assert by_target[next(t for t in by_target if t.endswith("HeldStabilizer"))] <= {"pass", "skip"}
    for name in mutants:
        assert "fail" in by_target[f"mutant:{name}"], name
