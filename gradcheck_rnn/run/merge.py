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
from ..result import CaseResult
from .spec import RunSpec


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


def merge_shards(run_dirs: list[str]) -> tuple[RunSpec, list[CaseResult], list[Path]]:
    """The whole run's spec and rows (in case order) from its shards' run folders."""
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
    return spec0.unsharded(), [CaseResult.from_json(row) for row in rows], [folder for folder, _, _ in shards]
