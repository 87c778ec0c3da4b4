"""Report files of a run: ``results.json``, ``junit.xml`` and ``report.md``, written atomically.

Everything is first written into a hidden temporary folder beside the run folder and then
renamed into place, so a crash or Ctrl-C never leaves a half-written report.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

from . import __version__
from .compare import json_safe
from .runner import STATUSES, CaseResult, exit_code

SPARK = " ▁▂▃▄▅▆▇█"


def summary(results: list[CaseResult]) -> dict[str, int]:
    counts = Counter(r.status for r in results)
    return {"total": len(results), **{s: counts.get(s, 0) for s in STATUSES}, "exit_code": exit_code(results)}


def case_status(rows: list[CaseResult]) -> str:
    """One verdict for a case × target from all its check rows: the most serious status wins."""
    statuses = {r.status for r in rows}
    for status in ("fail", "reference-disagreement", "error"):
        if status in statuses:
            return status
    return "pass" if "pass" in statuses else "skip"


def breakdown(results: list[CaseResult], key: str) -> list[dict[str, Any]]:
    """Per target × ``key`` (``mode`` or ``wants``): distinct cases, their verdicts over every
    check, and the worst reference-comparison ratio of the group."""
    groups: dict[tuple[str, str], dict[str, list[CaseResult]]] = {}
    for r in results:
        groups.setdefault((r.target, getattr(r, key)), {}).setdefault(r.case_id, []).append(r)
    rows = []
    for (target, value), cases in groups.items():
        ratios = [w.ratio for rows_ in cases.values() for r in rows_ if r.check == "reference"
                  and (w := r.worst) is not None and w.ratio == w.ratio]
        counts = Counter(case_status(rows_) for rows_ in cases.values())
        rows.append({"target": target, key: value, "cases": len(cases),
                     **{s: counts.get(s, 0) for s in STATUSES}, "worst_ratio": max(ratios, default=None)})
    return rows


def results_document(results: list[CaseResult], meta: dict[str, Any]) -> dict[str, Any]:
    """The ``results.json`` object (schema in the README)."""
    return {
        "tool": "gradcheck-rnn", "version": __version__, "schema": 1,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **meta,
        "summary": summary(results),
        "by_mode": breakdown(results, "mode"),
        "by_wants": breakdown(results, "wants"),
        "results": [r.to_json() for r in results],
    }


def junit_xml(results: list[CaseResult], suite_name: str) -> bytes:
    """One testcase per case × target; fail and reference-disagreement are failures."""
    counts = summary(results)
    suite = ET.Element("testsuite", name=suite_name, tests=str(len(results)),
                       failures=str(counts["fail"] + counts["reference-disagreement"]),
                       errors=str(counts["error"]), skipped=str(counts["skip"]),
                       time=f"{sum(r.seconds for r in results):.3f}")
    for r in results:
        name = r.case_id if r.check == "reference" else f"{r.case_id} [{r.check}]"
        case = ET.SubElement(suite, "testcase", classname=f"gradcheck_rnn.{r.target}", name=name,
                             time=f"{r.seconds:.3f}")
        text = "\n".join([t.message for t in r.failing if t.message] + [f"reproduce: {r.repro}"])
        if r.status in ("fail", "reference-disagreement"):
            ET.SubElement(case, "failure", message=r.message or r.status, type=r.status).text = text
        elif r.status == "error":
            ET.SubElement(case, "error", message=r.message, type="error").text = text
        elif r.status == "skip":
            ET.SubElement(case, "skipped", message=r.message)
    return ET.tostring(ET.ElementTree(suite).getroot(), encoding="utf-8", xml_declaration=True)


def sparkline(values: list[float]) -> str:
    """Error per time step as a bar picture (log scale, relative to the largest step)."""
    import math

    top = max(values, default=0.0)
    if not top > 0:
        return SPARK[0] * len(values)
    bars = []
    for v in values:
        level = 0 if v <= 0 else max(1, min(8, 8 + round(math.log10(v / top) * 2)))
        bars.append(SPARK[level])
    return "".join(bars)


def markdown_report(results: list[CaseResult], meta: dict[str, Any]) -> str:
    """The human report: summary, failures with their repro commands and per-step error pictures."""
    counts = summary(results)
    lines = [f"# gradcheck-rnn {meta.get('command', '')} report", "",
             " · ".join(f"{k}: {v}" for k, v in counts.items()), ""]
    lines += ["| target | mode | cases | pass | fail | error | skip | disagree | worst ratio |",
              "|---|---|---|---|---|---|---|---|---|"]
    for row in breakdown(results, "mode"):
        worst = "" if row["worst_ratio"] is None else f"{row['worst_ratio']:.3g}"
        lines.append(f"| {row['target']} | {row['mode']} | {row['cases']} | {row['pass']} | {row['fail']} | "
                     f"{row['error']} | {row['skip']} | {row['reference-disagreement']} | {worst} |")
    bad = [r for r in results if r.status not in ("pass", "skip")]
    if bad:
        lines += ["", "## Failures", ""]
    for r in bad:
        check = "" if r.check == "reference" else f" ({r.check} check)"
        lines += [f"### {r.status}: `{r.case_id}` on `{r.target}`{check}", "", f"    {r.repro}", ""]
        if r.message:
            lines += [f"{r.message}", ""]
        for t in r.failing:
            lines.append(f"- `{t.name}` ratio {t.ratio:.3g}, max abs {t.max_abs:.3g}, max rel {t.max_rel:.3g} "
                         f"at {t.location_text()}: a={t.a:.9g}, b={t.b:.9g}")
            if t.per_step:
                lines.append(f"  error per step t=0..{len(t.per_step) - 1}: `{sparkline(t.per_step)}` "
                             f"(max {max(t.per_step):.3g})")
        lines.append("")
    return "\n".join(lines) + "\n"


def run_name(command: str, seed: int | None) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{command}" + ("" if seed is None else f"-s{seed}")


def write_reports(results: list[CaseResult], report_dir: str | os.PathLike[str], meta: dict[str, Any],
                  extra: dict[str, Any] | None = None) -> Path:
    """Write results.json, junit.xml and report.md into ``<report_dir>/<run>/`` atomically."""
    root = Path(report_dir)
    root.mkdir(parents=True, exist_ok=True)
    name = run_name(meta.get("command", "run"), meta.get("seed"))
    final = root / name
    suffix = 1
    while final.exists():
        suffix += 1
        final = root / f"{name}-{suffix}"
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=root))
    try:
        document = results_document(results, meta)
        document.update(extra or {})
        (staging / "results.json").write_text(json.dumps(json_safe(document), indent=2, allow_nan=False) + "\n")
        (staging / "junit.xml").write_bytes(junit_xml(results, f"gradcheck-rnn {meta.get('command', '')}"))
        (staging / "report.md").write_text(markdown_report(results, meta))
        os.replace(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return final

