"""Shrinking (gradcheck-rnn shrink) and emitted regression tests (repro --emit-test)."""

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gradcheck_rnn import Case
from gradcheck_rnn.cli import main
from gradcheck_rnn.workflows.shrink import DidNotReproduce, shrink, tensor_role
from gradcheck_rnn.targets import resolve_target

SHRINK_PAGE = (Path(__file__).parent.parent / "docs" / "how-to" / "shrink.md").read_text()
START = "lstm-L2-bi-I3-H5-T7-B3-len7.4.1-f32-s918273"
TRUNCATED = "mutant:truncated-bptt"


def invoke(*args):
    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    return result.exit_code, result.output


@pytest.fixture(scope="module")
def truncated_path():
    return shrink(Case.from_id(START), resolve_target(TRUNCATED))


def test_truncated_bptt_shrinks_to_one_layer_one_sequence_two_steps(truncated_path):
    minimal = Case.from_id(truncated_path.minimal.case_id)
    cfg = minimal.config
    assert (cfg.num_layers, cfg.bidirectional, cfg.batch_size, cfg.max_len) == (1, False, 1, 2)
    assert (cfg.input_size, cfg.hidden_size) == (1, 1)  # the smallest sizes still lose the future
    assert truncated_path.steps[0].case_id == START and not truncated_path.exhausted
    # Every accepted step keeps the same failure: the reference check, the same tensor role.
    kept = tensor_role(truncated_path.failure.tensor)
    for step in truncated_path.steps:
        assert step.result.status == "fail" and step.ratio > 1
        assert kept in {tensor_role(t.name) for t in step.result.failing}


def test_shrinking_is_deterministic(truncated_path):
    again = shrink(Case.from_id(START), resolve_target(TRUNCATED))
    assert [(s.change, s.case_id) for s in again.steps] == [(s.change, s.case_id) for s in truncated_path.steps]
    assert again.tried == truncated_path.tried


def test_the_printed_repro_fails_again_and_a_correct_kernel_passes_it():
    code, output = invoke("shrink", START, "--target", TRUNCATED)
    assert code == 0, output
    minimal = re.search(r"minimal case: (\S+)", output).group(1)
    repro = re.search(r"reproduce: (gradcheck-rnn repro .*)", output).group(1).split()
    assert repro[:3] == ["gradcheck-rnn", "repro", minimal]
    assert invoke(*repro[1:])[0] == 1
    assert invoke("repro", minimal, "--target", "fused-cpu")[0] == 0


def test_top_bias_bug_keeps_its_tensor_across_layer_renumbering():
    # The top layer's b_hh is l2.fwd.b_hh in 3 layers and l0.fwd.b_hh once one is left.
    result = shrink(Case.from_id("gru-L3-uni-I2-H3-T4-B2-len4.2-f64-s5"), resolve_target("mutant:top-b_hh-zero"))
    assert result.failure.tensor == "l2.fwd.b_hh"
    assert result.minimal.case_id.startswith("gru-L1-uni-I1-H1-T1-B1-len1-f64-s5")
    assert [t.name for t in result.minimal.result.failing] == ["l0.fwd.b_hh"]


def test_a_projection_bug_shrinks_h_and_p_together_and_keeps_its_projection():
    # H shrinks past P by taking P down with it; the transposed-layout bug needs P >= 2 and H > P
    result = shrink(Case.from_id("lstm-L2-bi-I3-H5-P3-T6-B3-len6.4.2-f64-s21"),
                    resolve_target("mutant:projection-grad-transposed"))
    assert result.minimal.case_id == "lstm-L1-uni-I1-H3-P2-T1-B1-len1-f64-s21-wparams"
    correct = shrink(Case.from_id("lstm-L1-uni-I2-H3-P2-T3-B1-len3-f64-s1"), resolve_target("mutant:dc0-missing"))
    assert "-P" not in correct.minimal.case_id  # a bug off the projection path drops it


def test_shrink_drops_long_memory_when_the_failure_does_not_need_it():
    result = shrink(Case.from_id("gru-L3-uni-I2-H3-longmem-T4-B2-len4.2-f64-s5"), resolve_target("mutant:top-b_hh-zero"))
    assert result.minimal.case_id.startswith("gru-L1-uni-I1-H1-T1-B1-len1-f64-s5")


