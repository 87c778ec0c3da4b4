"""The local process pool: N worker processes, supervised so that one case cannot end the run.

Why not ``concurrent.futures.ProcessPoolExecutor``: when one of its processes dies (a target
that segfaults or calls ``os._exit``) the whole pool breaks and every pending future fails
without saying which case killed it; it cannot stop one task that runs past a deadline; and it
cannot send the cases of one JAX shape bucket to the process that already compiled it. The
supervisor here is small instead: each worker (:mod:`.worker`) gets one case at a time over its
own socket and streams back one message per result row. So the supervisor always knows which row
is in flight:

- a worker that dies (signal or exit code) or runs past ``case_timeout`` for one row is killed
  and replaced; that row becomes an ``error`` row with the reason ("killed by signal 11",
  "timed out after 10 s"), and the rest of the case resumes on the new worker from the next row;
- a worker near the kernel's limit of memory maps per process hands its next case back unjudged
  and exits (:func:`.worker.maps_near_limit`), and a fresh one judges it: a target that keeps a
  compiled program per shape (flax) would otherwise crash its worker inside XLA after ~150 cases;
- each worker keeps to one JAX shape bucket while it has cases, so it compiles each bucket once
  (and loads the others from the shared persistent compile cache, GRADCHECK_RNN_JAX_CACHE);
- each worker runs torch, OpenMP, MKL and OpenBLAS on one thread (GRADCHECK_RNN_TORCH_THREADS
  overrides), so N workers use N cores and do not oversubscribe them; its environment is still
  the supervisor's, unchanged (:mod:`.preload` sets the thread variables only while those
  libraries load), so a target, and any interpreter it starts, sees what the user started.

Workers are forked from ``multiprocessing``'s fork server, which imported torch, jax and the
judging modules once (:mod:`.preload`): the first worker is ready once the server's imports are
done, every later one (a crashed worker's replacement too) a tenth of a second after it is asked
for, and the server starts before the supervisor's own set-up (:func:`..run.start_pool_early`),
so both import at once (benchmarks/RESULTS.md, "Worker start-up"). The fork server is a fresh interpreter that never computed
anything (no torch, BLAS or XLA threads to lose in a fork), and each worker still takes the
supervisor's current environment. Unlike ``multiprocessing``'s habit, a
worker does not import the supervisor's ``__main__`` (as before, when each worker was a fresh
``python -c``): a user's script that sweeps with workers needs no ``if __name__ == "__main__":``
guard, and its targets are named by importable specs as always. The server's lifetime (it
stops with the last pool that uses it, or at exit, whatever it is doing) is :mod:`.fork_server`'s.
A daemonic process (a Dask worker) may not have ``multiprocessing`` children, so there each
worker is a fresh interpreter as before (``GRADCHECK_RNN_WORKER_START=exec`` asks for that anywhere).

The same pool serves the Dask executor: each Dask worker judges its tasks through one of these,
for the same isolation.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Callable, Hashable, Iterable, Iterator

from ..model.case import Case, RNNConfig
from ..errors import UsageError
from ..rows.result import CaseResult
from . import fork_server
from .fork_server import interrupts_held, main_module_hidden, use_fork_server
from .spec import Job
from .worker import WorkerSetup

START_FAILURES = 3  # workers that die before their first case, in a row, before the run gives up
# Not ``-m gradcheck_rnn.run.worker``: the package imports that module first, and runpy warns. The
# tool's own import path is the last argument, put on the worker's sys.path only: an exported
# PYTHONPATH would reach every interpreter a target starts (with this venv's numpy).
WORKER_COMMAND = "import sys; sys.path.insert(0, sys.argv.pop()); from gradcheck_rnn.run.worker import main; main()"
_TICK = 0.5  # seconds between checks that the workers are alive (a grandchild may hold the socket open)
# Seconds a worker may take for a case's float64 references before its first row's --case-timeout
# starts (the worker says "truth" when they are ready): a JAX compile in a fresh worker on a busy
# machine takes longer than a short --case-timeout (benchmarks/RESULTS.md, "Worker start-up"),
# and it is not the target's time. Bounded all the same, so a reference that hangs cannot stall the run.
TRUTH_TIMEOUT = 300.0


def shape_group(config: RNNConfig) -> Hashable:
    """The cases one compiled JAX program serves: references.buckets.program_key (jax-free, so the
    supervisor does not pay jax's start-up, seconds, for a key)."""
    from ..references.buckets import program_key

    return program_key(config)


def group_jobs(jobs: Iterable[Job]) -> dict[Hashable, deque[Job]]:
    """Jobs by shape group, each group in index order; groups in order of their first case."""
    groups: dict[Hashable, deque[Job]] = {}
    for job in jobs:
        groups.setdefault(shape_group(job[1].config), deque()).append(job)
    return groups


def tool_import_path() -> str:
    """The folder this gradcheck_rnn is imported from, for an exec'd worker to import the same one."""
    return str(Path(__file__).resolve().parents[2])  # <folder>/gradcheck_rnn/run/pool.py


class ForkedProcess:
    """A worker forked from the fork server, with the part of ``subprocess.Popen`` the pool uses."""

    def __init__(self, process: multiprocessing.process.BaseProcess) -> None:
        self.process = process

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def poll(self) -> int | None:
        """The exit status (negative: the signal), or None while it runs."""
        return self.process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self.process.join(timeout)
        if self.process.exitcode is None:
            raise subprocess.TimeoutExpired("gradcheck-rnn worker", timeout or 0)
        return self.process.exitcode

    def kill(self) -> None:
        self.process.kill()


def death_reason(returncode: int | None) -> str:
    """Why a worker stopped, in the words an ``error`` row gives: ``killed by signal 11 (SIGSEGV)``."""
    if returncode is not None and returncode < 0:
        try:
            name = f" ({signal.Signals(-returncode).name})"
        except ValueError:
            name = ""
        return f"killed by signal {-returncode}{name}"
    return f"exited with code {returncode}"


@dataclass
class _Worker:
    """One worker process and what it is doing."""

    process: subprocess.Popen | ForkedProcess
    conn: Connection
    ready: bool = False
    job: Job | None = None
    row: int = 0  # the row of ``job`` in flight
    row_started: float = 0.0
    deadline: float = float("inf")
    group: Hashable = None
    case_ids: dict[str, str] = field(default_factory=dict)  # target -> the id its rows of ``job`` carry

    @property
    def active(self) -> bool:
        """Starting up or judging a case: a message is due."""
        return self.job is not None or not self.ready


class WorkerPool:
    """N supervised worker processes that judge cases for one :class:`WorkerSetup`; reusable."""

    def __init__(self, setup: WorkerSetup, size: int) -> None:
        self.setup = setup
        self.size = max(1, size)
        self.pairs = [(target, check) for target in setup.targets for check in setup.checks]  # judge's order
        self.workers: list[_Worker] = []
        # one selector for the pool's life: multiprocessing.connection.wait builds one per call,
        # which cost the supervisor ~0.1 ms of CPU per row, taken from its workers' cores
        self._selector = selectors.DefaultSelector()
        self.start_failures = 0
        self.repro_envs: dict[str, str] = {}  # target -> its repro_env, as the workers report it
        self.fork = use_fork_server()
        self.server_used = False  # from the first start until close: the last user stops the server
        self._use_server()  # it imports while the supervisor draws cases

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ processes

    def _use_server(self) -> None:
        if self.fork and not self.server_used:
            fork_server.start()
            fork_server.use()
            self.server_used = True

    def _start(self) -> None:
        if self.fork:
            self._use_server()  # again after a close
            from .worker import forked_main

            context = multiprocessing.get_context("forkserver")
            conn, theirs = context.Pipe()
            child = context.Process(target=forked_main, args=(theirs, dict(os.environ)),
                                    name="gradcheck-rnn-worker")
            try:
                with main_module_hidden():
                    child.start()
            finally:
                theirs.close()
            worker = _Worker(ForkedProcess(child), conn)
        else:
            ours, their_socket = socket.socketpair()
            try:
                with interrupts_held():
                    process = subprocess.Popen([sys.executable, "-c", WORKER_COMMAND, str(their_socket.fileno()),
                                                tool_import_path()],
                                               pass_fds=(their_socket.fileno(),), stdin=subprocess.DEVNULL)
            finally:
                their_socket.close()
            worker = _Worker(process, Connection(ours.detach()))
        worker.conn.send(self.setup)
        self.workers.append(worker)
        self._selector.register(worker.conn, selectors.EVENT_READ, worker)

    def _stop(self, worker: _Worker, grace: float) -> int:
        """End a worker: wait up to ``grace`` seconds for it to exit, then kill it; its exit status."""
        try:
            code = worker.process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            worker.process.kill()
            code = worker.process.wait()
        self._selector.unregister(worker.conn)
        worker.conn.close()
        self.workers.remove(worker)
        return code

    def close(self) -> None:
        """Stop every worker: idle ones are asked to exit, busy ones are killed."""
        for worker in self.workers:
            if worker.job is None:
                try:
                    worker.conn.send(None)
                except OSError:
                    pass
        for worker in list(self.workers):
            self._stop(worker, grace=0 if worker.job is not None else 5)
        if self.server_used:
            self.server_used = False
            fork_server.release()

    # ------------------------------------------------------------------ judging

    def judge(self, jobs: Iterable[Job], case_timeout: float | None = None,
              stopping: Callable[[], bool] = lambda: False) -> Iterator[tuple[int, CaseResult]]:
        """Every row of every job with its sweep index, as it arrives; rows of a case in ``judge`` order.

        ``case_timeout`` bounds each row (one target, one check, one case); the case's float64
        references (a JAX compile in a fresh worker) are computed before its deadline starts. No
        case is started once ``stopping()`` says so (asked after each row); cases in flight finish.
        """
        groups = group_jobs(jobs)
        resume: dict[int, int] = {}  # index -> first row still to judge, for cases whose worker died
        stopping_now = False
        next_liveness_check = 0.0  # asking each process is a system call: every _TICK, not every message

        def died(worker: _Worker, reason: str, timed_out: bool = False) -> CaseResult | None:
            """The error row of the row a lost worker was judging (None when it had no case)."""
            if not worker.ready:
                self.start_failures += 1
                if self.start_failures >= START_FAILURES:
                    self.close()
                    raise UsageError(f"worker processes die while starting ({reason}); "
                                     f"run with --workers 1 to see why")
                return None
            if worker.job is None:
                return None
            row = self._error_row(worker, reason, timed_out)
            index, case = worker.job
            if worker.row + 1 < len(self.pairs):  # the rest of the case goes back in line
                resume[index] = worker.row + 1
                groups.setdefault(shape_group(case.config), deque()).appendleft(worker.job)
            return row

        while True:
            queued = sum(len(g) for g in groups.values())
            if not stopping_now:
                while len(self.workers) < min(self.size, queued + sum(w.job is not None for w in self.workers)):
                    self._start()
                for worker in self.workers:
                    if worker.ready and worker.job is None and (job := self._next_job(worker, groups)):
                        self._assign(worker, job, resume.pop(job[0], 0), case_timeout)
            active = [w for w in self.workers if w.active]
            if not active:
                break
            timeout = min([_TICK] + [w.deadline - time.monotonic() for w in active])
            for key, _ in self._selector.select(timeout=max(0.0, timeout)):
                worker = key.data
                if worker not in self.workers:  # stopped by an earlier message of this round
                    continue
                try:
                    message = worker.conn.recv()
                except (EOFError, OSError, pickle.UnpicklingError):
                    if (lost := died(worker, death_reason(self._stop(worker, grace=5)))) is not None:
                        yield worker.job[0], lost
                        stopping_now = stopping_now or stopping()
                    continue
                if message[0] == "fatal":
                    self.close()
                    raise UsageError(message[1])
                if message[0] == "ready":
                    worker.ready, self.start_failures = True, 0
                    self.repro_envs = message[2]
                    continue
                if message[0] == "ids":
                    worker.case_ids = message[2]
                    continue
                if message[0] == "retire":  # near its memory-map limit, it judged nothing of this case
                    index, case = worker.job
                    if worker.row:
                        resume[index] = worker.row
                    groups.setdefault(shape_group(case.config), deque()).appendleft(worker.job)
                    worker.job = None
                    self._stop(worker, grace=5)
                    continue
                if message[0] == "truth":  # the case's references are computed: the target's time starts
                    worker.row_started = time.monotonic()
                    worker.deadline = worker.row_started + (case_timeout or float("inf"))
                    continue
                yield message[1], message[2]
                stopping_now = stopping_now or stopping()
                worker.row += 1
                worker.row_started = time.monotonic()
                worker.deadline = worker.row_started + (case_timeout or float("inf"))
                if worker.row == len(self.pairs):
                    worker.job = None
            now = time.monotonic()
            check_alive = now >= next_liveness_check
            if check_alive:
                next_liveness_check = now + _TICK
            for worker in [w for w in active if w in self.workers]:
                lost = None
                if worker.job is not None and now > worker.deadline:
                    self._stop(worker, grace=0)
                    lost = died(worker, f"timed out after {worker.deadline - worker.row_started:g} s", timed_out=True)
                elif check_alive and worker.process.poll() is not None:
                    lost = died(worker, death_reason(self._stop(worker, grace=5)))
                if lost is not None:
                    yield worker.job[0], lost
                    stopping_now = stopping_now or stopping()

    def _next_job(self, worker: _Worker, groups: dict[Hashable, deque[Job]]) -> Job | None:
        """The next case of the worker's own shape group; else of the largest group no one works on."""
        if not groups.get(worker.group):
            held = {w.group for w in self.workers if w is not worker and w.job is not None}
            candidates = [key for key, jobs in groups.items() if jobs]
            if not candidates:
                return None
            worker.group = max(candidates, key=lambda key: (key not in held, len(groups[key])))
        return groups[worker.group].popleft()

    def _assign(self, worker: _Worker, job: Job, row: int, case_timeout: float | None) -> None:
        worker.job, worker.row, worker.case_ids = job, row, {}
        worker.row_started = time.monotonic()
        budget = case_timeout or float("inf")
        if "reference" in self.setup.checks:  # the worker computes the references first, then says "truth"
            budget = max(budget, TRUTH_TIMEOUT)
        worker.deadline = worker.row_started + budget
        # a Case made by the caller travels whole (its data need not be what its id draws); else its id
        worker.conn.send((job[0], job[1] if isinstance(job[1], Case) else job[1].id, row))

    def _error_row(self, worker: _Worker, reason: str, timed_out: bool) -> CaseResult:
        """The ``error`` row for the row a lost worker was judging (killed for ``timed_out``, or dead)."""
        index, case = worker.job
        target, check = self.pairs[worker.row]
        # "killed by signal 11 (SIGSEGV)" / "exited with code 3": the worker "was killed", "exited"
        message = reason if timed_out else \
            f"the worker process judging it {'was ' if reason.startswith('killed') else ''}{reason}"
        return CaseResult.of_case(case, target, "error", check, case_id=worker.case_ids.get(target),
                                  message=message, timed_out=timed_out, seconds=time.monotonic() - worker.row_started,
                                  repro_env=self.repro_envs.get(target, ""))
