"""A run's rows on disk as they arrive, and the run folder built from them.

A :class:`RowLog` opens the run's hidden staging folder ``<report dir>/.<run>.<pid>@<host>.<random>``
when the run starts and appends each result row to ``results.jsonl`` there as it arrives, in the
strict-JSON form results.json gives it (:func:`gradcheck_rnn.rows.result.document_row`). At the end,
:func:`gradcheck_rnn.reports.publish` writes ``results.json`` and the other report files into the same folder
from that file, rows in case order, and renames the folder into place: a crash, Ctrl-C or SIGKILL
leaves either the complete run or no run (only the hidden staging folder, which the next run
clears, see :func:`clear_stale_staging`).

Why rows go to disk: the document of a large run does not fit in memory twice over (rendered
from rows held in memory, the supervisor's peak RSS grew by tens of kB per row). Streamed,
results.json and junit.xml are written row by row from the file, and no list of every row's
JSON is ever built (``benchmarks/memory.py``; figures in benchmarks/RESULTS.md, "Memory").
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import sys
import tempfile
import time
from array import array
from pathlib import Path
from typing import IO, Any, Callable, Iterator

from ..model.statuses import is_shown
from .tally import Tally
from .result import CaseResult, stored_form, stored_row

STALE_AFTER = 24 * 3600  # seconds without a write after which any staging folder is stale
# .<run>.<pid>@<host>.<random>; <run> is run_name()'s <YYYYmmdd-HHMMSS>-<command>[-s<seed>], no dots.
_STAGING = re.compile(r"^\.(?P<run>[^.]+)\.(?P<pid>\d+)@(?P<host>[A-Za-z0-9-]*)\.(?P<random>[A-Za-z0-9_]+)$")
# What versions before the pid was in the name left: .<run>.<random> (mkdtemp's 8 characters).
_OLD_STAGING = re.compile(r"^\.\d{8}-\d{6}-[^.]+\.[a-z0-9_]{8}$")
ROWS_FILE = "results.jsonl"


def run_name(command: str, seed: int | None) -> str:
    """``<YYYYmmdd-HHMMSS>-<command>[-s<seed>]``: sorts by time, says what ran."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{command}" + ("" if seed is None else f"-s{seed}")


def host_name() -> str:
    """This machine's name as a staging folder carries it: letters, digits and dashes only."""
    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:40]


def staging_prefix(run: str) -> str:
    """``.<run>.<pid>@<host>.``: who writes the staging folder, so that the next run can tell a
    folder whose writer is gone (the pid is only meaningful on its own host)."""
    return f".{run}.{os.getpid()}@{host_name()}."


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def _last_write(folder: Path) -> float:
    """The newest mtime of the folder and its files (a run appending rows keeps its folder fresh)."""
    newest = folder.stat().st_mtime
    for entry in folder.iterdir():
        try:
            newest = max(newest, entry.stat().st_mtime)
        except OSError:
            pass
    return newest


def clear_stale_staging(root: Path, now: float | None = None) -> list[str]:
    """Remove the staging folders under ``root`` that no run will finish; their names.

    Stale: written by a process of this host that no longer exists, or not written for
    :data:`STALE_AFTER` seconds (a writer on another host sharing the folder, or an old-style
    name without a pid). A live run's folder is never touched.
    """
    now = time.time() if now is None else now
    host = host_name()
    removed = []
    try:
        entries = list(root.iterdir())
    except OSError:
        return removed
    for entry in entries:
        match = _STAGING.match(entry.name)
        if not (match or _OLD_STAGING.match(entry.name)) or entry.is_symlink() or not entry.is_dir():
            continue
        try:
            gone = bool(match) and match["host"] == host and not _process_alive(int(match["pid"]))
            if gone or now - _last_write(entry) > STALE_AFTER:
                shutil.rmtree(entry)
                removed.append(entry.name)
        except OSError:  # another run cleared it first, or it cannot be removed: not ours to fix
            continue
    return removed


def say_cleared(root: Path, removed: list[str]) -> None:
    """The one stderr line about cleared staging folders."""
    if removed:
        print(f"gradcheck-rnn: removed {len(removed)} stale staging folder{'s' if len(removed) > 1 else ''} "
              f"in {root} (left by runs killed while writing): {', '.join(sorted(removed))}", file=sys.stderr)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


