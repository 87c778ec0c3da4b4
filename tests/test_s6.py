"""The s6 family: its case ids, its draws, both references against finite differences, and the
fused chunked-scan kernel (correct at every chunk size, and caught when broken)."""

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
from gradcheck_rnn.kernels.fused_cpu import FusedCPUTarget
from gradcheck_rnn.kernels.s6_cpu import S6CPUKernel
from gradcheck_rnn.references import run_reference

# One config shape for the slow JAX program (compiled once per config, T and B padded to powers of two).
CASE_ID = "s6-L2-uni-I2-H3-N2-R1-T9-B3-len9.3.0-f64-s5"


def test_case_id_round_trip_and_shapes():
    case = Case.from_id("s6-L2-uni-I3-H4-N2-R1-nosoftplus-nogate-nobias-T7-B3-len7.4.1-f32-s9-wx")
    assert case.id == "s6-L2-uni-I3-H4-N2-R1-nosoftplus-nogate-nobias-T7-B3-len7.4.1-f32-s9-wx"
    assert case.config.option("state_dim") == 2 and not case.config.option("gated")
    assert {k: v.shape for k, v in case.params.items() if k.startswith("l1.")} == {
        "l1.fwd.w_in": (4, 4), "l1.fwd.w_x": (5, 4), "l1.fwd.w_dt": (4, 1), "l1.fwd.a_log": (4, 2), "l1.fwd.d": (4,)}
    assert case.h0.shape == case.dhy.shape == (2, 3, 8) and case.c0 is None and case.dy.shape == (7, 3, 4)
    assert np.array_equal(Case.from_id(case.id).params["l0.fwd.w_x"], case.params["l0.fwd.w_x"])


@pytest.mark.parametrize("bad_id, words", [
    ("s6-L1-uni-I3-H4-R1-T7-B1-len7-f32-s9", "N<state size>"),
    ("s6-L1-bi-I3-H4-N2-R1-T7-B1-len7-f32-s9", "bidirectional is not allowed for s6"),
    ("s6-L1-uni-I3-H4-N2-R1-P2-T7-B1-len7-f32-s9", "'P2'"),
    ("lstm-L1-uni-I3-H4-N2-T7-B1-len7-f32-s9", "'N2'"),
])
def test_bad_s6_ids_raise_one_clear_error(bad_id, words):
    with pytest.raises(UsageError, match=words):
        Case.from_id(bad_id)


def test_the_generator_draws_only_what_s6_supports():
    profile = dataclasses.replace(load_profile("ci"), modes={"s6": 1.0})
    cases = list(draw_cases(profile, 0, 60))
    assert not any(c.config.bidirectional for c in cases) and all(c.id.startswith("s6-") for c in cases)
    assert {c.config.option("softplus") for c in cases} == {c.config.option("gated") for c in cases} == {True, False}
    assert all(Case.from_id(c.id).id == c.id for c in cases)


@pytest.mark.parametrize("reference", ["loop", "jax"])
def test_references_match_central_differences(reference):
    case = Case.from_id(CASE_ID)
    assert_matches_central_differences(reference, case, ["x", "h0", *case.params], 2, (3, 1))
    # padding: a padded step outputs 0 and has no input gradient; a length-0 sequence keeps h0
    out = run_reference(reference, case)
    assert not out.y[3:, 1].any() and not out.grads["x"][3:, 1].any() and not out.y[:, 2].any()
    assert np.array_equal(out.hy[:, 2], case.h0[:, 2]) and np.array_equal(out.grads["h0"][:, 2], case.dhy[:, 2])


@pytest.mark.parametrize("chunk", [1, 2, 4, 16])
def test_kernel_matches_the_loop_reference_across_chunk_boundaries(chunk):
    case = Case.from_id(CASE_ID)
    expected = as_mapping(run_reference("loop", case))
    out = as_mapping(S6CPUKernel(chunk).run(case, torch.float64))
    assert set(out) == set(expected)
    for name, value in out.items():
        np.testing.assert_allclose(value.numpy(), expected[name], rtol=1e-12, atol=1e-13, err_msg=name)


def _undecayed(a_last, b_last, h_start):
    return b_last + h_start


class _CarryDropped(S6CPUKernel):
    """A deliberately broken chunked scan: the state handed across a chunk boundary loses its decay."""

    def carry_rule(self, reverse):
        return _undecayed


def test_the_reference_check_catches_a_broken_kernel_and_passes_the_correct_one():
    case = Case.from_id(CASE_ID.replace("f64", "f32"))
    good = gr.check(FusedCPUTarget(), case, checks=["reference"])
    bad = gr.check(FusedCPUTarget(family_kernels={"s6": _CarryDropped()}), case, checks=["reference"])
    assert [r.status for r in good] == ["pass"] and [r.status for r in bad] == ["fail"]


def test_requested_gradients_only_and_half_skipped():
    case = Case.from_id("s6-L1-uni-I2-H3-N2-R1-T5-B2-len5.2-f32-s1-wx")
    assert set(FusedCPUTarget().run(case).grads) == {"x"}
    assert "f64 and f32 only" in FusedCPUTarget().supports(dataclasses.replace(case.config, dtype="f16"))
    assert family("s6").h_size(case.config) == 6 and not family("s6").bidirectional


@pytest.mark.parametrize("name", ["s6-padded-step-decay", "s6-reverse-carry-undecayed", "s6-gate-grad-dropped",
                                  "s6-lower-layer-dhy-dropped"])
def test_each_s6_mutant_is_caught_by_the_reference_check(name):
    rows = gr.check(f"mutant:{name}", CASE_ID, checks=["reference"])
    assert [r.status for r in rows] == ["fail"]


def test_the_padded_step_decay_needs_a_softplus_or_a_delta_bias_as_in_mamba_368():
    plain = CASE_ID.replace("R1-", "R1-nosoftplus-nobias-")
    assert [r.status for r in gr.check("mutant:s6-padded-step-decay", plain, checks=["reference"])] == ["pass"]
    assert "the bug is in the s6 kernel" in gr.check("mutant:s6-gate-grad-dropped", "gru-L1-uni-I2-H2-T3-B1-len3-f64-s1",
                                                     checks=["reference"])[0].message


def test_stacked_layers_stay_finite_in_float32_because_each_layer_input_is_normalised():
    # Without the pre-norm this case's three layers grew like x^64 and overflowed float32 (y = inf),
    # a false alarm of the stateless check on a correct kernel.
    case = Case.from_id("s6-L3-uni-I3-H1-N2-R2-T4-B2-len4.2-f32-s490214521")
    out = as_mapping(S6CPUKernel().run(case, torch.float32))
    expected = as_mapping(run_reference("loop", case))
    for name, value in out.items():
        assert torch.isfinite(value).all(), name
        np.testing.assert_allclose(value.numpy(), expected[name], rtol=1e-4, atol=1e-5, err_msg=name)


def test_one_bucketed_jax_program_serves_other_sizes_and_switches_exactly():
    ids = ["s6-L2-uni-I3-H2-N3-R2-nosoftplus-nogate-nobias-T6-B2-len6.0-f64-s3",
           "s6-L2-uni-I1-H4-N1-R1-T3-B3-len3.1.2-f64-s4"]
    assert_one_bucketed_program_is_exact(ids, ids)
