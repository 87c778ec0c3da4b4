"""What flash-linear-attention 0.6.0 refuses, in its own words: each reason the fla-* targets decline
with (gradcheck_rnn/targets/foreign/fla_target.py). torch and fla only.

- fused_recurrent_gated_delta_rule has no backward (fla-recurrent declines gdn);
- chunk_gla asserts a float32 initial state (fla-chunk declines float64);
- on a machine without CUDA, Triton's interpreter cannot run the chunk kernels (fla-chunk is judged
  on CUDA only), while fused_recurrent_gla runs there;
- there too, causal_conv1d (fla-recurrent's conv1d) runs forward and backward, except the kernel of
  its initial state's gradient (compute_dh0_kernel): fla-recurrent judges conv1d there on cases
  without an initial state (-z) only.
"""

import os

import torch

INTERPRET = not torch.cuda.is_available()
if INTERPRET:  # Triton's interpreter decorates the kernels at import: set before fla is imported
    os.environ["TRITON_INTERPRET"] = "1"

from fla.ops.gated_delta_rule import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule  # noqa: E402
from fla.modules.causal_conv1d.ops import causal_conv1d  # noqa: E402
from fla.ops.gla import chunk_gla  # noqa: E402
from triton.runtime.autotuner import Autotuner  # noqa: E402

if INTERPRET:  # the interpreter cannot benchmark: one configuration per autotuner
    import sys

    for name, module in list(sys.modules.items()):
        if name.startswith("fla.") and module is not None:
            for value in vars(module).values():
                while value is not None:
                    if isinstance(value, Autotuner):
                        value.configs = value.configs[:1]
                    value = getattr(value, "fn", None) if not isinstance(value, type) else None

T, NH, K, V = 5, 1, 2, 2


def inputs(dtype):
    q, k, v = torch.randn(1, T, NH, K, dtype=dtype), torch.randn(1, T, NH, K, dtype=dtype), torch.randn(1, T, NH, V, dtype=dtype)
    g = torch.nn.functional.logsigmoid(torch.randn(1, T, NH, dtype=dtype))
    return [a.requires_grad_() for a in (q, k, v, g, torch.rand(1, T, NH, dtype=dtype))]


def said(call):
    try:
        call()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}".splitlines()[0]
    return "ran"


q, k, v, g, beta = inputs(torch.float32)
print("fused_recurrent_gated_delta_rule backward:",
      said(lambda: fused_recurrent_gated_delta_rule(q, k, v, g=g, beta=beta, use_qk_l2norm_in_kernel=True)[0].sum().backward()))
q, k, v, g, _ = inputs(torch.float64)
gk = g[..., None].expand(1, T, NH, K)
print("chunk_gla, float64 initial state:",
      said(lambda: chunk_gla(q, k, v, g=gk, initial_state=torch.zeros(1, NH, K, V, dtype=torch.float64))))
if INTERPRET:
    q, k, v, g, beta = inputs(torch.float32)
    print("chunk_gated_delta_rule in the interpreter:",
          said(lambda: chunk_gated_delta_rule(q, k, v, g=g, beta=beta, use_qk_l2norm_in_kernel=True)))
if INTERPRET:  # causal_conv1d (fla-recurrent's conv1d): it runs in the interpreter, its initial state's gradient does not
    u, weight, h0 = torch.randn(1, T, 4, requires_grad=True), torch.randn(4, 3, requires_grad=True), torch.randn(1, 4, 3)
    print("causal_conv1d in the interpreter, no initial state:",
          said(lambda: causal_conv1d(u, weight, activation="silu")[0].sum().backward()))
    print("causal_conv1d in the interpreter, an initial state:",
          said(lambda: causal_conv1d(u, weight, initial_state=h0, output_final_state=True)[0].sum().backward()))
