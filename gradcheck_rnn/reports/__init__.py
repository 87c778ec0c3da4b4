"""Report files of a run, one writer per format, each rendering one results document.

A run folder ``<report dir>/<run>/`` holds ``results.json`` (:mod:`.json`, the document
itself), ``junit.xml`` (:mod:`.junit`), ``report.md`` (:mod:`.markdown`) and ``report.html``
(:mod:`.html`); :mod:`.github` prints annotations for GitHub Actions. Every file is rendered
into a hidden staging folder beside the run folder, which is then renamed into place, so a crash,
Ctrl-C or SIGKILL leaves either the complete run or no run (at most a hidden
``.<run>.<pid>@<host>.*`` staging folder, which the next run that writes into the same report dir
removes once its writer is gone, saying so on stderr: :mod:`gradcheck_rnn.rows.store`). Rows go
to the staging folder's ``results.jsonl`` first and results.json is written from there one row at
a time (:class:`~gradcheck_rnn.rows.store.RowLog`). ``<report dir>/latest`` then names the newest
complete run: a relative symlink, or a one-line file holding the run's folder name where symlinks
cannot be made. :func:`publish` does all of it for a judged run, in this module alone: the
writers (one registry of records, :data:`WRITERS`), the rename and ``latest``; the console renders
the same stored run (:func:`gradcheck_rnn.reports.console.print_stored_run`).

What every writer is handed is one :class:`StoredRun`, made here once per run: the document's top
level, its rows as the store hands them over, and its failing rows and findings (worst first).
A writer receives what it renders; it never goes back to the store or the document for rows.
"""

from __future__ import annotations

import io
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable, Iterable

from ..errors import UsageError
from ..model.numbers import fmt, from_json_number
from ..model.statuses import failure_order, is_shown
from ..rows.result import CaseResult
from ..rows.store import ROWS_FILE, RowLog, Run, clear_stale_staging, run_name  # noqa: F401  (run_name: its old place)
from . import html, json, junit, markdown
from .document import convention_of, document_head, failing_tensors, load_document, results_document

__all__ = ["WRITERS", "Published", "RowLog", "StoredRun", "Writer", "clear_stale_staging", "failing_rows",
           "failures", "finding_rows_text", "findings", "latest_run", "load_document", "message_shown", "publish",
           "rerender", "resolve_run_dir", "results_document", "run_name", "whole", "write_reports"]


@dataclass(frozen=True)
class StoredRun:
    """A run as stored, as every writer (the console included) receives it: the results
    document's top level (``head``: every key but ``"results"``), its rows (``rows``: every stored
    row in case order, the run's store's :class:`~gradcheck_rnn.rows.store.StoredRows` or
    results.json's list), the rows that did not pass or skip, worst first (``failing``,
    :func:`failing_rows`), and their findings (``findings``, :func:`findings`), each made once."""

    head: dict[str, Any]
    rows: Iterable[dict[str, Any]]
    failing: list[dict[str, Any]]
    findings: list[dict[str, Any]]

    @classmethod
    def of(cls, document: dict[str, Any]) -> StoredRun:
        """The stored run of a results document (its rows under ``"results"``)."""
        rows = document["results"]
        failing = failing_rows(rows)
        return cls({key: value for key, value in document.items() if key != "results"}, rows, failing,
                   findings(failing))

    @property
    def document(self) -> dict[str, Any]:
        """The results document: the top level and the rows."""
        return {**self.head, "results": self.rows}


def failures(document: dict[str, Any]) -> list[dict[str, Any]]:
    """The document's rows that did not pass or skip, worst first (:func:`failing_rows`)."""
    return failing_rows(document["results"])