def test_a_target_that_raises_keeps_its_exception_type():
    fused = resolve_target("fused-cpu")

    def no_reverse(case):
        if case.config.bidirectional:
            raise NotImplementedError("no reverse direction")
        return fused.run(case)

    result = shrink(Case.from_id("gru-L2-bi-I3-H4-T5-B2-len5.3-f64-s1"), no_reverse)
    assert (result.failure.status, result.failure.error_type) == ("error", "NotImplementedError")
    assert result.minimal.case_id == "gru-L1-bi-I1-H1-T1-B1-len1-f64-s1-wx"  # fewer gradients asked, same error


def test_the_error_type_is_a_field_of_the_row_read_back_from_results_json():
    """Shrink keeps an error by the row's error_type (issue 43: it parsed it out of the message)."""
    from gradcheck_rnn.judging.judge import judge_one
    from gradcheck_rnn.rows.result import CaseResult

    def raises(case):
        raise NotImplementedError("KeyError: not the type")

    row = judge_one(Case.from_id("gru-L1-uni-I2-H3-T4-B1-len4-f64-s1"), raises)
    assert (row.status, row.error_type) == ("error", "NotImplementedError")
    assert CaseResult.from_json(json.loads(json.dumps(row.to_json()))).error_type == "NotImplementedError"


def test_the_minimal_repro_is_its_row_as_the_run_finished_it_case_timeout_included():
    """The run finishes each row once (its options, --case-timeout for a row that timed out); the
    shrink result's repro line is that row's, never finished again (which dropped --case-timeout)."""
    import math

    from gradcheck_rnn.rows.result import CaseResult, finish
    from gradcheck_rnn.workflows.shrink import Failure, ShrinkResult, Step

    case = Case.from_id("gru-L1-uni-I2-H3-T4-B1-len4-f64-s1")
    row = finish(CaseResult.of_case(case, "plugin_targets:hangs", "error", "reference",
                                    message="timed out after 2 s", timed_out=True), "--config nightly", 2.0)
    result = ShrinkResult(row.target, Failure("reference", "error", error_type=row.message),
                          [Step(case.id, "start", math.nan, row)], 1, 10)
    assert result.repro == f"gradcheck-rnn repro {case.id} --target plugin_targets:hangs --config nightly --case-timeout 2"
    assert result.reproduction.options == "--config nightly --case-timeout 2"


def test_a_reference_free_check_is_kept_and_the_json_names_the_path():
    code, output = invoke("shrink", "gru-L1-uni-I2-H3-T5-B2-len5.3-f64-s2", "--target", TRUNCATED,
                          "--check", "future", "--json")
    assert code == 0, output
    document = json.loads(output)
    assert document["check"] == "future" and document["tensor"] == "x"
    assert document["steps"][0]["case_id"] == "gru-L1-uni-I2-H3-T5-B2-len5.3-f64-s2"
    assert document["minimal"] == document["steps"][-1]["case_id"] and len(document["steps"]) > 1
    assert document["repro"].endswith("--target mutant:truncated-bptt --check future")
    assert Case.from_id(document["minimal"]).config.max_len <= 2


def test_the_step_budget_stops_shrinking():
    code, output = invoke("shrink", START, "--target", TRUNCATED, "--max-steps", 2, "--json")
    document = json.loads(output)
    assert code == 0 and document["exhausted"] and document["tried"] == 2
    assert Case.from_id(document["minimal"]).config.num_layers == 1  # the first candidate was accepted


def test_a_case_that_does_not_fail_exits_1_with_that_sentence():
    with pytest.raises(DidNotReproduce, match="did not fail"):
        shrink(Case.from_id("gru-L1-uni-I2-H3-T4-B1-len4-f64-s1"), resolve_target("fused-cpu"))
    result = CliRunner().invoke(main, ["shrink", "gru-L1-uni-I2-H3-T4-B1-len4-f64-s1", "-t", "fused-cpu"])
    assert result.exit_code == 1 and "the case did not fail" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("args, words", [
    (["shrink", "lstm-L2-bi", "-t", TRUNCATED], "case id"),
    (["shrink", START, "-t", "no-such-target"], "unknown target"),
    (["shrink", START], "Missing option"),
    (["shrink", START, "-t", TRUNCATED, "--max-steps", "0"], "--max-steps"),
    (["shrink", START, "-t", TRUNCATED, "--check", "bogus"], "--check"),
    (["repro", START, "--emit-test", "x.py"], "exactly one --target"),
    (["repro", START, "-t", TRUNCATED, "--emit-test", "no/such/folder/test_x.py"], "does not exist"),
    (["repro", START, "-t", TRUNCATED, "--emit-test", "test_x.txt"], ".py file"),
])
def test_bad_input_exits_2_with_one_sentence(args, words):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert words in result.output and "Traceback" not in result.output


