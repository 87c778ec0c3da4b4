"""What the judging commands print and write: tables, failure lines, the verdict line, reports.

The CLI's commands call these; each reads a judged :class:`~gradcheck_rnn.result.Run` (or the
rows of one case) and never recomputes its verdict. Target-provided text (messages, tracebacks,
names) is always printed literally, never as rich markup.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Iterable

from rich.console import Console
from rich.text import Text

from . import render
from .errors import UsageError
from .result import CaseResult, Run


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


def print_run(results: list[CaseResult], run: Run | None = None) -> None:
    """Summary tables per target, skip reasons, the failure list and the mistrust note."""
    for table in render.summary_tables(results):
        out.print(table)
    lines = render.skipped_target_lines(results) + render.failure_lines(results) + render.mistrusted_lines(results)
    for line in lines:
        say(out, line)


def verdict_line(code: int, reason: str, suffix: str = "") -> None:
    say(out, Text.assemble((reason, VERDICT_STYLE.get(code, "red")), suffix))


def write_and_finish(run: Run, report_dir: str, meta: dict[str, Any], extra: dict[str, Any] | None = None,
                     fmt: str = "console") -> int:
    """Write the reports of a judged run (its verdict stored in them), print the verdict line,
    and return the exit code. The tables are already on the console: if the reports cannot be
    written after all, say so in one sentence and return non-zero (1 unless the verdict is worse)."""
    from .reports import write_reports

    meta = {**meta, "verdict": run.verdict_json(), "complete": run.complete, "cases_judged": run.cases_judged}
    if not run.complete:
        for line in render.stopped_early_lines(run.cases_judged, meta.get("cases")):
            say(out, line)
    try:
        run_dir = write_reports(run.results, report_dir, meta, extra)
    except OSError as exc:
        print_error(f"the reports could not be written to {report_dir!r} ({exc.strerror or exc}); "
                    f"the verdict was: {run.reason}")
        return run.exit_code or 1
    publish_format(fmt, run_dir)
    verdict_line(run.exit_code, run.reason, f" — {render.plural(len(run.results), 'result')}, reports in {run_dir}")
    return run.exit_code


def publish_format(fmt: str, run_dir: Path) -> None:
    """GitHub annotations and step summary when ``--format`` asks for them (see reports.github)."""
    from .reports import github, load_document

    if github.wanted(fmt):
        github.publish(load_document(run_dir), run_dir, lambda line: say(out, line))


def print_case_results(results: Iterable[CaseResult], per_step: bool) -> list[CaseResult]:
    """The full per-tensor table of each row as it comes (``check`` and ``repro``); the rows."""
    shown = []
    for result in results:
        shown.append(result)
        title, table, tolerances = render.tensor_table(result)
        say(out, title)
        if result.tensors:
            out.print(table)
            if tolerances:
                say(out, tolerances)
        # A failed comparison is the table itself; other checks, errors and skips explain themselves.
        if result.message and (result.status != "fail" or result.check != "reference"):
            say(out, Text.assemble((result.status, render.STATUS_STYLE.get(result.status, "")), ": ",
                                   result.message))
        if result.traceback:
            say(out, "target traceback (most recent call last):")
            say(out, result.traceback)
        if per_step and (timed := render.worst_time_tensor(result)) is not None:
            out.print(render.per_step_table(timed))
        say(out, f"reproduce: {result.repro}")
    return shown
