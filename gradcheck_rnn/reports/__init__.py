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
"""

from __future__ import annotations

import io
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable

from ..errors import UsageError
from ..rows.result import CaseResult
from . import html, json, junit, markdown
from .document import load_document, results_document
from ..rows.store import ROWS_FILE, RowLog, Run, clear_stale_staging, run_name  # noqa: F401  (run_name: its old place)

__all__ = ["WRITERS", "Published", "RowLog", "Writer", "clear_stale_staging", "latest_run", "load_document",
           "publish", "rerender", "resolve_run_dir", "results_document", "run_name", "whole", "write_reports"]


@dataclass(frozen=True)
class Writer:
    """One report file of a run: a name, its file name in the run folder, and the function that
    writes it from the results document into a stream (row by row where the rows are many:
    :func:`json.write`, :func:`junit.write`). It reads the stored verdict and tallies and never
    recomputes them. A new format is one entry in :data:`WRITERS`."""

    name: str
    file_name: str
    write: Callable[[dict[str, Any], IO[bytes]], Any]

    def render(self, document: dict[str, Any]) -> bytes:
        """The file's bytes."""
        buffer = io.BytesIO()
        self.write(document, buffer)
        return buffer.getvalue()


def whole(render: Callable[[dict[str, Any]], bytes]) -> Callable[[dict[str, Any], IO[bytes]], Any]:
    """A writer's function from one that renders the whole file as bytes."""
    return lambda document, stream: stream.write(render(document))


# The one registry of report files, by file name; results.json first, so that a re-render reads
# what the others were made from.
WRITERS: dict[str, Writer] = {writer.file_name: writer for writer in (
    Writer("json", "results.json", json.write), Writer("junit", "junit.xml", junit.write),
    Writer("markdown", "report.md", whole(markdown.render)), Writer("html", "report.html", whole(html.render)))}
LATEST = "latest"


@dataclass
class Published:
    """A judged run as stored: its results document (what every writer renders, the console
    included) and its run folder, or the error that kept its files from being written (the
    document and the run's verdict stand either way; None when not even the document was made)."""

    document: dict[str, Any] | None
    run_dir: Path | None = None
    unwritten: OSError | None = None


def publish(run: Run, log: RowLog, meta: dict[str, Any]) -> Published:
    """Publish a judged run from its row log: results.json's top level is ``meta`` (the spec's:
    :meth:`~gradcheck_rnn.run.spec.RunSpec.meta`) with the run's one verdict, how far it got and
    what its observers and verdict's rule stored beside the rows (:attr:`Run.extra`); every
    report file written in the staging folder, renamed into place, ``latest`` updated. An error
    that keeps the files from being written is returned, not raised, and leaves no folder."""
    meta = {**meta, "verdict": run.verdict_json(), "complete": run.complete, "cases_judged": run.cases_judged,
            "interrupted": run.interrupted, **({} if run.seconds is None else {"seconds": round(run.seconds, 3)})}
    document = None
    try:
        document = results_document(run.results, meta, run.extra or None, rows=log.rows(), totals=run.totals)
        return Published(document, write_document(document, log))
    except OSError as exc:
        log.discard()
        return Published(document, unwritten=exc)


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
    return write_document(document, log)


def write_document(document: dict[str, Any], log: RowLog) -> Path:
    """Write every file of :data:`WRITERS` from ``document`` into the log's staging folder, rename
    it into place and update ``latest``; the run folder. Results.json is written row by row from
    the log's file (the document's rows are the log's :class:`~gradcheck_rnn.rows.store.StoredRows`)."""
    try:
        log.close()
        _write_files(log.staging, document)
        final = _rename_into_place(log)
    except BaseException:
        log.discard()
        raise
    update_latest(log.root, final)
    return final


def _write_files(staging: Path, document: dict[str, Any]) -> None:
    """Render every report file into the staging folder.

    Each file appears under its name only once complete (written as ``.<name>.part``, then
    renamed), so a staging folder left by a killed run never holds a torn report."""
    for file_name, writer in WRITERS.items():
        part = staging / f".{file_name}.part"
        with open(part, "wb") as stream:
            writer.write(document, stream)
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
    for file_name, writer in WRITERS.items():
        if file_name == "results.json":
            continue
        data = writer.render(document)
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
