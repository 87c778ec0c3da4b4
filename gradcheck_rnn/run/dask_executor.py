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
LOST_CHUNK_TIMEOUT = 60  # seconds to wait for the repro environments and ids of a lost chunk's rows
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


def lost_chunk_facts(setup: WorkerSetup, chunk: list[tuple[int, str]]) -> tuple[dict[str, str], dict[int, dict[str, str]]]:
    """Runs on a Dask worker, judging nothing: each target's repro environment, and the id each
    target's rows of each case of a lost chunk carry (its kernel configuration, its convention:
    :func:`~gradcheck_rnn.judging.judge.judged_case_id`), for that chunk's error rows."""
    from ..judging.judge import judged_case_id
    from ..model.case import Case
    from ..targets import resolve_target

    load_user_code(setup)
    targets = [resolve_target(name) for name in setup.targets]
    ids = {index: {name: judged_case_id(Case.from_id(case_id), target) for name, target in zip(setup.targets, targets)}
           for index, case_id in chunk}
    return {name: target.repro_env for name, target in zip(setup.targets, targets)}, ids


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


def lost_rows(chunk: list[Job], setup: WorkerSetup, reason: str, repro_envs: dict[str, str],
              ids: dict[int, dict[str, str]]) -> list[tuple[int, CaseResult]]:
    """``error`` rows, with their index, for every row of a chunk whose task could not be judged,
    each with its target's repro environment and the id its rows carry, as the cluster reported
    them (:func:`ask_about_lost_chunk`; the plain case where it could not say)."""
    return [(index, CaseResult.of_case(case, target, "error", check, case_id=ids.get(index, {}).get(target),
                                       message=reason, repro_env=repro_envs.get(target, "")))
            for index, case in chunk for target in setup.targets for check in setup.checks]


def ask_about_lost_chunk(client: Any, setup: WorkerSetup,
                         chunk: list[Job]) -> tuple[dict[str, str], dict[int, dict[str, str]]]:
    """:func:`lost_chunk_facts` of a lost chunk, asked of the cluster; nothing when it cannot say
    (a target that cannot even be loaded there), since the rows are errors either way."""
    future = client.submit(lost_chunk_facts, setup, [(index, case.id) for index, case in chunk], pure=False)
    try:
        return future.result(timeout=LOST_CHUNK_TIMEOUT)
    except Exception:  # noqa: BLE001 (a lost chunk's rows are written whatever went wrong here)
        return {}, {}
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
                reported, ids = ask_about_lost_chunk(client, setup, part)
                repro_envs.update(reported)
                rows = lost_rows(part, setup, f"the Dask worker judging it was lost, and retries too ({exc})",
                                 repro_envs, ids)
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
