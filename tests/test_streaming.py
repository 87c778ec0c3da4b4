"""Runs at scale, the supervisor's side: workers forked from a preloaded fork server, rows streamed
to the staging folder's results.jsonl as they arrive, stale staging folders cleared."""

from __future__ import annotations

import json
import multiprocessing.forkserver
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from gradcheck_rnn.model.case import Case
from gradcheck_rnn.cli import main
from gradcheck_rnn.reports import RowLog, write_reports
from gradcheck_rnn.reports.document import results_document
from gradcheck_rnn.rows.store import ROWS_FILE, STALE_AFTER, clear_stale_staging, host_name, staging_prefix
from gradcheck_rnn import CaseResult
from gradcheck_rnn.rows.result import slim
from gradcheck_rnn.run import busy_cores, cpu_ticks, default_workers
from gradcheck_rnn.run import fork_server
from gradcheck_rnn.run.pool import WorkerPool, use_fork_server
from gradcheck_rnn.run.worker import WorkerSetup
from gradcheck_rnn.model.tolerances import Tolerances

TESTS = Path(__file__).parent
META = {"command": "sweep", "seed": 3, "verdict": {"exit_code": 0, "reason": "all passed"}}

# the pipeline as users run it: judging in worker processes (see conftest.py)
pytestmark = pytest.mark.usefixtures("worker_processes")


def row(index: int, target: str, status: str = "pass") -> CaseResult:
    return CaseResult(f"gru-L1-uni-I2-H3-T4-B1-len4-f64-s{index}", target, status, "gru", "f64", "all",
                      case_index=index, message="" if status == "pass" else "broken")


# --- workers -----------------------------------------------------------------------------------

@pytest.mark.skipif(not use_fork_server(), reason="no fork server on this platform")
def test_workers_are_forked_from_the_preloaded_server_with_one_thread_and_the_current_environment(monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))
    monkeypatch.setenv("GRADCHECK_RNN_PROBE", "set-after-the-server-started")
    preloaded_here = "gradcheck_rnn.run.preload" in sys.modules  # by another test of this process, if any
    setup = WorkerSetup(("probe_targets:reports_its_process",), Tolerances(), ("reference",),
                        tuple(p for p in sys.path if p))
    case = Case.from_id("gru-L1-uni-I2-H3-T4-B1-len4-f64-s1")
    with fork_server.kept():  # across pools: the second one's workers are forked from the same server
        with WorkerPool(setup, 2) as pool:
            rows = list(pool.judge([(0, case), (1, case)]))
            server = multiprocessing.forkserver._forkserver._forkserver_pid
        with WorkerPool(setup, 1) as pool:
            rows += pool.judge([(1, case)])
    seen = [dict(re.findall(r"(\w+)=(\S+)", r.message)) for _, r in rows]
    assert len(seen) == 3 and all(s["ppid"] == str(server) for s in seen), (seen, server)
    # torch on one thread; the thread variables are the user's, as the command was started with them
    user_omp = str(os.environ.get("OMP_NUM_THREADS"))
    assert all(s["torch_threads"] == "1" and s["omp"] == user_omp for s in seen), seen
    assert all(s["marker"] == "set-after-the-server-started" for s in seen), seen
    assert all(s["main"] == "None" for s in seen), seen  # the supervisor's __main__ is not re-run
    assert ("gradcheck_rnn.run.preload" in sys.modules) == preloaded_here  # the heavy imports happen in the server only


def test_the_command_starts_the_fork_server_before_its_own_torch_import(monkeypatch):
    """The fork server's imports (torch and jax) are on every pooled run's path to its first row;
    the command's own set-up imports torch too, and must do it beside them, not before."""
    from gradcheck_rnn.cli import options as cli_options

    order: list[str] = []
    monkeypatch.setattr("gradcheck_rnn.run.start_pool_early", lambda execution: order.append("fork server"))
    monkeypatch.setattr("gradcheck_rnn.runtime.set_up_process", lambda: order.append("torch threads"))
    cli_options.build_run({"cases": 2, "workers": 2, "targets": ("fused-cpu",)})
    assert order == ["fork server", "torch threads"]


