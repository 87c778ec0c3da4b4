"""SIGINT in the pool's child processes: a leaf module, imported by the fork server's preload and by
every worker before anything heavy, so that a Ctrl-C during their start-up is the supervisor's alone."""

from __future__ import annotations

import signal


def ignore_interrupts() -> None:
    """Ignore SIGINT in this child process, then unblock it (the supervisor made this process with
    it blocked: a Ctrl-C pending since then is discarded, never raised)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