def failing_rows(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Stored rows that did not pass or skip (out-of-contract ones last), worst first (:func:`gradcheck_rnn.model.statuses.failure_order`),
    for the console and every report; a run's row log hands them over as kept when they arrived,
    without reading every row again."""
    bad = list(rows.failing) if hasattr(rows, "failing") else [r for r in rows if is_shown(r["status"])]
    return sorted(bad, key=lambda r: failure_order(r["status"], from_json_number(r.get("worst_ratio")), r["case_id"],
                                                   r["target"], r.get("check", "")))


def findings(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows that did not pass, grouped into one finding per case × target × cause, worst first:
    ``{"row": the worst row, "others": the rest of its rows, "cause": the cause in words, "message":
    the row's message where a report shows it (:func:`message_shown`), else "", "also": the other
    rows in one line (:func:`finding_rows_text`), else ""}``, so that a writer needs no more. Rows of
    one case and target fail for one cause when they fail the same way: outside the same contract,
    by the same error, by a disagreement of the references, or on wrong (or non-deterministic)
    values, which the checks see one way each. Every writer shows findings (and a cause that is not
    ""); the counts by row stay in the tallies."""
    groups: dict[tuple[str, str, str], dict[str, Any]] = {}
    for row in failing_rows(rows):  # worst first: a group's first row is its worst
        key = (row["case_id"], row["target"], _cause_kind(row))
        if key in groups:
            groups[key]["others"].append(row)
        else:
            groups[key] = {"row": row, "others": []}
    for finding in groups.values():
        row, others = finding["row"], finding["others"]
        finding.update(cause=_cause(row, others), message=row["message"] if message_shown(row) else "",
                       also=finding_rows_text(others) if others else "")
    return list(groups.values())


def finding_rows_text(others: list[dict[str, Any]]) -> str:
    """The other rows of a finding in one line: ``also: linearity fail (l0.fwd.w_q 5e+03), …``."""
    parts = []
    for row in others:
        name, ratio = row.get("worst_tensor"), row.get("worst_ratio")
        parts.append(f"{row.get('check', 'reference')} {row['status']}" + (f" ({name} {fmt(ratio)})" if name else ""))
    return "also: " + "; ".join(parts)


def message_shown(row: dict[str, Any]) -> bool:
    """Whether a report shows a row's message: an out-of-contract row's (the contract's statement),
    or one without failing tensors (a fail's message only repeats its tensor lines)."""
    return bool(row.get("message")) and (row["status"] == "out-of-contract" or not failing_tensors(row.get("tensors", ())))


def _cause_kind(row: dict[str, Any]) -> str:
    status = row["status"]
    if status == "error":
        return f"error: {row.get('message', '')}"
    return {"out-of-contract": "contract", "reference-disagreement": "disagreement"}.get(status, "wrong")


def _cause(row: dict[str, Any], others: list[dict[str, Any]]) -> str:
    """The root cause of a finding, as far as its rows tell it; "" for one row that fails on wrong
    values under no convention (its tensor lines say all there is)."""
    status = row["status"]
    if status == "out-of-contract":
        return row.get("message", "").split("): ", 1)[0] + ")"
    if status == "error":
        return "the target raised or its process ended"
    if status == "reference-disagreement":
        return "the float64 references disagree with each other (never the target's fault)"
    rows = [row, *others]
    tensors = list(dict.fromkeys(t["name"] for r in rows for t in failing_tensors(r.get("tensors", ())) if t["status"] != "out-of-contract"))
    words = lambda names: ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    if all(r["status"] == "nondeterministic" for r in rows):
        cause = f"two runs of the same case differ in {words(tensors)}"
    elif all("non-finite" in t.get("message", "") for r in rows for t in failing_tensors(r.get("tensors", ()))
             if t["status"] != "out-of-contract") and tensors:
        cause = f"non-finite values in {words(tensors)}"
    elif tensors and set(tensors) <= {"h0", "c0"}:
        cause = f"an initial-state gradient is wrong ({words(tensors)}); the outputs and the other gradients are right"
    elif tensors and not set(tensors) & {"y", "hy", "cy", "x", "h0", "c0"}:
        cause = f"parameter gradients are wrong ({words(tensors)}); the outputs and the input gradients are right"
    else:  # nothing more to say of one row than its tensor lines say
        cause = f"wrong values in {words(tensors) or 'its outputs'}" if others else ""
    convention = convention_of(row["case_id"])
    if convention:
        cause = (cause or "wrong values") + f", judged under the target's convention {convention}"
    return cause


@dataclass(frozen=True)
class Writer:
    """One report file of a run: a name, its file name in the run folder, and the function that
    writes it from the stored run (a :class:`StoredRun`) into a stream (row by row where the rows
    are many: :func:`json.write`, :func:`junit.write`; :func:`whole` makes one of a function of
    the results document). It reads the stored verdict and tallies and never recomputes them. A
    new format is one entry in :data:`WRITERS`."""

    name: str
    file_name: str
    write: Callable[[Any, IO[bytes]], Any]

    def render(self, run: StoredRun | dict[str, Any]) -> bytes:
        """The file's bytes, of a stored run or a results document."""
        buffer = io.BytesIO()
        self.write(run if isinstance(run, StoredRun) else StoredRun.of(run), buffer)
        return buffer.getvalue()


def whole(render: Callable[[dict[str, Any]], bytes]) -> Callable[[StoredRun, IO[bytes]], Any]:
    """A writer's function from one that renders the whole file as bytes from the results
    document (results.json's object)."""
    return lambda run, stream: stream.write(render(run.document))


# The one registry of report files, by file name; results.json first, so that a re-render reads
# what the others were made from.
WRITERS: dict[str, Writer] = {writer.file_name: writer for writer in (
    Writer("json", "results.json", json.write), Writer("junit", "junit.xml", junit.write),
    Writer("markdown", "report.md", markdown.write), Writer("html", "report.html", html.write))}
LATEST = "latest"


@dataclass
class Published:
    """A judged run as stored: the stored run (what every writer renders, the console included)
    and its run folder, or the error that kept its files from being written (the stored run and
    the run's verdict stand either way; None when not even the document was made)."""

    stored: StoredRun | None
    run_dir: Path | None = None
    unwritten: OSError | None = None

    @property
    def document(self) -> dict[str, Any] | None:
        """The results document (results.json's object), None when it was not made."""
        return None if self.stored is None else self.stored.document


def publish(run: Run, log: RowLog, meta: dict[str, Any]) -> Published:
    """Publish a judged run from its row log: results.json's top level is ``meta`` (the spec's:
    :meth:`~gradcheck_rnn.run.spec.RunSpec.meta`) with the run's one verdict, how far it got and
    what its observers and verdict's rule stored beside the rows (:attr:`Run.extra`); every
    report file written in the staging folder, renamed into place, ``latest`` updated. An error
    that keeps the files from being written is returned, not raised, and leaves no folder."""
    meta = {**meta, "verdict": run.verdict_json(), "complete": run.complete, "cases_judged": run.cases_judged,
            "interrupted": run.interrupted, **({} if run.seconds is None else {"seconds": round(run.seconds, 3)})}
    stored = None
    try:
        stored = StoredRun.of({**document_head(meta, run.totals, run.extra or None), "results": log.rows()})
        return Published(stored, write_stored(stored, log))
    except OSError as exc:
        log.discard()
        return Published(stored, unwritten=exc)


def write_reports(results: list[CaseResult], report_dir: str | os.PathLike[str], meta: dict[str, Any],
                  extra: dict[str, Any] | None = None, log: RowLog | None = None) -> Path:
    """Write every report file of ``results`` into ``<report_dir>/<run>/`` atomically; return that
    folder. ``log``: the run's :class:`~gradcheck_rnn.rows.store.RowLog` when the rows were stored
    in it as they arrived (it holds ``results`` already); without one, one is made here (which
    clears stale staging folders) and given the rows."""
    if log is None:
        log = RowLog(report_dir, run_name(meta.get("command", "run"), meta.get("seed")))
        try:
            for result in results:
                log.add(result)
        except BaseException:
            log.discard()
            raise
    try:
        document = results_document(results, meta, extra, rows=log.rows(), totals=log.tally.document_part())
    except BaseException:
        log.discard()
        raise
    return write_stored(StoredRun.of(document), log)


def write_stored(stored: StoredRun, log: RowLog) -> Path:
    """Write every file of :data:`WRITERS` from the stored run into the log's staging folder,
    rename it into place and update ``latest``; the run folder. Results.json is written row by row
    from the log's file (the stored run's rows are the log's :class:`~gradcheck_rnn.rows.store.StoredRows`)."""
    try:
        log.close()
        _write_files(log.staging, stored)
        final = _rename_into_place(log)
    except BaseException:
        log.discard()
        raise
    update_latest(log.root, final)
    return final


def _write_files(staging: Path, stored: StoredRun) -> None:
    """Render every report file into the staging folder, each writer handed the stored run.

    Each file appears under its name only once complete (written as ``.<name>.part``, then
    renamed), so a staging folder left by a killed run never holds a torn report."""
    for file_name, writer in WRITERS.items():
        part = staging / f".{file_name}.part"
        with open(part, "wb") as stream:
            writer.write(stored, stream)
        os.replace(part, staging / file_name)


def _rename_into_place(log: RowLog) -> Path:
    """Drop the log's row file and rename its staging folder to the first free run name."""
    log.close()
    (log.staging / ROWS_FILE).unlink(missing_ok=True)
    suffix = 1
    while True:
        final = log.root / (log.run if suffix == 1 else f"{log.run}-{suffix}")
        if not final.exists():
            try:
                os.rename(log.staging, final)
                return final
            except OSError:
                if not final.exists():  # not a race with another run of the same second
                    raise
        suffix += 1


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def update_latest(root: Path, run_dir: Path) -> None:
    """Point ``<root>/latest`` at ``run_dir`` atomically (replace, never delete first)."""
    link = root / LATEST
    temporary = root / f".{LATEST}.{os.getpid()}.{time.monotonic_ns()}"
    try:
        os.symlink(run_dir.name, temporary, target_is_directory=True)
    except (OSError, NotImplementedError):
        temporary.write_text(run_dir.name + "\n", encoding="utf-8")
    try:
        os.replace(temporary, link)
    except OSError:
        temporary.unlink(missing_ok=True)
        raise


def latest_run(report_dir: str | os.PathLike[str]) -> Path | None:
    """The run folder that ``<report_dir>/latest`` names, or None when there is none."""
    link = Path(report_dir) / LATEST
    if link.is_symlink() or link.is_dir():
        return link.resolve() if link.exists() else None
    if link.is_file():
        target = Path(report_dir) / link.read_text(encoding="utf-8").strip()
        return target if target.is_dir() else None
    return None


def resolve_run_dir(path: str | os.PathLike[str]) -> Path:
    """A run folder from what a user typed: the folder, ``<report dir>/latest`` or the report dir."""
    path = Path(path)
    if path.name == LATEST and not path.is_dir() and path.is_file():
        resolved = latest_run(path.parent)
    elif path.is_dir() and not (path / "results.json").exists() and (path / LATEST).exists():
        resolved = latest_run(path)
    else:
        resolved = path
    if resolved is None or not resolved.is_dir():
        raise UsageError(f"{path} is not a run folder; give <report dir>/<run> or <report dir>/latest")
    return resolved


def rerender(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Re-render every report file of a run from its results.json alone (each file replaced
    atomically); return the document."""
    run_dir = resolve_run_dir(run_dir)
    document = load_document(run_dir)
    stored = StoredRun.of(document)
    for file_name, writer in WRITERS.items():
        if file_name == "results.json":
            continue
        data = writer.render(stored)
        handle, temporary = tempfile.mkstemp(prefix=f".{file_name}.", dir=run_dir)
        try:
            with os.fdopen(handle, "wb") as stream:
                stream.write(data)
            os.chmod(temporary, 0o666 & ~_umask())  # mkstemp makes it private; report files are not
            os.replace(temporary, run_dir / file_name)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    return document
