"""``junit.xml`` for CI test viewers (Jenkins, GitLab, GitHub test reporters).

One ``<testsuite>`` per target inside ``<testsuites>``, whose ``<properties>`` carry the run's
stored verdict (never recomputed) and, for a run stopped early, how far it got; one
``<testcase>`` per case × target × check with classname = target and name = "<case id>
[<check>]". A testcase's ``time`` is its row's judging time (the row's ``seconds``), a
``<testsuite>``'s the sum of its rows', and ``<testsuites>``' the run's wall time. ``fail`` and ``nondeterministic`` are ``<failure>``s of that type whose text holds
one line per failing tensor (worst first) and the repro command; ``error`` and
``reference-disagreement`` (the references, not the target, are in doubt) are ``<error>``s of
that type; ``skip`` is ``<skipped>`` with its reason. ``drifted`` (``--baseline``) is a
``<failure type="drifted">`` when the run failed on drift (``--fail-on-drift``), else a passing
testcase whose ``<system-out>`` holds the warning (Jenkins, GitLab and the GitHub test reporters
show a test's output; few show a testcase's properties).

Written one testcase at a time (:func:`write`): an element tree of every row was most of the
supervisor's memory per row of a large run.
"""

from __future__ import annotations

import io
import re
from typing import IO, Any
from xml.etree import ElementTree as ET

from ..model.compare import from_json_number
from .document import case_lengths, failing_tensors, progress_note, stored_verdict, strict_contracts, tensor_line

# XML 1.0 cannot carry most control characters: a target's exception text may contain them.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def clean(text: Any) -> str:
    """Text made safe for an XML attribute or element."""
    return _NOT_XML.sub("\ufffd", str(text))


def _seconds(value: Any) -> str:
    seconds = from_json_number(value)
    return f"{seconds:.3f}" if seconds == seconds and abs(seconds) != float("inf") else "0.000"


def failure_statuses(document: dict[str, Any]) -> tuple[str, ...]:
    """The statuses written as ``<failure>``: ``drifted`` too when the run failed on drift
    (``--fail-on-drift``, stored under ``"drift"``), ``out-of-contract`` when its contracts were
    strict (``--strict-contracts``, stored in its spec)."""
    drift = document.get("drift") or {}
    return (("fail", "nondeterministic") + (("drifted",) if drift.get("fail_on_drift") else ())
            + (("out-of-contract",) if strict_contracts(document) else ()))


class _Counts:
    """Tests, failures, errors, skips and seconds of a set of rows, counted one row at a time."""

    def __init__(self, failing: tuple[str, ...]) -> None:
        self.failing = failing
        self.tests = self.failures = self.errors = self.skipped = 0
        self.seconds = 0.0

    def add(self, row: dict[str, Any]) -> None:
        status = row["status"]
        self.tests += 1
        self.failures += status in self.failing
        self.errors += status in ("error", "reference-disagreement")
        self.skipped += status == "skip" or (status == "out-of-contract" and status not in self.failing)
        self.seconds += from_json_number(row.get("seconds", 0.0))

    def attributes(self) -> dict[str, str]:
        return {"tests": str(self.tests), "failures": str(self.failures), "errors": str(self.errors),
                "skipped": str(self.skipped), "time": _seconds(self.seconds)}


def failure_text(row: dict[str, Any]) -> str:
    """The body of a failure or error: message (errors), per-tensor lines (worst first), the
    target's traceback (errors), the repro command."""
    lengths = case_lengths(row["case_id"])[0]
    lines = [tensor_line(t, row.get("check", "reference"), lengths) for t in failing_tensors(row.get("tensors", ()))]
    if not lines and row.get("message"):
        lines = [row["message"]]
    if row.get("traceback"):  # a target that raised: its own frames, file:line
        lines += ["Traceback of the target (most recent call last):", row["traceback"]]
    return "\n".join(lines + [f"reproduce: {row['repro']}"])


