"""Rich console output: the summary, the failure list (failures first, with case ids), the
per-tensor table of one case and the per-time-step error picture of a repro.

Everything fits an 80-column terminal and a case id is never wrapped or cut: tables hold only
short columns (target names are table titles), and lines that carry a case id or a repro
command are printed as single unwrapped lines (``print_lines``), so a terminal narrower than
the line soft-wraps it and copying still gives the whole id. Other long lines (messages, the
values of a failing tensor) are packed into lines of at most ``WIDTH`` columns at word
boundaries, never inside a word.

Like every report writer, the console renders stored rows (the dict form results.json holds:
:meth:`~gradcheck_rnn.rows.result.CaseResult.to_json`, :func:`~gradcheck_rnn.rows.result.document_row`),
never result objects, with the writers' own functions for what is shared: the order of rows
(:func:`~gradcheck_rnn.reports.failing_rows`) and of tensors
(:func:`~gradcheck_rnn.model.statuses.tensors_worst_first`), numbers (:func:`~gradcheck_rnn.model.numbers.fmt`:
"nan", "inf", "-inf" as in every file) and the tensor shown under a repro
(:func:`~gradcheck_rnn.reports.pictures.stepped_tensors`).

Text that comes from a target (messages, tracebacks, names) is printed literally, never parsed
as rich markup: a message such as ``ValueError("shape [/b] mismatch")`` must not crash the run.
"""

from __future__ import annotations

import contextlib
import math
import textwrap
import time
from functools import lru_cache
from typing import Any, Iterable, Iterator

import numpy as np
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..model.compare import expand_tensor
from ..model.numbers import fmt, fmt_or_dash, from_json_number, location_text
from .document import (DriftView, case_lengths, check_values, failing_tensors, failure_in_words,
                       location_mark, mistrust_note, significant_pair,
                       stopped_early_text, values_parts)
from .markdown import sparkline
from .pictures import ratio_grid, stepped_tensors
from ..rows.result import CaseResult, plural, row_field
from ..model.statuses import LABEL, STYLE, stored_facts, tensors_worst_first, worst_tensor
from ..rows.store import Tally

WIDTH = 80  # the narrowest terminal every line is made for
INDENT = " " * 9  # under the status column of a failure line
TENSORS_SHOWN = 3  # failing tensors detailed per failure line; the rest are named with their ratios
BAR_UPDATE_SECONDS = 0.1  # how often the progress bar takes the rows counted since (it redraws at 10 Hz)


def print_lines(console: Console, lines: Iterable[Text | str]) -> None:
    """Print lines without wrapping or cropping them (case ids and repro commands stay whole),
    plain strings literally: a traceback or message with "[/b]" in it is text, not markup."""
    for line in lines:
        console.print(line, soft_wrap=True, highlight=False, markup=False)


def wrapped(text: str, indent: str = INDENT, width: int = WIDTH, hanging: str | None = None) -> list[str]:
    """``text`` in lines of at most ``width`` columns, broken at spaces only: a case id, a path
    or a repro command in it stays whole (a word longer than the line gets a line of its own).
    Continuation lines start with ``hanging`` (default: ``indent``)."""
    lines = []
    for paragraph in str(text).splitlines() or [""]:
        lines += textwrap.wrap(paragraph, width=width, initial_indent=indent,
                               subsequent_indent=indent if hanging is None else hanging,
                               break_long_words=False, break_on_hyphens=False) or [indent.rstrip()]
    return lines


def packed(parts: list[str], indent: str = INDENT, width: int = WIDTH) -> list[str]:
    """Parts (each kept whole, e.g. "rdiff 20.4") joined by spaces into lines of at most
    ``width`` columns where they fit."""
    lines: list[str] = []
    for part in parts:
        if lines and len(lines[-1]) + 1 + len(part) <= width:
            lines[-1] += " " + part
        else:
            lines.append(indent + part)
    return lines


