"""A user family with a matrix state, as a user writes one from scratch: RetNet's retention (Sun et
al. 2023) with one head, a fixed decay γ and a K×V state, a batched torch kernel to judge on it,
and that kernel with a planted slip (``--family matrix_family_targets:RETENTION``)."""

import numpy as np
import torch

from gradcheck_rnn import Outputs
from gradcheck_rnn.families import Family, Option

GAMMA = 0.9


class Retention(Family):
    """S' = γ S + k vᵀ, y = S'ᵀ q with q, k (K) and v (H) linear in x; the state S (K×H) is h,
    flattened key-major. Both references run ``step``."""

    def h_size(self, config):
        return config.option("key_width") * config.hidden_size

    def unit_shapes(self, config, layer):
        width, K = self.layer_input_size(config, layer), config.option("key_width")
        return {"w_q": (K, width), "w_k": (K, width), "w_v": (config.hidden_size, width)}

    def step(self, ops, p, x, h, c, config):
        K, H = config.option("key_width"), config.hidden_size
        q, k, v = x @ p["w_q"].T, x @ p["w_k"].T, x @ p["w_v"].T
        state = GAMMA * h.reshape(h.shape[:-1] + (K, H)) + k[..., :, None] * v[..., None, :]
        return (state * q[..., :, None]).sum(-2), state.reshape(h.shape), c


RETENTION = Retention(token="retention", gates=("v",), bidirectional=False,
                      options=(Option("key_width", r"K(\d+)", None, "K<key units>, e.g. K2"),))


def retention_target(case, decay_padded: bool = False) -> Outputs:
    """The kernel under test: the whole batch at once in torch autograd (``decay_padded`` decays the
    state at padded steps too, the slip of a kernel that masks the write but not the decay)."""
    cfg, K, H = case.config, case.config.option("key_width"), case.config.hidden_size
    params = {k: torch.tensor(v, requires_grad=True) for k, v in case.params.items()}
    x = torch.tensor(case.x, requires_grad=True)
    h0 = torch.tensor(case.h0 if case.initial_state else np.zeros((cfg.num_layers, cfg.batch_size, K * H)),
                      requires_grad=True)
    valid = torch.from_numpy(np.arange(cfg.max_len)[:, None] < case.seq_lengths[None, :])[..., None, None]
    inp, finals = x, []
    for layer in range(cfg.num_layers):
        w = {kind: params[f"l{layer}.fwd.{kind}"] for kind in ("w_q", "w_k", "w_v")}
        state, ys = h0[layer].reshape(-1, K, H), []
        for t in range(cfg.max_len):
            q, k, v = inp[t] @ w["w_q"].T, inp[t] @ w["w_k"].T, inp[t] @ w["w_v"].T
            write = torch.where(valid[t], k[:, :, None] * v[:, None, :], torch.zeros(()))
            decay = GAMMA if decay_padded else torch.where(valid[t], torch.tensor(GAMMA, dtype=torch.float64), torch.tensor(1.0, dtype=torch.float64))
            state = decay * state + write
            ys.append(torch.where(valid[t, :, 0], (state * q[:, :, None]).sum(1), torch.zeros(())))
        inp = torch.stack(ys)
        finals.append(state.reshape(cfg.batch_size, K * H))
    hy = torch.stack(finals)
    loss = (inp * torch.from_numpy(case.dy)).sum() + (hy * torch.from_numpy(case.dhy)).sum()
    names = ["x", "h0", *params]
    grads = dict(zip(names, torch.autograd.grad(loss, [x, h0, *params.values()])))
    return Outputs(y=inp.detach(), hy=hy.detach(), grads={k: v for k, v in grads.items() if k in case.wants})


def retention_slipped(case) -> Outputs:
    """The planted slip: padded steps decay the state."""
    return retention_target(case, decay_padded=True)
