"""Runs: the run spec (:mod:`.spec`), the executors that judge its cases, and shard merging.

One way through: every judging surface (sweep, check, repro, shrink, calibrate, mutants,
``gr.check``, ``gr.sweep``, the pytest fixture) resolves a :class:`RunSpec` once and hands it to
:func:`judge_run` (one case is a run of one). Every executor judges the same rows for the same
spec, in the same order (case by case in index order; within a case target by target, check by
check), with the same statuses and numbers:

- ``local`` (the default, ``--workers N``, N >= 1): N supervised local worker processes (:mod:`.pool`);
- ``dask`` (``--executor dask --scheduler ADDRESS``): an existing Dask cluster (:mod:`.dask_executor`);
- in this process (``--in-process``, for debugging with pdb or a profiler, in place of the local
  pool). **Not isolated**: a target that calls ``os._exit`` or crashes ends the command.

The executors ``--executor`` chooses are the entries of :data:`EXECUTORS`: each owns how it is
opened, its options (the Dask scheduler's address) and what the run's header says of where it
judges; adding one is one :class:`ExecutorEntry` given to :func:`register_executor`.

Isolation, whatever the executor: anything a target raises, ``SystemExit`` included, is an
``error`` row of that target (:mod:`gradcheck_rnn.judging.judge`); with worker processes (pool, Dask) a
target that ends its process or runs past ``--case-timeout`` is an ``error`` row with the reason,
and the run goes on.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Collection, Iterable, Iterator, Mapping, Protocol, Sequence

from ..errors import INTERRUPTS, UsageError, signal_name
from ..rows.result import CaseResult, finish, normal_form
from ..model.statuses import is_bad
from ..rows.store import KeptRows, Run, StopReason, VerdictRule, conclude
from .spec import Job, Judging, RunSpec, Selection, parse_shard
from .worker import WorkerSetup

__all__ = ["EXECUTORS", "Execution", "Executor", "ExecutorEntry", "ExecutorOption", "Judging", "OnRow", "RowObserver",
           "RunSpec", "RunStore", "Selection", "busy_cores", "cpu_ticks", "default_workers", "execute", "judge_run",
           "mean_case_work", "open_executor", "parse_shard", "register_executor", "start_pool_early"]

# Cases each worker process must have before one more pays for itself; see default_workers.
CASES_PER_WORKER = 100


def usable_cores() -> int:
    """The cores this process may use (its CPU affinity where the OS says), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - macOS, Windows
        return max(1, os.cpu_count() or 1)


# How long busy_cores watches the CPU: many scheduler ticks (10 ms each), little of a command's start.
BUSY_SAMPLE_SECONDS = 0.15


