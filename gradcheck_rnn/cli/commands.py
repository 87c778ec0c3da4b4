"""What the judging commands print and write: tables, failure lines, the verdict line, reports.

The CLI's commands call these; each reads a judged :class:`~gradcheck_rnn.rows.result.Run` (or the
rows of one case) and never recomputes its verdict. Target-provided text (messages, tracebacks,
names) is always printed literally, never as rich markup.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from rich.console import Console
from rich.text import Text

from ..reports import console as render
from ..errors import INTERRUPTS, UsageError
from ..rows.result import CaseResult, Run, document_row, plural, tally_verdict
from ..rows.statuses import STYLE, is_bad
from ..rows.tally import StoredTally, Tally


def _width(stream: Any) -> int | None:
    """The terminal's width (or $COLUMNS); 120 in CI logs, where there is no terminal to ask."""
    return None if stream.isatty() or os.environ.get("COLUMNS") else 120


out = Console(width=_width(sys.stdout))
err = Console(stderr=True, width=_width(sys.stderr))

VERDICT_STYLE = {0: "green", 5: "yellow"}
BAR_UPDATE_SECONDS = 0.1  # how often the progress bar takes the rows counted since (it redraws at 10 Hz)


def say(console: Console, text: str | Text, style: str = "") -> None:
    """One unwrapped line, taken literally (a case id, a repro command, a target's message)."""
    console.print(text if isinstance(text, Text) else Text(text, style=style), soft_wrap=True, highlight=False)


def print_error(message: str) -> None:
    """``error: <message>`` on stderr, in the project's one-line style."""
    say(err, Text.assemble(("error:", "bold red"), " ", str(message)))


def ensure_writable(report_dir: str) -> None:
    """Refuse, before anything runs, a report folder that cannot be created or written to.

    Nothing is created: the first existing ancestor must be writable (the folder itself is made
    only when the reports are written)."""
    import tempfile

    path = Path(report_dir).absolute()
    existing = next(p for p in (path, *path.parents) if p.exists())
    try:  # a real write, removed at once: permission bits do not tell (root, /proc, read-only mounts)
        if not existing.is_dir():
            raise NotADirectoryError(f"{existing} is not a folder")
        with tempfile.TemporaryDirectory(dir=existing):
            pass
    except OSError as exc:
        raise UsageError(f"--report-dir {report_dir!r} is not writable ({exc.strerror or exc}); "
                         f"choose another folder with --report-dir DIR") from None


def print_run(rows: Iterable[dict[str, Any]], tally: Tally | StoredTally) -> None:
    """Summary tables per target (from the run's tally), skip reasons, the failure list (from the
    stored ``rows``, as the reports read them) and the mistrust note."""
    for table in render.summary_tables(tally):
        out.print(table)
    render.print_lines(out, render.skipped_target_lines(tally) + render.failure_lines(rows)
                       + render.mistrusted_lines(tally))


def verdict_line(code: int, reason: str, suffix: str = "") -> None:
    say(out, Text.assemble((reason, VERDICT_STYLE.get(code, "red")), suffix))


def write_and_finish(run: Run, report_dir: str, meta: dict[str, Any], extra: dict[str, Any] | None = None,
                     fmt: str = "console", log: Any = None) -> int:
    """Write the reports of a judged run (its verdict stored in them), print the verdict line,
    and return the exit code. The tables are already on the console: if the reports cannot be
    written after all, say so in one sentence and return non-zero (1 unless the verdict is worse)."""
    from ..reports import write_reports

    meta = {**meta, "verdict": run.verdict_json(), "complete": run.complete, "cases_judged": run.cases_judged,
            "interrupted": run.interrupted, **({} if run.seconds is None else {"seconds": round(run.seconds, 3)})}
    if not run.complete and not run.interrupted:  # an interrupted run's verdict line says how far it got
        render.print_lines(out, render.stopped_early_lines(run.cases_judged, meta.get("cases")))
    try:
        run_dir = write_reports(run.results, report_dir, meta, extra, log=log)
    except OSError as exc:
        print_error(f"the reports could not be written to {report_dir!r} ({exc.strerror or exc}); "
                    f"the verdict was: {run.reason}")
        return run.exit_code or 1
    publish_format(fmt, run_dir)
    pictures_note(bool(run.failures), run_dir)
    verdict_line(run.exit_code, run.reason, f" — {plural(run.rows, 'result')}, reports in {run_dir}")
    return run.exit_code


