"""What the jvp check costs per case beside the reference check (issue 47): in one process, fused-cpu
on the ci profile's cases, the programs already loaded (the first 20 cases warm them up).

    python benchmarks/jvp_cost.py [CASES]

Prints, per part, the median and mean per case: each check's float64 truth (both references'
outputs and gradients; both references' output tangents along the two directions) and the
target's own time in each check (the jvp check's is its two jvp calls: the base run is shared).
"""

from __future__ import annotations

import statistics
import sys
import time

from gradcheck_rnn.judging.context import CaseContext
from gradcheck_rnn.judging.judge import judge
from gradcheck_rnn.model.profiles import draw_cases, load_profile
from gradcheck_rnn.targets import resolve_target


def main(count: int) -> None:
    target = resolve_target("fused-cpu")
    cases = list(draw_cases(load_profile("ci"), 0, count))
    for case in cases[:20]:
        list(judge(CaseContext(case), [target], checks=["reference", "jvp"]))
    parts: dict[str, list[float]] = {"reference: truth": [], "jvp: truth": [], "reference: target": [],
                                     "jvp: target": []}
    for case in cases:
        context = CaseContext(case)
        start = time.perf_counter()
        context.disagreement  # both references' outputs and gradients, and their agreement
        middle = time.perf_counter()
        context.jvp  # both references' output tangents along both directions, and their agreement
        end = time.perf_counter()
        reference, jvp = judge(context, [target], checks=["reference", "jvp"])
        parts["reference: truth"].append(middle - start)
        parts["jvp: truth"].append(end - middle)
        parts["reference: target"].append(reference.seconds)
        parts["jvp: target"].append(jvp.seconds)
    for name, values in parts.items():
        print(f"{name}: median {statistics.median(values) * 1e3:.1f} ms, mean {statistics.mean(values) * 1e3:.1f} ms")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
