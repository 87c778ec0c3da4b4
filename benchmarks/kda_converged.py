"""How converged is kda's ``-converged`` regime? The delta rule's error relative to the value,
|v_t − S'ᵀk̂_t| / |v_t| (S' the decayed state the step writes into), with and without the regime.

    python benchmarks/kda_converged.py [DRAWS]

For K = 2 and 4 and each regime (none, -converged, -longmem) it prints the median over DRAWS data
seeds (default 20) of each case's median over its steps t ≥ 2, on layer 0 of one-layer cases of
four full sequences of 18 steps. A state that has learned its keys (S·k ≈ v) gives a value near 0.
"""

from __future__ import annotations

import sys

import numpy as np
import torch

from gradcheck_rnn import Case
from gradcheck_rnn.families.gdn import L2_EPS
from gradcheck_rnn.families.ops import torch_ops


def relative_error(case_id: str) -> float:
    """The median over every step t ≥ 2 of every sequence of |v − S'ᵀk̂| / |v|."""
    case = Case.from_id(case_id)
    cfg, ops = case.config, torch_ops()
    kda = cfg.family
    p = {k.rpartition(".")[2]: torch.tensor(v) for k, v in case.params.items() if k.startswith("l0.")}
    errors = []
    for b in range(cfg.batch_size):
        h, x = torch.tensor(case.h0[0, b]), torch.tensor(case.x[:, b])
        for t in range(int(case.seq_lengths[b])):
            x_hat, q, k, v = kda.project(ops, p, x[t], cfg)
            k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + L2_EPS)
            gate = ((x_hat @ p["w_a1"].T) @ p["w_a2"].T + p["b_a"]).reshape(q.shape)
            log_decay = -p["a_log"].exp()[:, None] * torch.nn.functional.softplus(gate)
            decayed = log_decay.exp()[..., None] * kda.matrix(h, cfg)
            if t >= 2:
                errors.append(float((v - (k[..., :, None] * decayed).sum(-2)).norm() / v.norm()))
            _, h, _ = kda.step(ops, p, x[t], h, None, cfg)
    return float(np.median(errors))


def main() -> None:
    draws = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    for K in (2, 4):
        for regime in ("", "-converged", "-longmem"):
            ids = [f"kda-L1-uni-I3-H4-NH2-K{K}-R2{regime}-T18-B4-len18.18.18.18-f64-s{seed}" for seed in range(draws)]
            median = np.median([relative_error(i) for i in ids])
            print(f"K = {K}, {regime.strip('-') or 'no regime'}: median |v − S'ᵀk̂| / |v| = {median:.2f}")


if __name__ == "__main__":
    main()