@pytest.mark.slow
@pytest.mark.parametrize("mutant, start", [
    ("conv1d-short-sequence-dh0-pass-through-dropped", "conv1d-L1-uni-I2-H3-W4-T5-B2-len5.1-f64-s1"),
    ("kda-decay-grad-wrong-axis", "kda-L1-uni-I2-H4-NH2-K2-R1-T6-B2-len6.3-f64-s1"),
    ("rwkv7-state-grad-no-low-rank", "rwkv7-L1-uni-I2-H4-NH2-K2-T6-B2-len6.3-f64-s1"),
    ("deltaproduct-state-grad-drops-second-householder", "deltaproduct-L1-uni-I2-H4-NH2-K2-n3-T5-B2-len5.3-f64-s3")])
def test_a_mutant_of_each_issue_46_family_shrinks_and_its_emitted_test_fails_only_on_it(mutant, start, tmp_path):
    """shrink, then repro --emit-test, on the families of issue 46: the minimal case still fails the
    mutant, its emitted test fails there and passes on fused-cpu (about a minute each)."""
    code, output = invoke("shrink", start, "-t", f"mutant:{mutant}")
    assert code == 0, output
    minimal = re.search(r"gradcheck-rnn repro (\S+) --target", output).group(1)
    assert minimal.startswith(start.split("-")[0] + "-L1-uni-I1-H1-")  # shrunk, its kernel configuration kept
    for name, target in (("test_mutant.py", f"mutant:{mutant}"), ("test_fused.py", "fused-cpu")):
        code, _ = invoke("repro", minimal, "--target", target, "--emit-test", tmp_path / name)
        assert code == (1 if name == "test_mutant.py" else 0)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", str(tmp_path)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert re.search(r"FAILED test_mutant\.py::test_\w+\[reference\]", run.stdout), run.stdout
    assert re.search(r"PASSED test_fused\.py::test_\w+\[reference\]", run.stdout), run.stdout
    assert "1 failed, 1 passed" in run.stdout, run.stdout


def test_the_readme_walk_through_shrinks_to_the_case_it_shows():
    command = re.search(r"^\s*(gradcheck-rnn shrink .*)$", SHRINK_PAGE, flags=re.M).group(1)
    shown = re.search(r"minimal case: (\S+)", SHRINK_PAGE).group(1)
    code, output = invoke(*shlex.split(command)[1:])
    assert code == 0 and f"minimal case: {shown} " in output, output


# ------------------------------------------------------------------ family options (sLSTM, s6)

def _heads_rolled_target():
    """fused-cpu with the sLSTM recurrent gradient's head blocks written one head over (head k's
    dR lands in head k+1's block): a layout bug that only a case with heads > 1 can show."""
    import numpy as np

    from gradcheck_rnn import Outputs

    fused = resolve_target("fused-cpu")

    def heads_rolled(case):
        out = fused.run(case)
        heads = case.config.option("heads")
        d = case.config.hidden_size // heads
        grads = {key: np.roll(np.asarray(g).reshape(4, heads, d, d), 1, axis=1).reshape(np.shape(g))
                 if key.endswith(".w_hh") else g for key, g in out.grads.items()}
        return Outputs(out.y, out.hy, out.cy, grads)

    return heads_rolled


