"""mlstm_kernels 2.0.6's chunkwise--native_custbw holds the denominator max(|nᵀq|, exp(−m)) constant in
its hand-written backward: its gradients are not the derivative of its own forward whenever |nᵀq| is
the larger one (what the mlstm-custbw target fails on). torch and mlstm_kernels only.

chunkwise/native/bw.py says why: "We do not need to compute the gradients for the denominator, as
it cancels out in the forward in the groupnorm." That holds for an xLSTM block, where a per-head
GroupNorm follows the cell and cancels any per-step scale; the kernel's own output h is not
scale-free, and the convention is written in that source comment only. The backward also returns
zeros for n_initial and m_initial and ignores head gradients on n_last and m_last.

A float64 loop of the same mLSTM (written below; autograd through it, m through its max) and
chunkwise--native_autograd (autograd through the library's chunkwise forward) agree on every
gradient of a loss through h. native_custbw agrees with them on q, k, v, i, f, c0 only while exp(−m) is the larger
term of the denominator (q scaled by 1e-3 below; its n0 and m0 gradients are zeros there too);
with ordinary q the gradients of q, k, i, f (and n0, m0) differ by O(1).
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
    """The gradients of sum(h·dh) with respect to q, k, v, i, f, c0, n0, m0 (0 where one is unused)."""
    leaves = [x.to(dtype).requires_grad_() for x in (q_value, k, v, i, f, c0, n0, m0)]
    h, _ = run(*leaves)
    found = torch.autograd.grad((h * dh.to(dtype)).sum(), leaves, allow_unused=True)
    return [torch.zeros_like(x).double() if g is None else g.double() for x, g in zip(leaves, found)]


def library(name):
    def run(q, k, v, i, f, c, n, m):
        h, (_, _, m_last) = get_mlstm_kernel(name)(q, k, v, i, f, c_initial=c, n_initial=n, m_initial=m,
                                                   return_last_states=True, chunk_size=2)
        return h, m_last
    return run


names = ("q", "k", "v", "i", "f", "c0", "n0", "m0")
results = {}
for label, scale in (("|nᵀq| larger", 1.0), ("exp(−m) larger", 1e-3)):
    true = grads(loop, torch.float64, q * scale)
    for kernel in ("chunkwise--native_autograd", "chunkwise--native_custbw"):
        got = grads(library(kernel), torch.float32, q * scale)
        bad = [n for n, g, t in zip(names, got, true)
               if not torch.allclose(g, t, rtol=1e-3, atol=1e-4 * float(t.abs().max()))]
        results[kernel, label] = bad
        print(f"{label}: {kernel} vs the float64 loop, wrong: {', '.join(bad) or 'none'}")
if (not results["chunkwise--native_autograd", "|nᵀq| larger"] and not results["chunkwise--native_autograd", "exp(−m) larger"]
        and set(results["chunkwise--native_custbw", "exp(−m) larger"]) <= {"n0", "m0"}
        and {"q", "k", "i", "f"} <= set(results["chunkwise--native_custbw", "|nᵀq| larger"])):
    print("CONFIRMED mlstm_kernels 2.0.6's native_custbw holds the denominator constant in its backward")
else:
    print("NOT REPRODUCED")
