"""How many result rows a second one command's supervisor takes in: the pool's ceiling in workers.

    python benchmarks/supervisor_capacity.py                # 200 ci cases, replayed 10 times (28,000 rows)
    python benchmarks/supervisor_capacity.py --repeat 20 --cases 100

First the rows of CASES ci cases (fused-cpu, torch-native, every ci check) are judged for real by
one worker process, which also measures how many rows a second one worker makes here. Then the same
rows are replayed: a stand-in worker process answers each case the pool hands it with that case's
rows, as fast as the pipe takes them, so this process (the supervisor: the pool's loop, the
progress bar, the row log with its tally, as ``gradcheck-rnn sweep`` runs them) is the only limit.
On a 2-core machine the stand-in has one core and the supervisor the other.

Printed: the replay's pace, the supervisor's CPU per row (``time.process_time``) and the rows a
second that makes at most (the stand-in, which makes each row's results.jsonl line as a worker does,
may be the slower of the two), and that rate over one real worker's rows a second: how many workers
one command keeps busy before its supervisor is the bottleneck.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import selectors
import tempfile
import time
from multiprocessing.connection import Connection
from typing import Any

TARGETS = ("fused-cpu", "torch-native")


def replay(conn: Connection, canned: list[list[Any]]) -> None:
    """A stand-in worker: the pool's protocol (gradcheck_rnn/run/worker.py), with canned rows."""
    try:
        from gradcheck_rnn.rows.result import normal_form
    except ImportError:  # checkouts before the one normal form of a row
        try:
            from gradcheck_rnn.rows.result import with_stored_line
        except ImportError:  # checkouts before workers made the rows' lines
            def with_stored_line(row: Any) -> Any:
                return row

        def normal_form(row: Any, index: int) -> Any:
            row.case_index = index
            return with_stored_line(row)
    setup = conn.recv()
    conn.send(("ready", os.getpid(), {}))
    while (job := conn.recv()) is not None:
        index, _, start = job
        if "reference" in setup.checks:
            conn.send(("truth", index))
        for row in canned[index % len(canned)][start:]:
            conn.send(("row", index, normal_form(row, index)))  # as a worker sends it


def use_stand_in_workers(canned: list[list[Any]]) -> None:
    """Make every pool of this process start :func:`replay` processes instead of real workers."""
    from gradcheck_rnn.run import pool

    def start(self: pool.WorkerPool) -> None:
        context = multiprocessing.get_context("fork")  # the canned rows travel by fork, unpickled
        ours, theirs = context.Pipe()
        child = context.Process(target=replay, args=(theirs, canned), daemon=True)
        child.start()
        theirs.close()
        worker = pool._Worker(pool.ForkedProcess(child), ours)
        worker.conn.send(self.setup)
        self.workers.append(worker)
        self._selector.register(worker.conn, selectors.EVENT_READ, worker)

    pool.WorkerPool._start = start


def judge_for_real(cases: int) -> tuple[list[list[Any]], float]:
    """The rows of ``cases`` ci cases by case, judged by one worker; its rows per second once running."""
    from gradcheck_rnn.run import Execution, OnRow, RunSpec, Selection, execute

    spec, _ = RunSpec.build("ci", TARGETS, Selection(cases=cases))
    arrivals: list[float] = []
    rows = execute(spec, Execution(workers=1), observers=(OnRow(lambda row: arrivals.append(time.perf_counter())),))
    by_case: dict[int, list[Any]] = {}
    for row in rows:
        by_case.setdefault(row.case_index, []).append(row)
    return [by_case[index] for index in sorted(by_case)], (len(arrivals) - 1) / (arrivals[-1] - arrivals[0])


def replay_run(cases: int) -> tuple[int, float, float]:
    """A sweep of ``cases`` cases judged by one stand-in worker, as the command runs it: rows, wall, CPU."""
    from rich.console import Console

    from gradcheck_rnn.reports import RowLog
    from gradcheck_rnn.reports.console import progress
    from gradcheck_rnn.run import Execution, RunSpec, Selection, judge_run

    spec, _ = RunSpec.build("ci", TARGETS, Selection(cases=cases))
    with tempfile.TemporaryDirectory(prefix="supervisor-capacity-") as folder:
        log = RowLog(folder, "replay", notify=lambda *_: None)
        wall, cpu = time.perf_counter(), time.process_time()
        with progress(Console(stderr=True), spec.rows) as bar:  # as the command judges: its bar sees every row
            run = judge_run(spec, Execution(workers=1), observers=(bar,), store=log)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        log.discard()
    return run.tally.rows, wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=200, help="ci cases judged for real (default 200)")
    parser.add_argument("--repeat", type=int, default=10, help="times their rows are replayed (default 10)")
    args = parser.parse_args()
    from gradcheck_rnn.runtime import set_up_process

    set_up_process()
    canned, worker_rate = judge_for_real(args.cases)
    use_stand_in_workers(canned)
    rows, wall, cpu = replay_run(args.cases * args.repeat)
    capacity = rows / cpu
    print(f"{time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    print(f"one real worker: {worker_rate:,.0f} rows/s ({args.cases} ci cases x {', '.join(TARGETS)})")
    print(f"replayed: {rows:,} rows in {wall:.1f} s ({rows / wall:,.0f} rows/s, the stand-in's pace or the "
          f"supervisor's); the supervisor's CPU: {cpu / rows * 1e6:.0f} us a row, so at most {capacity:,.0f} rows/s")
    print(f"workers one command keeps busy: {capacity / worker_rate:.1f}")


if __name__ == "__main__":
    main()
