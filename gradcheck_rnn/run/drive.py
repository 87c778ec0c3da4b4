"""Driving a planned run from its first row to its publication, for every command alike: signals
turned into an interrupted run, the row log, the ``next:`` hint, and the publishing of the
stored run. The command line hands over a :class:`~gradcheck_rnn.run.plan.Plan` and what presents
the published run (the console's printer), and ends with the :class:`Outcome`; it never runs a
stage itself. The rows go from the store to publishing and from there to the presenter: this
module hands over the store and the presenter, never the rows.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from ..errors import INTERRUPTS
from ..rows.store import RowLog, Run, run_name
from . import RowObserver, RunStore, judge_run
from .plan import Plan

# Publishes a judged run from its row log with the run's meta (results.json's top level): the
# stored run (reports.Published: the results document, and its folder or the error that kept it
# from being written). reports.publish is the one; the engine takes it as a value, a later stage's.
Publish = Callable[[Run, RowLog, dict[str, Any]], Any]
# Presents a published run (reports.Published) with the run's ``next:`` hint (None without one):
# the console's printer, handed in by the command line, as a later stage's.
Present = Callable[[Any, "str | None"], Any]


@dataclass
class Outcome:
    """A judged run and what became of it: its run folder (interrupted or not), or None and the
    error that kept its files from being written, and the ``next:`` hint of a run that asked for
    one. The published run itself went to the presenter."""

    run: Run
    run_dir: Path | None = None
    unwritten: OSError | None = None
    next_step: str | None = None


@contextlib.contextmanager
def terminate_as_exception() -> Iterator[None]:
    """While a command judges, SIGTERM raises :class:`~gradcheck_rnn.errors.Terminated` in this
    (the main) thread, as SIGINT raises KeyboardInterrupt, so both end the run the same way: the
    workers stopped, what was judged published as interrupted. The previous handler comes back after."""
    import signal
    import threading

    from ..errors import Terminated

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminated(signum: int, frame: Any) -> None:
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def judge(plan: Plan, observers: Sequence[RowObserver] = (), store: RunStore | None = None) -> Run:
    """Judge a plan, its one verdict included, its rows handed to ``observers`` and ``store``
    (:func:`~gradcheck_rnn.run.judge_run`); a run a signal stopped is returned (its verdict
    ``interrupted``), not raised. The caller holds :func:`terminate_as_exception` around it and
    whatever it does with the run."""
    try:
        return judge_run(plan.spec, plan.execution, plan.targets, jobs=plan.jobs, observers=observers, store=store,
                         rule=plan.verdict)
    except INTERRUPTS as exc:
        return exc.run


def judge_and_publish(plan: Plan, command: str, report_dir: str | os.PathLike[str], publish: Publish,
                      observers: Sequence[RowObserver] = (), advise: bool = False,
                      present: Present | None = None) -> Outcome:
    """Judge a plan with its rows logged as they arrive (the run's staging folder, its store),
    then publish it, interrupted or not: SIGINT and SIGTERM end the run as judged so far, and
    hand the published run to ``present`` (with the ``next:`` hint) unless a signal stopped it.
    ``advise``: a run that passed or checked nothing gets its ``next:`` hint (:mod:`.advice`). A
    rerun's folder says so (``<stamp>-rerun-s<the stored run's seed>``)."""
    from .advice import next_step

    spec = plan.spec
    log = RowLog(report_dir, run_name("rerun" if spec.rerun_of else command, spec.seed))
    try:
        with terminate_as_exception():
            try:
                run = judge_run(plan.spec, plan.execution, plan.targets, jobs=plan.jobs, observers=observers,
                                store=log, rule=plan.verdict)
            except INTERRUPTS as exc:
                run = exc.run
            published = publish(run, log, spec.meta(command))
    except BaseException:
        log.discard()  # an error or a second signal before the run was published: no folder left
        raise
    outcome = Outcome(run, published.run_dir, published.unwritten)
    if advise and run.interrupted is None and run.exit_code in (0, 5):
        outcome.next_step = next_step(spec, log.tally.coverage)
    if present is not None and run.interrupted is None and published.stored is not None:
        present(published, outcome.next_step)
    return outcome
