"""The cuDNN cells' JAX reference: their bucketed program against the generic program of their step.

    python benchmarks/jax_programs.py               # the first 60 ci cases, each program in a fresh process
    python benchmarks/jax_programs.py --cases 200

Both programs compute the same numbers (tests/test_jax_reference.py); this measures what each
costs a sweep of the ci profile, cold (``GRADCHECK_RNN_JAX_CACHE=""``: no persistent cache, no
artifacts), in a new process each: the first call (start-up and its compile), the whole run and
the programs compiled. It is why the cuDNN families name the bucketed program as their
``jax_program`` (issue 37).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
PROGRAMS = ("bucketed", "generic")


def _child(program: str, cases: int) -> None:
    """Run one program over the first ``cases`` ci cases and print one line of figures."""
    from gradcheck_rnn.model.profiles import draw_cases, load_profile
    from gradcheck_rnn.references import jax_cudnn, jax_family

    drawn = list(draw_cases(load_profile("ci"), 0, cases))
    run = jax_cudnn.run_jax_reference if program == "bucketed" else jax_family.run_jax_family_reference
    start = time.perf_counter()
    run(drawn[0])
    first = time.perf_counter() - start
    for case in drawn[1:]:
        run(case)
    total = time.perf_counter() - start
    compiled = jax_cudnn.compile_count() if program == "bucketed" else jax_family.program_count()
    print(f"{program:9s} first call {first:6.2f} s   all {cases} cases {total:6.2f} s   programs compiled {compiled}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=60)
    parser.add_argument("--child", choices=PROGRAMS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child, args.cases)
        return
    env = {**os.environ, "GRADCHECK_RNN_JAX_CACHE": "", "PYTHONPATH": str(HERE)}
    print(f"ci profile, first {args.cases} cases, cold; load average {os.getloadavg()[0]:.1f}")
    for program in PROGRAMS:
        subprocess.run([sys.executable, __file__, "--child", program, "--cases", str(args.cases)], env=env, check=True)


if __name__ == "__main__":
    main()
