"""What each check costs per case on one target: CPU seconds of judging it, the case's float64 truth
(references, drift allowance, fd witness) computed beforehand and left out, so the figure is
what turning the check on adds to a sweep. CPU time, not wall time: a shared machine's load
changes the wall clock far more than the work.

    python benchmarks/check_costs.py -c ci -n 200 -t fused-cpu
    python benchmarks/check_costs.py -c matrix -n 60 -t fused-cpu --check segments --check reference
"""

from __future__ import annotations

import argparse
import time

from gradcheck_rnn.judging.checks import CHECKS, enabled
from gradcheck_rnn.judging.context import CaseContext
from gradcheck_rnn.judging.judge import TargetCall, judge_check, judged_case
from gradcheck_rnn.model.profiles import draw_cases, load_profile
from gradcheck_rnn.runtime import set_up_process
from gradcheck_rnn.targets import resolve_target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-c", "--config", default="ci")
    parser.add_argument("-n", "--cases", type=int, default=200)
    parser.add_argument("-s", "--seed", type=int, default=0)
    parser.add_argument("-t", "--target", default="fused-cpu")
    parser.add_argument("--check", action="append", choices=list(CHECKS), help="default: the profile's")
    args = parser.parse_args()
    set_up_process()
    profile = load_profile(args.config)
    checks = args.check or enabled(profile.checks, profile.source)
    target = resolve_target(args.target)
    tolerances = profile.tolerance_table()
    seconds = dict.fromkeys(checks, 0.0)
    statuses: dict[str, dict[str, int]] = {c: {} for c in checks}
    for case in draw_cases(profile, args.seed, args.cases):
        judged = judged_case(case, target)
        if isinstance(judged, str) or target.supports(judged.config) is not True \
                or target.supports_case(judged) is not True:
            continue
        context = CaseContext(judged)
        _ = context.expected, context.disagreement  # the truth, untimed
        if "fd" in checks:
            context.truth(CHECKS["fd"])
        call = TargetCall(target, context)
        call.base_with_problems()  # the shared base run, untimed: every check may use it
        for check in checks:
            start = time.process_time()
            row = judge_check(call, check, tolerances)
            seconds[check] += time.process_time() - start
            statuses[check][row.status] = statuses[check].get(row.status, 0) + 1
    print(f"{args.cases} {args.config} cases (seed {args.seed}) on {args.target}: CPU ms per case, "
          f"the truth and the base run excluded")
    for check in checks:
        tally = ", ".join(f"{n} {s}" for s, n in sorted(statuses[check].items()))
        print(f"  {check:12s} {1000 * seconds[check] / args.cases:8.1f} ms   ({tally})")


if __name__ == "__main__":
    main()
