"""The matrix-memory families (mlstm, gla, gdn, deltaproduct): their case ids, shapes and state layout, both
references against central differences, the bucketed JAX program, the regimes and the profile
that draws them (configs/matrix.toml)."""

import dataclasses

import numpy as np
import pytest
from family_checks import assert_matches_central_differences, assert_one_bucketed_program_is_exact

import gradcheck_rnn as gr
from gradcheck_rnn import Case
from gradcheck_rnn.errors import UsageError
from gradcheck_rnn.model.profiles import chunk_edge_lengths, draw_cases, load_profile
from gradcheck_rnn.references import run_reference

FD_IDS = ["mlstm-L2-uni-I3-H4-NH2-K3-T5-B3-len5.2.0-f64-s11",
          "gla-L2-uni-I3-H4-NH2-K3-R2-T5-B3-len5.2.0-f64-s12",
          "gla-L1-uni-I2-H3-NH3-K2-R1-headdecay-strongdecay-T5-B3-len5.2.0-f64-s13",
          "gdn-L2-uni-I3-H4-NH2-K3-T5-B3-len5.2.0-f64-s14",
          "gdn-L1-uni-I2-H2-K2-longmem-T5-B3-len5.2.0-f64-s15"]


def test_case_ids_round_trip_with_every_option_and_the_state_layout():
    case = Case.from_id("mlstm-L2-uni-I3-H6-NH3-K2-strongdecay-T4-B2-len4.1-f32-s1")
    assert case.id == "mlstm-L2-uni-I3-H6-NH3-K2-strongdecay-T4-B2-len4.1-f32-s1"
    assert case.h0.shape == (2, 2, 3 * 2 * 2) and case.c0.shape == (2, 2, 3 * 2 + 3)  # C; [n | m]
    assert case.params["l1.fwd.w_q"].shape == (6, 6) and case.params["l0.fwd.w_v"].shape == (6, 3)
    gla = Case.from_id("gla-L1-uni-I3-H4-NH2-K3-R2-headdecay-nobias-T4-B1-len4-f64-s1")
    assert gla.c0 is None and gla.h0.shape == (1, 1, 2 * 3 * 2)
    assert {k.rpartition(".")[2]: v.shape for k, v in gla.params.items()} == {
        "w_q": (6, 3), "w_k": (6, 3), "w_v": (4, 3), "w_a1": (2, 3), "w_a2": (2, 2)}
    gdn = Case.from_id("gdn-L1-uni-I3-H4-K3-T4-B1-len4-f64-s1")
    assert sorted(k.rpartition(".")[2] for k in gdn.params) == ["b_a", "b_b", "w_a", "w_b", "w_k", "w_q", "w_v"]


def test_the_flat_state_is_head_then_key_then_value():
    """hy of one step from a zero state is k vᵀ of each head (gla with its decay of a zero state)."""
    case = Case.from_id("gla-L1-uni-I3-H4-NH2-K3-R1-T1-B1-len1-f64-s2-z")
    hy = run_reference("loop", case).hy[0, 0].reshape(2, 3, 2)
    x = case.x[0, 0] / np.sqrt(np.mean(case.x[0, 0] ** 2) + 1)
    k, v = (case.params["l0.fwd.w_k"] @ x).reshape(2, 3), (case.params["l0.fwd.w_v"] @ x).reshape(2, 2)
    np.testing.assert_allclose(hy, k[:, :, None] * v[:, None, :], rtol=1e-13)


@pytest.mark.parametrize("bad_id, words", [
    ("gla-L1-uni-I3-H4-NH3-K2-R1-T4-B1-len4-f64-s1", "must divide"),
    ("gdn-L1-uni-I3-H4-T4-B1-len4-f64-s1", "K<key units per head>"),
    ("mlstm-L1-bi-I3-H4-K2-T4-B1-len4-f64-s1", "bidirectional is not allowed"),
    ("gdn-L1-uni-I3-H4-K2-strongdecay-longmem-T4-B1-len4-f64-s1", "strongdecay is not allowed with longmem"),
    ("mlstm-L1-uni-I3-H4-K2-strongdecay-nobias-T4-B1-len4-f64-s1", "needs it (not with -nobias)"),
])
def test_bad_ids_raise_one_clear_error(bad_id, words):
    with pytest.raises(UsageError, match=words.replace("(", r"\(").replace(")", r"\)")):
        Case.from_id(bad_id)


# the jax reference on one case of each family (each is a compile), the loop reference on all
@pytest.mark.parametrize("reference, case_id", [*(("loop", i) for i in FD_IDS),
                                                *(("jax", i) for i in FD_IDS[::2])])