def cpu_ticks() -> tuple[int, int] | None:
    """(busy, total) CPU time of the whole machine since boot, in clock ticks, from /proc/stat's
    first line; None where there is none (macOS, Windows)."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = stat.readline().split()
    except OSError:
        return None
    # user nice system idle iowait irq softirq steal [guest guest_nice: already in user and nice]
    ticks = [int(value) for value in fields[1:9]]
    total = sum(ticks)
    return total - ticks[3] - ticks[4], total


def busy_cores(sample: Callable[[], tuple[int, int] | None] = cpu_ticks,
               seconds: float = BUSY_SAMPLE_SECONDS) -> float | None:
    """How many cores other processes keep busy now: the machine's busy share of CPU time over
    ``seconds`` (while this process sleeps) times its cores. None when ``sample`` cannot say.

    Not the load average: its 1-minute mean still counts processes that ended seconds ago (a
    test run, an install), so right after one a 2-core machine judged 200 cases on 1 worker."""
    before = sample()
    time.sleep(seconds)
    after = sample()
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1]) * (os.cpu_count() or 1)


def idle_cores(cores: int, busy_now: Callable[[], float | None] = busy_cores) -> int:
    """Cores that no other process keeps busy now: ``cores`` minus the whole part of
    :func:`busy_cores`, at least 1 (0.9 of a core busy elsewhere still leaves 2 of 2). Where the
    CPU time cannot be read, the 1-minute load average stands in for it."""
    busy = busy_now()
    if busy is None:
        try:
            busy = os.getloadavg()[0]
        except (AttributeError, OSError):  # pragma: no cover - no load average on this OS
            return cores
    return max(1, min(cores, cores - int(busy)))


def mean_case_work(modes: Mapping[str, float]) -> float:
    """What judging a case drawn with these mode weights costs, in cases of cuDNN's cells: the
    weighted mean of the families' ``case_work`` (a matrix-memory case is several cells' work)."""
    from ..families import family

    total = sum(modes.values())
    return sum(weight * family(mode).case_work for mode, weight in modes.items()) / total if total else 1.0


def default_workers(cases: int | None = None, busy_now: Callable[[], float | None] = busy_cores,
                    per_case: float = 1.0) -> tuple[int, str]:
    """How many worker processes judge a run of ``cases`` cases when ``--workers`` is not given,
    and why (the run's header prints it).

    One per idle core (:func:`idle_cores`, with ``busy_now`` counting the busy ones), and at most
    one per CASES_PER_WORKER cases: a second worker's start-up costs about as much as it saves on
    fewer cases (benchmarks/sweep_throughput.py; the figures are in benchmarks/RESULTS.md). On a
    core that another process keeps busy, two workers only take turns, so busy cores do not count.
    A run that takes one worker whatever the cores does not wait to count them. ``per_case``: how
    many cases of cuDNN's cells one case of this run is worth: its families' work
    (:func:`mean_case_work`), times the targets of a detection run, which judges each case with
    every mutant besides the correct kernels (``gradcheck-rnn mutants``).
    """
    cores = usable_cores()
    if cases is None:
        return cores, f"{cores} usable cores"
    per_case = max(1.0, per_case)
    work = int(cases * per_case) // CASES_PER_WORKER
    at_most = f"default: at most one per {CASES_PER_WORKER} cases" + (
        f", each counted as {per_case:.2g}" if per_case != 1 else "")
    if work < 2:
        return 1, at_most
    idle = idle_cores(cores, busy_now)
    workers = max(1, min(idle, work))
    if workers == idle and idle > 1:
        return workers, f"default: one per idle core, {idle} of {cores}"
    if idle == 1:
        return 1, f"default: 1 idle core of {cores}"
    return workers, at_most


@dataclass(frozen=True)
class Execution:
    """How a run is judged, as opposed to what (the spec): never changes a row's verdict.

    Validated when made: options that cannot go together raise UsageError with one sentence.
    """

    workers: int = 1  # worker processes of the local pool
    executor: str = "local"  # an entry of EXECUTORS
    options: tuple[tuple[str, Any], ...] = ()  # the executors' own options given (name, value): --scheduler
    case_timeout: float | None = None  # seconds per row, enforced by the worker processes
    fail_fast: bool = False
    in_process: bool = False  # judge in this process: for debugging, not isolated

    def __post_init__(self) -> None:
        entry = EXECUTORS.get(self.executor)
        if entry is None:
            raise UsageError(f"--executor {self.executor} is not an executor; executors are {', '.join(EXECUTORS)}")
        given = {name for name, value in self.options if value is not None}
        for option in entry.options:
            if option.name not in given:
                raise UsageError(f"--executor {entry.name} needs --{option.name} {option.metavar}, "
                                 f"e.g. {option.example}")
        for name in sorted(given - {option.name for option in entry.options}):
            owner = next(e.name for e in EXECUTORS.values() if any(o.name == name for o in e.options))
            raise UsageError(f"--{name} is only for --executor {owner}; add --executor {owner} or drop --{name}")
        if self.in_process and entry.place:
            raise UsageError(f"--in-process judges in this process and --executor {entry.name} {entry.place}; "
                             f"choose one")
        if self.in_process and self.case_timeout is not None:
            raise UsageError("--case-timeout needs worker processes, and --in-process judges in this process; "
                             "drop one of them")

    def option(self, name: str) -> Any:
        """The value of the executor's option ``name`` (None when not given)."""
        return dict(self.options).get(name)

    def where(self, jobs: int, workers_why: str) -> str:
        """Where the run's ``jobs`` cases are judged, for its header (``workers_why``: why that many workers)."""
        if self.in_process:
            return "in this process (--in-process: not isolated)"
        return EXECUTORS[self.executor].where(self, jobs, workers_why)

    @property
    def uses_pool(self) -> bool:
        """Whether this process supervises a local pool of worker processes."""
        return self.executor == "local" and not self.in_process


def start_pool_early(execution: Execution) -> None:
    """Start the local pool's fork server now, when ``execution`` will use one, so that its imports
    (torch and jax, seconds) run beside this process's own set-up (the profile, the targets, the
    cases) instead of after it. Call it once the options are valid and before the spec is built.
    """
    if not execution.uses_pool:
        return
    from . import fork_server

    if fork_server.use_fork_server():
        fork_server.start()  # stopped by the pool's close, or at exit if the run is refused before


class Executor(Protocol):
    """Judges jobs (``(sweep index, case or case reference)``, a sized collection that may draw
    them only while iterated) and yields each row with its sweep index as it arrives, rows of a
    case in :func:`~gradcheck_rnn.judging.judge.judge` order; nothing else. It starts no case once
    ``stopping()`` says so (cases in flight may finish). Everything done to a row (stamping,
    slimming, finishing, storing, fail-fast) is :func:`judge_run`'s. Reusable for several runs of
    the same set-up (shrink judges its candidates one run at a time)."""

    def judge(self, jobs: Collection[Job], stopping: Stopping) -> Iterator[tuple[int, CaseResult]]: ...

    def close(self) -> None: ...


# Asked by an executor before it starts a case (after each row in this process): has judge_run stopped?
Stopping = Callable[[], bool]


class InProcess:
    """The ``--in-process`` executor: this process judges, with the targets it resolved itself."""

    def __init__(self, setup: WorkerSetup, targets: list) -> None:
        self.setup, self.targets = setup, targets

    def judge(self, jobs: Collection[Job], stopping: Stopping) -> Iterator[tuple[int, CaseResult]]:
        """Every enabled check of every target on each case, with its index, as it is judged;
        nothing more once ``stopping()`` says so (asked after each row)."""
        from ..judging.judge import judge

        checks = list(self.setup.checks)
        for index, case in jobs:
            for row in judge(case, self.targets, self.setup.tolerances, checks):
                yield index, row
                if stopping():
                    return

    def close(self) -> None:
        pass


class LocalPool:
    """The default executor: a supervised pool of worker processes (:mod:`.pool`)."""

    def __init__(self, setup: WorkerSetup, execution: Execution, jobs: int) -> None:
        from .pool import WorkerPool

        self.pool = WorkerPool(setup, min(execution.workers, max(1, jobs)))
        self.execution = execution

    def judge(self, jobs: Collection[Job], stopping: Stopping) -> Iterator[tuple[int, CaseResult]]:
        return self.pool.judge(jobs, self.execution.case_timeout, stopping)

    def close(self) -> None:
        self.pool.close()


class DaskCluster:
    """``--executor dask``: the cases go to an existing Dask cluster (:mod:`.dask_executor`)."""

    def __init__(self, setup: WorkerSetup, execution: Execution, jobs: int) -> None:
        self.setup, self.execution = setup, execution

    def judge(self, jobs: Collection[Job], stopping: Stopping) -> Iterator[tuple[int, CaseResult]]:
        from .dask_executor import judge_on_dask

        return judge_on_dask(jobs, len(jobs), self.setup, self.execution.option("scheduler"),
                             self.execution.case_timeout, stopping)

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class ExecutorOption:
    """An option an executor owns: ``--NAME VALUE`` on the command line, ``Execution.option(NAME)``;
    the executor needs it (``example`` shows a value)."""

    name: str
    help: str
    metavar: str = "VALUE"
    example: str = ""


@dataclass(frozen=True)
class ExecutorEntry:
    """An executor ``--executor NAME`` chooses: ``open(setup, execution, jobs)`` makes it for a run
    of ``jobs`` cases; ``where(execution, jobs, workers_why)`` is where its header says the cases
    are judged; ``help`` its words in ``--executor``'s help; ``options`` the options it owns;
    ``place`` where it judges when that is not this machine, for the sentence that refuses it with
    ``--in-process`` ("" for one that --in-process replaces)."""

    name: str
    open: Callable[[WorkerSetup, Execution, int], Executor]
    where: Callable[[Execution, int, str], str]
    help: str
    options: tuple[ExecutorOption, ...] = ()
    place: str = ""


EXECUTORS: dict[str, ExecutorEntry] = {}


def register_executor(entry: ExecutorEntry) -> ExecutorEntry:
    """Add ``entry`` to :data:`EXECUTORS` (an option name another executor owns is refused)."""
    owned = {o.name for e in EXECUTORS.values() if e.name != entry.name for o in e.options}
    if clash := owned & {o.name for o in entry.options}:
        raise ValueError(f"executor {entry.name!r}: option --{sorted(clash)[0]} belongs to another executor")
    EXECUTORS[entry.name] = entry
    return entry


def _pool_where(execution: Execution, jobs: int, workers_why: str) -> str:
    count = min(execution.workers, max(1, jobs))
    return f"in {count} worker process{'es' if count > 1 else ''} ({workers_why})"


register_executor(ExecutorEntry("local", LocalPool, _pool_where, "--workers processes here"))
register_executor(ExecutorEntry(
    "dask", DaskCluster, lambda execution, jobs, why: f"on the Dask cluster at {execution.option('scheduler')}",
    "the cluster at --scheduler (extra: dask)",
    (ExecutorOption("scheduler", "The Dask scheduler, e.g. tcp://10.0.0.5:8786.", "ADDRESS", "tcp://10.0.0.5:8786"),),
    place="on a cluster"))


def open_executor(spec: RunSpec, execution: Execution, targets: list | None = None, jobs: int = 1) -> Executor:
    """The executor ``execution`` names (an entry of :data:`EXECUTORS`, or this process with
    ``--in-process``), set up for ``spec``'s targets, tolerances and checks.

    ``targets`` are the spec's targets already resolved in this process (the Python API passes the
    objects it was given); worker processes resolve ``spec.targets`` by name. ``jobs`` caps the
    pool's size (no idle workers for a run of one case). Close it when done.
    """
    setup = WorkerSetup(spec.targets, spec.tolerances(), spec.checks, tuple(p for p in sys.path if p), spec.families)
    if execution.in_process:
        return InProcess(setup, targets if targets is not None else spec.resolve_targets())
    return EXECUTORS[execution.executor].open(setup, execution, jobs)


class RowObserver(Protocol):
    """What listens to a run's rows, as pytest's plugins listen to its reports: the progress bar,
    the tables ``check`` prints, and ``sweep --baseline``'s
    :class:`~gradcheck_rnn.workflows.baseline.Baseline`. :func:`judge_run` hands every finished
    row to each observer in the order they were registered, then to the run's store
    (:class:`RunStore`): an observer that marks a row (the baseline's ``drifted``) does so before
    the row is stored. What an observer found is stored beside the rows (results.json's top level,
    e.g. ``"drift"``) and read by the verdict: :meth:`extra`."""

    def on_row(self, row: CaseResult) -> None: ...

    def extra(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class OnRow:
    """An observer that calls a function with each row and stores nothing beside the rows: the
    tables ``check`` prints as rows arrive, a benchmark's clock."""

    call: Callable[[CaseResult], None]

    def on_row(self, row: CaseResult) -> None:
        self.call(row)

    def extra(self) -> dict[str, Any]:
        return {}


class RunStore(Protocol):
    """What keeps a run, handed each row after its observers: its
    :class:`~gradcheck_rnn.rows.store.Tally` (every row counted, the one source of the verdict's
    and the reports' totals) and the rows it keeps in memory (``kept``: every row, or those that
    did not pass when the rest are on disk)."""

    tally: Any
    kept: list[CaseResult]

    def on_row(self, row: CaseResult) -> None: ...


def execute(spec: RunSpec, execution: Execution, targets: list | None = None, executor: Executor | None = None,
            jobs: Iterable[Job] | None = None, observers: Sequence[RowObserver] = ()) -> list[CaseResult]:
    """Every row of ``spec`` (its shard only, if any) judged as ``execution`` says, in index
    order: :func:`judge_run`'s rows, for a caller that wants the rows only."""
    return judge_run(spec, execution, targets, executor, jobs, observers).results


def judge_run(spec: RunSpec, execution: Execution, targets: list | None = None, executor: Executor | None = None,
              jobs: Iterable[Job] | None = None, observers: Sequence[RowObserver] = (),
              store: RunStore | None = None, rule: VerdictRule | None = None) -> Run:
    """Judge a run and compute its one verdict (exit code, reason, stop reason), which every report
    stores and reads: :func:`~gradcheck_rnn.rows.store.conclude`'s, with ``rule`` for a run with
    its own (a detection run). ``run.complete`` is False when ``--fail-fast`` stopped it early.

    The one place rows are handled: each row the executor yields is put in its normal form
    (stamped with its index, slimmed: :func:`~gradcheck_rnn.rows.result.normal_form`), finished
    (:func:`~gradcheck_rnn.rows.result.finish`), handed to the ``observers`` and then to the
    ``store`` (one row event, :class:`RowObserver`), and stops the run under ``--fail-fast``.

    ``executor``: one already open (kept open afterwards); otherwise one is opened and closed here.
    ``jobs``: cases given as objects (the Python API's ``Case``), instead of the spec's own draw.

    The run's totals and verdict come from the store's one :class:`~gradcheck_rnn.rows.store.Tally`,
    made as the rows arrive, and ``run.results`` are the rows it kept: the run's
    :class:`~gradcheck_rnn.rows.store.RowLog` keeps only the rows that did not pass (it holds every
    row on disk), so a run of any size keeps flat memory; without a store, every row is kept
    (:class:`~gradcheck_rnn.rows.store.KeptRows`). A signal raises out of here with the run judged so
    far, its verdict ``interrupted``, as the exception's ``run``.
    """
    store = KeptRows() if store is None else store
    listeners = (*observers, store)
    repro_options = spec.repro_options  # once: it is made from the spec's strings, for every row
    stopped = False

    def receive(index: int, row: CaseResult) -> None:
        nonlocal stopped
        normal_form(row, index)
        stopped = stopped or (execution.fail_fast and is_bad(row.status))
        if not spec.judges(row.case_id, row.target, row.check):  # a row of the product that --last-failed did not ask for
            return
        finish(row, repro_options, execution.case_timeout)
        for listener in listeners:
            listener.on_row(row)
        row.stored_line = None  # read: a row kept in memory (gr.sweep keeps every row) does not keep its line too

    def extra() -> dict[str, Any]:
        return {key: value for observer in observers for key, value in observer.extra().items()}

    # a reference per case (id, config, wants group), drawn as the executor reads it: workers
    # rebuild each case from its id
    to_judge = list(jobs) if jobs is not None else spec.lazy_jobs(full=execution.in_process)
    opened = executor or open_executor(spec, execution, targets, len(to_judge))
    start = time.perf_counter()
    try:
        for index, row in opened.judge(to_judge, lambda: stopped):
            receive(index, row)
    except INTERRUPTS as exc:  # the caller decides what an interrupt means; it gets what was judged
        exc.run = conclude(store.kept, spec, store.tally, StopReason(signal_name(exc)),
                           seconds=time.perf_counter() - start)
        raise
    finally:
        if executor is None:
            opened.close()
    kept = sorted(store.kept, key=lambda row: row.case_index)  # stable: a case's rows keep their judging order
    stop = StopReason.COMPLETE if store.tally.rows >= spec.rows else StopReason.FAIL_FAST
    return conclude(kept, spec, store.tally, stop, rule, extra(), time.perf_counter() - start)
