"""The run's store: its rows on disk (or in memory) as they arrive, their one tally, and the one
verdict read from that tally.

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

The run's totals (:class:`Tally`) are made here, once, as each row is stored, from its stored form
(a results.json row): the console's summary tables, results.json's ``summary``, ``mistrusted``,
``by_mode`` and ``by_wants``, and every report read these tallies, made from exactly the rows the
store holds, never recomputed from other objects. A tally keeps counts and, per target × group ×
case, a set of statuses: no row is held.

The run's one verdict (:func:`conclude`: its exit code, its one-sentence reason and why it
stopped) is made here too, once the last row is stored, from the store's tally: whatever made the
run (a sweep, a merge of shards, a detection run, a calibration, a run a signal stopped),
:func:`conclude` is the only place a :class:`Run` gets its exit code and reason. The engine
(:func:`gradcheck_rnn.run.judge_run`, and the merge) calls it once; results.json stores the
verdict and every writer, the console included, reads the stored value. Exit codes:
docs/contracts.md, "Exit codes".
"""

from __future__ import annotations

import enum
import json
import math
import os
import re
import shutil
import socket
import sys
import tempfile
import time
from array import array
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Iterator, Protocol

from ..model.compare import tensor_summary
from ..model.numbers import plural
from ..model.statuses import BAD_STATUSES, JUDGED, PASSED, SEVERITY, STATUSES, failing_statuses, is_shown
from .result import CaseResult, document_row, row_field, row_worst, stored_form, stored_row

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


# The run's totals: one tally, made as the rows are stored.

GROUP_KEYS = ("mode", "wants")


# A case's statuses as the bits of one small int: a set per case × target was most of a large
# run's tally (benchmarks/memory.py).
_BIT = {status: 1 << i for i, status in enumerate(STATUSES)}


# What a case id says beyond the kind of case it is: its sizes, its lengths (but whether one is 0)
# and its seed, each set to one value so that a run's case shapes stay few whatever its size.
_SIZES = ((re.compile(r"-I\d+-H\d+"), "-I0-H0"), (re.compile(r"-T\d+-B\d+"), "-T0-B0"),
          (re.compile(r"-s\d+"), "-s0"))
_LENGTHS = re.compile(r"-len([0-9.]+)")


def case_shape(case_id: str) -> str:
    """The case id with its sizes, lengths and seed set to one value (a zero length kept as one):
    the same grammar, read by the "next:" hint (:func:`gradcheck_rnn.cli.advice.next_step`)."""
    for pattern, fixed in _SIZES:
        case_id = pattern.sub(fixed, case_id, count=1)
    return _LENGTHS.sub(lambda m: "-len0" if "0" in m[1].split(".") else "-len1", case_id, count=1)


def case_status(statuses: int) -> str:
    """One verdict for a case × target from all its check rows (their statuses as the bits of
    :data:`_BIT`): the most serious status wins."""
    for status in (*SEVERITY, "drifted", "pass"):
        if statuses & _BIT[status]:
            return status
    return "skip"


