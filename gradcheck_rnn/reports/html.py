"""``report.html``: one self-contained page (inline CSS, pictures as base64 PNG, no script, nothing
fetched) that opens from disk in any browser.

Layout, readable with 0, 1 or 500 failures: a header with the stored verdict (never
recomputed), counts, an early stop and the mistrusted note; a summary of targets × checks that
stays on one screen, the top skip reasons per target (target × mode and target × wants tables
folded below it); the failure table, worst first, capped at ``TABLE_CAP`` rows; then, for the
``DETAIL_CAP`` worst failing rows, their per-tensor lines, repro command and error pictures (see
:mod:`.pictures`). Without matplotlib the page says how to get the pictures. Case ids, targets
and repro commands never break inside a word: their cells do not wrap and a table wider than
the window scrolls sideways (the page itself does not), at 800 px as at 1400 px.
"""

from __future__ import annotations

import base64
import html
from collections import Counter
from typing import IO, Any

from ..model.compare import from_json_number
from ..model.numbers import fmt, fmt_or_dash
from .document import (DriftView, by_check, case_lengths, failing_tensors, mistrust_note,
                       progress_note, stored_verdict, tensor_line)
from .pictures import available, case_png

DETAIL_CAP = 6  # failing rows drawn: each picture costs 0.4–0.8 s of matplotlib on one core
TABLE_CAP = 200  # rows of the failure table
FOLD_ABOVE = 12  # breakdown tables with more rows start folded
VERDICTS = {0: ("passed", "pass"), 1: ("failed", "fail"), 5: ("nothing was checked", "skip")}

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:1500px;padding:0 16px 40px;color:#1b1f24}
h1{font-size:22px;margin:16px 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #d0d7de}
h3{font-size:15px;margin:20px 0 6px}code,pre{font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,monospace}
pre{background:#f6f8fa;padding:6px 8px;overflow-x:auto;margin:4px 0}
table{border-collapse:collapse;margin:6px 0}th,td{border:1px solid #d0d7de;padding:2px 7px;text-align:right;vertical-align:top}
th{background:#f6f8fa}td.l,th.l{text-align:left}td.id{text-align:left;white-space:nowrap}
code.id,td.l{white-space:nowrap}
tr.repro td{border-top:0;background:#f6f8fa}
table{display:block;overflow-x:auto;max-width:100%}
.out-of-contract{color:#9a6700;font-weight:600}.pass{color:#1a7f37}.fail{color:#cf222e;font-weight:600}.error{color:#8250df;font-weight:600}
.skip{color:#6e7781}.reference-disagreement{color:#9a6700;font-weight:600}
.nondeterministic{color:#bc4c00;font-weight:600}.drifted{color:#9a6700;font-weight:600}
.bad{background:#ffebe9}.ok{background:#dafbe1}.none{color:#8c959f}
.chips span{display:inline-block;margin:0 10px 4px 0}.note{background:#fff8c5;padding:6px 10px;border-radius:4px}
.scroll{max-height:70vh;overflow:auto}.meta{color:#57606a}img{max-width:100%;height:auto;display:block;margin:6px 0}
details summary{cursor:pointer;margin:8px 0;color:#0969da}ul{margin:4px 0;padding-left:20px}
"""


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _status(status: str) -> str:
    return f'<span class="{_e(status)}">{_e(status)}</span>'


def _header(document: dict[str, Any]) -> list[str]:
    """The stored verdict (never recomputed), its reason, what ran, the counts, an early stop and
    the mistrusted note."""
    code, reason = stored_verdict(document)
    word, css = VERDICTS.get(code, (f"exit code {code}", "fail"))
    if document.get("command") == "mutants" and code == 0:  # its rows fail as they should
        word = "every mutant caught, no false alarm"
    stopped = progress_note(document)
    meta = [f"rerun of {_e(document['rerun_of'])}"] if document.get("rerun_of") else []
    for key in ("profile", "seed", "cases", "rtol", "atol", "checks"):
        if document.get(key) is None:
            continue
        value = document[key]
        if key == "cases" and stopped is not None and isinstance(document.get("cases_judged"), int):
            value = f"{document['cases_judged']} of {value} judged"
        meta.append(f"{key} {_e(value)}")
    meta += [f"created {_e(document.get('created', ''))}", f"gradcheck-rnn {_e(document.get('version', ''))}"]
    counts = {k: v for k, v in document.get("summary", {}).items() if k != "exit_code"}
    parts = [f'<h1>gradcheck-rnn {_e(document.get("command", ""))}: <span class="{css}">{_e(word)}</span></h1>',
             f'<p class="verdict">{_e(reason)} (exit code {_e(code)})</p>',
             f'<p class="meta">{" · ".join(meta)}</p>',
             '<p class="chips">' + "".join(f"<span>{_e(k)}: <b>{_e(v)}</b></span>" for k, v in counts.items()) + "</p>"]
    if stopped is not None:
        parts.append(f'<p class="note"><b>Stopped early:</b> {_e(stopped)}.</p>')
    if (note := mistrust_note(document.get("mistrusted"))) is not None:
        parts.append(f'<p class="note"><b>Mistrusted:</b> {_e(note)}.</p>')
    return parts


def _skips(document: dict[str, Any]) -> list[str]:
    """Top skip reasons per target with counts: a green run that skipped most rows says so."""
    entries = document.get("skips", [])
    if not entries:
        return []
    parts = ["<h3>Top skip reasons</h3><ul>"]
    for entry in entries:
        reasons = "; ".join(f"{_e(reason)} ×{n}" for reason, n in entry["reasons"])
        other = f"; other reasons ×{entry['other']}" if entry["other"] else ""
        parts.append(f"<li><code>{_e(entry['target'])}</code>: {entry['skipped']} of {entry['total']} results "
                     f"skipped — {reasons}{other}</li>")
    return parts + ["</ul>"]


def _summary(document: dict[str, Any]) -> list[str]:
    checks, rows = by_check(document)
    cases = Counter()
    worst: dict[str, float] = {}
    for row in document.get("by_mode", []):
        cases[row["target"]] += row["cases"]
        if row["worst_ratio"] is not None:
            worst[row["target"]] = max(worst.get(row["target"], 0.0), from_json_number(row["worst_ratio"]))
    parts = ["<h2>Summary</h2>", "<p>Rows judged per target and check; a red cell counts the rows that did not "
             "pass (fail, error or reference disagreement). Worst ratio: over every check that judged the "
             "target, pass ⇔ ≤ 1.</p>",
             "<table><tr><th class=l>target</th><th>cases</th>"
             + "".join(f"<th>{_e(c)}</th>" for c in checks) + "<th>worst ratio</th></tr>"]
    for row in rows:
        cells = []
        for check in checks:
            counter = Counter(row["checks"].get(check, {}))
            judged = sum(counter.values())
            bad = judged - counter["pass"] - counter["skip"] - counter["drifted"]
            if not judged:
                cells.append('<td class="none">–</td>')
            elif bad:
                cells.append(f'<td class="bad">{bad} of {judged}</td>')
            else:
                notes = [f"{counter[s]} {w}" for s, w in (("drifted", "drifted"), ("skip", "skipped")) if counter[s]]
                notes_text = f" ({', '.join(notes)})" if notes else ""
                cells.append(f'<td class="ok">{counter["pass"] + counter["drifted"]}{notes_text}</td>')
        ratio = worst.get(row["target"])
        ratio_css = ' class="bad"' if ratio is not None and not ratio <= 1 else ""
        parts.append(f'<tr><td class=l>{_e(row["target"])}</td><td>{cases[row["target"]]}</td>{"".join(cells)}'
                     f'<td{ratio_css}>{fmt_or_dash(ratio)}</td></tr>')
    parts.append("</table>")
    parts += _skips(document)
    for key in ("mode", "wants"):
        parts += _breakdown(document.get(f"by_{key}", []), key)
    if document.get("mutants"):
        parts += _mutants(document)
    return parts


def _breakdown(rows: list[dict[str, Any]], key: str) -> list[str]:
    if not rows:
        return []
    opened = " open" if key == "mode" and len(rows) <= FOLD_ABOVE else ""
    nondeterministic = any(row.get("nondeterministic") for row in rows)
    outside = any(row.get("out-of-contract") for row in rows)
    head = ["target", key, "cases", "pass", "fail", "error", "skip", "disagree"] + ["nondet"] * nondeterministic
    head += ["out-of-contract"] * outside + ["worst ratio"]
    parts = [f"<details{opened}><summary>Cases per target × {_e(key)} (verdict over every check)</summary>",
             "<table><tr>" + "".join(f"<th{' class=l' if h in ('target', key) else ''}>{h}</th>" for h in head) + "</tr>"]
    for row in rows:
        ratio = row["worst_ratio"]
        ratio_css = ' class="bad"' if ratio is not None and not from_json_number(ratio) <= 1 else ""
        nondet = row.get("nondeterministic", 0)
        parts.append(f"<tr><td class=l>{_e(row['target'])}</td><td class=l>{_e(row[key])}</td><td>{row['cases']}</td>"
                     f"<td>{row['pass']}</td><td{' class=bad' if row['fail'] else ''}>{row['fail']}</td>"
                     f"<td{' class=bad' if row['error'] else ''}>{row['error']}</td><td>{row['skip']}</td>"
                     f"<td>{row.get('reference-disagreement', 0)}</td>"
                     + (f"<td{' class=bad' if nondet else ''}>{nondet}</td>" if nondeterministic else "")
                     + (f"<td>{row.get('out-of-contract', 0)}</td>" if outside else "")
                     + f"<td{ratio_css}>{fmt_or_dash(ratio)}</td></tr>")
    return parts + ["</table></details>"]


def _mutants(document: dict[str, Any]) -> list[str]:
    parts = ["<h2>Mutants</h2><table><tr><th class=l>mutant</th><th>cases</th><th>caught</th>"
             "<th class=l>first catching case id</th><th class=l>caught by</th></tr>"]
    for row in document.get("mutants", []) + document.get("false_alarms", []):
        is_mutant = row in document["mutants"]
        flagged = row.get("flagged", 0)
        css = ("ok" if flagged else "bad") if is_mutant else ("bad" if flagged else "ok")
        label = row["target"] if is_mutant else f"{row['target']} (false alarms)"
        parts.append(f"<tr><td class=l>{_e(label)}</td><td>{_e(row.get('cases', ''))}</td>"
                     f'<td class="{css}">{_e(flagged)}</td><td class=id>{_e(row.get("first_case_id") or "–")}</td>'
                     f"<td class=l>{_e(row.get('caught_by') or '–')}</td></tr>")
    parts.append("</table>")
    for group in document.get("left_out") or []:  # what a run without -m does not judge, and how to
        parts.append(f"<p>Left out: {_e(', '.join(group['mutants']))}: {_e(group['why'])}; e.g. "
                     f"<code>{_e(group['run'])}</code></p>")
    return parts


def _drift(drift: dict[str, Any] | None) -> list[str]:
    """The drift section (``sweep --baseline``): per drifted tensor, largest growth first, ratio then and now."""
    if drift is None:
        return []
    view = DriftView.of(drift)
    parts = [f"<h2>Drift since the baseline ({view.drifted} rows)</h2>",
             f"<p>Baseline <code>{_e(view.baseline)}</code>: {_e(view.compared)} passing rows compared; a row "
             f"drifts when a tensor's ratio grew past ×{view.factor:g} and ends above {view.floor:g}"
             + (" (--fail-on-drift: drift fails the run)" if view.fail_on_drift else "") + ".</p>"]
    if not view.tensors:
        return parts + ['<p class="pass">No drift.</p>']
    body = [f"<tr><td class=id>{_e(t.case_id)}</td><td class=l>{_e(t.target)}</td><td class=l>{_e(t.check)}</td>"
            f"<td class=l>{_e(t.tensor)}</td><td>{fmt(t.then)}</td><td>{fmt(t.now)}</td>"
            f'<td class="drifted">{t.growth}</td></tr>' for t in view.tensors[:TABLE_CAP]]
    header = ("<tr><th class=l>case id</th><th class=l>target</th><th class=l>check</th><th class=l>tensor</th>"
              "<th>ratio then</th><th>ratio now</th><th>growth</th></tr>")
    return parts + _capped_table("<table>", header, body, len(view.tensors), "more drifted tensors: see results.json")


def _capped_table(opening: str, header: str, body: list[str], total: int, more: str) -> list[str]:
    """A scrolling table of the first TABLE_CAP of ``total`` entries, then how many more there are."""
    parts = [f'<div class="scroll">{opening}{header}', *body, "</table></div>"]
    if total > TABLE_CAP:
        parts.append(f"<p>… and {total - TABLE_CAP} {more}.</p>")
    return parts


def _failure_table(found: list[dict[str, Any]]) -> list[str]:
    results = sum(1 + len(f["others"]) for f in found)
    parts = [f"<h2>Failures ({len(found)} findings in {results} results, worst first)</h2>"]
    if not found:
        return parts + ['<p class="pass">No failures.</p>']
    # Each finding is two rows: its worst row's facts, then its repro command across the row (an
    # unbroken command as wide as the table's other columns together, so the page rarely has to scroll).
    body = []
    for i, row in enumerate((f["row"] for f in found[:TABLE_CAP]), 1):
        case_id = _e(row["case_id"])
        if i <= DETAIL_CAP:
            case_id = f'<a href="#case-{i}">{case_id}</a>'
        body.append(f"<tr><td rowspan=2>{i}</td><td class=l>{_status(row['status'])}</td><td class=id>{case_id}</td>"
                    f"<td class=l>{_e(row['target'])}</td><td class=l>{_e(row.get('check', ''))}</td>"
                    f"<td class=l>{_e(row.get('worst_tensor') or '–')}</td><td>{fmt(row.get('worst_ratio'))}</td></tr>"
                    f'<tr class="repro"><td class=id colspan=6><code class=id>{_e(row["repro"])}</code></td></tr>')
    header = ("<tr><th>#</th><th class=l>status</th><th class=l>case id</th><th class=l>target</th>"
              "<th class=l>check</th><th class=l>worst tensor</th><th>ratio</th></tr>")
    return parts + _capped_table('<table class="failures">', header, body, len(found),
                                 "more: see results.json or junit.xml")


def _details(found: list[dict[str, Any]]) -> list[str]:
    if not found:
        return []
    pictures = available()  # imports matplotlib: only a page with findings to draw pays for it
    shown = found[:DETAIL_CAP]
    parts = [f"<h2>Findings, worst first ({len(shown)} of {len(found)})</h2>"]
    if not pictures:
        parts.append('<p class="note">The error pictures need matplotlib: '
                     "<code>pip install 'gradcheck-rnn[html]'</code>, then <code>gradcheck-rnn report RUN_DIR</code>.</p>")
    for i, finding in enumerate(shown, 1):
        row = finding["row"]
        check = row.get("check", "reference")
        parts.append(f'<h3 id="case-{i}">{i}. {_status(row["status"])} <code>{_e(row["case_id"])}</code> on '
                     f"<code>{_e(row['target'])}</code> ({_e(check)} check)</h3>")
        if finding["cause"]:
            parts.append(f"<p><b>Cause:</b> {_e(finding['cause'])}</p>")
        if finding["also"]:
            parts.append(f"<p>{_e(finding['also'])}</p>")
        lengths, num_directions = case_lengths(row["case_id"])
        lines = [tensor_line(t, check, lengths) for t in failing_tensors(row.get("tensors", ()))]
        if finding["message"]:
            parts.append(f"<p>{_e(finding['message'])}</p>")
        if lines:
            parts.append("<ul>" + "".join(f"<li><code>{_e(line)}</code></li>" for line in lines) + "</ul>")
        parts.append(f"<pre>{_e(row['repro'])}</pre>")
        if pictures:
            png = case_png(row, lengths, num_directions)
            if png is not None:
                data = base64.b64encode(png).decode("ascii")
                parts.append(f'<img alt="error pictures of {_e(row["case_id"])} on {_e(row["target"])}" '
                             f'src="data:image/png;base64,{data}">')
    return parts


def write(run: Any, stream: IO[bytes]) -> None:
    """Write the HTML page of a stored run (:class:`~gradcheck_rnn.reports.StoredRun`)."""
    stream.write(render(run))


def render(run: Any) -> bytes:
    """The HTML page of a stored run (:class:`~gradcheck_rnn.reports.StoredRun`)."""
    document, bad, found = run.head, run.failing, run.findings
    counts = document.get("summary", {})
    title = (f"gradcheck-rnn {document.get('command', '')}: {len(bad)} of {counts.get('total', 0)} "
             f"not passed")
    body = _header(document) + _summary(document) + _drift(document.get("drift")) + _failure_table(found) + _details(found)
    body.append('<p class="meta">ratio = |a − b| / (atol + rtol·|b|), a = target, b = float64 reference '
                "(the reference-free checks say what a and b are); pass ⇔ ratio ≤ 1. Pictures, colour = log10 of "
                "the ratio: near-white blue at ratio 1e-4 and below, deepening blue up to the tolerance (ratio 1, "
                "0 on the colour bar, marked by a black line), where blue turns red: red fails, darker is worse; "
                "grey = NaN expected value, × = non-finite target value, hatched = padded steps.</p>")
    page = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{_e(title)}</title><style>{CSS}</style></head><body>", *body, "</body></html>"]
    return ("\n".join(page) + "\n").encode("utf-8")
