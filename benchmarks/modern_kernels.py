"""Forward + backward time of the project's s6 kernel (fused-cpu) against mambapy's pscan, side by side.

    .venv/bin/python benchmarks/modern_kernels.py            # full table
    .venv/bin/python benchmarks/modern_kernels.py --quick    # fewer rows and repeats

Issue 26 asks how the fused-cpu ``s6`` kernel (gradcheck_rnn/kernels/s6_cpu.py: a chunked scan
with a hand-written backward) compares with a real Mamba implementation on CPU: mambapy 1.2.0's
``selective_scan`` over ``pscan`` (a Blelloch scan with a hand-written backward), run through the
``mambapy`` target (gradcheck_rnn/targets/foreign/mambapy_target.py). Both sides run the same case
(float32, every sequence of full length, so mambapy makes one call, every gradient requested) and
return every output and gradient; each timing is one ``run(case)``, forward and backward, the
numpy-to-torch copies included on both sides. Runs alternate after a warm-up, so background load
hits both alike; each column is the median of the repeats, and the ratio is fused / mambapy (below
1.0: the fused kernel is faster). FlashRNN's vanilla backend against the slstm family comes when
that family lands.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gradcheck_rnn import Case  # noqa: E402
from gradcheck_rnn.runtime import limit_torch_threads  # noqa: E402
from gradcheck_rnn.targets import resolve_target  # noqa: E402

# (layers, I, H, N, R, T, B)
SIZES = [(1, 16, 16, 4, 1, 64, 4), (1, 64, 64, 16, 4, 256, 8), (2, 64, 64, 16, 4, 256, 8), (1, 64, 64, 16, 4, 1024, 4)]
QUICK = SIZES[:2]


def case_id(layers: int, I: int, H: int, N: int, R: int, T: int, B: int) -> str:
    return f"s6-L{layers}-uni-I{I}-H{H}-N{N}-R{R}-T{T}-B{B}-len{'.'.join([str(T)] * B)}-f32-s1"


def seconds(target, case: Case) -> float:
    start = time.perf_counter()
    target.run(case)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two sizes, 3 repeats")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    limit_torch_threads()
    fused, mamba = resolve_target("fused-cpu"), resolve_target("mambapy")
    repeats = 3 if args.quick else args.repeats
    print(f"{'case':<56} {'fused-cpu ms':>12} {'mambapy ms':>11} {'ratio':>6}")
    for size in QUICK if args.quick else SIZES:
        case = Case.from_id(case_id(*size))
        fused.run(case), mamba.run(case)  # warm-up
        times: dict[str, list[float]] = {"fused": [], "mamba": []}
        for _ in range(repeats):
            times["fused"].append(seconds(fused, case))
            times["mamba"].append(seconds(mamba, case))
        f, m = (statistics.median(times[k]) * 1e3 for k in ("fused", "mamba"))
        label = case.id if len(case.id) <= 56 else case.id[:40] + "…" + case.id[-15:]
        print(f"{label:<56} {f:>12.1f} {m:>11.1f} {f / m:>6.2f}")


if __name__ == "__main__":
    main()