class Tally:
    """Counts of a run's rows, added one stored row (a dict) at a time."""

    def __init__(self) -> None:
        self.statuses: Counter[str] = Counter()
        self.tensors = self.compared = self.mistrusted_rows = 0
        # key -> (target, group value) -> {"cases": {case id: status bits}, "ratio": worst or None}
        self.groups: dict[str, dict[tuple[str, str], dict[str, Any]]] = {key: {} for key in GROUP_KEYS}
        self.per_target: Counter[str] = Counter()
        self.skips: dict[str, Counter[str]] = {}  # target -> skip reason -> rows
        self.checks: dict[str, dict[str, Counter[str]]] = {}  # target -> check -> status -> rows
        # target -> (refused, judged): the case shapes of its reference rows, for a green run's "next:" note
        self.coverage: dict[str, tuple[Counter[str], Counter[str]]] = {}

    @classmethod
    def of(cls, rows: Iterable[dict[str, Any]]) -> "Tally":
        tally = cls()
        for row in rows:
            tally.add(row)
        return tally

    @classmethod
    def of_results(cls, results: Iterable[Any]) -> "Tally":
        """The tally of CaseResult objects, through their stored form (as the row log makes it)."""
        return cls.of(document_row(result) for result in results)

    def add(self, row: dict[str, Any]) -> None:
        """Count one results.json row."""
        status, target = row["status"], row["target"]
        self.statuses[status] += 1
        self.per_target[target] += 1
        if status == "skip":
            self.skips.setdefault(target, Counter())[row.get("message") or "no reason given"] += 1
        self.checks.setdefault(target, {}).setdefault(row.get("check", "reference"), Counter())[status] += 1
        if row.get("check", "reference") == "reference":  # only reference rows say whether it took the case
            refused, judged = self.coverage.setdefault(target, (Counter(), Counter()))
            (refused if status == "skip" else judged)[case_shape(row["case_id"])] += 1
        compared = [t for t in map(tensor_summary, row.get("tensors", ())) if t[1] != "missing"]
        mistrusted = sum(t[3] for t in compared)
        self.compared += len(compared)
        self.tensors += mistrusted
        self.mistrusted_rows += bool(mistrusted)
        # the row's worst ratio counts when it judged the target; a fail without one (a shape,
        # a missing tensor, NaN) is as bad as it gets: inf. Disagreements measure the references.
        ratio = None
        worst, value = row_worst(row)
        if status in JUDGED and worst is not None:
            ratio = value if value == value else (math.inf if status == "fail" else None)
        for key in GROUP_KEYS:
            group = self.groups[key].setdefault((row["target"], row_field(row, key)), {"cases": {}, "ratio": None})
            cases = group["cases"]
            cases[row["case_id"]] = cases.get(row["case_id"], 0) | _BIT.get(status, 0)
            if ratio is not None:
                group["ratio"] = ratio if group["ratio"] is None else max(group["ratio"], ratio)

    @property
    def rows(self) -> int:
        """Rows counted."""
        return sum(self.statuses.values())

    @property
    def cases_judged(self) -> int:
        """Distinct case ids with at least one row."""
        return len(set().union(*(group["cases"] for group in self.groups["mode"].values())))

    def cases_per_target(self) -> Counter[str]:
        """Distinct cases judged per target: a case whose every row of the target is a skip does not count."""
        counts: Counter[str] = Counter()
        for (target, _), group in self.groups["mode"].items():
            counts[target] += sum(case_status(bits) != "skip" for bits in group["cases"].values())
        return counts

    def summary(self) -> dict[str, int]:
        """Row counts per status and the total (the verdict is the run's, stored apart)."""
        return {"total": sum(self.statuses.values()), **{s: self.statuses.get(s, 0) for s in STATUSES}}

    def mistrust(self) -> dict[str, int]:
        """How many compared tensors were mistrusted (zeros would have passed them), out of how
        many, and in how many rows: a run whose comparisons are mostly trivial shows here."""
        return {"tensors": self.tensors, "compared": self.compared, "results": self.mistrusted_rows}

    def breakdown(self, key: str) -> list[dict[str, Any]]:
        """Per target × ``key`` (``mode`` or ``wants``), sorted by both (rows of one run arrive in
        another order with more workers, and the totals must not depend on it): distinct cases, their verdicts over every check, and the worst ratio over every check that judged
        the target (a row that failed ``future`` at 538 must not hide behind a reference ratio
        of 0.0004)."""
        rows = []
        for (target, value), group in sorted(self.groups[key].items(), key=lambda item: item[0]):
            counts = Counter(case_status(statuses) for statuses in group["cases"].values())
            rows.append({"target": target, key: value, "cases": len(group["cases"]),
                         **{s: counts.get(s, 0) for s in STATUSES}, "worst_ratio": group["ratio"]})
        return rows

    def skip_reasons(self, top: int = 3) -> list[dict[str, Any]]:
        """Per target that skipped anything: rows skipped, rows in all, and the ``top`` most
        frequent reasons with their counts."""
        entries = []
        for target, counter in self.skips.items():
            common = counter.most_common(top)
            entries.append({"target": target, "skipped": sum(counter.values()), "total": self.per_target[target],
                            "reasons": [list(pair) for pair in common],
                            "other": sum(counter.values()) - sum(n for _, n in common)})
        return entries

    def by_check(self) -> list[dict[str, Any]]:
        """Per target, for each check: rows per status."""
        return [{"target": target, "checks": {check: dict(counts) for check, counts in checks.items()}}
                for target, checks in self.checks.items()]

    def document_part(self) -> dict[str, Any]:
        """The tallies as results.json stores them."""
        return {"summary": self.summary(), "mistrusted": self.mistrust(), "by_mode": self.breakdown("mode"),
                "by_wants": self.breakdown("wants"), "skips": self.skip_reasons(), "by_check": self.by_check()}


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


