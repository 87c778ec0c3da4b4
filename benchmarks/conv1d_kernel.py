"""Forward + backward time of fused-cpu's conv1d kernel against the CPU implementation a user would
run otherwise: torch's depthwise ``F.conv1d`` over the state-prepended sequence, through autograd.

    .venv/bin/python benchmarks/conv1d_kernel.py            # the table
    .venv/bin/python benchmarks/conv1d_kernel.py --quick    # fewer rows and repeats

No library runs this op natively on a CPU: causal-conv1d is CUDA only, and flash-linear-attention
0.6.0's ``causal_conv1d`` is Triton only, which a CPU runs only in Triton's interpreter (its autotuners
cut to one configuration, as the ``fla-recurrent`` target runs it to judge it): a debugging mode, not
what a user trains with. So
the other column is the same layer written the way a PyTorch user writes it on a CPU (Mamba's
``use_causal_conv1d=False`` path): the pre-norm and the input map, ``F.conv1d(…, groups=H)`` over
[h0 | u] with SiLU, the final state sliced off, gradients by autograd. Both sides run the same case
(float32, every sequence of full length, every gradient requested) from its numpy data, copies
included; runs alternate after a warm-up, each column is the median, and the ratio is ours / torch's
(below 1.0: the fused kernel is faster).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gradcheck_rnn import Case  # noqa: E402
from gradcheck_rnn.kernels.conv1d_cpu import Conv1dCPUKernel  # noqa: E402
from gradcheck_rnn.runtime import limit_torch_threads  # noqa: E402

SHAPES = ((1, 16, 16, 4, 64, 4), (1, 64, 64, 4, 256, 8), (2, 64, 64, 4, 256, 8), (1, 256, 256, 4, 1024, 4))


def case_id(L: int, I: int, H: int, W: int, T: int, B: int) -> str:
    return f"conv1d-L{L}-uni-I{I}-H{H}-W{W}-silu-T{T}-B{B}-len{'.'.join([str(T)] * B)}-f32-s1"


def torch_autograd(case: Case) -> None:
    """The layer stack in torch ops, its gradients by autograd (module docstring)."""
    cfg = case.config
    H, S = cfg.hidden_size, cfg.option("conv_width") - 1

    def leaf(a):
        return torch.tensor(a, dtype=torch.float32, requires_grad=True)

    x, h0 = leaf(case.x), leaf(case.h0)
    params = {k: leaf(v) for k, v in case.params.items()}
    inp, loss = x, 0.0
    for layer in range(cfg.num_layers):
        p = {k.split(".")[-1]: v for k, v in params.items() if k.startswith(f"l{layer}.")}
        xn = inp / torch.sqrt((inp * inp).mean(-1, keepdim=True) + 1)
        u = (xn @ p["w_in"].T).permute(1, 2, 0)                           # (B, H, T)
        ext = torch.cat([h0[layer].reshape(-1, H, S), u], -1)
        y = F.silu(F.conv1d(ext, p["w_conv"][:, None, :], p["b_conv"], groups=H))
        loss = loss + (ext[..., -S:].reshape(-1, H * S) * torch.from_numpy(case.dhy[layer]).float()).sum()
        inp = y.permute(2, 0, 1)
    (loss + (inp * torch.from_numpy(case.dy).float()).sum()).backward()


def ours(case: Case) -> None:
    Conv1dCPUKernel().run(case, torch.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two rows, three repeats")
    args = parser.parse_args()
    limit_torch_threads()
    repeats = 3 if args.quick else 7
    print(f"{'case (I = H, W = 4, SiLU, full lengths, f32)':<40} {'ours ms':>8} {'torch ms':>9} {'ratio':>6}")
    for shape in SHAPES[:2] if args.quick else SHAPES:
        case = Case.from_id(case_id(*shape))
        times: dict = {ours: [], torch_autograd: []}
        for run in times:
            run(case)  # warm-up
        for _ in range(repeats):
            for run, spent in times.items():
                start = time.perf_counter()
                run(case)
                spent.append(time.perf_counter() - start)
        mine, theirs = (statistics.median(times[f]) * 1e3 for f in (ours, torch_autograd))
        L, I, H, W, T, B = shape
        print(f"{f'L{L} H{H} W{W} T{T} B{B}':<40} {mine:8.1f} {theirs:9.1f} {mine / theirs:6.2f}")


if __name__ == "__main__":
    main()
