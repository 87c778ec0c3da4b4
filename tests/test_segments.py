"""The segments check (gradcheck_rnn/judging/checks/segments.py): a case run segment by segment,
final states fed forward and state gradients fed backward, equals the uncut run and the
references; what it cuts, what it declines, and the mutants only it catches."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

import gradcheck_rnn as gr
from gradcheck_rnn import Case
from gradcheck_rnn.cli import main
from gradcheck_rnn.judging.checks.segments import (
    CHUNK_SIZES,
    MAX_CUTS,
    draw_cuts,
    segment_case,
)
from gradcheck_rnn.model.case import round_to_dtype
from gradcheck_rnn.references import run_reference


def test_cuts_reach_every_kind_of_segment_the_check_promises():
    kinds = set()
    for seed in range(400):
        rng = np.random.default_rng(seed)
        limit = int(rng.integers(2, 70))
        cuts = draw_cuts(rng, limit)
        assert cuts == sorted(set(cuts)) and 1 <= cuts[0] and cuts[-1] < limit and len(cuts) <= 2 * MAX_CUTS
        lengths = np.diff([0, *cuts, limit])
        kinds.update({"one step"} if (lengths == 1).any() else set())
        kinds.update({"shorter than a chunk"} if ((lengths > 1) & (lengths < min(CHUNK_SIZES))).any() else set())
        kinds.update({"at a chunk multiple"} if any(c % k == 0 for c in cuts for k in CHUNK_SIZES) else set())
        kinds.update({"one past a multiple of 16"} if any(c > 16 and c % 16 == 1 for c in cuts) else set())
    assert kinds == {"one step", "shorter than a chunk", "at a chunk multiple", "one past a multiple of 16"}


def test_a_segment_is_a_case_of_its_steps_with_clipped_lengths_the_given_states_and_their_gradient():
    case = Case.from_id("lstm-L2-uni-I3-H4-T7-B3-len7.4.1-f32-s5-wx")
    h0, c0, dhy, dcy = case.h0 + 1, case.c0 - 1, case.dhy * 2, case.dcy * 3
    middle = segment_case(case, 2, 5, h0, c0, dhy, dcy)
    assert middle.config.max_len == 3 and middle.seq_lengths.tolist() == [3, 2, 0]
    assert (middle.x == case.x[2:5]).all() and (middle.dy == case.dy[2:5]).all()
    for given, passed in ((h0, middle.h0), (c0, middle.c0), (dhy, middle.dhy), (dcy, middle.dcy)):
        assert (passed == round_to_dtype(given, "f32")).all()  # case data, in the case's dtype
    assert middle.wants_group == "inputs"  # its dh0 is the segment before's dhy; the weights stay frozen
    assert segment_case(case, 0, 2, case.h0, case.c0, dhy, dcy).wants_group == "x"  # the first: the case's own
    no_state = Case.from_id("gru-L1-uni-I2-H3-T6-B2-len6.3-f64-s5-wparams-z")
    first = segment_case(no_state, 0, 3, None, None, no_state.dhy, None)
    assert first.h0 is None and first.wants_group == "params"


def loop_target(case):
    """The float64 loop reference as a target: chained in segments it must equal itself uncut."""
    return run_reference("loop", case)


class Counting:
    """A target that counts its calls."""

    def __init__(self, target) -> None:
        self.target, self.calls = target, 0

    def run(self, case):
        self.calls += 1
        return self.target(case)


# every family with carried state; stacks; zero lengths (empty segments); -z; frozen groups; -gy
CHAINED_IDS = [
    "lstm-L2-uni-I3-H4-P2-T9-B3-len9.4.0-f64-s31",
    "gru-L3-uni-I2-H3-T8-B2-len8.3-f64-s32-wx-z",
    "rnn_tanh-L1-uni-I2-H3-nobias-T6-B2-len6.2-f64-s33-wparams-gy",
    "s6-L2-uni-I2-H3-N2-R1-T10-B2-len10.4-f64-s35",
    "slstm-L2-uni-I2-H4-NH2-T8-B2-len8.5-f64-s36-gstates",
    "mlstm-L2-uni-I3-H4-NH2-K2-T11-B2-len11.6-f64-s37",
    "gla-L2-uni-I2-H4-NH2-K3-R2-T13-B3-len13.9.0-f64-s38",
]


@pytest.mark.parametrize("case_id", CHAINED_IDS)
def test_the_loop_reference_chained_in_segments_equals_itself_uncut(case_id):
    counting = Counting(loop_target)
    [row] = gr.check(counting, case_id, checks=["segments"])
    assert row.status == "pass", row.message
    assert counting.calls >= 4  # the base run and 2K − 1 >= 3 segment runs: the case was cut
    assert max(t.ratio for t in row.tensors) < 1e-3, [(t.name, t.ratio) for t in row.tensors]


FUSED_IDS = [
    "lstm-L2-uni-I3-H4-T9-B3-len9.4.2-f32-s41",
    "gru-L1-uni-I2-H3-T12-B2-len12.0-f64-s42-z",
    "s6-L2-uni-I2-H3-N2-R1-T10-B2-len10.4-f32-s43",
    "slstm-L1-uni-I2-H4-NH2-T8-B2-len8.5-f32-s44",
    "mlstm-L2-uni-I3-H4-NH2-K2-T11-B2-len11.6-f32-s45",
    "gla-L1-uni-I3-H4-NH2-K3-R2-T17-B3-len17.9.5-f32-s46",
    "gdn-L2-uni-I3-H4-NH2-K2-T10-B2-len10.7-f32-s47-wparams",
    "gdn-L1-uni-I3-H4-NH2-K2-T10-B2-len10.7-f64-s39-glast",
    "rnn_relu-L2-uni-I2-H3-T7-B3-len7.7.5-f64-s34-winputs",
]


@pytest.mark.parametrize("case_id", FUSED_IDS)
def test_the_fused_cpu_kernels_pass(case_id):
    [row] = gr.check("fused-cpu", case_id, checks=["segments"], config="matrix")
    assert row.status == "pass", row.message


def test_torch_native_is_cut_only_before_its_shortest_sequence_ends_since_it_takes_no_length_0():
    [row] = gr.check("torch-native", "lstm-L2-uni-I3-H4-T9-B3-len9.4.3-f32-s48", checks=["segments"])
    assert row.status == "pass", row.message
    [row] = gr.check("torch-native", "gru-L1-uni-I2-H3-T6-B2-len6.1-f64-s49", checks=["segments"])
    assert row.status == "skip" and "declines zero lengths" in row.message and "length 0" in row.message


class NoInitialState:
    """A target that takes no initial state, as mlstm_kernels' parallel kernels."""

    def run(self, case):
        return run_reference("loop", case)

    def supports_case(self, case):
        return True if case.h0 is None else "takes no initial state"


