"""A run's rows as one event with observers, its one verdict with a named stop reason, and report
writers as records in one registry."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from gradcheck_rnn.cli import main
from gradcheck_rnn.rows.store import (
    EXIT_INTERRUPTED,
    KeptRows,
    StopReason,
    Tally,
    conclude,
)
from gradcheck_rnn.run import Execution, Judging, RunSpec, Selection, judge_run

KERNEL = "fused-cpu"


def invoke(*args: Any) -> tuple[int, str]:
    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    return result.exit_code, result.output


class Marker:
    """An observer that marks the first row it sees, as ``sweep --baseline`` marks a drifted one,
    and stores what it saw beside the rows."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, str]] = []

    def on_row(self, row: Any) -> None:
        if not self.seen:
            row.status, row.message = "drifted", "marked by a test observer"
        self.seen.append((row.case_index, row.status))

    def extra(self) -> dict[str, Any]:
        return {"seen": len(self.seen)}


def test_observers_see_every_row_before_the_store_and_what_they_found_is_stored_beside_the_rows():
    spec, _ = RunSpec.build("ci", (KERNEL,), Selection(cases=2, seed=3), Judging(("reference", "linearity")))
    marker, store = Marker(), KeptRows()
    run = judge_run(spec, Execution(in_process=True), observers=(marker,), store=store)
    assert len(marker.seen) == run.rows == spec.rows == 4
    assert [index for index, _ in marker.seen] == sorted(index for index, _ in marker.seen)  # as they arrived
    assert store.kept[0].status == "drifted" and store.tally.statuses["drifted"] == 1  # stored as marked
    assert run.results == store.kept and run.tally is store.tally
    assert run.extra == {"seen": 4}


class VacuousDrift:
    """A baseline that compared nothing, under --fail-on-drift: the verdict reads what it found."""

    def on_row(self, row: Any) -> None:
        pass

    def extra(self) -> dict[str, Any]:
        return {"drift": {"baseline": "b", "factor": 4.0, "floor": 0.01, "fail_on_drift": True, "compared": 0,
                          "rows": []}}


def test_the_verdict_reads_the_drift_an_observer_stored_and_the_engine_knows_no_baseline():
    spec, _ = RunSpec.build("ci", (KERNEL,), Selection(cases=1, seed=3), Judging(("reference",)))
    run = judge_run(spec, Execution(in_process=True), observers=(VacuousDrift(),))
    assert run.exit_code == 5 and "no drift was checked" in run.reason
    assert run.extra["drift"]["compared"] == 0


def test_each_stop_reason_describes_itself_and_a_signal_is_never_a_pass():
    assert {reason.value for reason in StopReason} == {"complete", "fail-fast", "SIGINT", "SIGTERM"}
    assert len({reason.describe() for reason in StopReason}) == len(StopReason)
    assert [reason for reason in StopReason if reason.signal] == [StopReason.SIGINT, StopReason.SIGTERM]
    spec, _ = RunSpec.build("ci", (KERNEL,), Selection(cases=3))
    for reason in (StopReason.SIGINT, StopReason.SIGTERM):
        run = conclude([], spec, Tally(), reason)
        assert run.stop is reason and not run.complete and run.interrupted == reason.value
        assert run.exit_code == EXIT_INTERRUPTED[reason.value]
        assert run.reason == f"{reason.describe()}: 0 of 3 cases judged"
    assert conclude([], spec, Tally(), StopReason.FAIL_FAST).stop.describe().startswith("stopped by --fail-fast")


def test_a_fail_fast_run_says_why_it_stopped(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    spec, _ = RunSpec.build("ci", ("plugin_targets:zero_top_bhh",), Selection(cases=4, seed=11),
                            Judging(("reference",)))
    run = judge_run(spec, Execution(in_process=True, fail_fast=True))
    assert run.stop is StopReason.FAIL_FAST and not run.complete and run.exit_code == 1
    assert run.rows < spec.rows


def test_a_report_format_is_one_record_in_the_one_registry(tmp_path, monkeypatch):
    from gradcheck_rnn import reports

    def toy(document: dict[str, Any]) -> bytes:
        verdict = document["verdict"]
        return f"{verdict['exit_code']} {verdict['reason']}; {document['summary']['total']} rows\n".encode()

    monkeypatch.setitem(reports.WRITERS, "toy.txt", reports.Writer("toy", "toy.txt", reports.whole(toy)))
    code, output = invoke("sweep", "-n", 1, "-t", KERNEL, "--in-process", "--report-dir", tmp_path)
    run_dir = reports.latest_run(tmp_path)
    stored = json.loads((run_dir / "results.json").read_text())
    written = (run_dir / "toy.txt").read_text()
    assert written == f"{code} {stored['verdict']['reason']}; {len(stored['results'])} rows\n"
    (run_dir / "toy.txt").unlink()
    code_again, output = invoke("report", run_dir)
    assert code_again == code and (run_dir / "toy.txt").read_text() == written  # re-rendered from results.json
    assert "toy.txt" in output
