"""``gradcheck-rnn merge``: the shards of one run (``sweep --shard K/N``) joined into the whole run.

Shard k/n judged the cases whose index i has ``i % n == k - 1``; every row records its case
index, so the merged rows are the rows of the unsharded run in its order, and its verdict and exit
code are the unsharded run's. Shards are refused (UsageError, one sentence) when a folder is not a
shard, when the specs differ in anything but the shard, or when a shard is missing or given twice.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..rows.result import CaseResult
from ..run.spec import RunSpec


def load_shard(run_dir: str | Path) -> tuple[Path, RunSpec, dict[str, Any]]:
    """A shard's folder, spec and results document; UsageError when it holds no shard."""
    from ..reports import load_document, resolve_run_dir

    folder = resolve_run_dir(run_dir)
    document = load_document(folder)
    spec = RunSpec.from_json(document.get("spec"), where=str(folder / "results.json"))
    if spec.shard is None:
        raise UsageError(f"{folder} is a whole run, not a shard; merge the folders of sweep --shard K/N runs")
    if document.get("complete") is False:
        raise UsageError(f"{folder} is an incomplete shard (stopped by --fail-fast); run that shard again "
                         f"without --fail-fast")
    return folder, spec, document


def merge_shards(run_dirs: list[str]) -> tuple[RunSpec, list[CaseResult], list[Path], dict[str, Any] | None]:
    """The whole run's spec, rows (in case order) and drift comparison (results.json's ``"drift"``
    joined over the shards, None without ``--baseline``) from its shards' run folders."""
    shards = [load_shard(d) for d in run_dirs]
    folder0, spec0, _ = shards[0]
    n = spec0.shard[1]
    seen: dict[int, Path] = {}
    for folder, spec, _ in shards:
        differences = spec0.differences(spec) or ([f"shard count ({n} vs {spec.shard[1]})"] if spec.shard[1] != n else [])
        if differences:
            raise UsageError(f"{folder} is not a shard of the same run as {folder0}: it differs in "
                             f"{', '.join(differences)}")
        k = spec.shard[0]
        if k in seen:
            raise UsageError(f"shard {k}/{n} is given twice ({seen[k]} and {folder}); give each shard once")
        seen[k] = folder
    missing = [f"{k}/{n}" for k in range(1, n + 1) if k not in seen]
    if missing:
        raise UsageError(f"shard {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing; "
                         f"merge needs all {n} shards of the run")
    rows = [row for _, _, document in shards for row in document["results"]]
    # Each case lives in one shard, whose rows keep judge's order; a stable sort keeps it.
    rows.sort(key=lambda row: row["case_index"])
    drift = merge_drift([(folder, document.get("drift")) for folder, _, document in shards])
    return spec0.unsharded(), [CaseResult.from_json(row) for row in rows], [folder for folder, _, _ in shards], drift


def merge_drift(sections: list[tuple[Path, dict[str, Any] | None]]) -> dict[str, Any] | None:
    """The shards' drift comparisons (``sweep --baseline``) as one: the same baseline, factor and
    ``--fail-on-drift`` in every shard (else UsageError), the compared rows added up, the drifted
    rows together; None when no shard had a baseline."""
    first_folder, first = sections[0]
    settings = ("baseline", "factor", "floor", "fail_on_drift")
    for folder, drift in sections[1:]:
        if (drift is None) != (first is None):
            with_one, without = (folder, first_folder) if first is None else (first_folder, folder)
            raise UsageError(f"{with_one} was compared with a baseline and {without} was not; give every shard "
                             f"the same --baseline")
        if drift is not None:
            differing = [key for key in settings if drift.get(key) != first.get(key)]
            if differing:
                raise UsageError(f"{folder} was compared with its baseline unlike {first_folder}: it differs in "
                                 f"{', '.join(differing)} ({', '.join(repr(drift.get(k)) for k in differing)} vs "
                                 f"{', '.join(repr(first.get(k)) for k in differing)})")
    if first is None:
        return None
    return {**{key: first.get(key) for key in settings},
            "compared": sum(drift["compared"] for _, drift in sections),
            "rows": [row for _, drift in sections for row in drift["rows"]]}


def merged_run(spec: RunSpec, results: list[CaseResult], drift: dict[str, Any] | None, log: Any) -> Any:
    """The merged run of :func:`merge_shards`' rows, each added to the run's ``log`` as its shard
    finished it (:func:`~gradcheck_rnn.rows.result.finish`), with the engine's one verdict of the
    log's tally (the console's and the reports' tally too)."""
    from ..rows.store import conclude

    for result in results:
        log.add(result)
    return conclude(results, spec, log.tally, extra=None if drift is None else {"drift": drift})
