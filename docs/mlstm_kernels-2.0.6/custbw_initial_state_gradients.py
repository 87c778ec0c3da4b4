"""mlstm_kernels 2.0.6's chunkwise--native_custbw, judged under the library's own convention: its
hand-written backward holds the denominator max(|nᵀq|, exp(−m)) and the stabiliser m constant, by
design (chunkwise/native/bw.py: "We do not need to compute the gradients for the denominator, as
it cancels out in the forward in the groupnorm."; the Triton xl_chunk and limit_chunk and the JAX
backwards say the same). Both scale each head's h_t by one positive number, which a per-head norm
removes, so for a loss through such a norm, with no head gradient on the final states, the
convention is exact: and there its gradients of q, k, v, i, f and c0 agree with the derivative.
What still fails under it is the gradient of the initial stabiliser m_initial: the backward
returns 0 for it (and for n_initial, which only enters the denominator, so that 0 is right here),
although m_initial sets the scale of the initial memory C_initial·exp(m_initial) against the new
inputs and so changes the normalised output. torch and mlstm_kernels only.

A float64 loop of the same mLSTM (written below; autograd through it, m through its max) and
chunkwise--native_autograd agree on every gradient; native_custbw agrees with them on everything
but m0.
"""

import torch
from mlstm_kernels.torch import get_mlstm_kernel

torch.manual_seed(0)
B, NH, S, K, V = 1, 1, 4, 2, 2
q, k, v = torch.randn(B, NH, S, K), torch.randn(B, NH, S, K), torch.randn(B, NH, S, V)
i, f = torch.randn(B, NH, S), torch.randn(B, NH, S) + 2
c0, n0, m0 = torch.randn(B, NH, K, V), torch.rand(B, NH, K) + 1, torch.randn(B, NH, 1)
dh = torch.randn(B, NH, S, V)
EPS = 1e-6


def head_norm(h):
    """The per-head norm the convention assumes (a GroupNorm's scale invariance, without its shift)."""
    return h / torch.sqrt((h * h).sum(-1, keepdim=True) + 1e-30)


def loop(q, k, v, i, f, c, n, m):
    """The mLSTM step by step (float64): m_t = max(log σ(f_t) + m_{t−1}, i_t), C, n rescaled by it."""
    hs = []
    for t in range(S):
        log_f = torch.nn.functional.logsigmoid(f[..., t, None])
        m_new = torch.maximum(log_f + m, i[..., t, None])
        f_s, i_s = torch.exp(log_f + m - m_new), torch.exp(i[..., t, None] - m_new)
        c = f_s[..., None] * c + i_s[..., None] * k[..., t, :, None] * v[..., t, None, :]
        n = f_s * n + i_s * k[..., t, :]
        qs = q[..., t, :] * K ** -0.5
        denominator = torch.maximum((n * qs).sum(-1, keepdim=True).abs(), torch.exp(-m_new)) + EPS
        hs.append((c * qs[..., None]).sum(-2) / denominator)
        m = m_new
    return torch.stack(hs, -2), m


def grads(run, dtype, q_value):
    """The gradients of sum(head_norm(h)·dh) with respect to q, k, v, i, f, c0, n0, m0 (0 where unused)."""
    leaves = [x.to(dtype).requires_grad_() for x in (q_value, k, v, i, f, c0, n0, m0)]
    h, _ = run(*leaves)
    found = torch.autograd.grad((head_norm(h) * dh.to(dtype)).sum(), leaves, allow_unused=True)
    return [torch.zeros_like(x).double() if g is None else g.double() for x, g in zip(leaves, found)]


def library(name):
    def run(q, k, v, i, f, c, n, m):
        h, (_, _, m_last) = get_mlstm_kernel(name)(q, k, v, i, f, c_initial=c, n_initial=n, m_initial=m,
                                                   return_last_states=True, chunk_size=2)
        return h, m_last
    return run


names = ("q", "k", "v", "i", "f", "c0", "n0", "m0")
true = grads(loop, torch.float64, q)
results = {}
for kernel in ("chunkwise--native_autograd", "chunkwise--native_custbw"):
    got = grads(library(kernel), torch.float32, q)
    results[kernel] = [n for n, g, t in zip(names, got, true)
                       if not torch.allclose(g, t, rtol=1e-3, atol=1e-4 * max(float(t.abs().max()), 1e-2))]
    print(f"{kernel} vs the float64 loop, through a per-head norm: wrong: {', '.join(results[kernel]) or 'none'}")
    print(f"  n0 gradient {got[6].flatten().tolist()} (float64 loop {true[6].flatten().tolist()})")
    print(f"  m0 gradient {got[7].flatten().tolist()} (float64 loop {true[7].flatten().tolist()})")
if not results["chunkwise--native_autograd"] and results["chunkwise--native_custbw"] == ["m0"]:
    print("CONFIRMED mlstm_kernels 2.0.6's native_custbw returns 0 for the m_initial gradient, "
          "which its convention does not excuse")
else:
    print("NOT REPRODUCED")