def _testcase(target: str, row: dict[str, Any], failing: tuple[str, ...]) -> ET.Element:
    case = ET.Element("testcase", classname=clean(target), name=clean(f"{row['case_id']} [{row.get('check', 'reference')}]"),
                      time=_seconds(row.get("seconds", 0.0)))
    status, message = row["status"], clean(row.get("message") or row["status"])
    if status == "drifted" and status in failing:  # --fail-on-drift: the run failed on it
        ET.SubElement(case, "failure", message=message, type=status).text = clean(failure_text(row))
    elif status == "drifted":  # a pass with a warning that every JUnit viewer shows: the test's output
        ET.SubElement(case, "system-out").text = clean(f"warning: drifted since the baseline: {row.get('message', '')}")
    elif status in failing:  # two runs of one case differing is the target's failure
        ET.SubElement(case, "failure", message=message, type=status).text = clean(failure_text(row))
    elif status in ("error", "reference-disagreement"):
        ET.SubElement(case, "error", message=message, type=status).text = clean(failure_text(row))
    elif status == "skip":
        ET.SubElement(case, "skipped", message=message)
    elif status == "out-of-contract":  # not judged correct or wrong there: JUnit's nearest word is a skip
        ET.SubElement(case, "skipped", message=message, type=status).text = clean(failure_text(row))
    return case


def _element(element: ET.Element, level: int) -> bytes:
    """One element as indented XML text at ``level`` (one space per level), with its line break."""
    ET.indent(element, space=" ", level=level)
    return b" " * level + ET.tostring(element, encoding="utf-8", xml_declaration=False) + b"\n"


def _open_tag(tag: str, attributes: dict[str, str], level: int) -> bytes:
    text = ET.tostring(ET.Element(tag, attributes), encoding="utf-8", xml_declaration=False)
    return b" " * level + text.replace(b" />", b">") + b"\n"


def write(run: Any, stream: IO[bytes]) -> None:
    """Write the JUnit XML of a stored run (:class:`~gradcheck_rnn.reports.StoredRun`), one
    testcase at a time.

    The rows are read twice, never held together: once to count each target's statuses (a
    ``<testsuite>`` carries its counts before its testcases), then once per target to write its
    testcases (the rows may be a run's rows read back from its results.jsonl).
    """
    rows, document = run.rows, run.head
    failing = failure_statuses(document)
    totals, suites = _Counts(failing), {}
    for row in rows:
        totals.add(row)
        suites.setdefault(row["target"], _Counts(failing)).add(row)
    code, reason = stored_verdict(document)
    stopped = progress_note(document)
    name = f"gradcheck-rnn {document.get('command', '')}".strip()
    stream.write(b"<?xml version='1.0' encoding='utf-8'?>\n")
    # The run's wall time (results.json's "seconds"); a run stored without it (a merge, results.json
    # written before it was kept): the sum of its rows' judging times.
    attributes = {**totals.attributes(), **({"time": _seconds(document["seconds"])} if "seconds" in document else {})}
    stream.write(_open_tag("testsuites", {"name": name, **attributes}, 0))
    for target, counts in suites.items():
        stream.write(_open_tag("testsuite", {"name": clean(target), "timestamp": str(document.get("created", "")),
                                             **counts.attributes()}, 1))
        properties = ET.Element("properties")
        ET.SubElement(properties, "property", name="verdict", value=clean(f"{reason} (exit code {code})"))
        if stopped is not None:
            ET.SubElement(properties, "property", name="stopped early", value=clean(stopped))
        stream.write(_element(properties, 2))
        for row in rows:
            if row["target"] == target:
                stream.write(_element(_testcase(target, row, failing), 2))
        stream.write(b" </testsuite>\n")
    stream.write(b"</testsuites>\n")


def render(run: Any) -> bytes:
    """The JUnit XML of a stored run, as :func:`write` writes it."""
    buffer = io.BytesIO()
    write(run, buffer)
    return buffer.getvalue()
