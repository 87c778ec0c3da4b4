"""What a layout and a kernel configuration cost per target run: CPU milliseconds of one run of the
target on each case of a profile, contiguous and under each layout (``-dyT``, ``-dyS``, ``-dyE``,
``-xS``), and, for a target that declares kernel configurations, under each of its values. The
truth is not computed: a layout changes only what the target is handed. CPU time, not wall time
(a shared machine's load moves the wall clock far more than the work).

    python benchmarks/layout_costs.py -c ci -n 100 -t fused-cpu
    python benchmarks/layout_costs.py -c matrix -n 40 -t fused-cpu
"""

from __future__ import annotations

import argparse
import time

from gradcheck_rnn.judging.judge import judged_case
from gradcheck_rnn.model.case import private_copy, with_changes
from gradcheck_rnn.model.profiles import draw_cases, load_profile
from gradcheck_rnn.runtime import set_up_process
from gradcheck_rnn.targets import resolve_target

LAYOUTS = {"contiguous": {}, "-dyT": {"grad_layout": "T"}, "-dyS": {"grad_layout": "S"},
           "-dyE": {"grad_layout": "E"}, "-xS": {"input_layout": "S"}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-c", "--config", default="ci")
    parser.add_argument("-n", "--cases", type=int, default=100)
    parser.add_argument("-s", "--seed", type=int, default=0)
    parser.add_argument("-t", "--target", default="fused-cpu")
    args = parser.parse_args()
    set_up_process()
    profile = load_profile(args.config)
    target = resolve_target(args.target)
    seconds: dict[str, float] = {}
    runs: dict[str, int] = {}

    def timed(label: str, case) -> None:
        private = private_copy(case)
        start = time.process_time()
        target.run(private)
        seconds[label] = seconds.get(label, 0.0) + time.process_time() - start
        runs[label] = runs.get(label, 0) + 1

    for case in draw_cases(profile, args.seed, args.cases):
        judged = judged_case(with_changes(case, grad_layout="", input_layout="", kernel_config=()), target)
        if isinstance(judged, str) or target.supports_case(judged) is not True:
            continue
        target.run(private_copy(judged))  # warm: the first run of a shape pays torch's own set-up
        for label, layout in LAYOUTS.items():
            timed(label, with_changes(judged, **layout))
        for name, values in target.kernel_configs(judged.config).items():
            for value in values:
                timed(f"{name}={value}", with_changes(judged, kernel_config=((name, value),)))
    print(f"{args.cases} {args.config} cases (seed {args.seed}) on {args.target}: CPU ms per target run")
    for label, total in seconds.items():
        print(f"  {label:12s} {1000 * total / runs[label]:8.2f} ms   ({runs[label]} runs)")


if __name__ == "__main__":
    main()
