"""``report.md``: the stored verdict, summary, skip reasons, mistrusted note and failures (worst
first) with repro commands and the error per time step of each failing tensor as a bar picture;
also GitHub's step summary."""

from __future__ import annotations

import math
from typing import IO, Any

from ..model.compare import from_json_number
from ..model.numbers import fmt, fmt_or_dash
from ..model.narrowing import draw_flags
from .document import (DriftView, case_lengths, failing_tensors, mistrust_note, progress_note,
                       stored_verdict, tensor_line)

SPARK = " ▁▂▃▄▅▆▇█"
NON_FINITE = "!"


def sparkline(values: list[Any]) -> str:
    """Error per time step as a bar picture, log scale relative to the largest finite step.

    Two decades per bar level; zero is a blank and a non-finite step (NaN, Inf, or null from
    results.json) is ``!``, so a broken step is never drawn as a small or a full bar.
    """
    numbers = [from_json_number(v) for v in values]
    finite = [v for v in numbers if math.isfinite(v)]
    top = max(finite, default=0.0)
    bars = []
    for v in numbers:
        if not math.isfinite(v):
            bars.append(NON_FINITE)
        elif v <= 0 or not top > 0:
            bars.append(SPARK[0])
        else:
            # log10(v) − log10(top), not log10(v / top): a denormal over a huge top underflows to 0.
            bars.append(SPARK[max(1, min(8, 8 + round((math.log10(v) - math.log10(top)) * 2)))])
    return "".join(bars)


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def summary_lines(document: dict[str, Any]) -> list[str]:
    """The stored verdict, the counts line, an early stop, the mistrusted note, the target × mode
    table and the top skip reasons per target."""
    code, reason = stored_verdict(document)
    counts = {k: v for k, v in document.get("summary", {}).items() if k != "exit_code"}
    lines = [f"**Verdict:** {_cell(reason)} (exit code {code})", "",
             " · ".join(f"{k}: {v}" for k, v in counts.items()), ""]
    if document.get("rerun_of"):
        lines += [f"**Rerun** of the rows that did not pass in run {_cell(document['rerun_of'])} "
                  f"(seed {document.get('seed')}).", ""]
    if flags := draw_flags(document.get("draw")):
        lines += [f"**Draw:** profile {document.get('profile', '')} narrowed by `{' '.join(flags)}`.", ""]
    if (stopped := progress_note(document)) is not None:
        lines += [f"**Stopped early:** {stopped}.", ""]
    if (note := mistrust_note(document.get("mistrusted"))) is not None:
        lines += [f"**Mistrusted:** {note}.", ""]
    rows = document.get("by_mode", [])
    nondeterministic = any(row.get("nondeterministic") for row in rows)
    outside = any(row.get("out-of-contract") for row in rows)
    lines += ["| target | mode | cases | pass | fail | error | skip | disagree | " + "nondet | " * nondeterministic
              + "out-of-contract | " * outside + "worst ratio, any check |",
              "|---" * (9 + nondeterministic + outside) + "|"]
    for row in rows:
        worst = fmt_or_dash(row["worst_ratio"])
        nondet = f"{row.get('nondeterministic', 0)} | " if nondeterministic else ""
        nondet += f"{row.get('out-of-contract', 0)} | " if outside else ""
        lines.append(f"| {_cell(row['target'])} | {row['mode']} | {row['cases']} | {row['pass']} | {row['fail']} | "
                     f"{row['error']} | {row['skip']} | {row.get('reference-disagreement', 0)} | {nondet}{worst} |")
    skips = document.get("skips", [])
    if skips:
        lines += ["", "Top skip reasons:", ""]
        for entry in skips:
            reasons = "; ".join(f"{_cell(reason)} ×{n}" for reason, n in entry["reasons"])
            other = f"; other reasons ×{entry['other']}" if entry["other"] else ""
            lines.append(f"- `{_cell(entry['target'])}`: {entry['skipped']} of {entry['total']} results "
                         f"skipped — {reasons}{other}")
    return lines


def drift_lines(drift: dict[str, Any] | None, limit: int = 100) -> list[str]:
    """The drift section (``sweep --baseline``): per drifted tensor, largest growth first, ratio then → now."""
    if drift is None:
        return []
    view = DriftView.of(drift)
    lines = ["", f"## Drift since the baseline ({view.drifted} rows)", "",
             f"Baseline `{_cell(view.baseline)}`: {view.compared} passing rows compared; a row drifts when a "
             f"tensor's ratio grew past ×{view.factor:g} and ends above {view.floor:g}"
             + (" (--fail-on-drift: drift fails the run)." if view.fail_on_drift else "."), ""]
    if not view.tensors:
        return lines + ["No drift."]
    lines += ["| case id | target | check | tensor | ratio then → now | growth |", "|---|---|---|---|---|---|"]
    for t in view.tensors[:limit]:
        lines.append(f"| `{t.case_id}` | {_cell(t.target)} | {t.check} | {_cell(t.tensor)} | {fmt(t.then)} → "
                     f"{fmt(t.now)} | {t.growth} |")
    if len(view.tensors) > limit:
        lines.append(f"… and {len(view.tensors) - limit} more drifted tensors: see results.json.")
    return lines


def write(run: Any, stream: IO[bytes]) -> None:
    """Write the markdown report of a stored run (:class:`~gradcheck_rnn.reports.StoredRun`)."""
    stream.write(render(run))


def render(run: Any, limit: int = 100) -> bytes:
    """The markdown report of a stored run (:class:`~gradcheck_rnn.reports.StoredRun`); at most
    ``limit`` findings (one per case × target × cause) are detailed, the rest are counted."""
    document = run.head
    lines = [f"# gradcheck-rnn {document.get('command', '')} report", ""] + summary_lines(document)
    lines += drift_lines(document.get("drift"))
    bad = run.findings
    if bad:
        results = sum(1 + len(f["others"]) for f in bad)
        lines += ["", f"## Failures ({len(bad)} findings in {results} results, worst first)", ""]
    for finding in bad[:limit]:
        row = finding["row"]
        check = "" if row.get("check", "reference") == "reference" else f" ({row['check']} check)"
        lines += [f"### {row['status']}: `{row['case_id']}` on `{row['target']}`{check}", ""]
        lines += [f"Cause: {_cell(finding['cause'])}", ""] if finding["cause"] else []
        lines += [f"    {row['repro']}", ""]
        if finding["also"]:
            lines += [_cell(finding["also"]), ""]
        if finding["message"]:
            lines += [_cell(finding["message"]), ""]
        if row.get("traceback"):  # a target that raised: its own frames, file:line
            lines += ["```", "Traceback of the target (most recent call last):", row["traceback"], "```", ""]
        lengths = case_lengths(row["case_id"])[0]
        for tensor in failing_tensors(row.get("tensors", ())):
            lines.append(f"- {_cell(tensor_line(tensor, row.get('check', 'reference'), lengths))}")
            steps = tensor.get("per_step")
            if steps:
                top = max((from_json_number(v) for v in steps), key=lambda v: (v != v, v))
                lines.append(f"  error per step t=0..{len(steps) - 1}: `{sparkline(steps)}` (max {top:.3g})")
        lines.append("")
    if len(bad) > limit:
        lines += [f"… and {len(bad) - limit} more findings: see results.json or junit.xml.", ""]
    return ("\n".join(lines).rstrip("\n") + "\n").encode("utf-8")
