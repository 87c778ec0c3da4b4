"""What the jvp and gradgrad checks cost per case beside the reference check (issue 47): in one
process, on the ci profile's cases, the programs already loaded (the first 20 cases warm them up);
jvp judged on fused-cpu, gradgrad on torch-native (fused-cpu refuses second order).

    python benchmarks/product_checks_cost.py [CASES]

Prints, per part, the median and mean per case: each check's float64 truth (both references'
outputs and gradients; their output tangents, or Hessian-vector products, along the two
directions) and the target's own time in each check (jvp's and gradgrad's are their two calls of
jvp or hvp: the base run is shared). torch-native skips zero-length cases: its means are over the others.
"""

from __future__ import annotations

import statistics
import sys
import time

from gradcheck_rnn.judging.context import CaseContext
from gradcheck_rnn.judging.judge import judge
from gradcheck_rnn.model.profiles import draw_cases, load_profile
from gradcheck_rnn.targets import resolve_target

CHECKS = ("reference", "jvp", "gradgrad")


def main(count: int) -> None:
    fused, native = resolve_target("fused-cpu"), resolve_target("torch-native")
    cases = list(draw_cases(load_profile("ci"), 0, count))
    for case in cases[:20]:
        list(judge(CaseContext(case), [fused, native], checks=CHECKS))
    parts: dict[str, list[float]] = {}
    for case in cases:
        context = CaseContext(case)
        for check, truth in (("reference", "disagreement"), ("jvp", "jvp"), ("gradgrad", "hvp")):
            start = time.perf_counter()
            getattr(context, truth)  # both references, and their agreement
            parts.setdefault(f"{check}: truth", []).append(time.perf_counter() - start)
        rows = list(judge(context, [fused, native], checks=CHECKS))
        for row in rows:
            if row.status != "skip" and (row.target, row.check) != ("torch-native", "jvp"):
                parts.setdefault(f"{row.check}: {row.target}", []).append(row.seconds)
    for name, values in parts.items():
        print(f"{name}: median {statistics.median(values) * 1e3:.1f} ms, mean {statistics.mean(values) * 1e3:.1f} ms "
              f"({len(values)} cases)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
