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
from gradcheck_rnn.baseline import grown
from gradcheck_rnn.cli import main
from gradcheck_rnn.config import CHECK_NAMES
from gradcheck_rnn.generate import CONFIG_DIR
from gradcheck_rnn.result import row_field

KERNEL = "drift_targets:kernel"


def invoke(*args):
    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    return result.exit_code, result.output


@pytest.fixture(scope="module")
def reference_only(tmp_path_factory) -> Path:
    """The ci profile with the reference check alone: drift is read from it, and it is the fast check."""
    draw = (CONFIG_DIR / "ci.toml").read_text().split("[checks]")[0]
    path = tmp_path_factory.mktemp("profile") / "reference.toml"
    path.write_text(draw + "[checks]\n" + "".join(f"{c} = {str(c == 'reference').lower()}\n" for c in CHECK_NAMES))
    return path


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

    code, output = sweep(reference_only, tmp_path / "fail", 40, "--baseline", correct_run, "--fail-on-drift")
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