@pytest.mark.parametrize("target, case_id, words", [
    ("fused-cpu", "gru-L2-bi-I2-H3-T6-B2-len6.4-f64-s50", "bidirectional: a reverse direction carries its state"),
    ("fused-cpu", "lstm-L1-uni-I2-H3-T1-B2-len1.1-f64-s51", "nothing to cut"),
    (NoInitialState(), "gru-L1-uni-I2-H3-T6-B2-len6.4-f64-s52-z",
     "declines the case this check derives: takes no initial state"),
])
def test_what_cannot_be_chained_is_a_skip_that_says_why(target, case_id, words):
    [row] = gr.check(target, case_id, checks=["segments"])
    assert row.status == "skip" and words in row.message, row.message


# (mutant, a case where the reference check passes it and the segments check fails it)
ONLY_SEGMENTS_CATCHES = [
    # every call of the case is longer than a chunk: only a short segment loses dh0's pass-through
    ("gla-short-call-dh0-pass-through-dropped", "gla-L1-uni-I2-H2-K2-R1-T10-B2-len10.6-f64-s45"),
    ("gla-short-call-dh0-pass-through-dropped", "gla-L1-uni-I3-H4-NH2-K3-R2-T9-B2-len9.5-f32-s41"),
    # -gy: dhy = 0, so the dropped term is 0 uncut; the inner segments get a state gradient
    ("gla-decay-grad-ignores-dhy", "gla-L1-uni-I3-H4-NH2-K3-R2-T9-B2-len9.5-f64-s43-gy"),
    ("gla-decay-grad-ignores-dhy", "gla-L2-uni-I2-H2-K2-R1-T12-B3-len12.7.5-f64-s44-gy"),
]


