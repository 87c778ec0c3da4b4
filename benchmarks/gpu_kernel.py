"""Forward + backward time of the fused-gpu kernel against cuDNN (torch.nn on CUDA), side by side.

    python benchmarks/gpu_kernel.py            # the DeepBench-like table (benchmarks/gpu.sh runs it)
    python benchmarks/gpu_kernel.py --quick    # the small shape only, fewer repeats

Shapes (one layer, unidirectional, as DeepBench's RNN training rows): LSTM and GRU at
T=64, B=64, I=H=512 and T=256, B=32, I=H=1024; fixed lengths (all T) and variable lengths
(uniform in 1..T, torch through pack_padded_sequence(enforce_sorted=False)); float32 and
bfloat16. Both sides get the same weights, data and head gradients and compute every gradient
(x, h0, c0, weights). TF32 is off for both, as while checking (``GRADCHECK_RNN_TF32=1`` turns
it on for both). Each column is the median of the repeats after a warm-up (the warm-up also
pays Triton's compilation), timed with CUDA events; the ratio is fused / cuDNN (below 1.0: the
fused kernel is faster). Prints the GPU name and the date first. Needs CUDA.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
from pathlib import Path
from typing import Callable

import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gradcheck_rnn.model.case import RNNConfig  # noqa: E402
from gradcheck_rnn.kernels.target import cuda_matmul_precision# noqa: E402
from gradcheck_rnn.kernels.fused_gpu import FusedGPUFunction  # noqa: E402
from gradcheck_rnn.model.layout import pack, param_shapes  # noqa: E402

MODULES = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


def torch_attr(key: str) -> str:
    """``l0.fwd.w_ih`` -> ``weight_ih_l0``."""
    layer, direction, kind = key.split(".")
    return f"{'weight' if kind[0] == 'w' else 'bias'}_{kind[2:]}_l{layer[1:]}{'_reverse' if direction == 'bwd' else ''}"


def make_problem(config: RNNConfig, variable: bool, generator: torch.Generator,
                 dev: str = "cuda") -> tuple[Callable[[], None], ...]:
    """(fused step, cuDNN step): each runs forward + backward of every gradient once."""
    dtype = DTYPES[config.dtype]
    T, B, H = config.max_len, config.batch_size, config.hidden_size
    lstm = config.mode == "lstm"

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator).to(dev, dtype)

    bound = H ** -0.5
    params = {k: ((torch.rand(*s, generator=generator) * 2 - 1) * bound).to(dev, dtype)
              for k, s in param_shapes(config).items()}
    lengths = (torch.randint(1, T + 1, (B,), generator=generator) if variable
               else torch.full((B,), T, dtype=torch.long))
    x, h0, c0, dhy, dcy = randn(T, B, config.input_size), randn(1, B, H), randn(1, B, H), randn(1, B, H), randn(1, B, H)
    mask = (torch.arange(T)[:, None] < lengths[None, :]).to(dev, dtype)[:, :, None]
    dy = randn(T, B, H) * mask  # both sides see the same loss; outputs at padded steps are 0 on both
    flat = pack(params, config).requires_grad_()
    fused_inputs = [t.clone().requires_grad_() for t in (x, h0, c0)]
    length_list = lengths.tolist()

    def fused() -> None:
        xs, h, c = fused_inputs
        y, hy, cy = FusedGPUFunction.apply(xs, length_list, h, c if lstm else None, flat, config.mode, 1, False)
        torch.autograd.backward([y, hy] + ([cy] if lstm else []), [dy, dhy] + ([dcy] if lstm else []))

    module = MODULES[config.mode](config.input_size, H, 1).to(dev, dtype)
    with torch.no_grad():
        for key, value in params.items():
            getattr(module, torch_attr(key)).copy_(value)
    native_inputs = [t.clone().requires_grad_() for t in (x, h0, c0)]

    def native() -> None:
        xs, h, c = native_inputs
        state = (h, c) if lstm else h
        if variable:
            out, final = module(pack_padded_sequence(xs, lengths, enforce_sorted=False), state)
            y = pad_packed_sequence(out, total_length=T)[0]
        else:
            y, final = module(xs, state)
        hy, cy = final if lstm else (final, None)
        torch.autograd.backward([y, hy] + ([cy] if lstm else []), [dy, dhy] + ([dcy] if lstm else []))

    return fused, native


def median_ms(step: Callable[[], None], repeats: int) -> float:
    """Median milliseconds of ``step`` over ``repeats`` runs after two warm-ups, by CUDA events."""
    for _ in range(2):
        step()
    times = []
    for _ in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        stop.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def rows(quick: bool) -> list[tuple[str, int, int, int, bool, str]]:
    """(mode, T, B, H, variable length, dtype)."""
    shapes = [(64, 64, 512)] + ([] if quick else [(256, 32, 1024)])
    return [(mode, T, B, H, variable, dtype) for mode in MODULES for T, B, H in shapes
            for variable in (False, True) for dtype in DTYPES]


def main() -> int:
    """Print the table; exit 1 without CUDA."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the small shape only, fewer repeats")
    parser.add_argument("--repeats", type=int, default=None, help="timed runs per side (default 10, quick 3)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("benchmarks/gpu_kernel.py needs a CUDA GPU; torch sees none on this machine.", file=sys.stderr)
        return 1
    repeats = args.repeats or (3 if args.quick else 10)
    import triton

    print(f"fused-gpu vs cuDNN, forward + backward (every gradient), median of {repeats} — "
          f"{torch.cuda.get_device_name()}, {datetime.date.today().isoformat()}, torch {torch.__version__}, "
          f"triton {triton.__version__}, cuDNN {torch.backends.cudnn.version()}")
    print(f"{'mode':5} {'T':>4} {'B':>3} {'I=H':>5} {'lengths':8} {'dtype':5} {'fused ms':>9} {'cuDNN ms':>9} "
          f"{'ratio':>6}")
    generator = torch.Generator().manual_seed(0)
    with cuda_matmul_precision():
        for mode, T, B, H, variable, dtype in rows(args.quick):
            config = RNNConfig(mode, 1, False, H, H, T, B, dtype)
            label = f"{mode:5} {T:4} {B:3} {H:5} {'variable' if variable else 'fixed':8} {dtype:5}"
            try:
                fused, native = make_problem(config, variable, generator)
                fused_ms, native_ms = median_ms(fused, repeats), median_ms(native, repeats)
            except Exception as exc:  # one row's failure (e.g. no bf16 cuDNN RNN) must not hide the others
                print(f"{label} error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
                continue
            print(f"{label} {fused_ms:9.2f} {native_ms:9.2f} {fused_ms / native_ms:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
