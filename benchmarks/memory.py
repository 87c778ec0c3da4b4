"""Supervisor memory against the number of cases: peak RSS of `gradcheck-rnn sweep` for N and F·N cases.

    python benchmarks/memory.py                      # 500 and 5000 cases, 2 workers
    python benchmarks/memory.py --cases 1000 --factor 20
    python benchmarks/memory.py --cases 200 --workers 1

Each run is a fresh process that calls the CLI in-process (``gradcheck_rnn.cli.main``) and then
reports its own peak resident set (``getrusage(RUSAGE_SELF).ru_maxrss``): with worker processes
that is the supervisor alone, which receives every row, keeps the run's tallies and writes the
reports; the workers' memory does not grow with the run. The profile is tiny on purpose (GRU,
one layer, I and H up to 3, T up to 4, float64, the reference comparison only, every other check
off; one target, fused-cpu), so that 5,000 cases take a few minutes on 2 cores and what is
measured is the bookkeeping per row, not the judging. The goal (issue 28): the peak for 20,000
cases is at most 1.1 times the peak for 1,000.
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
from pathlib import Path

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
    from gradcheck_rnn.cli import ALL_CHECKS

    return PROFILE + "[checks]\n" + "".join(f"{name} = {'true' if name == 'reference' else 'false'}\n"
                                           for name in ALL_CHECKS)


def child(cases: int, workers: int, folder: Path) -> dict[str, object]:
    """One sweep in this process; its peak RSS, wall time and the size of what it wrote."""
    from gradcheck_rnn.cli import main as cli

    profile = folder / "tiny.toml"
    profile.write_text(profile_text())
    start = time.perf_counter()
    try:
        cli(["sweep", "-c", str(profile), "-n", str(cases), "-t", "fused-cpu", "--workers", str(workers),
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
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        with tempfile.TemporaryDirectory(prefix="gradcheck-memory-") as folder:
            result = child(args.child, args.workers, Path(folder))
        print(json.dumps(result))
        return
    rows = []
    with tempfile.TemporaryDirectory(prefix="gradcheck-memory-jax-") as cache:
        # A JAX cache of its own: what other runs on the machine left there is no part of this.
        env = dict(os.environ, PYTHONPATH=str(args.tree.resolve()), GRADCHECK_RNN_JAX_CACHE=cache)
        for cases in (args.cases, args.factor * args.cases):
            done = subprocess.run([sys.executable, __file__, "--child", str(cases), "--workers", str(args.workers)],
                                  capture_output=True, text=True, env=env, cwd=args.tree)
            if done.returncode:
                sys.exit(f"the {cases}-case run failed:\n{done.stderr[-3000:]}")
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"measured {cases} cases", file=sys.stderr)
    print(f"tiny GRU profile, reference check only, fused-cpu, {args.workers} worker(s); {os.cpu_count()} cores; "
          f"load {os.getloadavg()[0]:.1f}; {time.strftime('%Y-%m-%d %H:%M')}; {args.tree}")
    print(f"{'cases':>8} {'rows':>7} {'passed':>7} {'peak RSS (MB)':>14} {'wall (s)':>9} {'results.json (MB)':>18}")
    for row in rows:
        print(f"{row['cases']:>8} {row['rows']:>7} {row['passed']:>7} {row['peak_mb']:>14.1f} {row['wall']:>9.1f} "
              f"{row['results_json_mb']:>18.2f}")
    grown = (rows[1]["peak_mb"] - rows[0]["peak_mb"]) * 1024 / max(1, rows[1]["rows"] - rows[0]["rows"])
    print(f"peak RSS per extra row: {grown:.1f} kB")
    print(f"peak ratio {rows[1]['peak_mb'] / rows[0]['peak_mb']:.2f} (goal: <= 1.1 for 1,000 and 20,000 cases)")


if __name__ == "__main__":
    main()