def test_references_match_central_differences(reference, case_id):
    case = Case.from_id(case_id)
    names = ["x", "h0", *(["c0"] if case.c0 is not None else []), *case.params]
    assert_matches_central_differences(reference, case, names, 1, (2, 1))
    out = run_reference(reference, case)  # padding: nothing past a length, a length-0 sequence keeps its state
    assert not out.y[2:, 1].any() and not out.grads["x"][2:, 1].any() and not out.y[:, 2].any()
    assert np.array_equal(out.hy[:, 2], case.h0[:, 2]) and np.array_equal(out.grads["h0"][:, 2], case.dhy[:, 2])


def test_the_regimes_shift_only_the_decay_bias():
    plain = Case.from_id("gdn-L1-uni-I3-H4-K2-T4-B1-len4-f64-s3")
    for token, shift in (("longmem", 4.0), ("strongdecay", -4.0)):
        held = Case.from_id(f"gdn-L1-uni-I3-H4-K2-{token}-T4-B1-len4-f64-s3")
        for key, value in plain.params.items():
            np.testing.assert_array_equal(held.params[key], value + shift if key.endswith("b_a") else value)
        np.testing.assert_array_equal(held.x, plain.x)


MINF = "mlstm-L2-uni-I3-H4-NH2-K2-minf-T5-B3-len5.2.0-f64-s16"  # the stabiliser_start convention's option
# docs/findings/frameworks.md's mlstm-parallel case: log σ(f₀) > ĩ₀, so m from −∞ and from 0 differ at first
MINF_DIFFERS = "mlstm-L1-uni-I4-H1-K4-minf-longmem-T10-B1-len4-f64-s521336563-z"


def test_minf_starts_an_empty_memorys_stabiliser_at_minus_infinity_in_both_references():
    """-minf: without an initial state the first step's m is ĩ (not max(log f, ĩ)); the references
    agree, their gradients are central differences (no 0·∞ from the −∞ start), and a sequence of
    length 0 keeps its zero state. With an initial state the option changes nothing."""
    for case_id in (f"{MINF}-z", MINF_DIFFERS):
        case = Case.from_id(case_id)
        loop, jax = run_reference("loop", case), run_reference("jax", case)
        for name in ("y", "hy", "cy"):
            np.testing.assert_allclose(getattr(jax, name), getattr(loop, name), rtol=1e-12, atol=1e-14)
        for name, grad in loop.grads.items():
            np.testing.assert_allclose(jax.grads[name], grad, rtol=1e-12, atol=1e-14, err_msg=name)
    assert not run_reference("loop", Case.from_id(f"{MINF}-z")).cy[:, 2].any()  # length 0: the zero state as it was
    minf, zero = (run_reference("loop", Case.from_id(i)) for i in (MINF_DIFFERS, MINF_DIFFERS.replace("-minf", "")))
    assert 1e-9 < np.abs(minf.y - zero.y).max() < 1e-5  # the first steps, by ~ε·e^m
    assert_matches_central_differences("loop", Case.from_id(f"{MINF}-z"), ["x", *Case.from_id(MINF).params], 1, (2, 1))
    given, plain = run_reference("loop", Case.from_id(MINF)), run_reference("loop", Case.from_id(MINF.replace("-minf", "")))
    for name in ("y", "hy", "cy"):
        np.testing.assert_array_equal(getattr(given, name), getattr(plain, name))


BUCKET_IDS = ["gdn-L2-uni-I3-H6-NH3-K3-T5-B2-len5.0-f64-s4", "gdn-L2-uni-I4-H6-NH3-K4-nobias-T6-B1-len6-f64-s5",
              "gdn-L2-uni-I1-H6-NH3-K2-T3-B3-len3.1.2-f64-s6"]


def test_one_bucketed_program_serves_other_sizes_heads_and_key_widths():
    assert_one_bucketed_program_is_exact(BUCKET_IDS, [])


@pytest.mark.slow  # an exact-shape program per id: a compile each
@pytest.mark.parametrize("case_id", [BUCKET_IDS[0], "gla-L2-uni-I3-H6-NH3-K3-R3-headdecay-T5-B2-len5.0-f64-s4",
                                     "mlstm-L3-uni-I3-H6-NH3-K2-T5-B2-len5.0-f64-s4"])
def test_the_bucketed_program_equals_the_exact_shape_one(case_id):
    assert_one_bucketed_program_is_exact([case_id], [case_id])


