"""``sweep --last-failed``: what did not pass in the latest run of a report folder, to judge again.

As pytest's ``--lf``: the rows whose status fails a run (fail, error, reference disagreement,
nondeterministic) name the case ids, targets and checks of the rerun, which judges them with the
stored run's profile and tolerance overrides. The rerun is one run spec of named cases, so it
judges every failing case id × every failing target × every failing check: exactly the failing rows
when each failing case failed on the same targets and checks (a mutant sweep), and the other
pairs of that product too when not.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .errors import UsageError
from .run.spec import RunSpec
from .statuses import is_bad


@dataclass(frozen=True)
class LastFailed:
    """The latest run of a report folder and what in it did not pass."""

    run_dir: Path
    spec: RunSpec  # the stored run's spec: its profile and tolerance overrides judge the rerun
    case_ids: tuple[str, ...]
    targets: tuple[str, ...]
    checks: tuple[str, ...]
    rows: int  # rows that did not pass


def last_failed(report_dir: str) -> LastFailed:
    """What did not pass in ``<report_dir>/latest``; UsageError when the folder holds no run."""
    from .reports import latest_run, load_document

    folder = latest_run(report_dir)
    if folder is None:
        raise UsageError(f"--last-failed reruns what did not pass in the latest run of {report_dir!r}, which "
                         f"holds no run; run a sweep first or give --report-dir DIR")
    document = load_document(folder)
    spec = RunSpec.from_json(document.get("spec"), str(folder / "results.json"))
    bad = [row for row in document["results"] if is_bad(row["status"])]
    return LastFailed(folder, spec, tuple(dict.fromkeys(row["case_id"] for row in bad)),
                      tuple(t for t in spec.targets if any(row["target"] == t for row in bad)),
                      tuple(c for c in spec.checks if any(row.get("check", "reference") == c for row in bad)),
                      len(bad))
