"""What the judging commands print: tables, failure lines, the verdict line.

The CLI's commands hand a plan to the engine (:mod:`gradcheck_rnn.run.drive`, which judges,
stores and publishes) with the console's observers of its rows (the progress bar, the tables of
``check``), and print the stored run it returns (the results document, as ``report`` prints a
stored one) and its verdict, never recomputing it. Target-provided text (messages, tracebacks,
names) is always printed literally, never as rich markup.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.text import Text

from ..reports import console as render
from ..errors import UsageError
from ..model.numbers import plural
from ..rows.result import CaseResult
from ..model.statuses import STYLE, is_bad

if TYPE_CHECKING:
    from ..run.drive import Outcome
    from ..run.plan import Plan


def _width(stream: Any) -> int | None:
    """The terminal's width (or $COLUMNS); 120 in CI logs, where there is no terminal to ask."""
    return None if stream.isatty() or os.environ.get("COLUMNS") else 120


out = Console(width=_width(sys.stdout))
err = Console(stderr=True, width=_width(sys.stderr))

VERDICT_STYLE = {0: "green", 5: "yellow"}


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


def verdict_line(code: int, reason: str, suffix: str = "") -> None:
    say(out, Text.assemble((reason, VERDICT_STYLE.get(code, "red")), suffix))


def finish_outcome(outcome: Outcome, report_dir: str, fmt: str = "console") -> int:
    """After a judged run's tables: how far it got, then the published run's GitHub output, the
    pictures note and the verdict line; the exit code. The tables are already on the console: if
    the reports could not be written after all, say so in one sentence and return non-zero (1
    unless the verdict is worse)."""
    run = outcome.run
    if not run.complete and not run.interrupted:  # an interrupted run's verdict line says how far it got
        render.print_lines(out, render.stopped_early_lines(run.cases_judged, run.spec.cases))
    if outcome.run_dir is None:
        exc = outcome.unwritten
        print_error(f"the reports could not be written to {report_dir!r} ({getattr(exc, 'strerror', None) or exc}); "
                    f"the verdict was: {run.reason}")
        return run.exit_code or 1
    publish_format(fmt, outcome.run_dir)
    pictures_note(bool(run.failures), outcome.run_dir)
    verdict_line(run.exit_code, run.reason, f" — {plural(run.rows, 'result')}, reports in {outcome.run_dir}")
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


def judge_and_report(planned: Plan, command: str, report_dir: str, fmt: str = "console",
                     baseline: Any = None) -> int:
    """Judge a run with a progress bar, have it published, print the stored run; the exit code
    (``sweep``, ``mutants``). ``baseline``: ``sweep --baseline``'s observer, which marks drifted rows.

    A run stopped by SIGINT or SIGTERM is published as judged so far with the verdict
    ``interrupted``, and prints only its verdict line (exit 130 or 143).
    """
    import functools

    from ..reports import publish
    from ..run.drive import judge_and_publish

    ensure_writable(report_dir)
    with render.progress(err, planned.spec.rows) as bar:
        observers = (bar,) if baseline is None else (baseline, bar)
        # the published run goes from publishing to the console's printer, the bar gone first
        present = functools.partial(present_detection if planned.verdict is not None else render.present_stored_run,
                                    out, bar)
        outcome = judge_and_publish(planned, command, report_dir, publish, observers, advise=planned.verdict is None,
                                    present=present)
    return finish_outcome(outcome, report_dir, fmt)


def report_merged(run_dirs: list[str], report_dir: str, fmt: str) -> int:
    """``merge``: join the shards, print the tables, write the merged run's reports; the exit code."""
    from ..reports import RowLog, publish, run_name
    from ..run.drive import Outcome
    from ..workflows.merge import merge_shards, merged_run

    spec, results, folders, drift = merge_shards(run_dirs)
    ensure_writable(report_dir)
    log = RowLog(report_dir, run_name("merge", spec.seed))
    try:
        run = merged_run(spec, results, drift, log)
        published = publish(run, log, {**spec.meta("merge"), "shards": [str(f) for f in folders]})
        if published.document is not None:
            render.print_stored_run(out, published.document)
        return finish_outcome(Outcome(run, published.run_dir, published.unwritten), report_dir, fmt)
    finally:
        log.discard()  # a no-op once published


def present_detection(console: Console, bar: Any, published: Any, next_step: str | None = None) -> None:
    """``mutants``: a published detection run on the console, once its progress bar is gone."""
    bar.close()
    print_detection(published.document)


def print_detection(document: dict[str, Any]) -> None:
    """``mutants``: the detection table and lines of a detection run's document (results.json's
    ``"mutants"`` and ``"false_alarms"``, :class:`~gradcheck_rnn.workflows.detection.DetectionRule`)."""
    from ..workflows.detection import detection_lines

    table, lines = detection_lines(document)
    out.print(table)
    render.print_lines(out, lines)


def judge_calibration(planned: Plan, margin: float) -> int:
    """``calibrate``: judge a correct target, print the error ratios and the proposal; the exit code."""
    from ..run.drive import judge, terminate_as_exception
    from ..workflows.calibrate import calibrate, calibration_table

    spec = planned.spec
    with terminate_as_exception(), render.progress(err, spec.rows) as bar:
        run = judge(planned, (bar,))
    if run.interrupted:
        verdict_line(run.exit_code, run.reason)
        return run.exit_code
    out.print(calibration_table(calibrate(run.results, spec.tolerances(), margin), run, margin))
    if run.failures:
        say(out, f"{len(run.failures)} results did not pass: is {spec.targets[0]} really correct? "
                 f"First: {run.failures[0].repro}", style="red")
    verdict_line(run.exit_code, run.reason)
    return run.exit_code


def judge_case(planned: Plan, per_step: bool) -> int:
    """``check`` and ``repro``: judge a run of one case, print each row's full table as it
    arrives; the exit code (130/143 with one line when a signal stops it)."""
    from ..run import OnRow
    from ..run.drive import judge, terminate_as_exception

    with terminate_as_exception():  # each row's full table as it arrives
        run = judge(planned, (OnRow(lambda row: print_case_result(row.to_json(), per_step)),))
    verdict_line(run.exit_code, run.reason)
    return run.exit_code


def shrink_case(planned: Plan, any_tensor: bool, max_steps: int, as_json: bool) -> int:
    """``shrink``: judge the candidates one run of one case at a time through one open executor
    (one worker process by default); print the accepted steps or the JSON; the exit code."""
    import dataclasses

    from ..model.case import Case
    from ..errors import INTERRUPTS, signal_name
    from ..rows.store import EXIT_INTERRUPTED
    from ..run import judge_run, open_executor
    from ..run.drive import terminate_as_exception
    from ..workflows.shrink import DidNotReproduce, shrink, steps_lines

    spec, execution = planned.spec, planned.execution
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
    if document.get("mutants") is not None:  # a detection run's stored table
        print_detection(document)
    else:
        render.print_stored_run(out, document)
    publish_format(fmt, resolved)
    files = ", ".join(name for name in WRITERS if name != "results.json")
    say(out, f"re-rendered {files} from results.json in {resolved}")
    pictures_note(any(is_bad(row["status"]) for row in document["results"]), resolved)
    code, reason = stored_verdict(document)
    verdict_line(code, reason)
    return code


def print_drift(drift: dict[str, Any]) -> None:
    """The drifted rows of a ``"drift"`` section (``diff``'s): :func:`~gradcheck_rnn.reports.console.drift_lines`."""
    render.print_lines(out, render.drift_lines(drift))


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
