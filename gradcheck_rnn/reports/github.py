"""``--format github``: workflow-command annotations and the job's step summary.

GitHub shows at most 10 error annotations per step, so at most ``ANNOTATION_CAP`` failing rows
(worst first) become ``::error`` lines and one plain line counts the rest; a run stopped early
(--fail-fast) adds a ``::warning`` saying how far it got. Each error line is

    ::error title=gradcheck-rnn <status>%3A <target> [<check>]::<case id>: <tensor lines>%0Areproduce: <repro>

with GitHub's escaping: ``%``, CR and LF in the message; also ``:`` and ``,`` in the title.
When ``$GITHUB_STEP_SUMMARY`` names a file, the markdown summary is appended to it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Mapping

from . import markdown
from . import StoredRun, failures
from .document import case_lengths, failing_tensors, progress_note, strict_contracts, tensor_line

ANNOTATION_CAP = 10
SUMMARY_FAILURES = 20  # failures detailed in the step summary (GitHub caps it at 1 MiB)


def escape_data(text: str) -> str:
    """Escape a workflow-command message."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """Escape a workflow-command property value (title=…)."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(row: dict[str, Any], strict: bool = False) -> str:
    """The ``::error`` line of one failing row; ``::warning`` for an out-of-contract row of a run
    whose contracts are not strict (it does not fail the run)."""
    title = f"gradcheck-rnn {row['status']}: {row['target']} [{row.get('check', 'reference')}]"
    lengths = case_lengths(row["case_id"])[0]
    details = [tensor_line(t, row.get("check", "reference"), lengths) for t in failing_tensors(row.get("tensors", ()))[:3]] \
        or [row.get("message") or row["status"]]
    if row["status"] == "out-of-contract":
        details.insert(0, row.get("message", ""))
    level = "warning" if row["status"] == "out-of-contract" and not strict else "error"
    message = f"{row['case_id']}: " + "\n".join(details) + f"\nreproduce: {row['repro']}"
    return f"::{level} title={escape_property(title)}::{escape_data(message)}"


def annotations(document: dict[str, Any], run_dir: str | os.PathLike[str] | None = None) -> list[str]:
    """Annotation lines for the worst failing rows, then one plain line counting the rest."""
    bad = failures(document)
    lines = [annotation(row, strict_contracts(document)) for row in bad[:ANNOTATION_CAP]]
    if (stopped := progress_note(document)) is not None:
        lines.append(f"::warning title={escape_property('gradcheck-rnn stopped early')}::{escape_data(stopped)}")
    if len(bad) > ANNOTATION_CAP:
        where = f"; see {Path(run_dir) / 'report.html'}" if run_dir is not None else ""
        lines.append(f"gradcheck-rnn: {len(bad) - ANNOTATION_CAP} more failing results are not annotated{where}")
    return lines


def step_summary(document: dict[str, Any], run_dir: str | os.PathLike[str] | None = None) -> str:
    """The markdown for ``$GITHUB_STEP_SUMMARY``: the report, with fewer failures detailed."""
    text = markdown.render(StoredRun.of(document), limit=SUMMARY_FAILURES).decode("utf-8")
    return text + (f"\nReports: `{run_dir}`\n" if run_dir is not None else "")


def publish(document: dict[str, Any], run_dir: str | os.PathLike[str] | None, echo: Callable[[str], None],
            environ: Mapping[str, str] = os.environ) -> None:
    """Print the annotations through ``echo`` and append the step summary where GitHub asks for it."""
    for line in annotations(document, run_dir):
        echo(line)
    summary_file = environ.get("GITHUB_STEP_SUMMARY")
    if summary_file:
        try:
            with open(summary_file, "a", encoding="utf-8") as handle:
                handle.write(step_summary(document, run_dir))
        except OSError as exc:  # the reports are written; a missing summary must not hide the verdict
            echo(f"::warning title=gradcheck-rnn::cannot append to $GITHUB_STEP_SUMMARY ({escape_data(str(exc))})")


def wanted(fmt: str, environ: Mapping[str, str] = os.environ) -> bool:
    """Whether ``--format fmt`` asks for GitHub output (``auto``: inside GitHub Actions)."""
    return fmt == "github" or (fmt == "auto" and environ.get("GITHUB_ACTIONS") == "true")