@pytest.mark.parametrize("mutant, case_id", ONLY_SEGMENTS_CATCHES)
def test_state_handover_mutants_hide_from_the_reference_check_and_fail_segments(mutant, case_id):
    rows = gr.check(f"mutant:{mutant}", case_id, checks=["reference", "segments"], config="matrix")
    assert [r.status for r in rows] == ["pass", "fail"], [r.message for r in rows]
    assert "run in segments, cut at t = " in rows[1].message
    correct = gr.check("fused-cpu", case_id, checks=["reference", "segments"], config="matrix")
    assert [r.status for r in correct] == ["pass", "pass"]


def test_the_decay_mutant_fails_the_reference_check_too_where_a_head_gradient_reaches_hy():
    [row] = gr.check("mutant:gla-decay-grad-ignores-dhy", "gla-L1-uni-I2-H2-K2-R1-T10-B2-len10.6-f64-s45",
                     checks=["reference"], config="matrix")
    assert row.status == "fail" and "w_a" in row.message


def test_sweep_check_judges_only_the_named_checks_and_last_failed_refuses_it(tmp_path):
    result = CliRunner().invoke(main, ["sweep", "--check", "segments", "-t", "fused-cpu", "-n", "6",
                                       "--workers", "1", "--report-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    document = json.loads((tmp_path / "latest" / "results.json").read_text())
    assert {r["check"] for r in document["results"]} == {"segments"} and len(document["results"]) == 6
    refused = CliRunner().invoke(main, ["sweep", "--last-failed", "--check", "segments", "--report-dir",
                                        str(tmp_path)])
    assert refused.exit_code == 2 and "--check" in refused.output


def test_a_gradient_a_segment_omits_is_a_zero_term_and_a_non_zero_one_omitted_fails():
    """torch's autograd returns no gradient for a parameter a segment never reaches (fla-recurrent
    on a segment of tail rows only): the segments check sums it as zero. That can pass nothing
    wrong: a target that omits a segment's non-zero gradient fails."""
    from types import SimpleNamespace

    from gradcheck_rnn.judging.checks.segments import joined

    weight = np.arange(6.0).reshape(2, 3)
    context = SimpleNamespace(tensor_names=lambda: ["y", "w"], expected={"loop": {"w": np.zeros((2, 3))}})
    runs = [{"y": np.ones((2, 1)), "w": weight}, {"y": np.zeros((1, 1))}]
    segmented, terms = joined(context, runs, ["y", "w"])
    assert np.array_equal(segmented["w"], weight) and len(terms["w"]) == 2
    assert segmented["y"].shape == (3, 1)

    case_id = CHAINED_IDS[0]
    full_length = Case.from_id(case_id).config.max_len

    class DropsOnSegments:
        def run(self, case):
            out = loop_target(case)
            if case.config.max_len < full_length:  # a segment: its (non-zero) w_ih gradient left out
                out.grads.pop("l0.fwd.w_ih")
            return out

    [row] = gr.check(DropsOnSegments(), case_id, checks=["segments"])
    assert row.status == "fail" and "l0.fwd.w_ih" in row.message, row.message


class _HeadNormLoop:
    """The float64 loop declaring mLSTM's head_norm convention: judged on -headnorm -gy cases,
    whose gradients it computes exactly (the true derivative of that case)."""

    name = "head-norm-loop"
    normaliser_gradient = "head_norm"

    def run(self, case):
        return loop_target(case)


def test_a_convention_exact_only_for_losses_through_y_declines_segments():
    """mlstm-custbw's head_norm: the inner segments would get a final-state gradient, which the
    convention does not cover (its segments rows failed on correct-under-the-convention x, h0)."""
    rows = gr.check(_HeadNormLoop(), "mlstm-L1-uni-I3-H4-NH2-K2-T9-B2-len9.7-f32-s5",
                    checks=["reference", "segments"], config="matrix", in_process=True)
    assert [r.status for r in rows] == ["pass", "skip"], [r.message for r in rows]
    assert "-headnorm-" in rows[1].case_id and "normaliser_gradient convention" in rows[1].message