class StoredTally:
    """A stored run's tallies as results.json holds them (:meth:`Tally.document_part`), read back
    through the part of :class:`~gradcheck_rnn.rows.store.Tally`'s interface the console's tables
    use (their only reader): the console prints a run as it was counted, never a recount of its
    rows."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document

    def breakdown(self, key: str) -> list[dict[str, Any]]:
        return self.document[f"by_{key}"]

    def skip_reasons(self, top: int = 3) -> list[dict[str, Any]]:
        """The stored skip reasons (the run kept its top 3 per target)."""
        return self.document["skips"]

    def mistrust(self) -> dict[str, int]:
        return self.document["mistrusted"]


def summary_tables(tally: Tally | StoredTally) -> list[Table]:
    """One table per target: its cases by mode, then by wants group, with verdicts and the worst
    ratio over every check that judged the target (pass ⇔ ≤ 1), from the run's tally."""
    tables = []
    by_key = {key: tally.breakdown(key) for key in ("mode", "wants")}
    for target in dict.fromkeys(row["target"] for row in by_key["mode"]):
        cases = sum(row["cases"] for row in by_key["mode"] if row["target"] == target)
        table = Table(title=Text(f"{target}: {plural(cases, 'case')}"), title_justify="left",
                      caption="worst ratio: over every check; pass ⇔ ≤ 1", caption_justify="left")
        rows = [(label.format(row[key]), row) for key, label in (("mode", "{}"), ("wants", "wants={}"))
                for row in by_key[key] if row["target"] == target]
        nondeterministic = any(row.get("nondeterministic") for _, row in rows)
        drifted = any(row.get("drifted") for _, row in rows)
        outside = any(row.get("out-of-contract") for _, row in rows)
        columns = ["group", "cases", "pass", "fail", "error", "skip", "disagree"]
        columns += ["nondet"] * nondeterministic + ["drifted"] * drifted + ["contract"] * outside + ["worst ratio"]
        for column in columns:
            table.add_column(column, justify="left" if column == "group" else "right", no_wrap=True)
        for i, (label, row) in enumerate(rows):
            if i and rows[i - 1][0].startswith("wants=") != label.startswith("wants="):
                table.add_section()
            # a stored tally (``report``) holds ±Inf as results.json does, "inf": read as a number
            ratio = None if row["worst_ratio"] is None else from_json_number(row["worst_ratio"])
            cells = [Text(label), str(row["cases"]), str(row["pass"]),
                     Text(str(row["fail"]), style="red" if row["fail"] else ""),
                     Text(str(row["error"]), style="magenta" if row["error"] else ""), str(row["skip"]),
                     str(row.get("reference-disagreement", 0))]
            if nondeterministic:
                cells.append(str(row.get("nondeterministic", 0)))
            if drifted:
                cells.append(Text(str(row["drifted"]), style="yellow" if row["drifted"] else ""))
            if outside:  # cases whose worst row is out-of-contract
                cells.append(Text(str(row["out-of-contract"]), style="yellow" if row["out-of-contract"] else ""))
            cells.append(Text(fmt_or_dash(ratio), style="red" if ratio is not None and not ratio <= 1 else ""))
            table.add_row(*cells)
        tables.append(table)
    return tables


def skipped_target_lines(tally: Tally | StoredTally, top: int = 3) -> list[Text]:
    """A warning per target that was judged on no case, then, for every target that skipped
    anything, how many results it skipped and its ``top`` reasons with their counts: a green run
    that skipped most of its rows must say so on the console. From the run's tally."""
    lines = []
    entries = tally.skip_reasons(top)
    for entry in entries:
        if entry["skipped"] == entry["total"]:  # one line, the reasons follow in the block below
            lines.append(Text.assemble(("warning: ", "bold yellow"),
                                       f"{entry['target']} was judged on no case (every result skipped)"))
    if entries:
        lines.append(Text("Skips, top reasons per target:", style="bold"))
    for entry in entries:
        lines.append(Text(f"  {entry['target']}: {entry['skipped']} of {plural(entry['total'], 'result')} skipped"))
        for reason, count in entry["reasons"]:
            lines += [Text(line) for line in wrapped(f"{count:>5}× {reason}", indent="    ", hanging=" " * 11)]
        if entry["other"]:
            lines.append(Text(f"    {entry['other']:>5}× other reasons", style="dim"))
    return lines


def stopped_early_lines(cases_judged: int, cases_planned: int | None) -> list[Text]:
    """The note a run stopped by --fail-fast prints before its verdict: how far it got."""
    return [Text.assemble(("note: ", "bold yellow"), stopped_early_text(cases_judged, cases_planned))]


