"""``junit.xml`` for CI test viewers (Jenkins, GitLab, GitHub test reporters).

One ``<testsuite>`` per target inside ``<testsuites>``, whose ``<properties>`` carry the run's
stored verdict (never recomputed) and, for a run stopped early, how far it got; one
``<testcase>`` per case × target × check with classname = target and name = "<case id>
[<check>]". ``fail`` and ``nondeterministic`` are ``<failure>``s of that type whose text holds
one line per failing tensor (worst first) and the repro command; ``error`` and
``reference-disagreement`` (the references, not the target, are in doubt) are ``<error>``s of
that type; ``skip`` is ``<skipped>`` with its reason.
"""

from __future__ import annotations

import re
from typing import Any
from xml.etree import ElementTree as ET

from ..compare import from_json_number
from .document import case_lengths, failing_tensors, progress_note, stored_verdict, tensor_line

# XML 1.0 cannot carry most control characters: a target's exception text may contain them.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def clean(text: Any) -> str:
    """Text made safe for an XML attribute or element."""
    return _NOT_XML.sub("\ufffd", str(text))


def _seconds(value: Any) -> str:
    seconds = from_json_number(value)
    return f"{seconds:.3f}" if seconds == seconds and abs(seconds) != float("inf") else "0.000"


def _counts(rows: list[dict[str, Any]]) -> dict[str, str]:
    statuses = [r["status"] for r in rows]
    return {"tests": str(len(rows)), "failures": str(statuses.count("fail") + statuses.count("nondeterministic")),
            "errors": str(statuses.count("error") + statuses.count("reference-disagreement")),
            "skipped": str(statuses.count("skip")),
            "time": _seconds(sum(from_json_number(r.get("seconds", 0.0)) for r in rows))}


def failure_text(row: dict[str, Any]) -> str:
    """The body of a failure or error: message (errors), per-tensor lines (worst first), the
    target's traceback (errors), the repro command."""
    lengths = case_lengths(row["case_id"])[0]
    lines = [tensor_line(t, row.get("check", "reference"), lengths) for t in failing_tensors(row)]
    if not lines and row.get("message"):
        lines = [row["message"]]
    if row.get("traceback"):  # a target that raised: its own frames, file:line
        lines += ["Traceback of the target (most recent call last):", row["traceback"]]
    return "\n".join(lines + [f"reproduce: {row['repro']}"])


def render(document: dict[str, Any]) -> bytes:
    """The JUnit XML of a results document."""
    name = f"gradcheck-rnn {document.get('command', '')}".strip()
    targets: dict[str, list[dict[str, Any]]] = {}
    for row in document["results"]:  # one pass: rows may be read back from the run's file
        targets.setdefault(row["target"], []).append(row)
    root = ET.Element("testsuites", name=name, **_counts([row for rows in targets.values() for row in rows]))
    for target, target_rows in targets.items():
        suite = ET.SubElement(root, "testsuite", name=clean(target), timestamp=str(document.get("created", "")),
                              **_counts(target_rows))
        properties = ET.SubElement(suite, "properties")
        code, reason = stored_verdict(document)
        ET.SubElement(properties, "property", name="verdict", value=clean(f"{reason} (exit code {code})"))
        if (stopped := progress_note(document)) is not None:
            ET.SubElement(properties, "property", name="stopped early", value=clean(stopped))
        for row in target_rows:
            case = ET.SubElement(suite, "testcase", classname=clean(target),
                                 name=clean(f"{row['case_id']} [{row.get('check', 'reference')}]"),
                                 time=_seconds(row.get("seconds", 0.0)))
            status, message = row["status"], clean(row.get("message") or row["status"])
            if status in ("fail", "nondeterministic"):  # two runs of one case differing is the target's failure
                ET.SubElement(case, "failure", message=message, type=status).text = clean(failure_text(row))
            elif status in ("error", "reference-disagreement"):
                ET.SubElement(case, "error", message=message, type=status).text = clean(failure_text(row))
            elif status == "skip":
                ET.SubElement(case, "skipped", message=message)
    ET.indent(root, space=" ")
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"
