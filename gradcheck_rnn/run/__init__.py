"""Runs: the run spec (:mod:`.spec`), the executors that judge its cases, and shard merging.

Every executor judges the same rows for the same spec, in the same order (case by case in index
order; within a case target by target, check by check), with the same statuses and numbers:

- ``serial`` (``--workers 1``): in this process, :func:`gradcheck_rnn.runner.run_sweep`;
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

from ..errors import UsageError
from ..runner import CaseResult
from .spec import RunSpec, parse_shard
from .worker import WorkerSetup

__all__ = ["Execution", "RunSpec", "default_workers", "execute", "parse_shard"]


def default_workers() -> int:
    """The cores this process may use (its CPU affinity where the OS says), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - macOS, Windows
        return max(1, os.cpu_count() or 1)


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


def execute(spec: RunSpec, execution: Execution,
            on_result: Callable[[CaseResult], None] | None = None) -> list[CaseResult]:
    """Judge every case of ``spec`` (its shard only, if any) as ``execution`` says; rows in index order."""
    execution.validate()
    tolerances = spec.tolerances()
    jobs = list(spec.draw())
    if execution.executor == "local" and execution.workers == 1:
        from .. import runner

        return runner.run_sweep([case for _, case in jobs], spec.resolve_targets(), tolerances,
                                fail_fast=execution.fail_fast, on_result=on_result, checks=spec.checks,
                                indices=[index for index, _ in jobs])
    setup = WorkerSetup(spec.targets, tolerances, spec.checks, tuple(p for p in sys.path if p))
    if execution.executor == "dask":
        from .dask_executor import judge_on_dask

        return judge_on_dask(jobs, setup, execution.scheduler or "", execution.case_timeout, on_result,
                             execution.fail_fast)
    from .pool import judge_in_pool

    return judge_in_pool(jobs, setup, execution.workers, execution.case_timeout, on_result, execution.fail_fast)
