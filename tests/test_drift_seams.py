"""Where drift and reruns meet the other outputs: junit.xml shows a drifted row (a failure with
--fail-on-drift, else a warning in the test's output), merge keeps the shards' --fail-on-drift, and
--last-failed judges exactly the rows that did not pass, also when they form no product."""

from __future__ import annotations

import json
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from click.testing import CliRunner

import drift_targets
from gradcheck_rnn.cli import main
from gradcheck_rnn.judging.checks import check_names
from gradcheck_rnn.model.profiles import CONFIG_DIR
from gradcheck_rnn.reports import StoredRun, junit

KERNEL = "drift_targets:kernel"
CASE = "gru-L1-uni-I2-H3-T4-B2-len4.2-f32-s3"


def invoke(*args):
    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    return result.exit_code, result.output


def document(report_dir: Path) -> dict:
    return json.loads((report_dir / "latest" / "results.json").read_text())


@pytest.fixture(scope="module")
def profile(tmp_path_factory) -> Path:
    """The ci draw with the reference and linearity checks: drift is read from both, and both are fast."""
    draw = (CONFIG_DIR / "ci.toml").read_text().split("[checks]")[0]
    path = tmp_path_factory.mktemp("profile") / "two-checks.toml"
    path.write_text(draw + "[checks]\n" + "".join(f"{c} = {str(c in ('reference', 'linearity')).lower()}\n"
                                                  for c in check_names()))
    return path


# --- junit.xml ---------------------------------------------------------------------------------

def junit_of(fail_on_drift: bool | None) -> ET.Element:
    drifted = {"case_id": CASE, "target": "t", "check": "reference", "status": "drifted", "seconds": 0.01,
               "message": "ratio grew past ×4 the baseline: x 0.001 → 0.05", "tensors": [], "repro": "r"}
    passed = {**drifted, "status": "pass", "message": "", "check": "linearity"}
    document = {"command": "sweep", "results": [drifted, passed], "verdict": {"exit_code": 0, "reason": "r"}}
    if fail_on_drift is not None:
        document["drift"] = {"fail_on_drift": fail_on_drift, "rows": []}
    return ET.fromstring(junit.render(StoredRun.of(document)))


def test_junit_shows_a_drifted_row_as_a_failure_with_fail_on_drift():
    tree = junit_of(True)
    failure = tree.find(".//testcase/failure")
    assert failure is not None and failure.get("type") == "drifted" and "0.001 → 0.05" in failure.text
    assert tree.get("failures") == tree.find("testsuite").get("failures") == "1"


@pytest.mark.parametrize("fail_on_drift", [False, None])
def test_junit_shows_a_drifted_row_as_a_pass_with_a_warning_without_it(fail_on_drift):
    tree = junit_of(fail_on_drift)
    assert tree.find(".//failure") is None and tree.get("failures") == "0"
    drifted, passed = tree.findall(".//testcase")
    assert "warning: drifted since the baseline" in drifted.find("system-out").text
    assert passed.find("system-out") is None


# --- merge ---------------------------------------------------------------------------------------

def test_merge_fails_on_drift_when_the_shards_did_and_refuses_mixed_settings(profile, tmp_path, monkeypatch):
    args = ("-c", profile, "-n", 6, "-t", KERNEL, "--in-process")
    assert invoke("sweep", *args, "--report-dir", tmp_path / "base")[0] == 0
    monkeypatch.setattr(drift_targets, "GROWTH", 50.0)
    for k, more in ((1, ("--fail-on-drift",)), (2, ("--fail-on-drift",)), (3, ())):
        shard = "1/2" if k != 2 else "2/2"
        code, output = invoke("sweep", *args, "--shard", shard, "--baseline", tmp_path / "base", *more,
                              "--report-dir", tmp_path / f"shard-{k}")
        assert code in (0, 1), output
    assert any(r["status"] == "drifted" for k in (1, 2) for r in document(tmp_path / f"shard-{k}")["results"])
    code, output = invoke("merge", tmp_path / "shard-1", tmp_path / "shard-2", "--report-dir", tmp_path / "merged")
    merged = document(tmp_path / "merged")
    assert code == 1 and "drifted" in merged["verdict"]["reason"], output
    assert merged["drift"]["fail_on_drift"] is True and merged["drift"]["rows"]
    assert "Drifted since the baseline" in output
    assert 'type="drifted"' in (tmp_path / "merged" / "latest" / "junit.xml").read_text()

    code, output = invoke("merge", tmp_path / "shard-3", tmp_path / "shard-2", "--report-dir", tmp_path / "mixed")
    assert code == 2 and "differs in fail_on_drift" in output and "Traceback" not in output, output


def test_merge_of_shards_that_warned_on_drift_passes(profile, tmp_path, monkeypatch):
    args = ("-c", profile, "-n", 4, "-t", KERNEL, "--in-process")
    assert invoke("sweep", *args, "--report-dir", tmp_path / "base")[0] == 0
    monkeypatch.setattr(drift_targets, "GROWTH", 50.0)
    for k in (1, 2):
        invoke("sweep", *args, "--shard", f"{k}/2", "--baseline", tmp_path / "base", "--report-dir", tmp_path / f"s{k}")
    code, output = invoke("merge", tmp_path / "s1", tmp_path / "s2", "--report-dir", tmp_path / "merged")
    assert code == 0 and "warning: " in document(tmp_path / "merged")["verdict"]["reason"], output


# --- --last-failed -------------------------------------------------------------------------------

def test_last_failed_judges_exactly_the_failing_rows_when_they_form_no_product(profile, tmp_path):
    assert invoke("sweep", "-c", profile, "-n", 2, "-t", "fused-cpu", "-t", KERNEL, "--in-process",
                  "--report-dir", tmp_path)[0] == 0
    run = tmp_path / "latest" / "results.json"
    stored = json.loads(run.read_text())
    (first, second), targets = dict.fromkeys(r["case_id"] for r in stored["results"]), ("fused-cpu", KERNEL)
    chosen = {(first, "fused-cpu", "reference"), (second, KERNEL, "linearity")}  # 2 of the 2 × 2 × 2 product
    for row in stored["results"]:
        if (row["case_id"], row["target"], row["check"]) in chosen:
            row["status"] = "fail"
    run.write_text(json.dumps(stored))
    code, output = invoke("sweep", "--last-failed", "--in-process", "--report-dir", tmp_path)
    rerun = document(tmp_path)
    assert code == 0, output  # judged again, the correct kernels pass
    assert {(r["case_id"], r["target"], r["check"]) for r in rerun["results"]} == chosen
    assert rerun["summary"]["total"] == 2 and rerun["complete"] is True
    assert set(targets) == set(rerun["spec"]["targets"])
