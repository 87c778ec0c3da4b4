"""Supervisor memory against the number of cases: peak RSS of `gradcheck-rnn sweep` for N and F·N cases.

    python benchmarks/memory.py                      # 500 and 5000 cases, 2 workers
    python benchmarks/memory.py --cases 1000 --factor 20
    python benchmarks/memory.py --cases 200 --workers 1
    python benchmarks/memory.py --cases 5000 --factor 20 --dask   # on a LocalCluster of 2 workers

Each run is a fresh process that calls the CLI in-process (``gradcheck_rnn.cli.main``) and then
reports its own peak resident set (``getrusage(RUSAGE_SELF).ru_maxrss``): with worker processes
that is the supervisor alone, which receives every row, keeps the run's tallies and writes the
reports; the workers' memory does not grow with the run. The profile is tiny on purpose (GRU,
one layer, I and H up to 3, T up to 4, float64, the reference comparison only, every other check
off; one target, fused-cpu), so that 5,000 cases take a few minutes on 2 cores and what is
measured is the bookkeeping per row, not the judging. The goals (issue 28): the peak for 20,000
cases is at most 1.1 times the peak for 1,000; with ``--dask`` (a ``LocalCluster`` of ``--workers``
single-thread worker processes, started here and shared by both runs) the peak for 100,000 cases
is at most 1.2 times the peak for 5,000.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Iterator

PROFILE = """
[sweep]
cases = 10
seed = 0
[draw]
modes = { gru = 1 }
layers = [1, 1]
bidirectional = 0.0
input_size = [1, 3]
hidden_size = [1, 3]
max_len = [1, 4]
batch_size = [1, 2]
dtypes = { f64 = 1 }
"""


def profile_text() -> str:
    """The tiny profile with every check but the reference comparison turned off."""
    from gradcheck_rnn.judging.checks import check_names

    return PROFILE + "[checks]\n" + "".join(f"{name} = {'true' if name == 'reference' else 'false'}\n"
                                           for name in check_names())


def child(cases: int, workers: int, folder: Path, scheduler: str | None) -> dict[str, object]:
    """One sweep in this process; its peak RSS, wall time and the size of what it wrote."""
    from gradcheck_rnn.cli import main as cli

    profile = folder / "tiny.toml"
    profile.write_text(profile_text())
    start = time.perf_counter()
    try:
        execution = ["--executor", "dask", "--scheduler", scheduler] if scheduler else ["--workers", str(workers)]
        cli(["sweep", "-c", str(profile), "-n", str(cases), "-t", "fused-cpu", *execution,
             "--report-dir", str(folder / "reports")], standalone_mode=False)
    except SystemExit:
        pass
    wall = time.perf_counter() - start
    # the peak of the sweep itself, before this script parses the whole results.json below
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    run = (folder / "reports" / "latest").resolve()
    document = json.loads((run / "results.json").read_text())
    return {"cases": cases, "workers": workers, "peak_mb": peak_mb,
            "wall": wall, "results_json_mb": (run / "results.json").stat().st_size / 2**20,
            "rows": len(document["results"]), "passed": sum(r["status"] == "pass" for r in document["results"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=500, help="N: runs N and F·N cases (default 500)")
    parser.add_argument("--factor", type=int, default=10, help="F (default 10)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--tree", type=Path, default=Path(__file__).resolve().parent.parent,
                        help="the checkout to measure (default: this one), e.g. a git worktree of an earlier commit")
    parser.add_argument("--dask", action="store_true", help="judge on a LocalCluster of --workers workers")
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--scheduler", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        with tempfile.TemporaryDirectory(prefix="gradcheck-memory-") as folder:
            result = child(args.child, args.workers, Path(folder), args.scheduler)
        print(json.dumps(result))
        return
    rows = []
    with tempfile.TemporaryDirectory(prefix="gradcheck-memory-jax-") as cache, ExitStack() as stack:
        # A JAX cache of its own: what other runs on the machine left there is no part of this.
        os.environ.update(PYTHONPATH=str(args.tree.resolve()), GRADCHECK_RNN_JAX_CACHE=cache)
        extra = ["--scheduler", stack.enter_context(local_cluster(args.workers))] if args.dask else []
        for cases in (args.cases, args.factor * args.cases):
            start = time.strftime("%H:%M")
            done = subprocess.run([sys.executable, __file__, "--child", str(cases), "--workers", str(args.workers),
                                   *extra], capture_output=True, text=True, cwd=args.tree)
            if done.returncode:
                sys.exit(f"the {cases}-case run failed:\n{done.stderr[-3000:]}")
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"measured {cases} cases ({start}-{time.strftime('%H:%M')}, load {os.getloadavg()[0]:.1f})",
                  file=sys.stderr)
    where = f"a Dask LocalCluster of {args.workers} worker(s)" if args.dask else f"{args.workers} worker(s)"
    print(f"tiny GRU profile, reference check only, fused-cpu, {where}; {os.cpu_count()} cores; "
          f"load {os.getloadavg()[0]:.1f}; {time.strftime('%Y-%m-%d %H:%M')}; {args.tree}")
    print(f"{'cases':>8} {'rows':>7} {'passed':>7} {'peak RSS (MB)':>14} {'wall (s)':>9} {'results.json (MB)':>18}")
    for row in rows:
        print(f"{row['cases']:>8} {row['rows']:>7} {row['passed']:>7} {row['peak_mb']:>14.1f} {row['wall']:>9.1f} "
              f"{row['results_json_mb']:>18.2f}")
    grown = (rows[1]["peak_mb"] - rows[0]["peak_mb"]) * 1024 / max(1, rows[1]["rows"] - rows[0]["rows"])
    print(f"peak RSS per extra row: {grown:.1f} kB")
    goal = "1.2 for 5,000 and 100,000 cases on Dask" if args.dask else "1.1 for 1,000 and 20,000 cases"
    print(f"peak ratio {rows[1]['peak_mb'] / rows[0]['peak_mb']:.2f} (goal: <= {goal})")


@contextmanager
def local_cluster(workers: int) -> Iterator[str]:
    """A Dask LocalCluster of ``workers`` single-thread worker processes; yields its address."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        yield cluster.scheduler_address


if __name__ == "__main__":
    main()
