"""flash-linear-attention 0.6.0's fused_recurrent_gla leaves the gradients of the rows after
cu_seqlens[-1] unwritten (what the fla-recurrent target reports as out-of-contract on -tail<n>
cases; their determinism and stateless checks differ run to run, as uninitialised memory does).
An unchecked precondition, not a broken promise: fla's maintainers hold T == cu_seqlens[-1] as the
canonical contract (fla-org/flash-linear-attention PR #892, closed), as FlashAttention does; the
damage is that nothing asserts it, and a caller who pads a packed batch gets wrong weight gradients.
torch and fla only; on a machine without CUDA it runs in Triton's interpreter.

A packed batch with a tail: T rows, cu_seqlens = [0, 3, 5] covers rows 0..4, rows 5..6 belong
to no sequence (a batch rounded up to a block; QwenLM/FlashQLA PR #28 proposed writing zeros there
and was closed without merging, FlashQLA #36 leaves the tail to the caller). The forward
reads none of them, so the true derivative of any loss with respect to q, k, v, gk there is
exactly 0. The backward allocates dq, dk, dv, dgk with new_empty (fla/ops/common/fused_recurrent.py,
fused_recurrent_bwd) and writes the rows of the
sequences only: the tail holds whatever the memory held (often 1e30-sized values, sometimes 0).
Through the rows of the sequences the gradients agree with a float64 loop of the same recurrence
(S_t = diag(exp gk_t) S_{t−1} + k_t v_tᵀ, o_t = S_tᵀ q_t · K^-1/2, per sequence, written below).
cu_seqlens' docstring ("Cumulative sequence lengths of shape [N+1] used for variable-length
training, consistent with the FlashAttention API.") implies cu_seqlens[-1] == T, as FlashAttention's
API has it, but nothing checks it or says what happens otherwise.
"""

import os

import torch

INTERPRET = not torch.cuda.is_available()
if INTERPRET:  # Triton's interpreter decorates the kernels at import: set before fla is imported
    os.environ["TRITON_INTERPRET"] = "1"

from fla.ops.gla import fused_recurrent_gla  # noqa: E402
from triton.runtime.autotuner import Autotuner  # noqa: E402

if INTERPRET:  # the interpreter cannot benchmark: one configuration per autotuner (no device to time on)
    import sys

    for name, module in list(sys.modules.items()):
        if name.startswith("fla.") and module is not None:
            for value in vars(module).values():
                while value is not None:
                    if isinstance(value, Autotuner):
                        value.configs = value.configs[:1]
                    value = getattr(value, "fn", None) if not isinstance(value, type) else None

torch.manual_seed(0)
T, NH, K, V = 7, 2, 2, 3
cu_seqlens = torch.tensor([0, 3, 5])
q, k, v = torch.randn(1, T, NH, K), torch.randn(1, T, NH, K), torch.randn(1, T, NH, V)
gk = torch.nn.functional.logsigmoid(torch.randn(1, T, NH, K))
h0 = torch.randn(2, NH, K, V)
do, dht = torch.randn(1, T, NH, V), torch.randn(2, NH, K, V)


def loop(q, k, v, gk, h0):
    """Per sequence, float64: o (1, T, NH, V) zero in the tail, and the final states (N, NH, K, V)."""
    o, finals = torch.zeros(1, T, NH, V, dtype=torch.float64), []
    for n, (start, end) in enumerate(zip(cu_seqlens[:-1].tolist(), cu_seqlens[1:].tolist())):
        state = h0[n]
        for t in range(start, end):
            state = gk[0, t].exp()[..., None] * state + k[0, t][..., None] * v[0, t][:, None, :]
            o[0, t] = (state * q[0, t][..., None]).sum(-2) * K ** -0.5
        finals.append(state)
    return o, torch.stack(finals)


def grads(run, dtype):
    leaves = [a.to(dtype).requires_grad_() for a in (q, k, v, gk, h0)]
    o, final = run(*leaves)
    valid = int(cu_seqlens[-1])  # the loss reads the sequences' rows only
    loss = (o[:, :valid] * do[:, :valid].to(dtype)).sum() + (final * dht.to(dtype)).sum()
    return [g.double() for g in torch.autograd.grad(loss, leaves)]


true = grads(loop, torch.float64)
valid = int(cu_seqlens[-1])
tails, rows_ok = [], True
for trial in range(3):  # unwritten memory may happen to be 0 once
    theirs = grads(lambda *a: fused_recurrent_gla(*a[:3], gk=a[3], initial_state=a[4], output_final_state=True,
                                                  cu_seqlens=cu_seqlens), torch.float32)
    rows_ok &= all(torch.allclose(g[:, :valid], t[:, :valid], rtol=1e-4, atol=1e-5) for g, t in zip(theirs[:4], true[:4]))
    rows_ok &= torch.allclose(theirs[4], true[4], rtol=1e-4, atol=1e-5)
    tails.append(max(g[:, valid:].abs().max().item() for g in theirs[:4]))
print(f"rows of the sequences and h0: fused_recurrent_gla agrees with the float64 loop: {rows_ok}")
print(f"largest |gradient| in the tail rows (the true value is 0), three runs: {', '.join(f'{t:.3g}' for t in tails)}")
print("CONFIRMED fla 0.6.0's fused_recurrent_gla leaves the gradients after cu_seqlens[-1] unwritten"
      if rows_ok and any(t != 0 for t in tails) else "NOT REPRODUCED")
