"""Forward + backward time of the fused-cpu kernel against torch.nn on CPU, side by side.

    .venv/bin/python benchmarks/cpu_kernel.py            # full table
    .venv/bin/python benchmarks/cpu_kernel.py --quick    # fewer rows and repeats

Both sides get the same data (T=64, B=32, I=H=256, float32 by default) and the same head
gradients (dy, dhy, dcy). Fixed-length rows feed torch the padded batch; variable-length rows
(lengths uniform in 1..T) go through pack_padded_sequence(enforce_sorted=False). Rows marked
``inputs`` are the frozen-weights wants group: torch's parameters have requires_grad off, the
fused kernel skips its weight-gradient step. Fused and torch runs alternate, after a warm-up,
so background load hits both alike, and a run during which another process used the CPU is
timed again (``--retries``); each column is the median of the repeats, and the ratio is
fused / torch (below 1.0: the fused kernel is faster).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gradcheck_rnn.model.case import RNNConfig  # noqa: E402
from gradcheck_rnn.kernels.fused_cpu import FusedRNNFunction  # noqa: E402
from gradcheck_rnn.model.layout import pack, param_shapes  # noqa: E402

MODULES = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU, "rnn_tanh": torch.nn.RNN}


def torch_attr(key: str) -> str:
    layer, direction, kind = key.split(".")
    return f"{'weight' if kind[0] == 'w' else 'bias'}_{kind[2:]}_l{layer[1:]}{'_reverse' if direction == 'bwd' else ''}"


def make_problem(config: RNNConfig, variable: bool, frozen: bool, generator: torch.Generator):
    """Return (fused step, torch step): each runs forward + backward once."""
    dtype = {"f32": torch.float32, "f64": torch.float64}[config.dtype]
    T, B, H, D = config.max_len, config.batch_size, config.hidden_size, config.num_directions
    states = (config.num_layers * D, B, H)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator, dtype=dtype)

    bound = H ** -0.5
    params = {k: (torch.rand(*s, generator=generator, dtype=dtype) * 2 - 1) * bound
              for k, s in param_shapes(config).items()}
    lengths = (torch.randint(1, T + 1, (B,), generator=generator) if variable
               else torch.full((B,), T, dtype=torch.long))
    x, h0, dy, dhy = randn(T, B, config.input_size), randn(*states), randn(T, B, D * H), randn(*states)
    lstm = config.mode == "lstm"
    c0, dcy = (randn(*states), randn(*states)) if lstm else (None, None)
    mask = (torch.arange(T)[:, None] < lengths[None, :]).to(dtype)[:, :, None]
    dy = dy * mask  # both sides see the same loss; torch's padded output is 0 there anyway

    flat = pack(params, config).requires_grad_(not frozen)
    xs = [t.clone().requires_grad_() for t in (x, h0)] + ([c0.clone().requires_grad_()] if lstm else [])

    def fused() -> None:
        y, hy, cy = FusedRNNFunction.apply(xs[0], lengths, xs[1], xs[2] if lstm else None, flat,
                                           config.mode, config.num_layers, config.bidirectional)
        torch.autograd.backward([y, hy] + ([cy] if lstm else []), [dy, dhy] + ([dcy] if lstm else []))

    kwargs = {"nonlinearity": "tanh"} if config.mode == "rnn_tanh" else {}
    module = MODULES[config.mode](config.input_size, H, config.num_layers,
                                  bidirectional=config.bidirectional, **kwargs).to(dtype)
    with torch.no_grad():
        for key, value in params.items():
            getattr(module, torch_attr(key)).copy_(value)
    module.requires_grad_(not frozen)
    ts = [t.clone().requires_grad_() for t in (x, h0)] + ([c0.clone().requires_grad_()] if lstm else [])

    def native() -> None:
        state = (ts[1], ts[2]) if lstm else ts[1]
        if variable:
            packed = pack_padded_sequence(ts[0], lengths, enforce_sorted=False)
            out, final = module(packed, state)
            y = pad_packed_sequence(out, total_length=T)[0]
        else:
            y, final = module(ts[0], state)
        hy, cy = final if lstm else (final, None)
        torch.autograd.backward([y, hy] + ([cy] if lstm else []), [dy, dhy] + ([dcy] if lstm else []))

    return fused, native


def _cpu_ticks() -> tuple[int, int]:
    """(busy ticks of the whole machine, ticks of this process), or (0, 0) off Linux."""
    try:
        with open("/proc/stat") as f:
            machine = [int(v) for v in f.readline().split()[1:]]
        with open("/proc/self/stat") as f:
            mine = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0, 0
    return sum(machine) - machine[3] - machine[4], int(mine[11]) + int(mine[12])


def timed(step: Callable[[], None], retries: int) -> tuple[float, bool]:
    """Seconds for one run of ``step``, retried while other processes used the CPU meanwhile
    (on a shared 2-core machine a busy neighbour stalls every OpenMP barrier); returns the
    time and whether it was quiet."""
    tick = os.sysconf("SC_CLK_TCK")
    for attempt in range(retries + 1):
        busy0, mine0 = _cpu_ticks()
        start = time.perf_counter()
        step()
        elapsed = time.perf_counter() - start
        busy1, mine1 = _cpu_ticks()
        others = (busy1 - busy0) - (mine1 - mine0)
        if others <= max(1, 0.05 * elapsed * tick):
            return elapsed, True
        time.sleep(0.2)
    return elapsed, False


def measure(steps: dict[str, Callable[[], None]], repeats: int, retries: int) -> tuple[dict[str, float], int]:
    """Warm up, then alternate the steps; median seconds per step and the number of runs
    that stayed noisy after all retries."""
    for step in steps.values():
        step()
    times: dict[str, list[float]] = {name: [] for name in steps}
    noisy = 0
    for _ in range(repeats):
        for name, step in steps.items():
            elapsed, quiet = timed(step, retries)
            times[name].append(elapsed)
            noisy += not quiet
    return {name: statistics.median(values) for name, values in times.items()}, noisy


def rows(quick: bool) -> list[tuple[str, int, bool, bool, bool]]:
    """(mode, layers, bidirectional, variable length, frozen weights)."""
    table = []
    for mode in MODULES:
        for layers in (1,) if quick else (1, 2):
            for bi in (False, True):
                for variable in (False, True):
                    table.append((mode, layers, bi, variable, False))
    for mode in MODULES:
        for variable in (False, True):
            table.append((mode, 1, False, variable, True))
    return table


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rows and repeats")
    parser.add_argument("--repeats", type=int, default=None, help="timed repeats per row (default 7, quick 3)")
    parser.add_argument("--dtype", choices=("f32", "f64"), default="f32")
    parser.add_argument("-T", type=int, default=64)
    parser.add_argument("-B", type=int, default=32)
    parser.add_argument("-H", type=int, default=256, help="hidden size (the input size too)")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--only", default=None, help="run only rows whose mode starts with this")
    parser.add_argument("--retries", type=int, default=20,
                        help="re-time a run up to this often while other processes use the CPU (default 20)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    repeats = args.repeats or (3 if args.quick else 7)
    generator = torch.Generator().manual_seed(0)
    print(f"T={args.T} B={args.B} I=H={args.H} {args.dtype}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, median of {repeats}")
    print(f"{'mode':<9} {'L':>1} {'dir':<3} {'lengths':<8} {'wants':<6} {'fused ms':>9} {'torch ms':>9} {'ratio':>6}")
    ratios = []
    for mode, layers, bi, variable, frozen in rows(args.quick):
        if args.only and not mode.startswith(args.only):
            continue
        config = RNNConfig(mode, layers, bi, args.H, args.H, args.T, args.B, args.dtype)
        fused, native = make_problem(config, variable, frozen, generator)
        result, noisy = measure({"fused": fused, "torch": native}, repeats, args.retries)
        ratio = result["fused"] / result["torch"]
        ratios.append(ratio)
        print(f"{mode:<9} {layers:>1} {'bi' if bi else 'uni':<3} {'1..T' if variable else 'T':<8} "
              f"{'inputs' if frozen else 'all':<6} {result['fused'] * 1e3:>9.1f} {result['torch'] * 1e3:>9.1f} "
              f"{ratio:>6.2f}{f'  ({noisy} noisy runs)' if noisy else ''}", flush=True)
    print(f"worst ratio {max(ratios):.2f}, geometric mean {statistics.geometric_mean(ratios):.2f}")


if __name__ == "__main__":
    main()