def mistrusted_lines(tally: Tally | StoredTally) -> list[Text]:
    """A one-line note when comparisons were mistrusted (zeros would have passed them)."""
    note = mistrust_note(tally.mistrust())
    return [] if note is None else note_lines(f"note: {note}")


def print_stored_run(console: Console, run: Any, next_step: str | None = None) -> None:
    """A stored run (:class:`~gradcheck_rnn.reports.StoredRun`, or a results document) on the
    console, as every file renders it: summary tables per target and the skip reasons (its stored
    tallies), the failure list (its findings), the mistrust note, the ``next:`` hint of a judging
    command, and the drifted rows of a run compared with a baseline."""
    if isinstance(run, dict):
        from . import StoredRun  # the package is imported before this module

        run = StoredRun.of(run)
    document = run.head
    tally = StoredTally(document)
    for table in summary_tables(tally):
        console.print(table)
    print_lines(console, skipped_target_lines(tally) + finding_lines(run.findings) + mistrusted_lines(tally)
                + (note_lines(next_step) if next_step else [])
                + (drift_lines(document["drift"]) if document.get("drift") is not None else []))


def present_stored_run(console: Console, bar: ProgressBar, published: Any, next_step: str | None = None) -> None:
    """A published run (:class:`~gradcheck_rnn.reports.Published`) on the console as the judging
    command hands it over, its progress bar gone first: :func:`print_stored_run`."""
    bar.close()
    print_stored_run(console, published.stored, next_step)


def drift_lines(drift: dict[str, Any]) -> list[Text]:
    """The drifted rows (a ``"drift"`` section, :class:`~gradcheck_rnn.reports.document.DriftView`),
    largest growth first, one unwrapped line each with every drifted tensor's ratio then → now (a
    case id is never cut); or one line saying how many rows were compared and that none drifted,
    or that none was."""
    view = DriftView.of(drift)
    compared = f"{plural(view.compared, 'passing row')} compared with {view.baseline}"
    rule = f"ratio grew past ×{view.factor:g}, ending above {view.floor:g}"
    if not view.compared:
        return [Text(f"nothing was compared with the baseline {view.baseline}: no passing row has a row there, "
                     f"so drift went unchecked", style="bold yellow")]
    if not view.drifted:
        return [Text(f"no drift: {compared}, none whose {rule}")]
    lines = [Text(f"Drifted since the baseline: {plural(view.drifted, 'row')} ({compared}; {rule}), "
                  f"largest growth first:", style="bold yellow")]
    changes: dict[tuple[str, str, str], list[str]] = {}
    for t in view.tensors:
        changes.setdefault((t.case_id, t.target, t.check), []).append(
            f"{t.tensor} {fmt(t.then)} → {fmt(t.now)} ({t.growth})")
    for (case_id, target, check), tensors in changes.items():
        lines.append(Text.assemble(("  drifted ", "yellow"), f"{case_id} on {target} ({check}): {'; '.join(tensors)}"))
    return lines


def note_lines(text: str) -> list[Text]:
    """A note (``note: …``, ``next: …``) wrapped at 80 columns, its first word in bold yellow."""
    first, *rest = wrapped(text, indent="")
    word = first.split(":", 1)[0] + ":"
    return [Text.assemble((word, "bold yellow"), first[len(word):]), *(Text(line) for line in rest)]


@lru_cache(maxsize=256)
def _lengths(case_id: str) -> tuple[int, ...] | None:
    lengths = case_lengths(case_id)[0]
    return None if lengths is None else tuple(lengths)


def _location(tensor: dict[str, Any], case_id: str) -> tuple[str, str]:
    """A stored tensor's worst element in the console's short form, and its mark ("padded step",
    "empty sequence" or "")."""
    location = tensor.get("location") or {}
    lengths = _lengths(case_id)
    return compact_location(location), location_mark(location, None if lengths is None else list(lengths))