def test_default_workers_follow_cases_and_busy_cores_and_say_why(monkeypatch):
    monkeypatch.setattr("gradcheck_rnn.run.usable_cores", lambda: 4)
    monkeypatch.setattr(os, "getloadavg", lambda: (3.9, 3.9, 3.9))  # a minute's mean of what has ended: not read
    idle = lambda: 0.0  # noqa: E731 - the busy-core sampler, injected
    assert default_workers(10, idle)[0] == default_workers(199, idle)[0] == 1  # one worker process: isolated all the same
    assert default_workers(200, idle) == (2, "default: at most one per 100 cases")
    assert default_workers(100_000, idle) == (4, "default: one per idle core, 4 of 4")
    assert default_workers(100_000, lambda: 0.9)[0] == 4  # this command's own start-up
    assert default_workers(100_000, lambda: 3.2) == (1, "default: 1 idle core of 4")  # three cores busy elsewhere
    assert default_workers(100_000, lambda: None)[0] == 1  # no CPU times to read: the load average stands in
    assert default_workers()[0] == 4  # no case count: the cores
    monkeypatch.setattr("gradcheck_rnn.run.usable_cores", lambda: 2)
    # issue 42: an idle 2-core machine right after another run (whose processes are gone) uses both
    assert default_workers(200, idle) == (2, "default: one per idle core, 2 of 2")


def test_a_case_of_a_heavier_family_counts_as_several_for_the_default_worker_count(monkeypatch):
    """A matrix-memory case is several cuDNN-cell cases' work (``Family.case_work``, measured by
    benchmarks/case_work.py): the matrix profile's default 72 cases take both idle cores, as 200
    cases of the cells do, where counting cases alone gave one worker."""
    from gradcheck_rnn.cli import options as cli_options
    from gradcheck_rnn.families import CUDNN_MODES, family
    from gradcheck_rnn.model.profiles import draw_case_ref, load_profile
    from gradcheck_rnn.run import Selection, mean_case_work

    assert mean_case_work(load_profile("ci").modes) == 1.0
    matrix = mean_case_work(load_profile("matrix").modes)
    assert 3 < matrix < 7 and matrix == pytest.approx(
        sum(family(m).case_work for m in ("mlstm", "gla", "gdn", "deltaproduct", "rwkv7", "kda")) / 6)
    assert mean_case_work({"lstm": 1, "deltaproduct": 1}) == (1 + family("deltaproduct").case_work) / 2
    assert all(family(m).case_work == 1 for m in CUDNN_MODES)
    idle = lambda: 0.0  # noqa: E731
    assert default_workers(40, idle, per_case=matrix) == (1, f"default: at most one per 100 cases, each counted as {matrix:.2g}")

    monkeypatch.delenv("GRADCHECK_RNN_WORKERS", raising=False)
    monkeypatch.setattr("gradcheck_rnn.run.usable_cores", lambda: 2)
    monkeypatch.setattr("gradcheck_rnn.run.idle_cores", lambda cores, busy_now: cores)  # an idle machine
    monkeypatch.setattr("gradcheck_rnn.run.start_pool_early", lambda execution: None)
    monkeypatch.setattr("gradcheck_rnn.runtime.set_up_process", lambda: None)

    def workers(selection=None, **values):
        return cli_options.build_run({"targets": ("fused-cpu",), **values}, selection).execution.workers

    assert workers(config="matrix") == 2  # its 72 cases
    assert workers(config="ci", cases=72) == 1
    assert workers(config="matrix", cases=40) == 1
    assert workers(config="matrix", cases=40, modes=("deltaproduct",)) == 2  # the narrowed draw's family
    # named cases count by the families their ids name (a rerun of a matrix run's cases)
    profile = load_profile("matrix")
    ids = tuple(draw_case_ref(profile, profile.seed, i).id for i in range(72))
    assert workers(Selection(case_ids=ids)) == 2
    assert workers(Selection(case_ids=ids[:30])) == 1


