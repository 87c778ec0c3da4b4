"""What FlashRNN 1.0.8 refuses, with its own error: the cases the flashrnn-* targets decline
(gradcheck_rnn/targets/foreign/flashrnn_target.py quotes these). numpy, torch and flashrnn only.

Run with TRITON_INTERPRET=1 in the environment (this script sets it when absent, before flashrnn's
Triton kernels are imported) to see Triton's CPU interpreter refuse FlashRNN's kernels.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from flashrnn import flashrnn  # noqa: E402

GATES = {"lstm": (4, 4, 2), "gru": (3, 4, 1), "elman": (1, 1, 1)}  # Wx and R gates, bias gates, states


def call(function, backend, dtype, head=4, batch=2, steps=3):
    """One forward and backward of flashrnn() on random data; "accepted" or its error's last line."""
    g, gb, s = GATES[function]
    rng = np.random.default_rng(0)
    torch_dtype = getattr(torch, dtype)
    tensors = [torch.tensor(rng.standard_normal(shape), dtype=torch_dtype, requires_grad=True)
               for shape in ([batch, steps, g, 1, head], [g, 1, head, head], [gb, 1, head], [s, batch, 1, 1, head])]
    try:
        h, last = flashrnn(*tensors[:3], states=tensors[3], function=function, backend=backend, dtype=dtype)
        (h.sum() + last.sum()).backward()
        return "accepted"
    except Exception as exc:  # each backend refuses in its own way
        return f"{type(exc).__name__}: {[line for line in str(exc).splitlines() if line.strip()][-1].strip()}"


found = {
    "vanilla_fwbw gru": call("gru", "vanilla_fwbw", "float32"),
    "vanilla_fwbw elman": call("elman", "vanilla_fwbw", "float32"),
    "vanilla_fwbw float64": call("lstm", "vanilla_fwbw", "float64"),
    "triton_fused gru": call("gru", "triton_fused", "float32"),
    "triton_fused head 3": call("lstm", "triton_fused", "float32", head=3),
    "triton_fused on CPU (interpreter)": call("lstm", "triton_fused", "float32"),
    "vanilla float64 (judged)": call("lstm", "vanilla", "float64"),
}
for what, result in found.items():
    print(f"{what}: {result}")
expected = {"vanilla_fwbw gru": "Function gru not implemented for vanilla_fwbw backend.",
            "vanilla_fwbw float64": "KeyError: 'float64'", "triton_fused gru": "UnboundLocalError",
            "triton_fused head 3": "DH must be a power of 2, got 3.",
            "triton_fused on CPU (interpreter)": "Block pointers have been removed in favor of the tensor descriptor API",
            "vanilla float64 (judged)": "accepted"}
if all(words in found[what] for what, words in expected.items()):
    print("CONFIRMED FlashRNN 1.0.8 refuses what the flashrnn targets decline")
else:
    print("NOT REPRODUCED")
