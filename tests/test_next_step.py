"""A green run ends with what to do next (issue 29): the narrowing flags for the cases a target
refused, the checks not run and the families not drawn, each with the flag or profile that adds it."""

import pytest
from click.testing import CliRunner

from gradcheck_rnn.run.advice import kinds, next_step
from gradcheck_rnn.cli import main
from gradcheck_rnn.judging.checks import check_names
from gradcheck_rnn.model.profiles import CONFIG_DIR
from gradcheck_rnn.model.narrowing import Narrowing
from gradcheck_rnn.rows.result import CaseResult
from gradcheck_rnn.run import Judging, RunSpec, Selection
from gradcheck_rnn.rows.store import Tally

NARROW = "narrow_targets:only_lstm_without_projections"


def invoke(*args):
    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    return result.exit_code, " ".join(result.output.split())


@pytest.fixture(scope="module")
def reference_only(tmp_path_factory):
    """The ci profile with the reference check alone (the fast check)."""
    draw = (CONFIG_DIR / "ci.toml").read_text().split("[checks]")[0]
    path = tmp_path_factory.mktemp("profile") / "reference.toml"
    path.write_text(draw + "[checks]\n" + "".join(f"{c} = {str(c == 'reference').lower()}\n" for c in check_names()))
    return path


def row(case_id, status, target=NARROW, check="reference"):
    return CaseResult(case_id, target, status, case_id.split("-")[0], "f64", "all", check=check)


def test_a_green_sweep_ends_with_the_checks_and_families_it_left_out(tmp_path):
    code, output = invoke("sweep", "-n", 2, "-t", "fused-cpu", "--report-dir", tmp_path)
    assert code == 0, output
    next_line = output.split("next: ", 1)[1].split(" all passed")[0]
    assert "the fd, jvp, gradgrad checks were not run (-c nightly runs them)" in next_line, output
    assert "the s6, slstm, conv1d, mlstm, gla, gdn, deltaproduct, rwkv7, kda families were not drawn (-c matrix, -c families)" in next_line, output


def test_a_target_that_refused_cases_is_told_the_narrowing_flags(tmp_path, reference_only):
    code, output = invoke("sweep", "-c", reference_only, "-n", 20, "-t", NARROW, "--report-dir", tmp_path)
    assert code == 0, output
    assert "refused 18 of 20 cases: draw only what it takes with --mode lstm --no-projections" in output, output
    assert "the determinism, padding, permutation, future, linearity, stateless, segments, poisoned, fd, jvp, gradgrad checks were not run " \
           "(-c nightly runs them)" in output, output


def test_a_run_that_judged_nothing_is_told_the_narrowing_flags_too(tmp_path, reference_only):
    code, output = invoke("sweep", "-c", reference_only, "-n", 6, "-t", NARROW, "--report-dir", tmp_path)
    assert code == 5, output
    assert "refused 6 of 6 cases: draw only what it takes with the narrowing flags of" in output, output


def test_a_failing_run_has_no_next_step_note(tmp_path, reference_only, monkeypatch):
    from gradcheck_rnn.reports import html

    monkeypatch.setattr(html, "case_png", lambda *args: None)  # the console, not the pictures
    # the cases of the first test (the same draw), whose references are compiled already
    code, output = invoke("sweep", "-c", reference_only, "-n", 2, "-t", "mutant:truncated-bptt", "--report-dir", tmp_path)
    assert code == 1 and "next:" not in output, output


def test_the_refused_cases_give_only_the_flags_that_separate_them():
    spec, _ = RunSpec.build(None, ("fused-cpu",), Selection(cases=3, narrowing=Narrowing(modes=("lstm",))),
                            Judging(check_names()))
    judged = ["lstm-L1-uni-I2-H3-T5-B2-len5.3-f64-s1", "lstm-L2-bi-I2-H3-T5-B2-len5.3-f64-s2"]
    refused = ["lstm-L1-uni-I2-H3-P2-T5-B2-len5.3-f64-s3", "lstm-L1-bi-I2-H3-P1-nobias-T5-B2-len5.0-f64-s4"]
    results = [row(c, "pass") for c in judged] + [row(c, "skip") for c in refused]
    assert next_step(spec, Tally.of_results(results).coverage) == (f"next: {NARROW} refused 2 of 4 cases: draw only what it takes with "
                                        f"--no-projections")
    mixed = [row(c, "pass") for c in judged] + [row(refused[0], "skip"), row("gru-L1-uni-I2-H3-T5-B2-len5.3-f64-s5",
                                                                             "skip")]
    assert "draw only what it takes with --mode lstm --no-projections" in next_step(spec, Tally.of_results(mixed).coverage)


