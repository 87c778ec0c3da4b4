"""``sweep --last-failed``: what did not pass in the latest run of a report folder, to judge again.

As pytest's ``--lf``: the rows whose status fails a run (fail, error, reference disagreement,
nondeterministic) name the case ids, targets and checks of the rerun, which judges them with the
stored run's profile and tolerance overrides. The rerun is one run spec of the failing case ids ×
failing targets × failing checks that keeps exactly the failing rows (``RunSpec.only``): a case
that failed one check on one target is judged again on that pair alone, whatever failed elsewhere.
With ``--target`` the same case ids and checks are judged on the targets named instead (a fix
on another target, or a second kernel on the first one's failures). The rerun keeps the stored
run's seed and names that run (``RunSpec.rerun_of``), so its folder and header say what it reruns.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError
from ..run.spec import RunSpec
from ..model.statuses import is_bad


@dataclass(frozen=True)
class LastFailed:
    """The latest run of a report folder and what in it did not pass."""

    run_dir: Path
    spec: RunSpec  # the stored run's spec: its profile, seed and tolerance overrides judge the rerun
    case_ids: tuple[str, ...]
    targets: tuple[str, ...]  # what the rerun judges: the targets that failed, or those named instead
    checks: tuple[str, ...]
    rows: tuple[tuple[str, str, str], ...]  # (case id, target, check) of each row the rerun judges
    failed_on: tuple[str, ...] = ()  # the targets whose rows did not pass in the stored run


def last_failed(report_dir: str, targets: tuple[str, ...] = ()) -> LastFailed:
    """What did not pass in ``<report_dir>/latest``, to judge again on the same targets or on
    ``targets`` instead; UsageError when the folder holds no run."""
    from ..reports import latest_run, load_document

    folder = latest_run(report_dir)
    if folder is None:
        raise UsageError(f"--last-failed reruns what did not pass in the latest run of {report_dir!r}, which "
                         f"holds no run; run a sweep first or give --report-dir DIR")
    document = load_document(folder)
    spec = RunSpec.from_json(document.get("spec"), str(folder / "results.json"))
    bad = [row for row in document["results"] if is_bad(row["status"])]
    failed_on = tuple(t for t in spec.targets if any(row["target"] == t for row in bad))
    rows = tuple((row["case_id"], row["target"], row.get("check", "reference")) for row in bad)
    if targets:  # each failing case and check once per target named
        rows = tuple(dict.fromkeys((case_id, target, check) for case_id, _, check in rows for target in targets))
    return LastFailed(folder, spec, tuple(dict.fromkeys(row["case_id"] for row in bad)), tuple(targets) or failed_on,
                      tuple(c for c in spec.checks if any(row.get("check", "reference") == c for row in bad)),
                      rows, failed_on)