@pytest.mark.parametrize("case_id, changes", [
    ("slstm-L1-uni-I1-H4-NH4-expf-mconst-T1-B1-len1-f64-s3", ["NH 4→1", "NH 4→2", "NH 4→3", "drop -expf", "drop -mconst"]),
    ("s6-L1-uni-I1-H1-N4-R3-nosoftplus-T1-B1-len1-f64-s3",
     ["N 4→1", "N 4→2", "N 4→3", "R 3→1", "R 3→2", "drop -nosoftplus", "add -nogate"]),
    ("gla-L1-uni-I1-H4-NH4-K3-R3-headdecay-strongdecay-T1-B1-len1-f64-s3",
     ["NH 4→1", "NH 4→2", "NH 4→3", "K 3→1", "K 3→2", "R 3→1", "R 3→2", "drop -headdecay", "drop -strongdecay"]),
    ("mlstm-L1-uni-I1-H2-K1-T1-B1-len1-f64-s3", []),  # heads and K at their simplest
    ("s6-L1-uni-I1-H1-N1-R1-nogate-T1-B1-len1-f64-s3", []),  # already the simplest
    ("gru-L1-uni-I1-H1-T1-B1-len1-f64-s3", []),  # no options
    # issue 46's families
    ("conv1d-L1-uni-I1-H2-W4-silu-nobias-T1-B1-len1-f64-s3", ["W 4→2", "W 4→3", "drop -silu"]),  # never W1
    ("kda-L1-uni-I1-H4-NH2-K3-R2-T1-B1-len1-f64-s3", ["NH 2→1", "K 3→1", "K 3→2", "R 2→1"]),
    ("rwkv7-L1-uni-I1-H4-NH2-K3-T1-B1-len1-f64-s3", ["NH 2→1", "K 3→1", "K 3→2"]),
    ("deltaproduct-L1-uni-I1-H4-NH2-K3-n3-T1-B1-len1-f64-s3", ["NH 2→1", "K 3→1", "K 3→2", "n 3→1", "n 3→2"]),
])
def test_every_family_option_has_simpler_candidates_that_rebuild_bit_for_bit(case_id, changes):
    import numpy as np

    from gradcheck_rnn.errors import UsageError
    from gradcheck_rnn.workflows.shrink import _family_options

    case = Case.from_id(case_id)
    candidates = list(_family_options(case))
    assert [change for change, _ in candidates] == changes
    for change, build in candidates:
        try:
            candidate = build()
        except UsageError:  # NH3 does not divide H4: shrink skips it
            assert change == "NH 4→3"
            continue
        again = Case.from_id(candidate.id)
        assert again.id == candidate.id and again.config == candidate.config
        for name in ("x", "h0", "c0", "dy", "dhy", "dcy"):
            a, b = getattr(candidate, name), getattr(again, name)
            assert (a is None and b is None) or np.array_equal(a, b), name
        assert all(np.array_equal(candidate.params[k], again.params[k]) for k in candidate.params)


def test_slstm_heads_and_exp_forget_are_dropped_when_the_bug_does_not_need_them():
    result = shrink(Case.from_id("slstm-L1-uni-I1-H2-NH2-expf-T1-B1-len1-f64-s3"),
                    resolve_target("mutant:slstm-stabilizer-grad-to-forget"))
    changes = [step.change for step in result.steps]
    assert "NH 2→1" in changes and "drop -expf" in changes
    assert result.minimal.case_id.startswith("slstm-L1-uni-I1-H1-T1-B1-len1-f64-s3")


def test_slstm_heads_are_kept_when_the_bug_needs_them():
    result = shrink(Case.from_id("slstm-L1-uni-I1-H4-NH2-expf-T2-B1-len2-f64-s3"), _heads_rolled_target())
    assert result.failure.tensor == "l0.fwd.w_hh"
    # -expf goes, the heads stay: one head is the identity of the bug, so H stays at 2 of 2 heads
    assert result.minimal.case_id.startswith("slstm-L1-uni-I1-H2-NH2-T1-B1-len1-f64-s3"), result.minimal.case_id


def test_s6_state_size_and_rank_shrink_and_the_gate_stays_only_when_the_bug_is_in_it():
    gate = shrink(Case.from_id("s6-L1-uni-I1-H1-N4-R3-T1-B1-len1-f64-s3"), resolve_target("mutant:s6-gate-grad-dropped"))
    assert gate.minimal.case_id.startswith("s6-L1-uni-I1-H1-N1-R1-T1-B1-len1-f64-s3")  # dz needs the gate
    padded = shrink(Case.from_id("s6-L1-uni-I1-H1-N4-R3-nosoftplus-T3-B2-len3.1-f64-s3"),
                    resolve_target("mutant:s6-padded-step-decay"))
    # #368 needs a padded step and the delta_bias or the softplus; the gate it does not need
    assert padded.minimal.case_id.startswith("s6-L1-uni-I1-H1-N1-R1-nogate-T2-B1-len1-f64-s3"), padded.minimal.case_id


def test_a_nondeterministic_case_shrinks_under_the_determinism_check():
    """Issue 38: nondeterministic fails a run, and --check keeps a reference-free check's failure,
    yet shrink refused ("the case did not fail: … is nondeterministic")."""
    code, output = invoke("shrink", "gru-L1-bi-I2-H3-T4-B2-len4.3-f32-s2", "-t", "mutant:nondeterministic-weight-grad",
                          "--check", "determinism")
    assert code == 0, output
    assert "keeping the determinism check nondeterministic on l0.bwd.w_hh" in output
    minimal = Case.from_id(re.search(r"minimal case: (\S+)", output).group(1)).config
    assert (minimal.batch_size, minimal.max_len, minimal.hidden_size) == (1, 1, 1)
    assert "--target mutant:nondeterministic-weight-grad --check determinism" in output