def pictures_note(failed: bool, run_dir: Path) -> None:
    """Say on the console what report.html says on its page: its failing cases have no error
    pictures, for want of matplotlib, and how to get them."""
    from ..reports.pictures import available

    if failed and not available():
        render.print_lines(out, render.note_lines(  # the command on a line of its own, never broken
            "note: report.html has no error pictures: matplotlib is not installed; pip install "
            "'gradcheck-rnn[html]', then draw them with") + [f"  gradcheck-rnn report {run_dir}"])


def publish_format(fmt: str, run_dir: Path) -> None:
    """GitHub annotations and step summary when ``--format`` asks for them (see reports.github)."""
    from ..reports import github, load_document

    if github.wanted(fmt):
        github.publish(load_document(run_dir), run_dir, lambda line: say(out, line))


def print_case_result(row: dict[str, Any], per_step: bool) -> None:
    """The full per-tensor table of one stored row (``check`` and ``repro``), printed as it arrives."""
    title, table, tolerances = render.tensor_table(row)
    say(out, title)
    if row.get("tensors"):
        out.print(table)
        if tolerances:
            say(out, tolerances)
    # A failed comparison is the table itself; other checks, errors and skips explain themselves.
    status, message = row["status"], row.get("message", "")
    if message and (status != "fail" or row.get("check", "reference") != "reference"):
        first, *rest = render.wrapped(f"{status}: {message}", indent="", hanging="  ")
        say(out, Text.assemble((status, STYLE.get(status, "")), first[len(status):]))
        render.print_lines(out, rest)
    if row.get("traceback"):
        say(out, "target traceback (most recent call last):")
        say(out, row["traceback"])
    if per_step and (picture := render.error_picture(row)) is not None:
        out.print(picture)
    say(out, f"reproduce: {row['repro']}")


