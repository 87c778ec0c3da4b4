"""Runs: the run spec (:mod:`.spec`), the executors that judge its cases, and shard merging.

Every executor judges the same rows for the same spec, in the same order (case by case in index
order; within a case target by target, check by check), with the same statuses and numbers:

- ``serial`` (``--workers 1``): in this process (:mod:`.serial`);
- ``pool`` (``--workers N``, the default): N supervised local worker processes (:mod:`.pool`);
- ``dask`` (``--executor dask --scheduler ADDRESS``): an existing Dask cluster (:mod:`.dask_executor`).

With worker processes (pool or Dask) a crash or a timeout of one target on one case is an
``error`` row with its reason, and the run goes on.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Callable

from ..case import CaseRef
from ..errors import UsageError
from ..result import CaseResult, Run, slim, verdict
from .spec import RunSpec, parse_shard
from .worker import WorkerSetup

__all__ = ["Execution", "RunSpec", "default_workers", "execute", "judge_run", "parse_shard", "start_pool_early"]


# Cases each worker process must have before one more pays for itself; see default_workers.
CASES_PER_WORKER = 100


def usable_cores() -> int:
    """The cores this process may use (its CPU affinity where the OS says), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - macOS, Windows
        return max(1, os.cpu_count() or 1)


def idle_cores(cores: int) -> int:
    """Cores that no other process keeps busy: ``cores`` minus the whole part of the 1-minute load
    average, at least 1 (a load of 0.9 left by this command's own start-up still leaves 2 of 2)."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # pragma: no cover - no load average on this OS
        return cores
    return max(1, min(cores, cores - int(load)))


def default_workers(cases: int | None = None, isolate: bool = False) -> int:
    """How many processes judge a run of ``cases`` cases when ``--workers`` is not given.

    One per idle core, at most one per CASES_PER_WORKER cases, and 1 (this process: no pool at
    all) when that is all that helps. Why: a pool's first row comes later than a serial run's
    (the fork server is a fresh interpreter that imports torch and jax, ~1.7 s, beside the
    supervisor's own set-up: 2.4 s against 1.5 s), and from then on two workers judge twice as
    fast as one (ci profile, warm, idle 2-core machine, 2026-12-03: the middle half of 200 cases
    in 1.48 s against 3.07 s), saving ~15 ms a case. So a second worker pays from about 60 cases
    warm and 75 cold; 100 leaves a margin for a load that changes during the run. On a core that
    another process keeps busy, two workers only take turns: measured earlier at load 6-7,
    serial 18.4 s / 28.4 s, 2 workers 32.5 s / 32.4 s, and this rule chose 1. ``isolate`` (a
    ``--case-timeout`` was given) needs worker processes: then at least 2.
    """
    cores = usable_cores()
    if cases is None:
        return cores
    workers = max(1, min(idle_cores(cores), cases // CASES_PER_WORKER))
    return max(2, workers) if isolate else workers


@dataclass(frozen=True)
class Execution:
    """How a run is judged, as opposed to what (the spec): never changes a row that passes."""

    workers: int = 1
    executor: str = "local"  # local | dask
    scheduler: str | None = None  # the Dask scheduler's address
    case_timeout: float | None = None  # seconds per row, enforced only with worker processes
    fail_fast: bool = False

    def validate(self) -> None:
        """One sentence for options that cannot go together, before anything runs."""
        if self.executor == "dask" and not self.scheduler:
            raise UsageError("--executor dask needs --scheduler ADDRESS, e.g. --scheduler tcp://10.0.0.5:8786")
        if self.executor != "dask" and self.scheduler:
            raise UsageError("--scheduler is only for --executor dask; add --executor dask or drop --scheduler")
        if self.case_timeout is not None and self.executor == "local" and self.workers == 1:
            raise UsageError("--case-timeout needs worker processes, and --workers 1 judges in this process; "
                             "give --workers 2 or more, or drop --case-timeout")


def start_pool_early(execution: Execution) -> None:
    """Start the local pool's fork server now, when ``execution`` will use one, so that its imports
    (torch and jax, 1.5-2 s) run beside this process's own set-up (the profile, the targets, the
    cases) instead of after it. Call it once the options are valid and before the spec is built.
    """
    if execution.executor != "local" or execution.workers < 2:
        return
    from .pool import start_fork_server, use_fork_server

    if use_fork_server():
        start_fork_server()


def _slimming(on_result: Callable[[CaseResult], None] | None) -> Callable[[CaseResult], None]:
    def receive(row: CaseResult) -> None:
        slim(row)
        if on_result is not None:
            on_result(row)

    return receive


def execute(spec: RunSpec, execution: Execution, on_result: Callable[[CaseResult], None] | None = None,
            targets: list | None = None) -> list[CaseResult]:
    """Judge every case of ``spec`` (its shard only, if any) as ``execution`` says; rows in index order.

    ``targets`` are target objects already resolved for this process (the Python API passes the
    objects it was given); worker processes always resolve ``spec.targets`` by name.
    """
    execution.validate()
    tolerances = spec.tolerances()
    on_result = _slimming(on_result)
    if execution.executor == "local" and execution.workers == 1:
        from .serial import judge_serially

        # drawn one at a time: a judged case's arrays are freed before the next is drawn
        return judge_serially(spec.draw(), targets or spec.resolve_targets(), tolerances, spec.checks,
                              execution.fail_fast, on_result)
    # the workers rebuild each case from its id: the run keeps no case's arrays (~3 kB a case)
    jobs = [(index, CaseRef.of(case)) for index, case in spec.draw()]
    setup = WorkerSetup(spec.targets, tolerances, spec.checks, tuple(p for p in sys.path if p))
    if execution.executor == "dask":
        from .dask_executor import judge_on_dask

        return judge_on_dask(jobs, setup, execution.scheduler or "", execution.case_timeout, on_result,
                             execution.fail_fast)
    from .pool import judge_in_pool

    return judge_in_pool(jobs, setup, execution.workers, execution.case_timeout, on_result, execution.fail_fast)


def judge_run(spec: RunSpec, execution: Execution, on_result: Callable[[CaseResult], None] | None = None,
              targets: list | None = None) -> Run:
    """Judge a run and compute its one verdict (exit code and reason), which every report stores
    and reads; ``run.complete`` is False when ``--fail-fast`` stopped it early."""
    def finish_row(row: CaseResult) -> None:
        """The repro options every row carries, set as it arrives (so streamed rows have them)."""
        row.repro_options = spec.repro_options
        if row.status == "error" and row.message.startswith("timed out"):  # its repro must stop it too
            row.repro_options = f"{row.repro_options} --case-timeout {execution.case_timeout:g}".strip()
        if on_result is not None:
            on_result(row)

    results = execute(spec, execution, finish_row, targets)
    code, reason = verdict(results, spec.named_targets)
    expected = len(spec.indices) * len(spec.targets) * len(spec.checks)
    return Run(results, code, reason, spec, complete=len(results) >= expected)
