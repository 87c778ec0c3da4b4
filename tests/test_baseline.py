"""Precision drift against a baseline (sweep --baseline, --fail-on-drift, gradcheck-rnn diff) and
sweep --last-failed, end to end through the command line.

The drifting kernel is tests/drift_targets.py's: fused-cpu whose gradients carry 50× its own error,
still under tolerance. It is judged in this process (--in-process) so that the tests can switch it.
"""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import drift_targets
from gradcheck_rnn.workflows.baseline import Baseline, grown
from gradcheck_rnn.cli import main
from gradcheck_rnn.errors import UsageError
from gradcheck_rnn.rows.result import CaseResult, row_field, tally_verdict
from gradcheck_rnn.run import Judging, RunSpec, Selection
from gradcheck_rnn.rows.store import Tally

KERNEL = "drift_targets:kernel"


def invoke(*args):
    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    return result.exit_code, result.output


def sweep(profile, report_dir, cases, *more):
    return invoke("sweep", "-c", profile, "-n", cases, "-t", KERNEL, "--in-process", "--report-dir", report_dir, *more)


def document(report_dir: Path) -> dict:
    return json.loads((report_dir / "latest" / "results.json").read_text())


@pytest.fixture(scope="module")
def correct_run(reference_only, tmp_path_factory) -> Path:
    """40 cases of the correct kernel: the baseline."""
    report_dir = tmp_path_factory.mktemp("baseline")
    code, output = sweep(reference_only, report_dir, 40)
    assert code == 0, output
    return report_dir


def test_a_growth_below_the_floor_or_the_factor_is_not_drift():
    assert grown({"dx": 1e-9}, {"dx": 1e-8}, 4) == []  # ×10, but far below the tolerance
    assert grown({"dx": 0.01}, {"dx": 0.03}, 4) == []  # above the floor, but only ×3
    assert grown({"dx": 0.01}, {"dx": 0.5, "y": float("nan")}, 4) == [("dx", 0.01, 0.5)]


def test_drift_is_found_in_rows_judged_by_worker_processes(reference_only, correct_run, tmp_path, monkeypatch,
                                                          worker_processes):
    """A worker makes each passing row's results.jsonl line; the supervisor marks drift after it
    arrives, and the drifted row must be stored as drifted, not as the pass its worker wrote."""
    monkeypatch.setenv(drift_targets.GROWTH_ENV, "50")
    monkeypatch.syspath_prepend(str(Path(__file__).parent))  # the workers import drift_targets too
    code, output = invoke("sweep", "-c", reference_only, "-n", 20, "-t", KERNEL, "--workers", 1,
                          "--report-dir", tmp_path, "--baseline", correct_run / "latest")
    stored = document(tmp_path)
    drifted = {(r["case_id"], r["target"]) for r in stored["results"] if r["status"] == "drifted"}
    assert code == 0 and drifted, output
    assert drifted == {(e["case_id"], e["target"]) for e in stored["drift"]["rows"]}
    assert stored["summary"]["drifted"] == len(drifted)


def test_fifty_times_larger_errors_under_tolerance_drift(reference_only, correct_run, tmp_path, monkeypatch):
    monkeypatch.setattr(drift_targets, "GROWTH", 50.0)
    code, output = sweep(reference_only, tmp_path / "warn", 40, "--baseline", correct_run / "latest")
    assert code == 0, output  # every row is still within tolerance: drift only warns
    stored = document(tmp_path / "warn")
    drifted = [r for r in stored["results"] if r["status"] == "drifted"]
    assert drifted and all(row_field(r, "dtype") == "f32" for r in drifted)  # f64 cases carry no error to grow
    assert stored["summary"]["fail"] == 0 and "warning: " in stored["verdict"]["reason"]
    assert {(e["case_id"], e["target"]) for e in stored["drift"]["rows"]} == {(r["case_id"], r["target"]) for r in drifted}
    assert "Drifted since the baseline" in output and drifted[0]["case_id"] in output
    assert "## Drift since the baseline" in (tmp_path / "warn" / "latest" / "report.md").read_text()
    assert "Drift since the baseline" in (tmp_path / "warn" / "latest" / "report.html").read_text()

    code, output = sweep(reference_only, tmp_path / "fail", 20, "--baseline", correct_run, "--fail-on-drift")  # 20 drift too
    assert code == 1 and "drifted" in document(tmp_path / "fail")["verdict"]["reason"], output

    code, output = invoke("diff", correct_run / "latest", tmp_path / "warn" / "latest")
    assert code == 1 and f"{len(drifted)} rows drifted" in output, output


def test_two_runs_of_the_correct_kernel_do_not_drift(reference_only, correct_run, tmp_path):
    code, output = sweep(reference_only, tmp_path, 40, "--baseline", correct_run, "--fail-on-drift")
    assert code == 0, output
    stored = document(tmp_path)
    assert stored["drift"]["compared"] == stored["summary"]["pass"] > 0 and stored["drift"]["rows"] == []
    assert "no drift" in output


@pytest.mark.slow
def test_two_runs_of_the_correct_kernel_do_not_drift_across_1000_cases(reference_only, tmp_path):
    assert sweep(reference_only, tmp_path / "a", 1000)[0] == 0
    code, output = sweep(reference_only, tmp_path / "b", 1000, "--baseline", tmp_path / "a", "--fail-on-drift")
    assert code == 0 and document(tmp_path / "b")["drift"]["rows"] == [], output


