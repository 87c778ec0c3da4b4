"""The families' JAX programs: how many a sweep needs, and what a cold and a warm process pay.

    python benchmarks/family_programs.py                  # counts for 3,000 cases; 40 matrix cases timed
    python benchmarks/family_programs.py --cases 40 --profile families

Counts: the programs (:func:`gradcheck_rnn.references.buckets.program_key`) the first ``--count``
cases of each profile need. Each is compiled once and then loaded by every later process
(references/programs.py); before issue 42 every process compiled each of its family programs again.

Timing: the JAX reference of the first ``--cases`` cases of ``--profile`` in a fresh process with
an empty cache folder (cold: every program compiled and written), then in another fresh process
with the same folder (warm: every program loaded), CPU and wall seconds each.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent


def _count(profile: str, cases: int) -> int:
    from gradcheck_rnn.model.profiles import draw_cases, load_profile
    from gradcheck_rnn.references.buckets import program_key

    return len({program_key(case.config) for case in draw_cases(load_profile(profile), 0, cases)})


def _child(profile: str, cases: int) -> None:
    import torch

    torch.set_num_threads(1)
    from gradcheck_rnn.model.profiles import draw_cases, load_profile
    from gradcheck_rnn.references import run_reference
    from gradcheck_rnn.references import jax_family

    drawn = list(draw_cases(load_profile(profile), 0, cases))
    wall, cpu = time.perf_counter(), time.process_time()
    for case in drawn:
        run_reference("jax", case)
    print(f"  {cases} cases: {time.perf_counter() - wall:6.2f} s wall, {time.process_time() - cpu:6.2f} s CPU; "
          f"compiled {jax_family.program_count()}, loaded {jax_family.load_count()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=40)
    parser.add_argument("--profile", default="matrix")
    parser.add_argument("--count", type=int, default=3000, help="cases whose programs are counted")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.profile, args.cases)
        return
    print(f"load average {os.getloadavg()[0]:.1f}")
    for profile in ("matrix", "families", "ci", "nightly"):
        print(f"{profile}: {args.count} cases need {_count(profile, args.count)} JAX programs")
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "GRADCHECK_RNN_JAX_CACHE": cache, "PYTHONPATH": str(HERE)}
        for run in ("cold", "warm"):
            print(f"{args.profile}, {run} process:")
            subprocess.run([sys.executable, __file__, "--child", "--profile", args.profile, "--cases", str(args.cases)],
                           env=env, check=True)


if __name__ == "__main__":
    main()
