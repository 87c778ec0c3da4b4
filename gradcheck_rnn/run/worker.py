"""One worker process of :mod:`gradcheck_rnn.run.pool`: judges the cases it is sent, one at a time.

Forked from the pool's fork server (:func:`forked_main`, with its end of a pipe to the supervisor
and the supervisor's environment), or, where a fork server cannot be used (a daemonic process such
as a Dask worker), started as ``python -c '...worker import main; main()' FD PATH``, where FD is its
end of a socket pair to the supervisor and PATH the folder gradcheck_rnn is imported from (put on
this process's ``sys.path``, never exported: a target's own interpreters must not see it). Messages are pickles (``multiprocessing.connection``):

- in: a :class:`WorkerSetup` first, then ``(index, case, start)`` per case (the case as its id,
  or as a ``Case`` when the caller built its data itself), ``None`` to stop;
- out: ``("ready", pid, repro_envs)`` (each target's :attr:`~gradcheck_rnn.targets.Target.repro_env`,
  for the rows the supervisor writes itself) or ``("fatal", sentence)`` after the setup, then per
  case ``("ids", index, {target: case id})`` (the id each target's rows carry, for an error row the
  supervisor writes itself), ``("truth", index)`` once the references are computed, and
  ``("row", index, result)`` for each row of a case, in :func:`~gradcheck_rnn.judging.judge.judge` order from row ``start``,
  or ``("retire", index)`` instead of judging a case, when the process nears the kernel's limit of
  memory maps (:func:`maps_near_limit`): the supervisor gives that case to a fresh worker.

A case travels as its id: the id rebuilds it bit for bit, and it is a few dozen bytes.

A worker ignores SIGINT: Ctrl-C reaches every process of the terminal's group, and it is the
supervisor's to act on (it stops the workers and publishes what was judged). The supervisor makes
every child (the fork server, an exec'd worker) with SIGINT blocked, so that a Ctrl-C during the
child's start-up (seconds of torch and jax imports) cannot raise a KeyboardInterrupt there and
print its traceback; the child ignores SIGINT, then unblocks it (:func:`~gradcheck_rnn.run.interrupts.ignore_interrupts`).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from .interrupts import ignore_interrupts

# A target that JIT-compiles a program per shape and keeps it (the flax target: three XLA programs
# a configuration, ~350 memory maps a case) nears the kernel's limit of memory maps per
# process (vm.max_map_count, 65,530 by default) after ~150 cases; past it XLA:CPU cannot map the
# code it compiles and the process dies by SIGSEGV or SIGABRT (docs/findings/soak.md, "The flax
# soak's worker crashes"). A worker past this share of the limit hands its next case back and exits.
RETIRE_AT_MAPS = 0.5
# Cases between two looks at the map count: reading /proc/self/maps costs 0.3-1.5 ms, a few percent
# of a small fused-cpu case; four flax cases add ~1,400 maps, far inside the half left.
MAPS_CHECK_EVERY = 4


def maps_near_limit(share: float = RETIRE_AT_MAPS) -> bool:
    """Whether this process holds more than ``share`` of the memory maps the kernel allows a process
    (Linux's /proc; False where it cannot say)."""
    try:
        limit = int(Path("/proc/sys/vm/max_map_count").read_text())
        with open("/proc/self/maps", "rb") as maps:
            count = sum(1 for _ in maps)
    except (OSError, ValueError):
        return False
    return count > share * limit


@dataclass(frozen=True)
class WorkerSetup:
    """What every worker needs before its first case: the run spec's judging part."""

    targets: tuple[str, ...]
    tolerances: Any  # a gradcheck_rnn.model.tolerances.Tolerances
    checks: tuple[str, ...]
    sys_path: tuple[str, ...] = ()  # the submitting process's sys.path: plugin targets import from there too
    families: tuple[str, ...] = ()  # user families to load before the first case id is read


def load_user_code(setup: WorkerSetup) -> None:
    """The submitting process's import paths and user families, before this process reads a case id."""
    from ..families import load_all

    for entry in reversed(setup.sys_path):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    load_all(setup.families)


def _prepare(setup: WorkerSetup) -> list[Any]:
    """Threads, import paths, user families, targets and the JAX reference, so the first case's time is its own."""
    from ..runtime import limit_torch_threads
    from ..targets import resolve_target

    load_user_code(setup)
    limit_torch_threads()
    targets = [resolve_target(name) for name in setup.targets]
    if "reference" in setup.checks:
        from ..references import jax_cudnn  # noqa: F401  (jax's start-up, ~2 s, before the first deadline)
    return targets


def serve(conn: Connection) -> None:
    """Judge cases sent over ``conn`` until told to stop or the supervisor goes away."""
    from ..model.case import Case
    from ..judging.context import CaseContext
    from ..errors import UsageError
    from ..judging.judge import judge, judged_case_id
    from ..rows.result import normal_form

    setup: WorkerSetup = conn.recv()
    try:
        targets = _prepare(setup)
    except UsageError as exc:
        conn.send(("fatal", str(exc)))
        return
    except BaseException as exc:  # a plugin that fails (or exits) while it loads here fails the run, with its reason
        conn.send(("fatal", f"a worker process could not set up the targets ({type(exc).__name__}: {exc})"))
        return
    conn.send(("ready", os.getpid(), {target.name: target.repro_env for target in targets}))
    judged = 0
    while True:
        try:
            job = conn.recv()
        except EOFError:  # the supervisor is gone: nothing left to judge for
            return
        if job is None:
            return
        index, case, start = job
        # a fresh worker judges at least one case, so the run always moves on
        if judged and judged % MAPS_CHECK_EVERY == 0 and maps_near_limit():
            conn.send(("retire", index))
            return
        judged += 1
        context = CaseContext(case if isinstance(case, Case) else Case.from_id(case))
        # the ids the targets' rows will carry (conventions, kernel configurations): a row the
        # supervisor writes itself, for a target that ends this process, names the same case
        conn.send(("ids", index, {target.name: judged_case_id(context.case, target) for target in targets}))
        truth_seconds = 0.0
        if "reference" in setup.checks:
            # The float64 truth (a JAX compile in a fresh worker) is not the target's time: the
            # supervisor starts the row's --case-timeout deadline again when it is ready.
            truth_started = time.perf_counter()
            context.disagreement
            truth_seconds = time.perf_counter() - truth_started
            conn.send(("truth", index))
        for row in judge(context, targets, setup.tolerances, setup.checks, start):
            # the truth is judging time: the first row pays it, as it would had judge computed it
            row.seconds, truth_seconds = row.seconds + truth_seconds, 0.0
            # in the normal form judge_run would give it: a passing row's ratio maps are not wanted
            # (less to send), and its results.jsonl line is made here, on this worker's core
            conn.send(("row", index, normal_form(row, index)))


def forked_main(conn: Connection, environ: dict[str, str]) -> None:
    """Entry point of a worker forked from the fork server (:mod:`.preload`).

    The fork server's environment is the supervisor's of the moment it started; the worker takes
    the supervisor's current one (GRADCHECK_RNN_JAX_CACHE, whatever a test sets) before anything
    reads it.
    """
    os.environ.clear()
    os.environ.update(environ)
    ignore_interrupts()  # as the fork server does: whatever it inherited, a worker leaves SIGINT to the supervisor
    try:
        serve(conn)
    finally:
        conn.close()


def main() -> None:
    """Entry point of an exec'd worker process; its one argument is the socket's file descriptor."""
    ignore_interrupts()
    from . import preload  # noqa: F401  (one thread for OpenMP, MKL and OpenBLAS, set as they load)

    conn = Connection(int(sys.argv[1]))
    try:
        serve(conn)
    finally:
        conn.close()

