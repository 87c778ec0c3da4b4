"""The local pool's fork server: started once, kept while someone uses it, stopped with its user.

Workers are forked from ``multiprocessing``'s fork server, which imports :mod:`.preload` (torch,
jax and the judging modules) once (:mod:`.pool`). Left to ``multiprocessing``, that server outlives
its parent: it notices the parent is gone only when it next waits for a request, which is after
its seconds of imports. A run that ended early (a bad option, Ctrl-C, a run of few cases) left it
importing at full speed on one core, and the next run's count of busy cores
(:func:`gradcheck_rnn.run.default_workers`) took it for someone else's work: a second 200-case
sweep right after a first one chose 1 worker on an idle 2-core machine.

So this process stops the server it started, at once, whatever the server is doing (a kill: its
imports have nothing to save), and reaps it, so no process of a run is left when it ends:

- when the last user lets go of it: each :class:`~gradcheck_rnn.run.pool.WorkerPool` uses it from
  its start to its close, so the library (``gr.sweep``, ``gr.check``) leaves its caller's
  process without one, as it found it;
- :func:`kept` holds it across runs for a process that judges many (a test session, the pytest
  fixture): the server then stops when the last hold ends;
- at interpreter exit in any case (the command line, or a pool that was never made because the
  run was refused after its server started), with the ``multiprocessing`` resource tracker this
  process started for it. The tracker (idle, no imports) is left until then: it is
  ``multiprocessing``'s own, and stopping it would unlink whatever the caller registered with it since.

A server that was already running when this process first asked for one (the caller's own) is
the caller's: it is reused and never stopped here.
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import os
import signal
import sys
import threading
import time
from typing import Iterator

PRELOAD = "gradcheck_rnn.run.preload"
# How long the exit waits for the resource tracker to go (it goes once every holder of its pipe has
# closed it: a child process that still holds it keeps it, and the exit does not wait for that).
TRACKER_EXIT_SECONDS = 1.0

_lock = threading.Lock()
_users = 0  # pools open now and holds (kept): the server stops when this returns to 0
_server: int | None = None  # the pid of the fork server this process started, while it runs
_tracker: int | None = None  # the pid of the resource tracker this process started for it


def use_fork_server() -> bool:
    """Whether workers are forked from the fork server or exec'd (see :mod:`.pool`)."""
    return (os.environ.get("GRADCHECK_RNN_WORKER_START", "forkserver") != "exec"
            and "forkserver" in multiprocessing.get_all_start_methods()
            and not multiprocessing.current_process().daemon)


def start() -> None:
    """Start the fork server with :mod:`.preload` (once per process); returns at once.

    The server imports in the background; the first worker's start waits for it. A server that is
    already running (this process's, or the caller's own, with whatever preload) is reused.
    """
    global _server, _tracker
    multiprocessing.set_forkserver_preload([PRELOAD])
    from multiprocessing import forkserver, resource_tracker

    with _lock:
        tracker_before = resource_tracker._resource_tracker._pid
        server_before = forkserver._forkserver._forkserver_pid
        # The server's start starts the resource tracker first, and that start ends by unblocking
        # SIGINT (multiprocessing/resource_tracker.py): started before, it leaves interrupts_held alone.
        resource_tracker.ensure_running()
        with main_module_hidden(), interrupts_held():
            forkserver.ensure_running()
        if tracker_before is None and resource_tracker._resource_tracker._pid is not None:
            _tracker = resource_tracker._resource_tracker._pid
        started = forkserver._forkserver._forkserver_pid
        if started != server_before or started == _server:  # ours (a dead one of ours was replaced too)
            _server = started


def use() -> None:
    """A pool starts using the fork server (started with :func:`start`)."""
    global _users
    with _lock:
        _users += 1


def release() -> None:
    """A user lets go of the fork server; the last one stops it (:func:`stop`)."""
    global _users
    with _lock:
        _users = max(0, _users - 1)
        if _users == 0:
            _stop_server()


@contextlib.contextmanager
def kept() -> Iterator[None]:
    """Keep the fork server, once started, across the pools made inside: their later workers start
    at once instead of after the server's imports. It stops when the last hold ends."""
    use()
    try:
        yield
    finally:
        release()


def stop() -> None:
    """Stop the fork server this process started, whoever still uses it (stop the pools first:
    their workers are its children)."""
    with _lock:
        _stop_server()


def _stop_server() -> None:
    """Kill and reap the server this process started, if it runs; callers hold ``_lock``."""
    global _server
    from multiprocessing import forkserver

    server = forkserver._forkserver
    if _server is None or server._forkserver_pid != _server:
        _server = None
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(_server, signal.SIGKILL)
    # What ForkServer._stop does (close the "alive" pipe, reap, remove the socket), without its
    # blocking wait on a pid that ensure_running may have reaped already.
    with server._lock:
        os.close(server._forkserver_alive_fd)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(_server, 0)
        with contextlib.suppress(OSError):
            os.unlink(server._forkserver_address)
        server._forkserver_alive_fd = server._forkserver_pid = server._forkserver_address = None
    _server = None


def _stop_at_exit() -> None:
    """At interpreter exit: the server this process started, then its resource tracker, reaped."""
    global _tracker
    stop()
    from multiprocessing import resource_tracker

    tracker = resource_tracker._resource_tracker
    if _tracker is None or tracker._pid != _tracker or tracker._fd is None:
        return
    # closing our end of its pipe ends it once no child holds the pipe; never wait long for that
    os.close(tracker._fd)
    tracker._fd = None
    deadline = time.monotonic() + TRACKER_EXIT_SECONDS
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(_tracker, os.WNOHANG)[0] == 0:
                time.sleep(0.01)
                continue
        tracker._pid = None
        break
    _tracker = None


atexit.register(_stop_at_exit)


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """Block SIGINT in this thread while a child process is made, so that the child starts with it
    blocked until it ignores it (:func:`.interrupts.ignore_interrupts`): a Ctrl-C during the child's
    imports then prints no traceback there. Here it is only held: it arrives when this ends."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


@contextlib.contextmanager
def main_module_hidden() -> Iterator[None]:
    """Keep ``multiprocessing`` from re-running the supervisor's ``__main__`` in a new worker.

    ``multiprocessing.spawn.get_preparation_data`` names ``__main__`` by its ``__spec__`` or
    ``__file__``; without either it names nothing. The pool starts workers from one thread.
    """
    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    saved = {name: main.__dict__[name] for name in ("__spec__", "__file__") if name in main.__dict__}
    main.__dict__.pop("__file__", None)
    main.__dict__["__spec__"] = None
    try:
        yield
    finally:
        main.__dict__.pop("__spec__", None)
        main.__dict__.update(saved)
