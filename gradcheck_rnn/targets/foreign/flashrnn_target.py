"""The ``flashrnn-*`` targets: FlashRNN 1.0.8's LSTM, GRU, Elman and sLSTM cells, one target per backend.

Loaded by path in any interpreter with numpy, torch and flashrnn (``flashrnn-vanilla@PYTHON``), or
in-process when flashrnn imports here; it imports nothing from gradcheck_rnn. A case runs as a
user stacks FlashRNN: per layer and direction one ``flashrnn(Wx, R, b, states, function, backend,
dtype)`` call, Wx the input projection computed here, the reverse direction on the time-flipped
sequence, the next layer fed [fwd | bwd]. FlashRNN has no lengths: equal lengths are grouped into
one call each (torch_grad.py), a fixed-length batch is one call.

Mapping (flashrnn/flashrnn.py and flashrnn/vanilla/{lstm,gru,elman}.py), written once in
:func:`to_flashrnn`. FlashRNN's layouts are its defaults: Wx (B, T, G, NH, D), R (G, NH, D_out,
D_in), b (G_t, NH, D), states (S, B, 1, NH, D) with h first; one head (NH = 1, D = H), since our
recurrent weights are dense:
- lstm: gates i, f, z, o (ours i, f, g, o), R = w_hh's blocks, b = b_ih + b_hh; states (h, c);
- gru: Wx gates r, z, n (ours); R gates **n, r, z** (FlashRNN's recurrent ``g`` = W_hn h comes
  first); b has four gates **b_hn, b_ir + b_hr, b_iz + b_hz, b_in**, h' = z·h + (1 − z)·tanh(n + r·g),
  which is torch's GRU with b_hn inside r·(…);
- elman (our rnn_tanh): one gate, b = b_ih + b_hh;
- slstm (flashrnn/vanilla/slstm.py, flashrnn/vanilla_fwbw/{fw,bw}.py): our family follows FlashRNN's
  gate order i, f, z, o and its layouts, so the map is reshapes only, with NH heads of d = H / NH:
  Wx (B, T, 4, NH, d), R = w_hh as (4, NH, d, d), b = b as (4, NH, d); states (4, B, 1, NH, d):
  h, then our packed [c | n | m] cut in three.
The gradients of our parameters are torch autograd's derivative through that map.

The sLSTM stabiliser: ``vanilla`` is autograd through FlashRNN's forward, m differentiated through
its max (our default convention); ``vanilla_fwbw`` (bw.py: "delta_m_tminus1 = zero", and the
outside delta of m is never read) and ``triton_fused`` (slstm_bw.py stores zeros as the initial
state's delta m) hold m constant, so those targets declare ``stabilizer_gradient = "constant"``.

Declined, each with the library's own words: rnn_relu (FlashRNN's functions are slstm, lstm, gru,
elman, and elman is tanh), projections, the sLSTM's exponential forget gate (``-expf``: every
backend computes ``logsigmoid(fraw)``, its registry entry has no constants), GRU and Elman on
``vanilla_fwbw`` and ``triton_fused`` (lstm and slstm only), float64 where the backend has no float64 kernel (vanilla_fwbw's registry,
triton's and CUDA's dtype tables), head sizes Triton's kernels refuse, and the GPU backends where
they cannot run.
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from typing import Any

# Loaded by file path in an interpreter that may not have gradcheck_rnn: so is the shared base.
_spec = importlib.util.spec_from_file_location("_gradcheck_foreign_torch_grad", Path(__file__).with_name("torch_grad.py"))
torch_grad = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(torch_grad)

FUNCTIONS = {"lstm": "lstm", "gru": "gru", "rnn_tanh": "elman", "slstm": "slstm"}
BACKENDS = {"vanilla": "vanilla", "fwbw": "vanilla_fwbw", "triton": "triton_fused", "cuda": "cuda"}
# The backends whose hand-written sLSTM backward holds the stabiliser m constant (module docstring).
M_CONSTANT = ("vanilla_fwbw", "triton_fused")
# Gate orders, ours -> FlashRNN's, per tensor: Wx, R, and the bias (names of our bias sums).
_WX_GATES = {"lstm": "ifgo", "gru": "rzn", "rnn_tanh": "h"}
_R_GATES = {"lstm": "ifgo", "gru": "nrz", "rnn_tanh": "h"}
# A bias gate is our b_ih + b_hh of that gate ("sum"), or one of the two ("ih", "hh").
_B_GATES = {"lstm": (("i", "sum"), ("f", "sum"), ("g", "sum"), ("o", "sum")),
            "gru": (("n", "hh"), ("r", "sum"), ("z", "sum"), ("n", "ih")), "rnn_tanh": (("h", "sum"),)}
_OURS = {"lstm": "ifgo", "gru": "rzn", "rnn_tanh": "h"}
# What Triton's interpreter raises on FlashRNN's kernels (tl.make_block_ptr), Triton 3.9
# (docs/flashrnn-1.0.8/refusals.py shows it and every other refusal quoted here).
TRITON_INTERPRETER_REFUSES = "Block pointers have been removed in favor of the tensor descriptor API"


def import_flashrnn() -> Any:
    """``flashrnn.flashrnn``, imported without torch's "No CUDA runtime is found" warning: flashrnn
    imports torch.utils.cpp_extension for its CUDA backends, which says so on every CPU machine."""
    logger = logging.getLogger("torch.utils.cpp_extension")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        from flashrnn import flashrnn
    finally:
        logger.setLevel(level)
    return flashrnn


def _block(a: Any, mode: str, gate: str) -> Any:
    H = a.shape[0] // len(_OURS[mode])
    k = _OURS[mode].index(gate)
    return a[k * H:(k + 1) * H]


def to_flashrnn(params: dict[str, Any], config: Any, layer: int, direction: str, x: Any) -> tuple[Any, Any, Any]:
    """Wx (B, T, G, NH, d) from x (T, B, I), R (G, NH, d, d) and b (G_t, NH, d) for one layer and
    direction; NH = 1 and d = H but for slstm."""
    import torch

    mode, H = config.mode, config.hidden_size
    def p(kind: str) -> Any:
        return params[f"l{layer}.{direction}.{kind}"]

    if mode == "slstm":  # FlashRNN's gate order and layouts: reshapes only
        heads = config.option("heads")
        d = H // heads
        Wx = (x @ p("w_ih").T).reshape(x.shape[0], x.shape[1], 4, heads, d).transpose(0, 1)
        b = p("b") if config.bias else p("w_hh").new_zeros(4 * H)
        return Wx, p("w_hh").reshape(4, heads, d, d), b.reshape(4, heads, d)

    w_ih = torch.cat([_block(p("w_ih"), mode, g) for g in _WX_GATES[mode]])
    Wx = (x @ w_ih.T).reshape(x.shape[0], x.shape[1], len(_WX_GATES[mode]), 1, H).transpose(0, 1)
    R = torch.stack([_block(p("w_hh"), mode, g) for g in _R_GATES[mode]])[:, None]
    zero = p("w_hh").new_zeros(H)

    def bias(gate: str, which: str) -> Any:
        if not config.bias:  # FlashRNN always has a bias: zeros, and no bias gradient is asked of it
            return zero
        if which == "sum":
            return _block(p("b_ih"), mode, gate) + _block(p("b_hh"), mode, gate)
        return _block(p(f"b_{which}"), mode, gate)

    b = torch.stack([bias(gate, which) for gate, which in _B_GATES[mode]])[:, None]
    return Wx, R, b


class FlashRNNTarget(torch_grad.TorchGradTarget):
    """FlashRNN's ``flashrnn()`` on one backend; see the module docstring for the map and the declines."""

    def __init__(self, backend: str = "vanilla") -> None:
        self.backend = BACKENDS[backend]
        self.name = f"flashrnn-{backend}"
        self.device = "cuda" if backend in ("triton", "cuda") else "cpu"
        self.stabilizer_gradient = "constant" if self.backend in M_CONSTANT else "true"

    def supports(self, config: Any) -> bool | str:
        import torch

        if config.mode not in FUNCTIONS:
            return (f"FlashRNN has no {config.mode} cell (its functions: slstm, lstm, gru, elman; elman is tanh)"
                    if config.mode == "rnn_relu" else f"the flashrnn targets judge lstm, gru, rnn_tanh and slstm, not {config.mode}")
        if config.proj_size:
            return "FlashRNN's LSTM has no projections"
        if config.mode == "slstm" and config.option("exp_forget"):
            return ("FlashRNN 1.0.8's sLSTM has the sigmoid forget gate only (every backend computes "
                    "\"logfplusm = m + torch.nn.functional.logsigmoid(fbar)\"; its slstm entry has no constants)")
        if self.backend == "vanilla_fwbw" and config.mode not in ("lstm", "slstm"):
            return (f"FlashRNN 1.0.8's vanilla_fwbw backend has no {FUNCTIONS[config.mode]} kernel (lstm and slstm "
                    f"only: \"Function {FUNCTIONS[config.mode]} not implemented for vanilla_fwbw backend.\")")
        if self.backend == "triton_fused" and config.mode not in ("lstm", "slstm"):
            return (f"FlashRNN 1.0.8's triton_fused backend has no {FUNCTIONS[config.mode]} kernel (its _get_kernel "
                    f"defines lstm and slstm only: \"UnboundLocalError: cannot access local variable 'fn'\")")
        if self.backend == "vanilla_fwbw" and config.dtype == "f64":
            return ("FlashRNN 1.0.8's vanilla_fwbw has float32, float16 and bfloat16 kernels only "
                    f"(its {FUNCTIONS[config.mode]}_pt_registry raises KeyError: 'float64')")
        if self.device == "cuda":
            if config.dtype == "f64":
                return f"FlashRNN 1.0.8's {self.backend} backend has float32, float16 and bfloat16 kernels only"
            if not torch.cuda.is_available():
                if self.backend == "triton_fused":
                    import triton

                    return (f"flashrnn-triton needs a CUDA device: Triton {triton.__version__}'s CPU interpreter "
                            f"(TRITON_INTERPRET=1) cannot run FlashRNN's kernels (\"{TRITON_INTERPRETER_REFUSES}\")")
                return "FlashRNN's cuda backend compiles CUDA kernels and needs a CUDA device; this machine has none"
        head = config.hidden_size // (config.option("heads") if config.mode == "slstm" else 1)
        if self.backend == "triton_fused" and (head & (head - 1)):
            return f"FlashRNN's Triton kernels need a power-of-2 head size (\"DH must be a power of 2, got {head}.\")"
        return True

    def second_order_refusal(self, case: Any) -> str | None:
        if self.stabilizer_gradient == "constant" and case.config.mode == "slstm":
            return (f"{self.name}'s hand-written sLSTM backward holds the stabiliser m constant (the constant "
                    "convention): its double backward is that gradient's derivative, not the loss's second order "
                    "that the references compute")
        return None

    def forward_group(self, case: Any, params: dict[str, Any], x: Any, h0: Any, c0: Any) -> tuple[Any, Any, Any]:
        import torch

        flashrnn = import_flashrnn()
        cfg = case.config
        D = cfg.num_directions
        hy, cy = [], []
        for layer in range(cfg.num_layers):
            outputs = []
            for k, direction in enumerate(("fwd", "bwd")[:D]):
                Wx, R, b = to_flashrnn(params, cfg, layer, direction, x.flip(0) if k else x)
                heads, d = Wx.shape[3:]
                states = None
                if h0 is not None:
                    row = layer * D + k
                    # h first, then the cell state's parts: c (lstm), or our packed [c | n | m] (slstm)
                    parts = [h0[row]] + (list(c0[row].chunk(c0.shape[-1] // cfg.hidden_size, -1)) if c0 is not None else [])
                    states = torch.stack(parts).unflatten(-1, (heads, d))[:, :, None]
                h, last = flashrnn(Wx, R, b, states=states, function=FUNCTIONS[cfg.mode], backend=self.backend,
                                   dtype=torch_grad.DTYPES[cfg.dtype])
                y = h[0].flatten(-2).transpose(0, 1)  # (T, B, H)
                outputs.append(y.flip(0) if k else y)
                hy.append(last[0, :, 0].flatten(-2))
                if last.shape[0] > 1:  # (h, c) or (h, c, n, m)
                    cy.append(torch.cat(list(last[1:, :, 0].flatten(-2)), -1))
            x = torch.cat(outputs, -1)
        return x, torch.stack(hy), torch.stack(cy) if cy else None


def make_target(backend: str = "vanilla") -> FlashRNNTarget:
    return FlashRNNTarget(backend)