# The run's one verdict, read from its store's tally once the last row is stored.

EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_NOTHING_CHECKED = 0, 1, 2, 5
# An interrupted run exits as a shell reports a process ended by the signal: 128 + its number.
EXIT_INTERRUPTED = {"SIGINT": 130, "SIGTERM": 143}


class StopReason(enum.Enum):
    """Why a run stopped judging (as hypothesis's ``ExitReason``): every row judged, ``--fail-fast``
    after the first row that did not pass, or a signal."""

    COMPLETE = "complete"
    FAIL_FAST = "fail-fast"
    SIGINT = "SIGINT"
    SIGTERM = "SIGTERM"

    def describe(self) -> str:
        """One phrase for a reader: ``stopped by --fail-fast after the first row that did not pass``."""
        return {StopReason.COMPLETE: "every case judged",
                StopReason.FAIL_FAST: "stopped by --fail-fast after the first row that did not pass",
                StopReason.SIGINT: "interrupted by SIGINT",
                StopReason.SIGTERM: "interrupted by SIGTERM"}[self]

    @property
    def signal(self) -> str | None:
        """The signal's name when one stopped the run, else None."""
        return self.value if self in (StopReason.SIGINT, StopReason.SIGTERM) else None


def top_skip_reasons(skips: dict[str, Counter[str]], target: str | None = None, count: int = 2) -> str:
    """The most frequent skip reasons (of one target, or of all) in a tally's ``skips`` (target ->
    reason -> rows), e.g. ``'needs CUDA' ×40``."""
    reasons: Counter[str] = Counter()
    for name, counter in skips.items():
        if target in (None, name):
            reasons.update(counter)
    return "; ".join(f"{reason!r} ×{n}" for reason, n in reasons.most_common(count))


def tally_verdict(tally: Any, named_targets: Iterable[str] = (), drift: dict[str, Any] | None = None,
                  strict_contracts: bool = False) -> tuple[int, str]:
    """The exit code of a judging command and its one-sentence reason (docs/contracts.md, "Exit
    codes"), from the run's :class:`~gradcheck_rnn.rows.store.Tally`: no row need be held.

    0 all passed (skips allowed); 1 any fail, error, reference disagreement or non-determinism,
    or a drifted row with ``--fail-on-drift``, or an out-of-contract row with ``--strict-contracts``; 5 nothing was checked — no result, every result a
    skip, a target named on the command line judged on no case at all, or, with
    ``--fail-on-drift``, no row compared with the baseline (a vacuous run is never "all passed").
    1 wins over 5. Drifted rows without ``--fail-on-drift`` pass, with a warning, and so do
    out-of-contract rows without ``--strict-contracts`` (they count as judged). ``drift`` is the
    run's comparison with its baseline (results.json's ``"drift"``), None without one.
    """
    fail_on_drift = drift is not None and drift["fail_on_drift"]
    failing = failing_statuses(strict_contracts) | ({"drifted"} if fail_on_drift else set())
    bad = {status: n for status, n in tally.statuses.items() if status in failing and n}
    if bad:
        return EXIT_FAIL, "failures found: " + ", ".join(f"{n} {status}" for status, n in bad.items())
    if not tally.rows:
        return EXIT_NOTHING_CHECKED, "nothing was checked: no case was drawn or no check was enabled"
    judged = Counter({target: sum(counts[s] for counts in checks.values() for s in (*PASSED, "out-of-contract"))
                      for target, checks in tally.checks.items()})
    if not sum(judged.values()):
        every = "the only result was" if tally.rows == 1 else f"all {tally.rows} results were"
        return EXIT_NOTHING_CHECKED, f"nothing was checked: {every} skipped ({top_skip_reasons(tally.skips)})"
    for name in dict.fromkeys(named_targets):
        if not judged[name]:
            return EXIT_NOTHING_CHECKED, (f"target {name} was judged on no case: every result was skipped "
                                          f"({top_skip_reasons(tally.skips, name) or 'it ran on no case'})")
    if fail_on_drift and not drift["compared"]:
        return EXIT_NOTHING_CHECKED, (f"no drift was checked: no passing row of this run has a row in the baseline "
                                      f"{drift['baseline']}, and --fail-on-drift never passes on none")
    drifted, outside = tally.statuses["drifted"], tally.statuses["out-of-contract"]
    warning = f"; warning: {drifted} drifted since the baseline (--fail-on-drift fails on it)" if drifted else ""
    if outside:
        warning += f"; note: {plural(outside, 'result')} out-of-contract (--strict-contracts fails on them)"
    return EXIT_PASS, f"all passed: {plural(sum(judged.values()), 'result')} judged{warning}"


