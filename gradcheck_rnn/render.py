"""Rich console output: the summary, the failure list (failures first, with case ids), the
per-tensor table of one case and the per-time-step error picture of a repro.

Everything fits an 80-column terminal and a case id is never wrapped or cut: tables hold only
short columns (target names are table titles), and lines that carry a case id or a repro
command are printed as single unwrapped lines (``print_lines``), so a terminal narrower than
the line soft-wraps it and copying still gives the whole id.
"""

from __future__ import annotations

import math
from typing import Iterable

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .compare import TensorError
from .report import breakdown, sparkline
from .reports.document import mistrust, mistrust_note
from .runner import CaseResult, top_skip_reasons

STATUS_STYLE = {"pass": "green", "fail": "bold red", "error": "bold magenta", "skip": "dim",
                "reference-disagreement": "bold yellow", "missing": "bold red"}
STATUS_LABEL = {"reference-disagreement": "disagree"}


def fmt(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.3g}"


def print_lines(console: Console, lines: Iterable[Text | str]) -> None:
    """Print lines without wrapping or cropping them (case ids and repro commands stay whole)."""
    for line in lines:
        console.print(line, soft_wrap=True, highlight=False)


def summary_tables(results: list[CaseResult]) -> list[Table]:
    """One table per target: its cases by mode, then by wants group, with verdicts and worst ratio."""
    tables = []
    targets = list(dict.fromkeys(r.target for r in results))
    for target in targets:
        mine = [r for r in results if r.target == target]
        cases = len({r.case_id for r in mine})
        table = Table(title=f"{target}: {cases} cases", title_justify="left")
        for column in ("group", "cases", "pass", "fail", "error", "skip", "disagree", "worst ratio"):
            table.add_column(column, justify="left" if column == "group" else "right", no_wrap=True)
        for key, label in (("mode", "{}"), ("wants", "wants={}")):
            for row in breakdown(mine, key):
                ratio = row["worst_ratio"]
                ratio_text = fmt(ratio) if ratio is None or ratio <= 1 else f"[red]{fmt(ratio)}[/]"
                table.add_row(label.format(row[key]), str(row["cases"]), str(row["pass"]),
                              f"[red]{row['fail']}[/]" if row["fail"] else "0",
                              f"[magenta]{row['error']}[/]" if row["error"] else "0", str(row["skip"]),
                              str(row["reference-disagreement"]), ratio_text)
            table.add_section()
        tables.append(table)
    return tables


def skipped_target_lines(results: list[CaseResult]) -> list[Text]:
    """A warning per target that was judged on no case, with its most frequent skip reasons."""
    lines = []
    for target in dict.fromkeys(r.target for r in results):
        mine = [r for r in results if r.target == target]
        if all(r.status == "skip" for r in mine):
            lines.append(Text.assemble(("warning: ", "bold yellow"),
                                       f"{target} was judged on no case — skipped {len(mine)}×: "
                                       f"{top_skip_reasons(mine, target)}"))
    return lines


def mistrusted_lines(results: list[CaseResult]) -> list[Text]:
    """A one-line note when comparisons were mistrusted (zeros would have passed them)."""
    note = mistrust_note(mistrust(results))
    return [] if note is None else [Text.assemble(("note: ", "bold yellow"), note)]


def _tensor_line(t: TensorError) -> str:
    where = t.location_text()
    where = f" at {where}" if where else ""
    return (f"{t.name}: ratio {fmt(t.ratio)}, max abs {fmt(t.max_abs)}{where}, a={fmt(t.a)}, b={fmt(t.b)}"
            if t.status != "missing" else f"{t.name}: missing")