def test_busy_cores_are_the_busy_share_of_cpu_time_while_the_command_waits(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    ticks = iter([(1000, 4000), (1015, 4020)])  # (busy, total) ticks: 15 of the 20 since were busy
    assert busy_cores(lambda: next(ticks), seconds=0) == pytest.approx(1.5)
    assert busy_cores(lambda: None, seconds=0) is None
    busy, total = cpu_ticks()  # this machine's /proc/stat (the project runs its tests on Linux)
    assert 0 <= busy <= total


def test_passing_rows_lose_their_ratio_maps_on_arrival():
    from gradcheck_rnn.model.compare import TensorError

    passing, failing = row(0, "t"), row(1, "t", "fail")
    for r in (passing, failing):
        r.tensors = [TensorError("y", r.status, ratio_map=object())]
    assert slim(passing).tensors[0].ratio_map is None
    assert slim(failing).tensors[0].ratio_map is not None


# --- rows streamed to disk ---------------------------------------------------------------------

def test_rows_stream_to_the_staging_folder_and_results_json_is_built_from_them(tmp_path):
    arrived = [row(2, "a"), row(0, "a"), row(2, "b", "fail"), row(1, "a"), row(0, "b"), row(1, "b")]
    log = RowLog(tmp_path, "20261203-120000-sweep-s3")
    assert log.staging.name.startswith(staging_prefix("20261203-120000-sweep-s3"))
    for n, r in enumerate(arrived, 1):
        log.add(r)
        on_disk = (log.staging / ROWS_FILE).read_bytes() if n == 1 else None
        log.rows()  # flushes
        assert len((log.staging / ROWS_FILE).read_text().splitlines()) == n  # each row is on disk as it comes
        assert on_disk is None or on_disk.count(b"\n") <= 1
    ordered = sorted(arrived, key=lambda r: r.case_index)  # stable: a case's rows keep their order
    assert [(r["case_index"], r["target"]) for r in log.rows()] == [(r.case_index, r.target) for r in ordered]
    run_dir = write_reports(ordered, tmp_path, META, log=log)
    written = json.loads((run_dir / "results.json").read_text())
    expected = results_document(ordered, META)
    assert written["results"] == expected["results"]
    assert {k: v for k, v in written.items() if k != "created"} == {k: v for k, v in expected.items() if k != "created"}
    assert sorted(p.name for p in run_dir.iterdir()) == ["junit.xml", "report.html", "report.md", "results.json"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # staging renamed, nothing left


def test_a_failing_writer_leaves_no_run_and_no_staging(tmp_path, monkeypatch):
    from gradcheck_rnn import reports

    def broken(document, stream):
        raise OSError("disk full")

    monkeypatch.setitem(reports.WRITERS, "report.md", reports.Writer("markdown", "report.md", broken))
    with pytest.raises(OSError):
        write_reports([row(0, "a")], tmp_path, META)
    assert list(tmp_path.iterdir()) == []


# --- stale staging folders ---------------------------------------------------------------------

def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_the_next_run_clears_stale_staging_folders_and_says_so_in_one_line(tmp_path):
    reports = tmp_path / "reports"
    host, old = host_name(), time.time() - STALE_AFTER - 60
    folders = {
        f".20261201-000000-sweep-s0.{dead_pid()}@{host}.k1lled00": "stale",     # writer gone
        f".20261201-000000-sweep-s0.{os.getpid()}@{host}.l1ve0000": "kept",     # writer alive (this process)
        ".20261201-000000-sweep-s0.4242@elsewhere.recent00": "kept",           # another host, written lately
        ".20261201-000000-sweep-s0.4242@elsewhere.old00000": "stale-old",      # another host, a day quiet
        ".20261201-000000-sweep-s0.abcd1234": "stale-old",                     # an older version's name
        ".20261201-000000-sweep-s0.efgh5678": "kept",                          # ... still being written
        ".cache": "kept",                                                      # not ours
    }
    for name, fate in folders.items():
        (reports / name).mkdir(parents=True)
        (reports / name / "results.json").write_text("{")
        if fate == "stale-old":
            for path in (reports / name / "results.json", reports / name):
                os.utime(path, (old, old))
    profile = tmp_path / "tiny.toml"
    profile.write_text("[sweep]\ncases = 1\n[draw]\nmodes = { gru = 1 }\nlayers = [1, 1]\nmax_len = [1, 2]\n"
                       "[checks]\n" + "".join(f"{c} = false\n" for c in ("padding", "permutation", "future",
                                                                          "determinism", "linearity", "stateless", "segments",
                                                                          "poisoned", "fd", "jvp", "gradgrad")))
    result = CliRunner().invoke(main, ["sweep", "-c", str(profile), "-t", "fused-cpu", "--report-dir", str(reports)])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if "stale staging" in line]
    assert len(lines) == 1 and lines[0].startswith("gradcheck-rnn: removed 3 stale staging folders"), result.output
    left = {p.name for p in reports.iterdir() if p.name.startswith(".")}
    assert left == {name for name, fate in folders.items() if fate == "kept"}
    assert all(name in lines[0] for name, fate in folders.items() if fate != "kept")
    assert clear_stale_staging(reports) == []  # nothing more to clear: said once