@dataclass
class Run:
    """What :func:`gradcheck_rnn.sweep` returns: every row, and the run's one verdict."""

    results: list[CaseResult]
    exit_code: int
    reason: str
    spec: Any = None  # the gradcheck_rnn.run.RunSpec that was judged
    stop: StopReason = StopReason.COMPLETE
    # the run's totals (gradcheck_rnn.rows.store.Tally), made as its rows arrived: with a row log,
    # ``results`` holds only the rows that did not pass, and the counts of every row are here
    tally: Any = None
    seconds: float | None = None  # the wall time of judging it (judge_run); None: not timed (a merged run)
    # what the verdict's rule adds to results.json beside the rows (a detection run's table, a baseline's drift)
    extra: dict[str, Any] = field(default_factory=dict)
    # Counted once, when the verdict is made, from the tally (the one place a run's tally is read
    # after its store wrote it): how many rows and cases were judged, and the tallies results.json
    # stores (:meth:`~gradcheck_rnn.rows.store.Tally.document_part`; None without a tally).
    rows: int = field(init=False)
    cases_judged: int = field(init=False)
    totals: dict[str, Any] | None = field(init=False)

    def __post_init__(self) -> None:
        if self.tally is None:
            self.rows = len(self.results)
            self.cases_judged = len({r.case_id if r.case_index is None else r.case_index for r in self.results})
            self.totals = None
        else:
            self.rows, self.cases_judged, self.totals = (self.tally.rows, self.tally.cases_judged,
                                                         self.tally.document_part())

    @property
    def failures(self) -> list[CaseResult]:
        """The rows that make the run fail (fail, error, reference-disagreement, nondeterministic;
        out-of-contract too when the run's contracts are strict)."""
        failing = failing_statuses(getattr(self.spec, "strict_contracts", False))
        return [r for r in self.results if r.status in failing]

    def verdict_json(self) -> dict[str, Any]:
        """The stored verdict: what results.json records under ``"verdict"``."""
        return {"exit_code": self.exit_code, "reason": self.reason}

    @property
    def complete(self) -> bool:
        """Whether every row was judged (False when --fail-fast or a signal stopped the run)."""
        return self.stop is StopReason.COMPLETE

    @property
    def interrupted(self) -> str | None:
        """``"SIGINT"`` or ``"SIGTERM"`` when a signal stopped the run, else None."""
        return self.stop.signal


class VerdictRule(Protocol):
    """A run's own verdict instead of the sweep's (a detection run's: every mutant caught, no
    false alarm): the exit code, the reason and what results.json stores beside the rows."""

    def __call__(self, results: list[CaseResult], tally: Any, spec: Any) -> tuple[int, str, dict[str, Any]]: ...


def conclude(results: list[CaseResult], spec: Any, tally: Any, stop: StopReason = StopReason.COMPLETE,
             rule: VerdictRule | None = None, extra: dict[str, Any] | None = None,
             seconds: float | None = None) -> Run:
    """The judged run with its one verdict. A run a signal stopped is never a pass: it exits as a
    shell reports the signal (130, 143) and says how far it got. Otherwise ``rule`` decides when
    given, else the sweep's verdict of the ``tally`` (:func:`~gradcheck_rnn.rows.store.tally_verdict`).
    ``extra``: what the run's observers stored beside the rows (a baseline's ``"drift"``, which the
    sweep's verdict reads), kept with what the rule stores."""
    if stop.signal is not None:
        results = sorted(results, key=lambda r: -1 if r.case_index is None else r.case_index)  # stable
        run = Run(results, EXIT_INTERRUPTED[stop.signal], "", spec, stop, tally, seconds)
        bad = Counter(r.status for r in results if r.status in BAD_STATUSES)
        found = "; so far " + ", ".join(f"{n} {status}" for status, n in bad.items()) if bad else ""
        run.reason = f"{stop.describe()}: {run.cases_judged} of {len(spec.indices)} cases judged{found}"
        return run
    extra = dict(extra or {})
    if rule is not None:
        code, reason, found = rule(results, tally, spec)
        extra.update(found)
    else:
        code, reason = tally_verdict(tally, spec.named_targets, extra.get("drift"), spec.strict_contracts)
    return Run(results, code, reason, spec, stop, tally, seconds, extra)