def tensor_lines(tensor: dict[str, Any], check: str, case_id: str, indent: str = INDENT) -> list[str]:
    """One failing tensor of a stored row in at most 80 columns: its ratio and where (a padded step
    or an empty sequence is marked), then a and b with enough digits, what they are, and diff and
    rdiff there. Shape, missing and non-finite failures say so in words (the message)."""
    if (words := failure_in_words(tensor)) is not None:
        return wrapped(words, indent)
    where, mark = _location(tensor, case_id)
    head = f"{tensor['name']}: ratio {fmt(tensor.get('ratio'))}" + (f" at {where}" if where else "") \
        + (f" ({mark})" if mark else "") + (" (outside the contract)" if tensor["status"] == "out-of-contract" else "")
    lines = wrapped(head, indent)
    lines += packed(values_parts(tensor, check), indent + "  ")
    if "non-finite" in tensor.get("message", ""):
        lines += wrapped(tensor["message"], indent + "  ")
    return lines


def failure_lines(rows: Iterable[dict[str, Any]], limit: int = 50) -> list[Text]:
    """Every stored row that did not pass, as findings (:func:`~gradcheck_rnn.reports.findings`):
    :func:`finding_lines`."""
    from . import findings  # the package is imported before this module

    return finding_lines(findings(rows), limit)


def finding_lines(found: list[dict[str, Any]], limit: int = 50) -> list[Text]:
    """The findings of a stored run (:func:`~gradcheck_rnn.reports.findings`: one per case ×
    target × cause) in the reports' order (failing ones first): status and case id on one line,
    then target and check of its worst row, its cause, the failing tensors worst first (or the
    error), the finding's other rows, and the repro command."""
    if not found:
        return []
    results = sum(1 + len(f["others"]) for f in found)
    lines = [Text(f"Failures: {plural(len(found), 'finding')} in {plural(results, 'result')}, worst first; "
                  f"each ends with its repro command", style="bold")]
    for finding in found[:limit]:
        r = finding["row"]
        status, check = r["status"], r.get("check", "reference")
        lines.append(Text.assemble((f"{LABEL.get(status, status):<8}", STYLE.get(status, "")), " ",
                                   (r["case_id"], "bold")))
        lines += [Text(line) for line in wrapped(f"{r['target']} · {check} check")]
        if finding["cause"]:
            lines += [Text(line) for line in wrapped(f"cause: {finding['cause']}")]
        failing = failing_tensors(r.get("tensors", ()))
        details = [line for t in failing[:TENSORS_SHOWN] for line in tensor_lines(t, check, r["case_id"])]
        if not failing:
            details = wrapped(r.get("message") or status)
        elif finding["message"]:
            details = wrapped(finding["message"]) + details
        if len(failing) > TENSORS_SHOWN:
            rest = ", ".join(f"{t['name']} {t['status'] if t['status'] == 'missing' else fmt(t.get('ratio'))}"
                             for t in failing[TENSORS_SHOWN:])
            details += wrapped(f"… and {len(failing) - TENSORS_SHOWN} more tensors: {rest}")
        if finding["also"]:
            details += wrapped(finding["also"])
        lines.extend(Text(d) for d in details)
        lines.append(Text(f"{INDENT}{r['repro']}", style="cyan"))
    if len(found) > limit:
        lines.append(Text(f"… {len(found) - limit} more in the report", style="dim"))
    return lines


# Short labels for a location's coordinates, so the table fits 80 columns: "l0 fwd h r2 c0".
_LOCATION_LABELS = {"layer": "l", "dir": "", "gate": "", "row": "r", "col": "c", "t": "t", "b": "b", "unit": "u"}


def compact_location(location: dict) -> str:
    """A location as "t1 b0 u2" (time, batch, unit) or "l0 fwd h r2 c0" (layer, dir, gate, row, col)."""
    return " ".join(f"{_LOCATION_LABELS.get(k, k + '=')}{v}" for k, v in location.items())


