"""Is a failing float32 gdn case a kernel defect or a problem float32 cannot hold? (issue 35)

Usage::

    python benchmarks/gdn_float32_conditioning.py [--draws 50] [-c matrix] ID [ID ...]

For each float32 gdn case id it prints

1. fused-cpu's ratio on every tensor (its float32 kernel against the float64 loop reference,
   under the profile's tolerances), as the reference check computes it;
2. per layer, the smallest norm of a live step's raw key and query (the L2 norm's slope is
   1/|k| and its curvature 1/|k|², so a key a few times sqrt(1e-6) = 1e-3 from 0 amplifies
   rounding-level changes of the layer below up to ~1000× in the gradients) and the RMS error of
   the float32 kernel's output against the same kernel in float64 on the same float32 input;
3. the rounding probe: the float64 kernel run again ``--draws`` times, each layer's output
   perturbed by Gaussian noise of that layer's measured RMS error (what any correct float32
   forward carries), and the ratio of every tensor that failed in step 1 over those draws
   (median, 90th percentile, max, the share above 1); for a passing case, of its largest ratio.

A case where a good share of draws fails is ill-conditioned at float32: its failure is a false
alarm of the fixed tolerance, whatever kernel computes it. A case whose draws all pass while the
kernel fails points at the kernel. docs/findings/soak.md ("gdn in float32") reads its output.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gradcheck_rnn.model.case import Case, as_mapping  # noqa: E402
from gradcheck_rnn.model.compare import compare_tensor  # noqa: E402
from gradcheck_rnn.model.profiles import load_profile  # noqa: E402
from gradcheck_rnn.kernels.gdn_cpu import GDNCPUKernel  # noqa: E402
from gradcheck_rnn.model.layout import param_key  # noqa: E402
from gradcheck_rnn.references import run_reference  # noqa: E402
from gradcheck_rnn.model.tolerances import Tolerances  # noqa: E402


class ProbedKernel(GDNCPUKernel):
    """The float64 kernel that records each layer's input, output and smallest live key and query
    norms, and adds ``noise[layer]`` (a tensor shaped like the output, or None) to the output."""

    def __init__(self, noise: list[torch.Tensor | None] | None = None) -> None:
        super().__init__()
        self.noise = noise
        self.inputs: list[torch.Tensor] = []
        self.outputs: list[torch.Tensor] = []
        self.smallest_norms: list[tuple[float, float]] = []

    def layer_forward(self, cfg, p, x, mask, h0, index):
        y, final, layer = super().layer_forward(cfg, p, x, mask, h0, index)
        live = mask[..., None] > 0
        self.smallest_norms.append(tuple(float(n.masked_fill(~live, np.inf).min()) for n in (layer.k_norm, layer.q_norm)))
        if self.noise is not None and self.noise[index] is not None:
            y = y + self.noise[index]
        self.inputs.append(x)
        self.outputs.append(y)
        return y, final, layer


def ratios(case: Case, outputs: dict[str, torch.Tensor], reference: dict[str, np.ndarray],
           tolerances: Tolerances) -> dict[str, float]:
    """The reference check's ratio of every tensor the outputs hold."""
    dtype = case.config.dtype
    return {name: compare_tensor(name, value, reference[name], tolerances.for_tensor(dtype, name), case.config).ratio
            for name, value in outputs.items()}


def live_mask(case: Case) -> torch.Tensor:
    """(T, B, 1) float64: 1 at the steps of each sequence, 0 after its end."""
    steps = np.arange(case.config.max_len)[:, None] < case.seq_lengths[None, :]
    return torch.from_numpy(steps.astype(np.float64))[..., None]


def layer_errors(case: Case, probe: ProbedKernel) -> list[float]:
    """RMS error of the float32 kernel's output of each layer against the float64 kernel, both on
    the float64 run's input of that layer rounded to float32."""
    cfg, mask = case.config, live_mask(case)
    h0 = torch.from_numpy(case.h0) if case.h0 is not None else torch.zeros(cfg.num_layers, cfg.batch_size, cfg.h_size)
    errors = []
    for index, x in enumerate(probe.inputs):
        p = {kind: torch.from_numpy(case.params[param_key(index, "fwd", kind)]).float()
             for kind in cfg.family.unit_shapes(cfg, index)}
        with torch.no_grad():
            y32 = GDNCPUKernel().layer_forward(cfg, p, x.float(), mask.float(), h0[index].float(), index)[0]
            y64 = GDNCPUKernel().layer_forward(cfg, {k: v.double() for k, v in p.items()}, x.float().double(), mask,
                                               h0[index].float().double(), index)[0]
        live = mask.expand_as(y64) > 0
        errors.append(float((y32.double() - y64)[live].pow(2).mean().sqrt()))
    return errors


def report(case_id: str, draws: int, tolerances: Tolerances) -> None:
    case = Case.from_id(case_id)
    reference = as_mapping(run_reference("loop", case))
    kernel = {k: v for k, v in as_mapping(GDNCPUKernel().run(case, torch.float32)).items()}
    measured = ratios(case, kernel, reference, tolerances)
    print(case_id)
    print("  fused-cpu float32 ratios: " + ", ".join(f"{k} {v:.3g}" for k, v in measured.items()))
    probe = ProbedKernel()
    probe.run(case, torch.float64)
    errors = layer_errors(case, probe)
    for index, ((k_norm, q_norm), error) in enumerate(zip(probe.smallest_norms, errors)):
        print(f"  layer {index}: smallest live |k| {k_norm:.3g}, |q| {q_norm:.3g}; float32 output RMS error {error:.3g}")
    failed = [name for name, ratio in measured.items() if ratio > 1] or [max(measured, key=measured.get)]
    generator = torch.Generator().manual_seed(0)
    seen: dict[str, list[float]] = {name: [] for name in failed}
    for _ in range(draws):
        noise = [error * torch.randn(y.shape, generator=generator, dtype=torch.float64) * live_mask(case)
                 for error, y in zip(errors, probe.outputs)]
        outputs = as_mapping(ProbedKernel(noise).run(case, torch.float64))
        for name, ratio in ratios(case, {n: outputs[n] for n in failed}, reference, tolerances).items():
            seen[name].append(ratio)
    for name, values in seen.items():
        v = np.array(values)
        print(f"  rounding probe, {name} over {draws} draws: median {np.median(v):.3g}, 90th {np.quantile(v, 0.9):.3g},"
              f" max {v.max():.3g}, share > 1: {(v > 1).mean():.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ids", nargs="+", metavar="ID")
    parser.add_argument("--draws", type=int, default=50)
    parser.add_argument("-c", "--config", default="matrix", help="profile whose tolerances apply (default: matrix)")
    args = parser.parse_args()
    tolerances = load_profile(args.config).tolerance_table()
    for case_id in args.ids:
        try:
            config = Case.from_id(case_id).config
        except ValueError as error:
            print(f"{case_id}: {error}", file=sys.stderr)
            sys.exit(2)
        if config.mode != "gdn" or config.dtype != "f32":
            print(f"{case_id}: not a float32 gdn case (this probe runs fused-cpu's gdn kernel in float32)", file=sys.stderr)
            sys.exit(2)
        report(case_id, args.draws, tolerances)


if __name__ == "__main__":
    main()
