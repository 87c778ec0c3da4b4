"""What judging one case of each family costs, in cases of cuDNN's cells: the measured side of
``Family.case_work``, which the default worker count weighs a run's cases by.

Each profile's cases are judged twice in this process with every check the profile runs, on
fused-cpu (the first run loads or compiles the JAX programs); the second run's rows give the
seconds per case of each family (the sum of its rows' judging times), and the ratio to the mean
case of cuDNN's four cells on the ci profile:

    python benchmarks/case_work.py                       # ci 200, families 60, matrix 60 cases
    python benchmarks/case_work.py --cases 30

Measured with it: benchmarks/RESULTS.md, "Worker count by family".
"""

from __future__ import annotations

import argparse
import collections

import gradcheck_rnn as gr
from gradcheck_rnn.families import CUDNN_MODES, family

PROFILES = {"ci": 200, "families": 60, "matrix": 60}


def seconds_per_case(config: str, cases: int) -> dict[str, float]:
    """Per family drawn by ``config``'s first ``cases`` cases: the mean judging seconds of a case."""
    gr.sweep("fused-cpu", config=config, cases=cases, in_process=True)  # programs loaded or compiled
    run = gr.sweep("fused-cpu", config=config, cases=cases, in_process=True)
    assert len(run.results) == run.rows, "every row is kept in memory"
    seconds: dict[str, float] = collections.defaultdict(float)
    cases_of: dict[str, set] = collections.defaultdict(set)
    for row in run.results:
        seconds[row.mode] += row.seconds
        cases_of[row.mode].add(row.case_id)
    return {mode: seconds[mode] / len(cases_of[mode]) for mode in seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=None, help="cases of every profile (default: ci 200, others 60)")
    args = parser.parse_args()
    measured: dict[str, float] = {}
    for config, cases in PROFILES.items():
        measured.update(seconds_per_case(config, args.cases or cases))
    cell = sum(measured[m] for m in CUDNN_MODES) / len(CUDNN_MODES)
    print(f"{'family':<14}{'s per case':>12}{'ratio':>8}{'case_work':>11}")
    for mode, seconds in sorted(measured.items(), key=lambda item: item[1]):
        print(f"{mode:<14}{seconds:>12.3f}{seconds / cell:>8.1f}{family(mode).case_work:>11g}")


if __name__ == "__main__":
    main()