def tensor_table(row: dict[str, Any]) -> tuple[Text, Table, Text | None]:
    """The per-tensor table of one stored row (case × target × check), fitting 80 columns: its
    title line (the case id, printed apart so it is never wrapped), the table (every tensor, worst
    first as in the reports; a = target, b = the reference it is further from, with enough digits
    to differ; a padded step or empty sequence is marked after the location), and a line with the
    tolerances in force per tensor kind."""
    from ..model.tolerances import tensor_kind

    check = row.get("check", "reference")
    title = Text.assemble((row["case_id"], "bold"), f" on {row['target']}"
                          + ("" if check == "reference" else f" ({check} check)") + ": ",
                          (row["status"], STYLE.get(row["status"], "")))
    tensors = [expand_tensor(t) for t in row.get("tensors", [])]
    tolerances: dict[str, str] = {}  # per tensor kind, in the row's order: output, input_grad, weight_grad
    for t in tensors:
        rtol = from_json_number(t.get("rtol"))
        if rtol == rtol:
            tolerances.setdefault(tensor_kind(t["name"]), f"{rtol:g}/{from_json_number(t.get('atol')):g}")
    cells: list[list[Text | str]] = []
    for t in tensors_worst_first(tensors, stored_facts):
        ratio, a, b = (from_json_number(t.get(key)) for key in ("ratio", "a", "b"))
        where, mark = _location(t, row["case_id"])
        location = (where + (f" ({mark})" if mark else "")) or t.get("message", "")
        a_text, b_text = significant_pair(a, b) if ratio == ratio and ratio > 1 else (fmt(a), fmt(b))
        cells.append([Text(t["name"]), Text(t["status"], style=STYLE.get(t["status"], "")), fmt(ratio),
                      fmt(t.get("max_abs")), Text(location), a_text, b_text])
    table = _fitting_table(["tensor", "status", "ratio", "max abs", "location", "a", "b"], cells)
    notes = []
    if check != "reference":
        what, a_is, b_is = check_values(check)
        notes.append(f"{what + ': ' if what else ''}a = {a_is}, b = {b_is}")
    lines = [line for note in notes for line in wrapped(note, indent="")]
    if tolerances:  # "weight_grad 0.0002/2e-05" stays on one line
        items = [f"{kind} {tol}" for kind, tol in tolerances.items()]
        lines += packed(["rtol/atol:"] + [item + "," for item in items[:-1]] + items[-1:], indent="")
    footer = Text("\n".join(lines), style="dim") if lines else None
    return title, table, footer


def _fitting_table(columns: list[str], rows: list[list[Text | str]]) -> Table:
    """The tensor table within ``WIDTH`` columns with no number cut: a and b carry as many digits
    as it takes to differ, so when they are long the columns move closer together (two spaces,
    then one) and, last, "max abs" (also in the reports) gives way."""
    location_min = 8  # the location column wraps at spaces down to this width

    def width(index: int) -> int:
        cells = [len(str(r[index])) for r in rows] + [len(columns[index])]
        return location_min if columns[index] == "location" else max(cells)

    keep = list(range(len(columns)))
    for gap, drop in ((2, None), (1, None), (1, columns.index("max abs"))):
        if drop is not None:
            keep.remove(drop)
        if sum(width(i) for i in keep) + gap * (len(keep) - 1) <= WIDTH:
            break
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, gap - 1, 0, 0))
    for i in keep:
        name = columns[i]
        table.add_column(name, no_wrap=name != "location", min_width=location_min if name == "location" else None,
                         justify="left" if name in ("tensor", "status", "location") else "right")
    for r in rows:
        table.add_row(*(r[i] for i in keep))
    return table


def per_step_table(tensor: dict[str, Any]) -> Table | Text:
    """Max |a − b| per time step of one stored tensor: truncated BPTT shows as errors growing
    toward t=0. A tensor without error at any step gets one line that says so instead of empty bars."""
    steps = [from_json_number(v) for v in tensor.get("per_step") or []]
    name = tensor["name"]
    if steps and all(v == 0 for v in steps):  # bars of nothing say less than words
        return Text(f"{name}: max |a − b| per time step: no error, 0 at all {len(steps)} steps")
    table = Table(title=Text(f"{name}: max |a − b| per time step   {sparkline(steps)}"), title_justify="left")
    table.add_column("t", justify="right")
    table.add_column("max abs error", justify="right")
    table.add_column("", justify="left", min_width=30, no_wrap=True)
    finite = [v for v in steps if math.isfinite(v)]
    top = max(finite, default=0.0)
    for t, value in enumerate(steps):
        width = 30 if not math.isfinite(value) else (0 if not top > 0 else int(round(30 * (value / top))))
        table.add_row(str(t), fmt(value), "█" * width)
    return table


def worst_time_tensor(row: dict[str, Any]) -> dict[str, Any] | None:
    """The tensor whose per-step errors a repro shows: the worst of the series the report's
    picture draws (:func:`~gradcheck_rnn.reports.pictures.stepped_tensors`)."""
    return worst_tensor(stepped_tensors(row)[0], stored_facts)