class StoredRows:
    """The rows of a :class:`RowLog`, read back from its file in case order, each time iterated.

    A sequence for the report writers: ``len``, and iteration that holds one row at a time.
    Rows are ordered by sweep index (a row without one keeps its place), and within a case in the
    order they arrived, which is the engine's order (a case's rows come from one worker in turn).
    """

    def __init__(self, path: Path, keys: array, offsets: array, in_order: bool,
                 failing: list[dict[str, Any]] | None = None) -> None:
        self.path, self.keys, self.offsets, self.in_order = path, keys, offsets, in_order
        self.failing = failing or []  # the rows that did not pass, kept whole as they arrived

    def __len__(self) -> int:
        return len(self.offsets)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (json.loads(line) for line in self.lines())

    def lines(self) -> Iterator[bytes]:
        """Each row's strict-JSON text as stored (one line, no newline), in case order: results.json
        copies them as they are instead of parsing and writing every row again."""
        with open(self.path, "rb") as stream:
            if self.in_order:
                for line in stream:
                    yield line.rstrip(b"\n")
                return
            import numpy as np

            # 8 bytes per row; stable, so a case's rows keep their arrival order.
            order = np.argsort(np.frombuffer(self.keys, dtype=np.int64), kind="stable")
            for i in order:
                stream.seek(self.offsets[int(i)])
                yield stream.readline().rstrip(b"\n")


class KeptRows:
    """A run's store in memory (:class:`~gradcheck_rnn.run.RunStore`): every row kept as it
    arrived, and their tally (of their stored form, as the row log makes it). The store of a run
    that writes no run folder: ``gr.sweep``, ``gr.check``, ``check``, ``calibrate``, ``shrink``."""

    def __init__(self) -> None:
        self.tally = Tally()
        self.kept: list[CaseResult] = []

    def on_row(self, row: CaseResult) -> None:
        """Count and keep one finished row."""
        self.tally.add(stored_row(row))
        self.kept.append(row)


class RowLog:
    """A run being written (:class:`~gradcheck_rnn.run.RunStore`): its staging folder, its rows
    appended to ``results.jsonl`` and their tally, and the rows that did not pass kept in memory.

    Make it when the run starts (this clears stale staging folders and says so on stderr), hand
    it each row as it arrives (:meth:`on_row`; :meth:`add` stores a row without keeping it), then have it published once
    (:func:`gradcheck_rnn.reports.publish` writes the files into :attr:`staging` and renames it
    into place), or :meth:`discard` it.
    """

    def __init__(self, report_dir: str | os.PathLike[str], run: str,
                 notify: Callable[[Path, list[str]], None] = say_cleared) -> None:
        self.root = Path(report_dir)
        self._made_root = not self.root.exists()  # a run that ends in an error leaves no folder it made
        self.root.mkdir(parents=True, exist_ok=True)
        notify(self.root, clear_stale_staging(self.root))
        self.run = run
        self.staging = Path(tempfile.mkdtemp(prefix=staging_prefix(run), dir=self.root))
        os.chmod(self.staging, 0o777 & ~_umask())  # mkdtemp makes it private; the run folder is not
        self._stream: IO[bytes] | None = open(self.staging / ROWS_FILE, "wb")
        self.tally = Tally()  # the run's totals, from exactly the rows written here
        self._failing: list[dict[str, Any]] = []  # rows that did not pass: the reports detail them
        self.kept: list[CaseResult] = []  # the same rows as objects: the judged run's results
        self._keys = array("q")  # sweep index per row (-1: none)
        self._offsets = array("q")  # where each row starts in the file
        self._size = 0
        self._in_order = True

    def __len__(self) -> int:
        return len(self._offsets)

    def add(self, result: CaseResult) -> None:
        """Append one row (a CaseResult) as the document will hold it."""
        if self._stream is None:
            raise ValueError("this run was already published or discarded")
        row, line = stored_form(result)
        self.tally.add(row)
        if is_shown(row["status"]):
            self._failing.append(row)
        key = -1 if result.case_index is None else int(result.case_index)
        self._in_order = self._in_order and (not self._keys or self._keys[-1] <= key)
        self._keys.append(key)
        self._offsets.append(self._size)
        self._stream.write(line)
        self._size += len(line)

    def on_row(self, row: CaseResult) -> None:
        """Store one finished row, and keep it in memory when it did not pass."""
        self.add(row)
        if is_shown(row.status):
            self.kept.append(row)

    def rows(self) -> StoredRows:
        """Every row added so far, in case order (flushes the file first)."""
        if self._stream is not None:
            self._stream.flush()
        return StoredRows(self.staging / ROWS_FILE, self._keys, self._offsets, self._in_order, self._failing)

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    def discard(self) -> None:
        """Remove the staging folder (an error or Ctrl-C before the run was published)."""
        self.close()
        shutil.rmtree(self.staging, ignore_errors=True)
        if self._made_root:
            try:
                self.root.rmdir()  # only if empty: nothing else was written there meanwhile
            except OSError:
                pass
