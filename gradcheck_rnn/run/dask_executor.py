"""The Dask executor: the cases of a run judged on an existing Dask cluster.

The cases go out in chunks of one JAX shape group each (so a chunk compiles at most one bucket),
through ``client.submit``; Dask places, balances and retries them. The cases are read lazily and
only a bounded window of chunks is in flight, so a run of 100,000 cases costs this process and
the scheduler what a run of a few hundred does. On a Dask worker a chunk is
judged by a one-process :class:`~gradcheck_rnn.run.pool.WorkerPool` that the Dask worker keeps
between chunks (one per Dask worker thread), so a target that segfaults, exits or hangs costs
one ``error`` row, exactly as with ``--workers N``, and the Dask worker itself survives. A Dask
worker that is lost anyway (its machine, the OOM killer) is retried by Dask
(``distributed.scheduler.allowed-failures``); a chunk that still fails becomes ``error`` rows for
each of its cases, never dropped rows, each with its target's repro environment (asked of the
cluster when no chunk has come back yet) and finished, as every row is, by
:func:`~gradcheck_rnn.rows.result.finish` in :func:`~gradcheck_rnn.run.judge_run`.
"""

from __future__ import annotations

import atexit
import itertools
import math
import pickle
import threading
from typing import Any, Callable, Iterable, Iterator

from ..errors import UsageError
from ..rows.result import CaseResult
from .pool import Job, WorkerPool, group_jobs
from .worker import WorkerSetup, load_user_code

CONNECT_TIMEOUT = 10  # seconds to reach the scheduler before saying it cannot be reached
REPRO_ENVS_TIMEOUT = 60  # seconds to wait for the targets' repro environments after a lost chunk
MAX_CHUNK = 16  # cases per task at most: smaller chunks keep the progress bar and the balance live
WINDOW_PER_SLOT = 4  # chunks in flight per Dask worker thread: enough to keep each busy, bounded

_local = threading.local()
_POOLS: list[WorkerPool] = []  # every thread's pool, so that the Dask worker's exit stops their processes
atexit.register(lambda: [pool.close() for pool in _POOLS])


def _pool(setup: WorkerSetup) -> WorkerPool:
    """This Dask worker thread's pool for ``setup`` (a new one when the setup changes).

    Setups are compared by their pickles: each task brings its own unpickled copy, and the
    tolerance table compares by identity.
    """
    key = pickle.dumps(setup)
    if getattr(_local, "key", None) != key:
        if getattr(_local, "pool", None) is not None:
            _local.pool.close()
            _POOLS.remove(_local.pool)
        _local.pool, _local.key = WorkerPool(setup, 1), key
        _POOLS.append(_local.pool)
    return _local.pool


def judge_chunk(setup: WorkerSetup, chunk: list[tuple[int, str]],
                case_timeout: float | None) -> tuple[list[tuple[int, CaseResult]], dict[str, str]]:
    """Runs on a Dask worker: every row of the chunk's cases (given as (index, case id)) with its
    index, in index order, and each target's repro environment there (for the rows of a chunk
    that is lost)."""
    from ..model.case import Case

    load_user_code(setup)
    pool = _pool(setup)
    rows = list(pool.judge([(index, Case.from_id(case_id)) for index, case_id in chunk], case_timeout))
    return sorted(rows, key=lambda pair: pair[0]), pool.repro_envs  # stable: a case's rows keep their order


def target_repro_envs(setup: WorkerSetup) -> dict[str, str]:
    """Runs on a Dask worker: each target's repro environment, judging nothing (for the rows of a
    chunk lost before any chunk came back with them)."""
    from ..targets import resolve_target

    load_user_code(setup)
    return {name: resolve_target(name).repro_env for name in setup.targets}


def chunk_size(count: int, slots: int) -> int:
    """Cases per chunk: small enough to give every slot several chunks, at most MAX_CHUNK."""
    return max(1, min(MAX_CHUNK, math.ceil(count / max(1, 4 * slots))))