@contextlib.contextmanager
def progress(total: int) -> Iterator[Callable[[CaseResult], None]]:
    """A rich progress bar on stderr; yields the per-result callback that advances it."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    # target names and case ids are shown literally (markup=False): a name may hold brackets
    with Progress(TextColumn("[bold]checking"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.fields[current]}", markup=False), console=err, transient=True) as bar:
        task = bar.add_task("sweep", total=total, current="")
        pending, updated = 0, 0.0

        def advance(result: CaseResult) -> None:
            # rich redraws 10 times a second: rows are counted here and handed over as often, not
            # one update (a lock, a speed sample) per row in the supervisor's busiest loop
            nonlocal pending, updated
            pending += 1
            if (now := time.monotonic()) - updated >= BAR_UPDATE_SECONDS:
                bar.update(task, advance=pending, current=f"{result.target} {result.check} {result.case_id}")
                pending, updated = 0, now

        yield advance
        bar.update(task, advance=pending)


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


def judge_with_progress(spec: Any, execution: Any, log: Any = None, targets: list | None = None,
                        baseline: Any = None) -> Run:
    """Judge a run spec with a progress bar on stderr; the judged run. Each row goes to ``log``
    (the run's :class:`~gradcheck_rnn.rows.log.RowLog`) as it arrives, so the rows are on
    disk, in their results.json form, while the workers still judge, and the run keeps in memory
    only the rows that did not pass (:func:`~gradcheck_rnn.run.judge_run`); with a ``baseline``
    (:class:`~gradcheck_rnn.workflows.baseline.Baseline`) already marked drifted or not. A signal raises out
    of here with the run judged so far as the exception's ``run``."""
    from ..run import judge_run

    with progress(spec.rows) as advance:
        return judge_run(spec, execution, on_result=advance, targets=targets, baseline=baseline, log=log)


@contextlib.contextmanager
def row_log(report_dir: str, command: str, seed: int | None) -> Iterator[Any]:
    """The run's row log, made when judging starts and discarded if the command ends before
    :func:`write_and_finish` published it (an error, a second Ctrl-C while writing)."""
    from ..reports import RowLog, run_name

    log = RowLog(report_dir, run_name(command, seed))
    try:
        yield log
    finally:
        log.discard()  # a no-op once published


def judge_and_report(spec: Any, execution: Any, command: str, report_dir: str, fmt: str = "console",
                     present: Callable[[Run], tuple[Run, dict[str, Any] | None]] | None = None,
                     targets: list | None = None, baseline: Any = None) -> int:
    """Judge a run, print it, write its reports; the exit code (``sweep``, ``mutants``).

    ``present`` prints the command's own tables for a judged run and returns the run to store
    (a mutants run has its own verdict) and extra top-level keys for results.json; by default the
    summary tables and the failure list. A run stopped by SIGINT or SIGTERM is published as judged
    so far with the verdict ``interrupted``, after one line, and exits 130 or 143. With a
    ``baseline`` the drifted rows get their own table and results.json its ``"drift"``.
    """
    from .advice import next_step

    ensure_writable(report_dir)
    meta = spec.meta(command)
    # a rerun's folder says so (<stamp>-rerun-s<the stored run's seed>); results.json names the run it reruns
    with row_log(report_dir, "rerun" if spec.rerun_of else command, spec.seed) as log, terminate_as_exception():
        try:
            run = judge_with_progress(spec, execution, log, targets, baseline)
        except INTERRUPTS as exc:
            return write_and_finish(exc.run, report_dir, meta, fmt=fmt, log=log)
        extra = None if baseline is None else {"drift": baseline.to_json()}
        if present is None:
            print_run(map(document_row, run.results), log.tally)
            if run.exit_code in (0, 5) and (step := next_step(spec, log.tally.coverage)):  # what to do for more coverage
                render.print_lines(out, render.note_lines(step))
            if extra is not None:
                print_drift(extra["drift"])
        else:
            run, extra = present(run)
        return write_and_finish(run, report_dir, meta, extra, fmt=fmt, log=log)


def report_merged(run_dirs: list[str], report_dir: str, fmt: str) -> int:
    """``merge``: join the shards, print the tables, write the merged run's reports; the exit code."""
    from ..run.merge import merge_shards

    spec, results, folders, drift = merge_shards(run_dirs)
    ensure_writable(report_dir)
    with row_log(report_dir, "merge", spec.seed) as log:
        for result in results:  # as their shard finished them (gradcheck_rnn.rows.result.finish)
            log.add(result)
        # the one tally, the log's: the verdict's, the console's and the reports'
        run = Run(results, *tally_verdict(log.tally, spec.named_targets, drift, spec.strict_contracts), spec, tally=log.tally)
        print_run(map(document_row, results), log.tally)
        extra = None if drift is None else {"drift": drift}
        if drift is not None:
            print_drift(drift)
        return write_and_finish(run, report_dir, {**spec.meta("merge"), "shards": [str(f) for f in folders]},
                                extra, fmt=fmt, log=log)


def present_mutants(mutant_names: list[str], correct_names: list[str], every_mutant: bool = True,
                    home_profiles: list[dict[str, Any]] | None = None,
                    left_out: list[dict[str, Any]] | None = None) -> Callable[[Run], tuple[Run, dict[str, Any]]]:
    """``mutants``: print the detection table of a judged run; the run with the detection verdict
    (every mutant flagged and no correct kernel) and the detection rows for results.json.
    ``every_mutant``, ``home_profiles`` and ``left_out``: see
    :func:`~gradcheck_rnn.workflows.mutants.detection_verdict`, :func:`~gradcheck_rnn.workflows.mutants.home_cases`
    and :func:`~gradcheck_rnn.workflows.mutants.left_out`."""
    from ..workflows.mutants import detection_lines, detection_verdict, summarise

    def present(judged: Run) -> tuple[Run, dict[str, Any]]:
        mutant_rows, correct_rows = summarise(judged.results, mutant_names, correct_names, judged.tally)
        extra = {"mutants": [r.to_json() for r in mutant_rows], "false_alarms": [r.to_json() for r in correct_rows],
                 "checks": list(judged.spec.checks)}
        if home_profiles:
            extra["home_profiles"] = home_profiles
        if left_out:
            extra["left_out"] = left_out
        table, lines = detection_lines({**judged.spec.meta("mutants"), **extra})
        out.print(table)
        render.print_lines(out, lines)
        return Run(judged.results, *detection_verdict(mutant_rows, correct_rows, every_mutant), judged.spec,
                   complete=judged.complete, tally=judged.tally, seconds=judged.seconds), extra

    return present


def judge_calibration(spec: Any, execution: Any, margin: float) -> int:
    """``calibrate``: judge a correct target, print the error ratios and the proposal; the exit code."""
    from ..workflows.calibrate import calibrate, calibration_table

    with terminate_as_exception():
        try:
            run = judge_with_progress(spec, execution)
        except INTERRUPTS as exc:
            verdict_line(exc.run.exit_code, exc.run.reason)
            return exc.run.exit_code
    out.print(calibration_table(calibrate(run.results, spec.tolerances(), margin), run, margin))
    if run.failures:
        say(out, f"{len(run.failures)} results did not pass: is {spec.targets[0]} really correct? "
                 f"First: {run.failures[0].repro}", style="red")
    verdict_line(run.exit_code, run.reason)
    return run.exit_code


def judge_case(spec: Any, execution: Any, per_step: bool) -> int:
    """``check`` and ``repro``: judge a run of one case, print each row's full table as it
    arrives; the exit code (130/143 with one line when a signal stops it)."""
    from ..run import judge_run

    with terminate_as_exception():
        try:
            run = judge_run(spec, execution, on_result=lambda row: print_case_result(row.to_json(), per_step))
        except INTERRUPTS as exc:
            run = exc.run
    verdict_line(run.exit_code, run.reason)
    return run.exit_code


def shrink_case(spec: Any, execution: Any, any_tensor: bool, max_steps: int, as_json: bool) -> int:
    """``shrink``: judge the candidates one run of one case at a time through one open executor
    (one worker process by default); print the accepted steps or the JSON; the exit code."""
    import dataclasses

    from ..model.case import Case
    from ..errors import signal_name
    from ..rows.result import EXIT_INTERRUPTED
    from ..run import judge_run, open_executor
    from ..workflows.shrink import DidNotReproduce, shrink, steps_lines

    check = spec.checks[0]
    executor = open_executor(spec, execution, jobs=1)

    def judge(case: Case) -> CaseResult:
        one = dataclasses.replace(spec, case_ids=(case.id,), cases=1)
        return judge_run(one, execution, executor=executor, jobs=[(0, case)]).results[0]

    with terminate_as_exception():
        try:
            result = shrink(Case.from_id(spec.case_ids[0]), spec.targets[0], check, any_tensor=any_tensor,
                            max_steps=max_steps, repro_options=spec.repro_options, judge=judge)
        except DidNotReproduce as exc:
            print_error(str(exc))
            return 1
        except INTERRUPTS as exc:
            print_error(f"shrinking was interrupted by {signal_name(exc)}")
            return EXIT_INTERRUPTED[signal_name(exc)]
        finally:
            executor.close()
    if as_json:
        import json

        print(json.dumps(result.to_json(), indent=2))
        return 0
    lines = steps_lines(result)
    if result.exhausted:
        lines.append(f"stopped after {result.tried} candidates (--max-steps {max_steps}); the case may shrink further")
    lines += [f"minimal case: {result.minimal.case_id} ({len(result.steps) - 1} steps, {result.tried} candidates "
              f"judged)", f"reproduce: {result.repro}"]
    for line in lines:  # unwrapped lines: a case id or a repro command is never cut
        say(out, line)
    return 0


def rerender_run(run_dir: str, fmt: str) -> int:
    """``report``: re-render a run's files from results.json, print what the command printed from
    its stored tallies and its stored verdict; the stored exit code."""
    from ..reports import WRITERS, rerender, resolve_run_dir
    from ..reports.document import stored_verdict

    resolved = resolve_run_dir(run_dir)
    document = rerender(resolved)
    if document.get("mutants") is not None:
        from ..workflows.mutants import detection_lines

        table, lines = detection_lines(document)
        out.print(table)
        render.print_lines(out, lines)
    else:
        print_run(document["results"], StoredTally(document))
    if document.get("drift") is not None:
        print_drift(document["drift"])
    publish_format(fmt, resolved)
    files = ", ".join(name for name in WRITERS if name != "results.json")
    say(out, f"re-rendered {files} from results.json in {resolved}")
    pictures_note(any(is_bad(row["status"]) for row in document["results"]), resolved)
    code, reason = stored_verdict(document)
    verdict_line(code, reason)
    return code


def print_drift(drift: dict[str, Any]) -> None:
    """The drifted rows (``"drift"`` of results.json, :mod:`gradcheck_rnn.workflows.baseline`), largest growth
    first, one unwrapped line each with every drifted tensor's ratio then → now (a case id is never
    cut); or one line saying how many rows were compared and that none drifted, or that none was."""
    from ..reports.document import drift_rows
    from ..rows.numbers import fmt

    compared = f"{plural(drift['compared'], 'passing row')} compared with {drift['baseline']}"
    rule = f"ratio grew past ×{drift['factor']:g}, ending above {drift['floor']:g}"
    if not drift["compared"]:
        say(out, f"nothing was compared with the baseline {drift['baseline']}: no passing row has a row there, "
                 f"so drift went unchecked", style="bold yellow")
        return
    if not drift["rows"]:
        say(out, f"no drift: {compared}, none whose {rule}")
        return
    say(out, f"Drifted since the baseline: {plural(len(drift['rows']), 'row')} ({compared}; {rule}), "
             f"largest growth first:", style="bold yellow")
    lines: dict[tuple[str, str, str], list[str]] = {}
    for case_id, target, check, tensor, then, now in drift_rows(drift["rows"]):
        growth = f"×{now / then:.3g}" if then > 0 else "from 0"
        lines.setdefault((case_id, target, check), []).append(f"{tensor} {fmt(then)} → {fmt(now)} ({growth})")
    for (case_id, target, check), changes in lines.items():
        say(out, Text.assemble(("  drifted ", "yellow"), f"{case_id} on {target} ({check}): {'; '.join(changes)}"))


def diff_stored_runs(run_a: str, run_b: str, factor: float) -> int:
    """``diff``: the drift of run B against run A and the rows present in one run only; exit 1
    when any row drifted past ``factor``, else 0."""
    from ..workflows.baseline import diff_runs

    diff = diff_runs(run_a, run_b, factor)
    print_drift(diff.drift)
    for label, keys in (("only in A", diff.only_a), ("only in B", diff.only_b)):
        if keys:
            say(out, f"{plural(len(keys), 'row')} {label}:")
            for case_id, target, check in keys:
                say(out, f"  {case_id} {target} {check}")
    drifted = len(diff.drift["rows"])
    verdict_line(1 if drifted else 0, f"{plural(drifted, 'row')} drifted" if drifted else "no drift",
                 f" — {len(diff.only_a)} rows only in A, {len(diff.only_b)} only in B")
    return 1 if drifted else 0
