"""Rich console tables: the summary, the failure table (failures first, with case ids), the
per-tensor table of one case and the per-time-step error picture of a repro."""

from __future__ import annotations

import math
from rich.table import Table

from .compare import TensorError
from .report import breakdown, sparkline
from .runner import CaseResult

STATUS_STYLE = {"pass": "green", "fail": "bold red", "error": "bold magenta", "skip": "dim",
                "reference-disagreement": "bold yellow", "missing": "bold red"}


def fmt(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.3g}"


def summary_table(results: list[CaseResult], key: str = "mode") -> Table:
    """Per target × mode (or wants group): cases and their verdicts over every check, worst ratio."""
    table = Table(title=f"Summary by target × {key}")
    for column in ("target", key, "cases", "pass", "fail", "error", "skip", "ref-disagree", "worst ratio"):
        table.add_column(column, justify="left" if column in ("target", key) else "right")
    for row in breakdown(results, key):
        ratio = row["worst_ratio"]
        style = "red" if ratio is not None and ratio > 1 else ""
        table.add_row(row["target"], row[key], str(row["cases"]), str(row["pass"]),
                      f"[red]{row['fail']}[/]" if row["fail"] else "0",
                      f"[magenta]{row['error']}[/]" if row["error"] else "0", str(row["skip"]),
                      str(row["reference-disagreement"]), f"[{style}]{fmt(ratio)}[/]" if style else fmt(ratio))
    return table


def failure_table(results: list[CaseResult], limit: int = 50) -> Table | None:
    """One row per failing tensor (or per error), failing cases first, ready to copy into repro."""
    bad = [r for r in results if r.status not in ("pass", "skip")]
    if not bad:
        return None
    bad.sort(key=lambda r: (r.status != "fail", r.case_id, r.check != "reference"))
    options = f" {bad[0].repro_options}" if bad[0].repro_options else ""
    table = Table(title=f"Failures ({len(bad)} case × target × check) — reproduce with: "
                        f"gradcheck-rnn repro <case id> --target <target> [--check <check>]{options}")
    for column in ("case id", "target", "check", "status", "tensor", "max abs", "max rel", "ratio", "location", "a", "b"):
        table.add_column(column, overflow="fold")
    rows = 0
    for r in bad:
        tensors = r.failing or [None]
        for t in tensors:
            if rows >= limit:
                table.caption = f"… {sum(max(len(r.failing), 1) for r in bad) - limit} more rows in the report"
                return table
            rows += 1
            style = STATUS_STYLE.get(r.status, "")
            if t is None:
                table.add_row(r.case_id, r.target, r.check, f"[{style}]{r.status}[/]", "-", "-", "-", "-", r.message,
                              "-", "-")
            else:
                table.add_row(r.case_id, r.target, r.check, f"[{style}]{r.status}[/]", t.name, fmt(t.max_abs),
                              fmt(t.max_rel), fmt(t.ratio), t.location_text() or t.message, fmt(t.a), fmt(t.b))
    return table


def tensor_table(result: CaseResult) -> Table:
    """The full per-tensor table of one case × target."""
    check = "" if result.check == "reference" else f" ({result.check} check)"
    table = Table(title=f"{result.case_id} on {result.target}{check}: {result.status}")
    for column in ("tensor", "status", "max abs", "max rel", "ratio", "rtol/atol", "location", "a", "b", "ref"):
        table.add_column(column, overflow="fold", no_wrap=column not in ("location", "tensor"))
    for t in result.tensors:
        style = STATUS_STYLE.get(t.status, "")
        table.add_row(t.name, f"[{style}]{t.status}[/]", fmt(t.max_abs), fmt(t.max_rel), fmt(t.ratio),
                      f"{t.rtol:g}/{t.atol:g}", t.location_text() or t.message, fmt(t.a), fmt(t.b),
                      t.reference)
    return table


def per_step_table(tensor: TensorError) -> Table:
    """Max |a − b| per time step of one tensor: truncated BPTT shows as errors growing toward t=0."""
    steps = tensor.per_step or []
    table = Table(title=f"{tensor.name}: max |a − b| per time step   {sparkline(steps)}")
    table.add_column("t", justify="right")
    table.add_column("max abs error", justify="right")
    table.add_column("", justify="left")
    top = max(steps, default=0.0)
    for t, value in enumerate(steps):
        width = 0 if not top > 0 else int(round(30 * value / top))
        table.add_row(str(t), f"{value:.3g}", "█" * width)
    return table


def worst_time_tensor(result: CaseResult) -> TensorError | None:
    """The tensor whose per-step errors a repro shows: the worst one with a time axis."""
    timed = [t for t in result.tensors if t.per_step]
    failing = [t for t in timed if not t.passed]
    pool = failing or timed
    return max(pool, key=lambda t: (t.ratio == t.ratio, t.ratio), default=None)