def chunks(jobs: Iterable[Job], size: int, window: int) -> Iterator[list[Job]]:
    """Jobs cut into chunks of at most ``size`` cases of one shape group each, read lazily.

    The jobs are read ``size * window`` at a time and grouped within that batch, so a run of any
    size holds one batch of case references here, never the whole run's.
    """
    jobs = iter(jobs)
    while batch := list(itertools.islice(jobs, size * max(1, window))):
        for group in group_jobs(batch).values():
            group = list(group)
            yield from (group[i:i + size] for i in range(0, len(group), size))


def lost_rows(chunk: list[Job], setup: WorkerSetup, reason: str,
              repro_envs: dict[str, str]) -> list[tuple[int, CaseResult]]:
    """``error`` rows, with their index, for every row of a chunk whose task could not be judged,
    each with its target's repro environment as the Dask workers reported it (none before any
    chunk came back)."""
    return [(index, CaseResult.of_case(case, target, "error", check, message=reason,
                                       repro_env=repro_envs.get(target, "")))
            for index, case in chunk for target in setup.targets for check in setup.checks]


def missing_repro_envs(client: Any, setup: WorkerSetup, known: dict[str, str]) -> dict[str, str]:
    """The repro environments of the targets not in ``known``, asked of the cluster; none when it
    cannot say (a target that cannot even be loaded there), since the rows are errors either way."""
    if known.keys() >= set(setup.targets):
        return {}
    future = client.submit(target_repro_envs, setup, pure=False)
    try:
        return future.result(timeout=REPRO_ENVS_TIMEOUT)
    except Exception:  # noqa: BLE001 (a lost chunk's rows are written whatever went wrong here)
        return {}
    finally:
        future.release()


def _client(scheduler: str) -> Any:
    try:
        from distributed import Client
    except ImportError:
        raise UsageError("--executor dask needs dask.distributed; install it with: "
                         "pip install 'gradcheck-rnn[dask]'") from None
    try:
        return Client(scheduler, timeout=CONNECT_TIMEOUT, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        raise UsageError(f"cannot reach the Dask scheduler at {scheduler!r} ({exc}); start one "
                         f"(dask scheduler) or check --scheduler") from None


def judge_on_dask(jobs: Iterable[Job], count: int, setup: WorkerSetup, scheduler: str,
                  case_timeout: float | None = None,
                  stopping: Callable[[], bool] = lambda: False) -> Iterator[tuple[int, CaseResult]]:
    """Judge the ``count`` ``jobs`` on the cluster at ``scheduler``; every row with its index, a
    chunk's rows as the chunk comes back.

    The jobs are read lazily and at most WINDOW_PER_SLOT chunks per worker thread are in flight at
    once: a new chunk is submitted as one finishes, so neither this process nor the scheduler
    holds a task (or a case reference) per case of a large run. A finished chunk's future is
    dropped at once, so that the cluster can forget its rows. Once ``stopping()`` says so (asked
    after each chunk's rows), the chunks in flight are cancelled and no more are submitted.
    """
    from distributed import KilledWorker, as_completed

    client = _client(scheduler)
    repro_envs: dict[str, str] = {}  # target -> its repro_env, as the Dask workers report it
    try:
        slots = sum(client.nthreads().values())
        window = WINDOW_PER_SLOT * max(1, slots)
        parts = chunks(jobs, chunk_size(count, slots), window)
        in_flight: dict[Any, list[Job]] = {}

        def submit_next() -> Any:
            part = next(parts, None)
            if part is None:
                return None
            future = client.submit(judge_chunk, setup, [(index, case.id) for index, case in part], case_timeout,
                                   pure=False)
            in_flight[future] = part
            return future

        pending = as_completed([f for f in (submit_next() for _ in range(window)) if f is not None],
                               loop=client.loop)
        for future in pending:
            part = in_flight.pop(future)
            try:
                rows, reported = future.result()
                repro_envs.update(reported)
            except KilledWorker as exc:
                repro_envs.update(missing_repro_envs(client, setup, repro_envs))
                rows = lost_rows(part, setup, f"the Dask worker judging it was lost, and retries too ({exc})",
                                 repro_envs)
            except UsageError:
                raise
            del future
            yield from rows
            if stopping():
                client.cancel(list(in_flight))
                break
            following = submit_next()
            if following is not None:
                pending.add(following)
    finally:
        client.close()
