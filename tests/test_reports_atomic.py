"""A sweep killed with SIGKILL leaves the previous complete run or none, never a torn one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from click.testing import CliRunner

from gradcheck_rnn.cli import main
from gradcheck_rnn.reports import WRITERS, latest_run

# Two tiny GRU cases, the padding check only (checks added later may still run): what is killed is
# the point, not the judging, and a reference-free check spares each child JAX's import and programs.
PROFILE = """
[sweep]
cases = 2
[draw]
modes = { gru = 1 }
layers = [1, 1]
max_len = [2, 3]
[checks]
reference = false
padding = true
permutation = false
future = false
determinism = false
linearity = false
stateless = false
segments = false
poisoned = false
jvp = false
gradgrad = false
"""

# Run the real CLI in a child process; on reaching STAGE it writes the marker file and sleeps
# until it is killed: "judge" blocks inside the target (mid-run), "write" inside the html writer,
# after results.json and junit.xml are already staged (mid-write).
CHILD = """
import sys, time
from pathlib import Path

marker, stage, profile, report_dir = sys.argv[1:5]


def block(*args):
    Path(marker).write_text(stage)
    time.sleep(600)


def blocking_target(case):
    block()


if stage == "write":
    from gradcheck_rnn import reports
    reports.WRITERS["report.html"] = reports.Writer("html", "report.html", block)
from gradcheck_rnn.cli import main

target = "__main__:blocking_target" if stage == "judge" else "torch-native"
# in this process: the blocking target lives in this script's __main__, which no worker imports
main(["sweep", "-c", profile, "-t", target, "--in-process", "--report-dir", report_dir])
"""


def kill_at(stage: str, tmp_path: Path, report_dir: Path) -> None:
    """Start a sweep, wait until it reaches ``stage``, SIGKILL its whole process group."""
    marker = tmp_path / f"{stage}.marker"
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(CHILD))
    # the suite's JAX cache (tests/conftest.py): its artifacts are written whole or not at all, and
    # neither kill comes while one is written (the references are computed before the target runs)
    child = subprocess.Popen([sys.executable, str(script), str(marker), stage, str(tmp_path / "tiny.toml"),
                              str(report_dir)], start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert child.poll() is None, f"the sweep ended before {stage}: {child.stderr.read().decode()[-2000:]}"
            assert time.monotonic() < deadline, f"the sweep did not reach {stage} in 120 s"
            time.sleep(0.05)
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
        child.stderr.close()
    assert child.returncode == -signal.SIGKILL


def visible_runs(report_dir: Path) -> list[Path]:
    return sorted(p for p in report_dir.iterdir() if not p.name.startswith(".") and p.name != "latest")


def assert_complete(run: Path) -> None:
    assert sorted(p.name for p in run.iterdir()) == sorted(WRITERS)
    document = json.loads((run / "results.json").read_text())
    assert document["summary"]["total"] == len(document["results"]) > 0
    assert (run / "report.html").read_text().rstrip().endswith("</html>")


def test_sigkill_leaves_the_previous_complete_run_or_none(tmp_path):
    (tmp_path / "tiny.toml").write_text(PROFILE)
    report_dir = tmp_path / "reports"
    report_dir.mkdir()

    kill_at("judge", tmp_path, report_dir)  # no run yet: none afterwards
    assert visible_runs(report_dir) == [] and latest_run(report_dir) is None

    result = CliRunner().invoke(main, ["sweep", "-c", str(tmp_path / "tiny.toml"), "-t", "torch-native", "-j", "1",
                                       "--report-dir", str(report_dir)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    [complete] = visible_runs(report_dir)
    assert_complete(complete)

    kill_at("write", tmp_path, report_dir)  # killed with files staged: the previous run stays the only one
    assert visible_runs(report_dir) == [complete] and latest_run(report_dir) == complete.resolve()
    assert_complete(complete)
    staged = [p for p in report_dir.iterdir() if p.name.startswith(".")]
    assert staged and all(not (p / "report.html").exists() for p in staged)  # the torn staging stays hidden