def test_a_baseline_judged_under_other_tolerances_is_refused(reference_only, correct_run, tmp_path):
    """Tighter tolerances make every ratio larger: that is no drift of the kernel, so no comparison."""
    code, output = sweep(reference_only, tmp_path, 40, "--rtol", 1e-5, "--atol", 1e-7, "--baseline", correct_run)
    assert code == 2 and "was judged under other tolerances" in output and "rtol 1e-05, atol 1e-07 now" in output, output
    assert "Traceback" not in output and not (tmp_path / "latest").exists()
    assert "judging " not in output, output  # refused before the run's header: nothing runs (issue 48)


def test_a_baseline_of_another_profile_that_shares_no_row_is_refused(reference_only, correct_run, tmp_path):
    other = tmp_path / "other.toml"
    other.write_text(reference_only.read_text().replace("seed = 0", "seed = 5"))
    code, output = sweep(other, tmp_path / "reports", 40, "--baseline", correct_run, "--fail-on-drift")
    assert code == 2 and "shares no row" in output and "profile 'reference'" in output, output
    assert not (tmp_path / "reports").exists() and "judging " not in output


def test_a_baseline_of_an_edited_profile_with_the_same_tolerances_is_compared_with_a_note(
        reference_only, correct_run, tmp_path):
    edited = tmp_path / "reference.toml"
    edited.write_text(reference_only.read_text() + "# edited: another sha256, the same draw and tolerances\n")
    code, output = sweep(edited, tmp_path / "reports", 10, "--baseline", correct_run, "--fail-on-drift")
    assert code == 0 and "another version of profile 'reference'" in output, output
    assert document(tmp_path / "reports")["drift"]["compared"] > 0


def test_a_baseline_written_before_runs_recorded_their_tolerances_is_judged_by_its_overrides():
    now, _ = RunSpec.build(None, ("fused-cpu",), Selection(cases=1))
    with_rtol, _ = RunSpec.build(None, ("fused-cpu",), Selection(cases=1), Judging(rtol=1e-3))
    older = {key: value for key, value in with_rtol.to_json().items()
             if key != "tolerance_table"}
    with pytest.raises(UsageError, match="--rtol 0.001 in the baseline, None now"):
        Baseline(Path("reports/old"), {}, spec=older).refuse_incomparable(now)


@pytest.mark.parametrize("fail_on_drift, exit_code", [(True, 5), (False, 0)])
def test_fail_on_drift_never_passes_when_no_row_was_compared(fail_on_drift, exit_code):
    drift = {"baseline": "reports/run", "factor": 4.0, "floor": 0.01, "fail_on_drift": fail_on_drift,
             "compared": 0, "rows": []}
    passing = CaseResult("gru-L1-uni-I2-H3-T5-B1-len5-f32-s7", "fused-cpu", "pass", "gru", "f32", "all")
    code, reason = tally_verdict(Tally.of_results([passing]), drift=drift)
    assert code == exit_code and ("no drift was checked" in reason) == fail_on_drift, reason
    with_compared = tally_verdict(Tally.of_results([passing]), drift={**drift, "compared": 1})
    assert with_compared[0] == 0


@pytest.mark.parametrize("flags, words", [
    (["--fail-on-drift"], "--fail-on-drift needs a baseline to compare with; add --baseline RUN_DIR"),
    (["--drift-factor", "2", "--fail-on-drift"],
     "--drift-factor and --fail-on-drift need a baseline to compare with; add --baseline RUN_DIR"),
])
def test_drift_flags_without_a_baseline_are_refused_in_a_sentence(flags, words, tmp_path):
    code, output = invoke("sweep", *flags, "--report-dir", tmp_path)
    assert code == 2 and output.strip() == f"error: {words}", output


def test_diff_lists_the_rows_present_in_one_run_only(reference_only, correct_run, tmp_path):
    assert sweep(reference_only, tmp_path, 38)[0] == 0
    code, output = invoke("diff", correct_run, tmp_path)
    ids = [r["case_id"] for r in document(correct_run)["results"]]
    assert code == 0 and "2 rows only in A" in output and "no drift" in output, output
    assert ids[38] in output and ids[37] not in output


def test_last_failed_reruns_exactly_the_failing_rows_of_a_mutant_sweep(reference_only, tmp_path):
    code, output = invoke("sweep", "-c", reference_only, "-n", 12, "-t", "mutant:truncated-bptt", "-t", "fused-cpu",
                          "--report-dir", tmp_path)
    assert code == 1, output
    failing = {(r["case_id"], r["target"], r["check"]) for r in document(tmp_path)["results"] if r["status"] == "fail"}
    assert failing and {target for _, target, _ in failing} == {"mutant:truncated-bptt"}

    code, output = invoke("sweep", "--last-failed", "--report-dir", tmp_path)
    assert code == 1, output
    rerun = {(r["case_id"], r["target"], r["check"]): r["status"] for r in document(tmp_path)["results"]}
    assert set(rerun) == failing and set(rerun.values()) == {"fail"}

    code, output = invoke("sweep", "--last-failed", "-n", 3, "--report-dir", tmp_path)
    assert code == 2 and "--cases" in output


def test_last_failed_after_a_green_run_exits_5(reference_only, tmp_path):
    assert invoke("sweep", "-c", reference_only, "-n", 2, "-t", "fused-cpu", "--report-dir", tmp_path)[0] == 0
    code, output = invoke("sweep", "--last-failed", "--report-dir", tmp_path)
    assert code == 5 and "nothing to rerun" in output, output
    code, output = invoke("sweep", "--last-failed", "--report-dir", tmp_path / "empty")
    assert code == 2 and "holds no run" in output, output