def test_chunk_edges_are_drawn_at_every_edge_of_the_profile_chunk_sizes():
    assert chunk_edge_lengths((4,), 18) == [3, 4, 5, 9, 13, 17]
    assert chunk_edge_lengths((4, 8), 10) == [3, 4, 5, 7, 8, 9]
    profile = dataclasses.replace(load_profile("matrix"), lengths={"chunk_edges": 1.0}, max_len=(18, 18),
                                  edge_shapes=0.0)
    lengths = {n for case in draw_cases(profile, 0, 30) for n in case.seq_lengths.tolist()}
    assert lengths <= set(chunk_edge_lengths((4, 8), 18)) | {0} and len(lengths) >= 6


def test_the_matrix_profile_draws_every_family_option_and_regime():
    cases = list(draw_cases(load_profile("matrix"), 0, 120))
    assert {c.config.mode for c in cases} == {"mlstm", "gla", "gdn", "deltaproduct", "rwkv7", "kda"}
    assert not any(c.config.bidirectional for c in cases)
    assert any(c.config.option("strong_decay") for c in cases) and any(c.config.long_memory for c in cases)
    assert any(c.config.option("heads") > 1 for c in cases)
    assert {c.config.option("head_decay") for c in cases if c.config.mode == "gla"} == {True, False}
    assert {c.config.option("householder") for c in cases if c.config.mode == "deltaproduct"} == {1, 2, 3}
    assert {c.config.option("converged") for c in cases if c.config.mode == "kda"} == {True, False}
    assert all(Case.from_id(c.id).id == c.id for c in cases)


@pytest.mark.slow
def test_loop_and_jax_agree_on_100_cases_of_each_matrix_family():
    """Every gradient requested; the soak (docs/findings/soak.md) measures the same at 2,000 a family."""
    from gradcheck_rnn.judging.context import CaseContext

    for mode in ("mlstm", "gla", "gdn", "deltaproduct", "rwkv7"):
        profile = dataclasses.replace(load_profile("matrix"), modes={mode: 1.0}, wants={"all": 1.0})
        for case in draw_cases(profile, 2026, 100):
            assert CaseContext(case).disagreement is None, case.id


# ------------------------------------------------------------------ a user family with a matrix state

def test_a_user_family_with_a_matrix_state_is_judged_by_every_check_and_a_slip_is_caught():
    from matrix_family_targets import RETENTION, retention_slipped, retention_target

    from gradcheck_rnn.judging.checks import check_names
    from gradcheck_rnn.families import register

    register(RETENTION)
    case = Case.from_id("retention-L2-uni-I2-H3-K2-T6-B3-len6.3.0-f64-s4")
    assert case.h0.shape == (2, 3, 6)
    good = gr.check(retention_target, case, checks=list(check_names()))
    assert {r.check for r in good} == set(check_names()), [(r.check, r.message) for r in good]
    # the target offers no forward mode and no second order: those checks are skips that say so
    assert {r.status for r in good if r.check not in ("jvp", "gradgrad")} == {"pass"}, \
        [(r.check, r.message) for r in good]
    assert [r.message for r in good if r.check in ("jvp", "gradgrad")] == [
        "the target offers no forward mode (no jvp(case, tangents) method)",
        "the target offers no second order (no hvp(case, tangents) method)"]
    slipped = gr.check(retention_slipped, case, checks=["reference", "padding"])
    assert [r.status for r in slipped] == ["fail", "pass"]  # hy of the short sequences decayed too far


def test_the_hypothesis_strategy_draws_valid_matrix_cases_with_every_option():
    from hypothesis import given, settings

    from gradcheck_rnn.strategies import cases

    seen = set()

    @settings(max_examples=40, deadline=None, database=None, derandomize=True)
    @given(cases(modes=("gla", "mlstm", "gdn"), no_bias=True, zero_lengths=True, long_memory=True, packed_tail=True))
    def draw(case):
        assert Case.from_id(case.id).id == case.id and not case.config.bidirectional
        seen.add((case.config.mode, case.config.option("strong_decay"), case.config.long_memory, case.tail > 0))

    draw()
    assert {s[0] for s in seen} == {"gla", "mlstm", "gdn"}
    assert {s[1] for s in seen} == {s[2] for s in seen} == {s[3] for s in seen} == {True, False}


def test_a_row_names_every_convention_its_case_was_judged_under():
    from gradcheck_rnn.reports.document import convention_of

    assert convention_of(MINF) == "stabiliser_start='minus_infinity'"
    assert convention_of(MINF.replace("-minf", "-headnorm-minf")) == \
        "normaliser_gradient='head_norm' and stabiliser_start='minus_infinity'"
    assert convention_of(MINF.replace("-minf", "")) is None
