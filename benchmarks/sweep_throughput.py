"""Sweep throughput, before and after: serial and 2 workers, cold and warm JAX cache, where the time goes.

    python benchmarks/sweep_throughput.py                          # ci profile, 200 cases, this checkout
    git worktree add --detach /tmp/gr-before <commit>              # an earlier commit, outside this checkout
    python benchmarks/sweep_throughput.py --before /tmp/gr-before  # the same table for both, side by side
    python benchmarks/sweep_throughput.py --cases 60 --workers 0   # the 60-case in-process profile only
    python benchmarks/sweep_throughput.py --command                # the whole command, reports included

Each run is a fresh process (so "cold" means nothing compiled in memory either) that imports the
package from one checkout (``PYTHONPATH``; this checkout unless ``--before``) and judges the
same run spec through ``gradcheck_rnn.run.execute``, as ``gradcheck-rnn sweep --workers W`` does
minus the reports, with the targets fused-cpu and torch-native and every check of the profile.
With ``--command`` each column is the whole ``gradcheck-rnn sweep -n CASES --workers W`` command
instead (its start-up, its progress bar and its reports included), timed from outside; the rows
are read back from the run's results.json.
"cold" starts from an empty JAX cache folder (``GRADCHECK_RNN_JAX_CACHE``), "warm" is a new
process that reuses the folder the cold run of the same checkout and worker count filled. With
``--before`` every column runs for both checkouts back to back (before, after, before, ...), so
a change in the machine's load hits both sides alike: on these shared 2-core machines compare
the ratios, not the absolute seconds.

Rows:
- ``wall``, ``cases/s``, ``first row after`` (start-up: imports, workers, first compile);
- ``rows not passed`` and ``rows digest``: the verdicts; a speed change must not change them,
  so the digest (sha256 of every row's case id, target, check and status, sorted) is equal on
  both sides;
- ``JAX programs compiled``: new entries in the JAX compilation cache folder during the run (one
  per program XLA compiled, in any process); ``traced``/``lowered``/``cache hits``: jax's own
  monitoring events in the serial runs (a warm run that loads the serialized programs traces and
  lowers none; checkouts that only had the persistent cache traced and lowered each program to
  find it there);
- where the time goes, in-process runs (``--workers 0``): the float64 references (loop; jax without its compilation),
  JAX trace + lower + compile (jax.monitoring's compile events, cache loads included), each
  target's ``run`` and the rest (comparisons, the checks' own work, drawing cases, imports).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
TARGETS = ("fused-cpu", "torch-native")
JAX_EVENTS = {"/jax/core/compile/jaxpr_trace_duration": "traced",
              "/jax/core/compile/jaxpr_to_mlir_module_duration": "lowered",
              "/jax/core/compile/backend_compile_duration": "backend compile calls"}


def _install_timers(spent: dict[str, float], counts: dict[str, int]) -> None:
    """Accumulate seconds per reference, per target and for JAX compilation; count JAX events."""
    import jax.monitoring

    from gradcheck_rnn.references import jax_cudnn as jax_ref, loop
    from gradcheck_rnn.targets import Target

    def timed(key, func):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return func(*args, **kwargs)
            finally:
                name = key if isinstance(key, str) else key(*args)
                spent[name] += time.perf_counter() - start
                counts[f"calls: {name}"] += 1
        return wrapper

    loop.run_loop_reference = timed("reference loop", loop.run_loop_reference)
    jax_ref.run_jax_reference = timed("reference jax", jax_ref.run_jax_reference)
    Target.run = timed(lambda self, case: f"target {self.name}", Target.run)

    def on_duration(name: str, seconds: float, **_: object) -> None:
        if name.startswith("/jax/core/compile/"):  # cache loads included, as backend compile
            spent["jax compile"] += seconds
        if name in JAX_EVENTS:
            counts[JAX_EVENTS[name]] += 1

    def on_event(name: str, **_: object) -> None:
        if name == "/jax/compilation_cache/cache_hits":
            counts["cache hits"] += 1

    jax.monitoring.register_event_duration_secs_listener(on_duration)
    jax.monitoring.register_event_listener(on_event)


def _limit_threads() -> None:
    """Process set-up as the CLI does it, in whichever module the checkout keeps it."""
    try:
        from gradcheck_rnn.runtime import limit_torch_threads
    except ImportError:  # checkouts before gradcheck_rnn/runtime.py
        from gradcheck_rnn.cli import limit_torch_threads
    limit_torch_threads()


def _cache_entries(folder: str) -> int:
    """Programs in the JAX compilation cache folder (its own entries, not our artifacts)."""
    return sum(1 for p in Path(folder).iterdir() if p.is_file()) if os.path.isdir(folder) else 0


def measure(profile: str, cases: int, workers: int) -> dict[str, object]:
    """One run in this process (GRADCHECK_RNN_JAX_CACHE already set): wall time and breakdown."""
    start = time.perf_counter()  # imports count: a user's sweep pays them too
    from gradcheck_rnn.run import Execution, OnRow, RunSpec, Selection, execute

    try:  # 0 workers: judged in this process (--in-process); checkouts before it judged there with 1 worker
        execution = Execution(workers=max(1, workers), in_process=workers == 0)
    except TypeError:
        execution = Execution(workers=max(1, workers))
    here = getattr(execution, "in_process", workers == 1)  # judged in this process: its time is measurable
    try:  # as the CLI does: the pool's fork server imports while this process sets up and builds the spec
        from gradcheck_rnn.run import start_pool_early
    except ImportError:  # checkouts before it
        pass
    else:
        start_pool_early(execution)
    _limit_threads()
    cache = os.environ["GRADCHECK_RNN_JAX_CACHE"]
    entries = _cache_entries(cache)
    spent: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    if here:
        counts.update(dict.fromkeys([*JAX_EVENTS.values(), "cache hits"], 0))
        spent["jax compile"] = 0.0
        _install_timers(spent, counts)
    spec, _ = RunSpec.build(profile, TARGETS, Selection(cases=cases))
    first: list[float] = []
    results = execute(spec, execution, observers=(OnRow(lambda r: first or first.append(time.perf_counter())),))
    wall = time.perf_counter() - start
    # The jax reference's time includes its compilation, which is listed on its own.
    spent["reference jax"] -= spent.get("jax compile", 0.0)
    if here:
        spent["rest"] = wall - sum(spent.values())
    rows = [f"{r.case_id} {r.target} {getattr(r, 'check', '')} {r.status}" for r in results]
    try:  # what `sweep` without --workers would use here and now (checkouts before issue 18: the cores)
        from gradcheck_rnn.run import default_workers

        chosen = default_workers(cases)
    except TypeError:
        chosen = default_workers()
    chosen = chosen[0] if isinstance(chosen, tuple) else chosen  # (count, why) since issue 25
    return {"wall": wall, "first_row": first[0] - start, "rows": len(results), "default_workers": chosen,
            "bad": sum(r.status not in ("pass", "skip") for r in results),
            # sorted: the order of a case's checks is not a verdict (determinism moved after reference)
            "digest": hashlib.sha256("\n".join(sorted(rows)).encode()).hexdigest()[:12],
            "compiled": _cache_entries(cache) - entries, "spent": dict(spent), "counts": dict(counts)}


def run_command(tree: Path, profile: str, cases: int, workers: int, env: dict[str, str]) -> dict[str, object]:
    """The whole ``gradcheck-rnn sweep`` command of ``tree``, timed from outside; its rows from results.json."""
    with tempfile.TemporaryDirectory(prefix="sweep-reports-") as reports:
        command = [sys.executable, "-c", "from gradcheck_rnn.cli import main; main()", "sweep", "--config", profile,
                   "-n", str(cases), "--workers", str(workers), "--report-dir", reports,
                   *[arg for target in TARGETS for arg in ("-t", target)]]
        start = time.perf_counter()
        done = subprocess.run(command, env=env, cwd=tree, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if done.returncode not in (0, 1):
            sys.exit(f"the command in {tree} failed:\n{done.stderr[-3000:]}")
        document = json.loads((Path(reports) / "latest" / "results.json").read_text())
    rows = [f"{r['case_id']} {r['target']} {r.get('check', '')} {r['status']}" for r in document["results"]]
    return {"wall": wall, "rows": len(rows), "bad": sum(r["status"] not in ("pass", "skip") for r in document["results"]),
            "digest": hashlib.sha256("\n".join(sorted(rows)).encode()).hexdigest()[:12], "spent": {}, "counts": {}}


def run_child(tree: Path, profile: str, cases: int, workers: int, cache: str, command: bool = False) -> dict[str, object]:
    env = dict(os.environ, GRADCHECK_RNN_JAX_CACHE=cache, PYTHONPATH=str(tree))
    env.pop("JAX_ENABLE_X64", None)
    if command:
        entries = _cache_entries(cache)
        return run_command(tree, profile, cases, workers, env) | {"compiled": _cache_entries(cache) - entries}
    done = subprocess.run([sys.executable, __file__, "--child", str(workers), "--profile", profile,
                           "--cases", str(cases)], env=env, cwd=tree, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"the run in {tree} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _git_head(tree: Path) -> str:
    done = subprocess.run(["git", "-C", str(tree), "log", "-1", "--format=%h"], capture_output=True, text=True)
    return done.stdout.strip() or "?"


def _load() -> str:
    try:
        return " ".join(f"{v:.1f}" for v in os.getloadavg())
    except OSError:
        return "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="ci")
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="worker counts to measure (0: --in-process)")
    parser.add_argument("--before", type=Path, default=None,
                        help="a checkout of an earlier commit (git worktree) measured beside --after")
    parser.add_argument("--after", type=Path, default=HERE, help="the checkout measured (default: this one)")
    parser.add_argument("--command", action="store_true",
                        help="time the whole gradcheck-rnn sweep command (reports included) instead of the run alone")
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(measure(args.profile, args.cases, args.child)))
        return
    after = args.after.resolve()
    trees = {"after": after} if args.before is None else {"before": args.before.resolve(), "after": after}
    columns: dict[str, dict[str, object]] = {}
    load_before = _load()
    caches = {}
    try:
        for workers in args.workers:
            for side in trees:
                caches[side, workers] = tempfile.mkdtemp(prefix=f"jax-cache-{side}-{workers}w-")
            for state in ("cold", "warm"):
                for side, tree in trees.items():
                    name = f"{workers}w {state}" + (f" {side}" if len(trees) > 1 else "")
                    columns[name] = run_child(tree, args.profile, args.cases, workers, caches[side, workers],
                                             args.command)
                    print(f"measured {name}: {columns[name]['wall']:.1f} s", file=sys.stderr)
    finally:
        import shutil

        for folder in caches.values():
            shutil.rmtree(folder, ignore_errors=True)
    names = list(columns)
    width = max(13, max(len(n) for n in names) + 2)
    what = "the whole sweep command, reports included" if args.command else "the run without its reports"
    print(f"profile {args.profile}, {args.cases} cases x {', '.join(TARGETS)}, every check of the profile; {what}; "
          f"{os.cpu_count()} cores; {time.strftime('%Y-%m-%d %H:%M')}; load average {load_before} -> {_load()}")
    print("; ".join(f"{side} = {tree} ({_git_head(tree)})" for side, tree in trees.items()))

    def row(label: str, cells: list[str]) -> None:
        print(f"{label:30}" + "".join(f"{c:>{width}}" for c in cells))

    def get(n: str, key: str, sub: str | None = None, fmt: str = "{:.1f}") -> str:
        value = columns[n].get(key) if sub is None else columns[n].get(key, {}).get(sub)
        return "-" if value is None else fmt.format(value)

    row("", names)
    row("wall (s)", [get(n, "wall") for n in names])
    row("cases/s", [f"{args.cases / columns[n]['wall']:.1f}" for n in names])
    if not args.command:  # the command's own header says its default worker count
        row("first row after (s)", [get(n, "first_row") for n in names])
        row("default --workers then", [get(n, "default_workers", fmt="{:d}") for n in names])
    row("rows not passed", [get(n, "bad", fmt="{:d}") for n in names])
    row("rows digest", [get(n, "digest", fmt="{}") for n in names])
    row("JAX programs compiled", [get(n, "compiled", fmt="{:d}") for n in names])
    serial = [n for n in names if n.startswith("0w")]  # judged in this process: its time is measurable
    if serial:
        for key in ("traced", "lowered", "cache hits", "calls: reference jax"):
            row(f"  {key} (serial)", [get(n, "counts", key, "{:d}") if n in serial else "-" for n in names])
        keys = sorted({k for n in serial for k in columns[n]["spent"]}, key=lambda k: (k == "rest", k))
        print("where the time goes, in-process runs (s):")
        for key in keys:
            row(f"  {key}", [get(n, "spent", key) if n in serial else "-" for n in names])
        for n in serial:
            spent = columns[n]["spent"]
            jax_s = spent.get("reference jax", 0.0) + spent.get("jax compile", 0.0)
            print(f"  JAX share, {n}: {jax_s:.1f} of {columns[n]['wall']:.1f} s ({jax_s / columns[n]['wall']:.0%})")
    for state in ("cold", "warm"):  # the issue 18 goal: 2 workers <= 0.6x serial on an idle machine
        for side in trees:
            suffix = f" {side}" if len(trees) > 1 else ""
            one, two = f"1w {state}{suffix}", f"2w {state}{suffix}"
            if one in columns and two in columns:
                print(f"2 workers / serial, {state}{suffix}: {columns[two]['wall'] / columns[one]['wall']:.2f}x")
    if len(trees) > 1:
        print("after / before:")
        for n in names:
            if n.endswith(" after"):
                b = n[:-len(" after")] + " before"
                print(f"  {n[:-len(' after')]:12} wall {columns[n]['wall'] / columns[b]['wall']:.2f}x, "
                      f"same rows: {columns[n]['digest'] == columns[b]['digest']}")


if __name__ == "__main__":
    main()