def failure_lines(results: list[CaseResult], limit: int = 50) -> list[Text]:
    """Every result that did not pass, failing ones first: status and case id on one line, then
    target and check, the failing tensors (or the error), and the repro command."""
    bad = [r for r in results if r.status not in ("pass", "skip")]
    if not bad:
        return []
    bad.sort(key=lambda r: (r.status != "fail", -_sort_ratio(r), r.case_id, r.check != "reference"))
    lines = [Text(f"Failures: {len(bad)} case × target × check, failing first; each ends with its repro command",
                  style="bold")]
    for r in bad[:limit]:
        style = STATUS_STYLE.get(r.status, "")
        lines.append(Text.assemble((f"{STATUS_LABEL.get(r.status, r.status):<8}", style), " ", (r.case_id, "bold")))
        lines.append(Text(f"         {r.target} · {r.check} check"))
        details = [_tensor_line(t) for t in r.failing[:3]] or [r.message]
        if len(r.failing) > 3:
            details.append(f"… and {len(r.failing) - 3} more tensors")
        lines.extend(Text(f"         {d}") for d in details)
        lines.append(Text(f"         {r.repro}", style="cyan"))
    if len(bad) > limit:
        lines.append(Text(f"… {len(bad) - limit} more in the report", style="dim"))
    return lines


def _sort_ratio(result: CaseResult) -> float:
    worst = result.worst
    if worst is None or worst.status == "missing" or worst.ratio != worst.ratio:
        return math.inf
    return worst.ratio


# Short labels for a location's coordinates, so the table fits 80 columns: "l0 fwd h r2 c0".
_LOCATION_LABELS = {"layer": "l", "dir": "", "gate": "", "row": "r", "col": "c", "t": "t", "b": "b", "unit": "u"}


def compact_location(location: dict) -> str:
    """A location as "t1 b0 u2" (time, batch, unit) or "l0 fwd h r2 c0" (layer, dir, gate, row, col)."""
    return " ".join(f"{_LOCATION_LABELS.get(k, k + '=')}{v}" for k, v in location.items())


def tensor_table(result: CaseResult) -> tuple[Text, Table, Text | None]:
    """The per-tensor table of one case × target, fitting 80 columns: its title line (the case
    id, printed apart so it is never wrapped), the table (a = target, b = the reference it is
    further from), and a line with the tolerances in force per tensor kind."""
    from .tolerances import tensor_kind

    check = "" if result.check == "reference" else f" ({result.check} check)"
    title = Text.assemble((result.case_id, "bold"), f" on {result.target}{check}: ",
                          (result.status, STATUS_STYLE.get(result.status, "")))
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for column in ("tensor", "status", "ratio", "max abs", "location", "a", "b"):
        table.add_column(column, no_wrap=column != "location", min_width=10 if column == "location" else None,
                         justify="left" if column in ("tensor", "status", "location") else "right")
    tolerances: dict[str, str] = {}
    for t in result.tensors:
        style = STATUS_STYLE.get(t.status, "")
        location = compact_location(t.location) or t.message
        table.add_row(t.name, Text(t.status, style=style), fmt(t.ratio), fmt(t.max_abs), location, fmt(t.a), fmt(t.b))
        if t.rtol == t.rtol:
            tolerances.setdefault(tensor_kind(t.name), f"{t.rtol:g}/{t.atol:g}")
    footer = (Text("rtol/atol: " + ", ".join(f"{kind} {tol}" for kind, tol in tolerances.items()), style="dim")
              if tolerances else None)
    return title, table, footer


def per_step_table(tensor: TensorError) -> Table:
    """Max |a − b| per time step of one tensor: truncated BPTT shows as errors growing toward t=0."""
    steps = tensor.per_step or []
    table = Table(title=f"{tensor.name}: max |a − b| per time step   {sparkline(steps)}")
    table.add_column("t", justify="right")
    table.add_column("max abs error", justify="right")
    table.add_column("", justify="left")
    finite = [v for v in steps if math.isfinite(v)]
    top = max(finite, default=0.0)
    for t, value in enumerate(steps):
        width = 30 if not math.isfinite(value) else (0 if not top > 0 else int(round(30 * (value / top))))
        table.add_row(str(t), f"{value:.3g}", "█" * width)
    return table


def worst_time_tensor(result: CaseResult) -> TensorError | None:
    """The tensor whose per-step errors a repro shows: the worst one with a time axis."""
    timed = [t for t in result.tensors if t.per_step]
    failing = [t for t in timed if not t.passed]
    pool = failing or timed
    return max(pool, key=lambda t: (t.ratio == t.ratio, t.ratio), default=None)