def test_a_run_with_every_check_and_family_is_told_to_judge_more_cases():
    spec, _ = RunSpec.build(None, ("fused-cpu",), Selection(cases=3, narrowing=Narrowing(modes=("gru",))),
                            Judging(check_names()))
    assert next_step(spec, Tally.of_results([row("gru-L1-uni-I2-H3-T5-B2-len5.3-f64-s5", "pass", "fused-cpu")]).coverage) == \
        "next: judge more and larger cases: -n 100 or -c nightly"
    named, _ = RunSpec.build(None, ("fused-cpu",), Selection(case_ids=("gru-L1-uni-I2-H3-T5-B2-len5.3-f64-s5",)))
    assert next_step(named, Tally().coverage) is None  # a run of named cases has its own next step: the repro line


def test_the_refusals_are_read_from_case_ids_alone_so_a_user_familys_run_tallies_without_it():
    """`report` and `merge` tally stored rows in a process that may not know the run's user family."""
    rows = [{"case_id": "nofamily-L2-uni-I2-H3-P1-T5-B2-len5.0-f64-s1", "target": "t", "check": "reference",
             "status": "skip"},
            {"case_id": "nofamily-L1-uni-I2-H3-T5-B2-len5.3-f64-s2", "target": "t", "check": "reference",
             "status": "pass"}]
    refused, judged = map(kinds, Tally.of(rows).coverage["t"])
    assert list(refused) == [("nofamily", True, False, True, False, False, True)]
    assert list(judged) == [("nofamily", False, False, False, False, False, False)]


def test_a_target_that_refuses_family_options_is_told_the_family_option_flags():
    """Issue 38: mambapy refuses -nogate and -nosoftplus; the note said "the narrowing flags of
    `gradcheck-rnn sweep --help`", none of which reached a family's options. Several flags may be
    needed, each leaving out some refused cases and no judged one."""
    spec, _ = RunSpec.build("families", ("fused-cpu",), Selection(cases=3, narrowing=Narrowing(modes=("s6",))),
                            Judging(check_names()))
    judged = ["s6-L1-uni-I2-H3-N2-R1-T4-B2-len4.2-f32-s1", "s6-L1-uni-I2-H3-N3-R2-nobias-T4-B2-len4.2-f32-s2"]
    refused = ["s6-L1-uni-I2-H3-N2-R1-nogate-T4-B2-len4.2-f32-s3", "s6-L1-uni-I2-H3-N2-R1-nosoftplus-T4-B2-len4.2-f32-s4",
               "s6-L1-uni-I2-H3-N4-R1-nosoftplus-nogate-T4-B2-len4.2-f32-s5"]
    rows = [row(c, "pass", "mambapy") for c in judged] + [row(c, "skip", "mambapy") for c in refused]
    note = next_step(spec, Tally.of_results(rows).coverage)
    assert note.startswith("next: mambapy refused 3 of 5 cases: draw only what it takes with --family-option ")
    flags = note.split(" with ", 1)[1].split(";")[0]
    assert sorted(flags.split(" --family-option ")) == ["--family-option softplus=on", "gated=on"], note
    heads = [row("slstm-L1-uni-I2-H4-T4-B2-len4.2-f32-s1", "pass", "t"),
             row("slstm-L1-uni-I2-H4-NH2-T4-B2-len4.2-f32-s2", "pass", "t"),
             row("slstm-L1-uni-I2-H4-NH4-T4-B2-len4.2-f32-s3", "skip", "t")]
    assert "draw only what it takes with --family-option heads=1..2" in next_step(spec, Tally.of_results(heads).coverage)


def test_the_tally_counts_case_shapes_so_its_coverage_stays_small_and_the_row_store_needs_no_hints():
    """The row store does not import the command line's hints; a run's coverage holds one entry per
    kind of case, whatever its size, and reads as the same kinds its case ids have."""
    import ast
    import inspect

    import gradcheck_rnn.rows.store as tally_module

    imported = {node.module for node in ast.walk(ast.parse(inspect.getsource(tally_module)))
                if isinstance(node, ast.ImportFrom)}
    assert "advice" not in imported
    rows = [{"case_id": f"lstm-L2-uni-I{i % 7 + 1}-H{i % 5 + 1}-T{i % 9 + 1}-B3-len{i % 9 + 1}.{i % 4}.1-f64-s{i}",
             "target": "t", "check": "reference", "status": "skip" if i % 2 else "pass"} for i in range(1000)]
    refused, judged = Tally.of(rows).coverage["t"]
    assert len(refused) + len(judged) <= 4
    assert sum(kinds(refused).values()) == 500
    assert set(kinds(refused)) | set(kinds(judged)) == {("lstm", False, False, zero, False, False, True)
                                                         for zero in (False, True)}
