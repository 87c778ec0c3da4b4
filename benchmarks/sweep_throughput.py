"""Sweep throughput: cases per second with 1 and 2 workers, cold and warm JAX cache, and where the time goes.

    python benchmarks/sweep_throughput.py                 # ci profile, 200 cases, default targets, every check
    python benchmarks/sweep_throughput.py --cases 50 --profile nightly

Each of the four runs is a fresh process (so "cold" means nothing compiled in memory either),
judging the same run spec through :func:`gradcheck_rnn.run.execute`, as ``gradcheck-rnn sweep
--workers W`` does minus the reports. "cold" starts from an empty JAX persistent compile cache
(GRADCHECK_RNN_JAX_CACHE), "warm" reuses the one the cold run of the same worker count filled.

Where the time goes is measured in the serial runs, in-process: the float64 references (loop,
jax without compilation), JAX trace + lower + compile (jax.monitoring's compile events), each
target's ``run`` and the rest (comparisons, the checks' own work, drawing cases). With 2 workers
the same work is split over two processes; what is added is their start-up (torch and jax
imported in each: the time until the first row arrives) and the supervisor's share.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict


def _install_timers(spent: dict[str, float]) -> None:
    """Accumulate seconds per reference, per target and for JAX compilation into ``spent``."""
    import jax.monitoring

    from gradcheck_rnn.references import jax_ref, loop
    from gradcheck_rnn.targets import Target

    def timed(key, func):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return func(*args, **kwargs)
            finally:
                spent[key if isinstance(key, str) else key(*args)] += time.perf_counter() - start
        return wrapper

    loop.run_loop_reference = timed("reference loop", loop.run_loop_reference)
    jax_ref.run_jax_reference = timed("reference jax", jax_ref.run_jax_reference)
    Target.run = timed(lambda self, case: f"target {self.name}", Target.run)

    def on_event(name: str, seconds: float, **_: object) -> None:
        if name.startswith("/jax/core/compile/"):  # cache loads included, as backend compile
            spent["jax compile"] += seconds

    jax.monitoring.register_event_duration_secs_listener(on_event)


def measure(profile: str, cases: int, workers: int) -> dict[str, object]:
    """One run in this process (GRADCHECK_RNN_JAX_CACHE already set): wall time and breakdown."""
    from gradcheck_rnn.cli import limit_torch_threads
    from gradcheck_rnn.run import Execution, RunSpec, execute

    limit_torch_threads()
    spent: dict[str, float] = defaultdict(float)
    start = time.perf_counter()  # jax's import counts in both: the timers import it, workers do too
    if workers == 1:
        _install_timers(spent)
    spec = RunSpec.build(profile, cases=cases)
    first: list[float] = []
    results = execute(spec, Execution(workers=workers), on_result=lambda r: first or first.append(time.perf_counter()))
    wall = time.perf_counter() - start
    # The jax reference's time includes its compilation, which is listed on its own.
    spent["reference jax"] -= spent.get("jax compile", 0.0)
    if workers == 1:
        spent["rest"] = wall - sum(spent.values())
    return {"wall": wall, "first_row": first[0] - start, "rows": len(results),
            "bad": sum(r.status not in ("pass", "skip") for r in results), "spent": dict(spent)}


def run_child(profile: str, cases: int, workers: int, cache: str) -> dict[str, object]:
    env = dict(os.environ, GRADCHECK_RNN_JAX_CACHE=cache)
    output = subprocess.run([sys.executable, __file__, "--child", str(workers), "--profile", profile,
                             "--cases", str(cases)], env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="ci")
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(measure(args.profile, args.cases, args.child)))
        return
    columns: dict[str, dict[str, object]] = {}
    for workers in (1, 2):
        with tempfile.TemporaryDirectory(prefix="jax-cache-") as cache:
            for state in ("cold", "warm"):
                columns[f"{workers}w {state}"] = run_child(args.profile, args.cases, workers, cache)
                print(f"measured {workers} worker(s), {state} JAX cache", file=sys.stderr)
    names = list(columns)
    keys = sorted({k for c in columns.values() for k in c["spent"]}, key=lambda k: (k == "rest", k))
    print(f"profile {args.profile}, {args.cases} cases, default targets, every check of the profile; "
          f"{os.cpu_count()} cores; {time.strftime('%Y-%m-%d')}")
    print(f"{'':28}" + "".join(f"{n:>12}" for n in names))
    print(f"{'wall (s)':28}" + "".join(f"{columns[n]['wall']:12.1f}" for n in names))
    print(f"{'cases/s':28}" + "".join(f"{args.cases / columns[n]['wall']:12.1f}" for n in names))
    print(f"{'first row after (s)':28}" + "".join(f"{columns[n]['first_row']:12.1f}" for n in names))
    print(f"{'rows not passed':28}" + "".join(f"{columns[n]['bad']:12d}" for n in names))
    print("where the time goes, serial runs (s):")
    for key in keys:
        print(f"  {key:26}" + "".join(f"{columns[n]['spent'][key]:12.1f}" if key in columns[n]["spent"]
                                       else f"{'-':>12}" for n in names))


if __name__ == "__main__":
    main()