def error_picture(row: dict[str, Any]) -> Table | Text | None:
    """What a repro shows under its table, chosen as the report's picture chooses: the error per
    time step of the worst tensor with a time axis, or — when the failing tensors have none (a
    weight gradient, a state) — the worst failing one's ratio per gate block or layer.dir: a
    passing ``y`` says nothing about a failing ``w_hh``."""
    stepped, without_time = stepped_tensors(row)
    if without_time is not None:
        return per_unit_table(without_time, row_field(row, "mode"))
    timed = worst_tensor(stepped, stored_facts)
    return None if timed is None else per_step_table(timed)


def per_unit_table(tensor: dict[str, Any], mode: str) -> Table | Text:
    """The tolerance ratio of a stored tensor without a time axis, per gate block (a parameter) or
    per layer.dir (a state): its worst ratio there (> 1 fails), where, and a bar."""
    from ..families import family, modes

    ratio_map = tensor.get("ratio_map")
    if ratio_map is None:  # a shape the maps do not know: the worst element in words
        return Text(f"{tensor['name']}: no time axis; worst ratio {fmt(tensor.get('ratio'))} at "
                    f"{location_text(tensor.get('location'))}")
    gated = ratio_map["rows"] == "gate"
    gates = family(mode).gates if mode in modes() else ()
    table = Table(title=Text(f"{tensor['name']}: tolerance ratio per {'gate block' if gated else 'layer.dir'} "
                             f"(no time axis)"), title_justify="left")
    for name, justify in (("gate" if gated else "state", "left"), ("worst ratio", "right"),
                          ("at unit" if gated else "at b", "right"), ("", "left")):
        table.add_column(name, justify=justify, no_wrap=True, min_width=30 if not name else None)
    grid = ratio_grid(tensor)
    finite = grid[np.isfinite(grid)]
    top = max(float(finite.max()) if finite.size else 0.0, 1.0)
    pool = ratio_map["pool"][1]
    for i, values in enumerate(grid):
        worst = int(np.argmax(np.where(np.isnan(values), np.inf, values)))
        value = float(values[worst])
        label = (gates[i] if i < len(gates) else str(i)) if gated else str(i)
        width = 30 if not math.isfinite(value) else round(30 * value / top)
        where = str(worst * pool) if pool == 1 else f"{worst * pool}–{worst * pool + pool - 1}"
        table.add_row(label, fmt(value), where, "█" * width)
    return table


class ProgressBar:
    """The progress bar of a run: an observer of its rows (:class:`~gradcheck_rnn.run.RowObserver`)
    that advances a rich bar. Rich redraws 10 times a second: rows are counted here and handed
    over as often, not one update (a lock, a speed sample) per row in the supervisor's busiest loop."""

    def __init__(self, bar: Any, task: Any) -> None:
        self.bar, self.task = bar, task
        self.pending, self.updated = 0, 0.0
        self.closed = False

    def on_row(self, row: CaseResult) -> None:
        self.pending += 1
        if (now := time.monotonic()) - self.updated >= BAR_UPDATE_SECONDS:
            self.bar.update(self.task, advance=self.pending, current=f"{row.target} {row.check} {row.case_id}")
            self.pending, self.updated = 0, now

    def extra(self) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        """The bar done and gone (it is transient), so that what is printed next is not drawn over;
        once (rich's ``Progress.stop`` ends a non-terminal's output with a line each time)."""
        if self.closed:
            return
        self.closed = True
        self.bar.update(self.task, advance=self.pending)
        self.pending = 0
        self.bar.stop()


@contextlib.contextmanager
def progress(console: Console, total: int) -> Iterator[ProgressBar]:
    """A rich progress bar of ``total`` rows on ``console`` (stderr), gone when the run ends."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    # target names and case ids are shown literally (markup=False): a name may hold brackets
    bar = Progress(TextColumn("[bold]checking"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TextColumn("{task.fields[current]}", markup=False), console=console, transient=True)
    bar.start()
    observer = ProgressBar(bar, bar.add_task("sweep", total=total, current=""))
    try:
        yield observer
    finally:
        observer.close()  # unless the run's presenter closed it first
