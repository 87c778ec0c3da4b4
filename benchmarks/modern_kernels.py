"""Forward + backward time of the project's fused-cpu kernels against real implementations, side by side:
s6 against mambapy's pscan, slstm against FlashRNN's vanilla backend (and its vanilla_fwbw), gla,
gdn, rwkv7, kda and deltaproduct against flash-linear-attention's naive recurrences (rwkv7:
``dplr_recurrence``; kda: ``naive_recurrent_kda``; deltaproduct: ``naive_recurrent_gated_delta_product``
with n = 2), mlstm against mlstm_kernels' native chunkwise
backends (autograd and hand-written backward; the extras ``fla`` and ``mlstm``).

    .venv/bin/python benchmarks/modern_kernels.py                 # both tables
    .venv/bin/python benchmarks/modern_kernels.py --quick         # fewer rows and repeats
    .venv/bin/python benchmarks/modern_kernels.py --family slstm  # one table

Issue 26 asks how the fused-cpu kernels compare with real implementations on CPU:
- ``s6`` (gradcheck_rnn/kernels/s6_cpu.py: a chunked scan with a hand-written backward) against
  mambapy 1.2.0's ``selective_scan`` over ``pscan`` (a Blelloch scan with a hand-written backward),
  through the ``mambapy`` target;
- ``slstm`` (gradcheck_rnn/kernels/slstm_cpu.py: a batched BPTT written by hand) against FlashRNN
  1.0.8's ``vanilla`` backend (its cell in PyTorch, autograd's backward), through the
  ``flashrnn-vanilla`` target, with ``vanilla_fwbw`` (FlashRNN's hand-written backward in PyTorch)
  beside it.
Every side runs the same case (float32, every sequence of full length, so the libraries make one
call per layer, every gradient requested) and returns every output and gradient; each timing is
one ``run(case)``, forward and backward, the numpy-to-torch copies included on every side. Runs
alternate after a warm-up, so background load hits all alike; each column is the median of the
repeats, and the ratio is fused-cpu / the first library column (below 1.0: the fused kernel is
faster).
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

# The matrix-memory families' sizes: (L, I, H, NH, K, T, B).
MATRIX_SIZES = ((1, 16, 16, 2, 8, 64, 4), (1, 64, 64, 4, 16, 256, 8), (2, 64, 64, 4, 16, 256, 8),
                (1, 64, 64, 4, 16, 1024, 4))


def matrix_shapes(family: str, options: str = "") -> list[str]:
    """A matrix-memory family's shapes at :data:`MATRIX_SIZES`, its own options (``-R4``) after K."""
    return [f"{family}-L{L}-uni-I{I}-H{H}-NH{NH}-K{K}{options}-T{T}-B{B}" for L, I, H, NH, K, T, B in MATRIX_SIZES]


# Per family: the library targets, and case ids at a few sizes (float32, full lengths, seed 1).
FAMILIES = {
    "s6": (("mambapy",), [f"s6-L{L}-uni-I{I}-H{H}-N{N}-R{R}-T{T}-B{B}" for L, I, H, N, R, T, B in
                          ((1, 16, 16, 4, 1, 64, 4), (1, 64, 64, 16, 4, 256, 8), (2, 64, 64, 16, 4, 256, 8),
                           (1, 64, 64, 16, 4, 1024, 4))]),
    "slstm": (("flashrnn-vanilla", "flashrnn-fwbw"),
              [f"slstm-L{L}-uni-I{I}-H{H}{f'-NH{NH}' if NH > 1 else ''}-T{T}-B{B}" for L, I, H, NH, T, B in
               ((1, 16, 16, 1, 64, 4), (1, 64, 64, 4, 128, 8), (2, 64, 64, 4, 128, 8), (1, 64, 64, 4, 512, 4))]),
    # the matrix-memory families against the CPU implementations a user would run otherwise:
    # flash-linear-attention's naive torch recurrences (its fused_recurrent and chunk kernels are
    # Triton, CPU only through the interpreter) and mlstm_kernels' native chunkwise backends
    "gla": (("fla-naive",), matrix_shapes("gla", "-R4")),
    "gdn": (("fla-naive",), matrix_shapes("gdn")),
    "rwkv7": (("fla-naive",), matrix_shapes("rwkv7")),
    "kda": (("fla-naive",), matrix_shapes("kda", "-R4")),
    "deltaproduct": (("fla-naive",), matrix_shapes("deltaproduct", "-n2")),
    "mlstm": (("mlstm-chunkwise", "mlstm-custbw"), matrix_shapes("mlstm")),
}


def case_id(shape: str) -> str:
    T, B = (int(part[1:]) for part in shape.split("-")[-2:])
    return f"{shape}-len{'.'.join([str(T)] * B)}-f32-s1"


def seconds(target, case: Case) -> float:
    start = time.perf_counter()
    target.run(case)
    return time.perf_counter() - start


def table(family: str, repeats: int, quick: bool) -> None:
    """One row per size: the median ms of fused-cpu and of each library target, and the ratio."""
    names, shapes = FAMILIES[family]
    targets = [resolve_target(name) for name in ("fused-cpu", *names)]
    print(f"{'case':<56} " + " ".join(f"{t.name + ' ms':>{max(12, len(t.name) + 3)}}" for t in targets) + f" {'ratio':>6}")
    for shape in shapes[:2] if quick else shapes:
        case = Case.from_id(case_id(shape))
        for target in targets:  # warm-up
            target.run(case)
        times: list[list[float]] = [[] for _ in targets]
        for _ in range(repeats):
            for target, row in zip(targets, times):
                row.append(seconds(target, case))
        ms = [statistics.median(row) * 1e3 for row in times]
        label = case.id if len(case.id) <= 56 else case.id[:40] + "…" + case.id[-15:]
        print(f"{label:<56} " + " ".join(f"{m:>{max(12, len(t.name) + 3)}.1f}" for t, m in zip(targets, ms))
              + f" {ms[0] / ms[1]:>6.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two sizes, 3 repeats")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--family", choices=[*FAMILIES, "all"], default="all")
    args = parser.parse_args()
    limit_torch_threads()
    for family in FAMILIES if args.family == "all" else [args.family]:
        table(family, 3 if args.quick else args.repeats, args.quick)


if __name__ == "__main__":
    main()
