"""The ``torch-native`` target: torch.nn.RNN/LSTM/GRU on packed sequences, weights from the case.

On CPU this runs aten's (oneDNN where enabled) RNN; on CUDA, cuDNN. Gradients are requested
exactly as in ``case.wants`` through ``requires_grad``, so torch's own frozen-weight and
frozen-input paths are the ones exercised. ``proj_size`` and ``bias=False`` map to torch.nn's
own arguments (``weight_hr_l*`` is ``w_hr``).

Zero-length sequences: ``pack_padded_sequence`` refuses a length of 0 ("Length of all samples
has to be greater than 0"), and a user of torch.nn cannot pass one either, so this target
declines such a case through :meth:`TorchNativeTarget.supports_case` (a skip with that reason)
rather than splitting the batch: rows filled in by our own code would be checking this file,
not torch.

Forward mode (the ``jvp`` check) is torch's forward-mode AD (``torch.func.jvp``) through the same
module. torch 2.13 refuses it for packed sequences: ``_pack_padded_sequence`` has no forward-AD
formula (``NotImplementedError: Trying to use forward AD with _pack_padded_sequence that does not
support it``; docs/torch-2.13/forward-ad-packed.md scripts it). So a case whose sequences all run
the full T steps is run as the dense batch a user would pass (no packing needed), and a case
with shorter sequences is declined with torch's own sentence (:func:`packed_forward_ad_refusal`
asks torch once per process, so a torch that learns it is judged on every case).

Second order (the ``gradgrad`` check) is torch's double backward (``create_graph=True``) through
the same packed forward: torch 2.13 computes it on every CPU path here. torch 2.13 also
refuses it through oneDNN's CPU LSTM (``mkldnn_rnn_layer``, float32 without projections): such a
case is declined with that sentence too (:func:`dense_forward_ad_refusal`, asked of a one-step
module of the same kind).
"""

from __future__ import annotations

import dataclasses
import warnings
from functools import lru_cache
from typing import Mapping

import numpy as np
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ..model.case import TORCH_DTYPE_NAMES, Case, Outputs, RNNConfig
from ..kernels.strided import as_tensor
from ..kernels.target import cuda_matmul_precision
from ..model.layout import directions, param_key, unit_kinds

_MODULES = {"rnn_relu": torch.nn.RNN, "rnn_tanh": torch.nn.RNN, "lstm": torch.nn.LSTM, "gru": torch.nn.GRU}
# torch's CPU RNNs take float16 and bfloat16 too, but bfloat16 is not judged: under `gradcheck-rnn
# calibrate -c half -t torch-native` its worst bf16 gradient errors are several times fused-cpu's
# under the same inputs (benchmarks/RESULTS.md, "Tolerance calibrations"): a tolerance that passes
# it would catch no bf16 bug at all.
_CPU_DTYPES = ("f64", "f32", "f16")


def _torch_name(layer: int, direction: str, kind: str) -> str:
    """torch.nn's parameter name, e.g. l1.bwd.w_ih -> weight_ih_l1_reverse."""
    prefix = "weight" if kind.startswith("w_") else "bias"
    return f"{prefix}_{kind[2:]}_l{layer}{'_reverse' if direction == 'bwd' else ''}"


@lru_cache(maxsize=None)
def packed_forward_ad_refusal() -> str | None:
    """torch's sentence refusing forward-mode AD through ``pack_padded_sequence`` (the first line of
    what it raises), or None when this torch computes it."""
    import torch.autograd.forward_ad as forward_ad

    try:
        with forward_ad.dual_level():
            pack_padded_sequence(forward_ad.make_dual(torch.zeros(2, 1, 1), torch.ones(2, 1, 1)), torch.tensor([1]))
    except (NotImplementedError, RuntimeError) as exc:
        return str(exc).splitlines()[0]
    return None


@lru_cache(maxsize=None)
def dense_forward_ad_refusal(config: RNNConfig) -> str | None:
    """torch's sentence refusing forward-mode AD through its CPU RNN op for ``config``'s cell, dtype,
    projection and bias on a dense batch (oneDNN's LSTM, ``mkldnn_rnn_layer``, has no formula in
    torch 2.13), or None when it computes it: asked of a one-step module of the same kind."""
    from torch.func import jvp

    probe = TorchNativeTarget().build_module(dataclasses.replace(
        config, num_layers=1, max_len=1, batch_size=1)).to(getattr(torch, TORCH_DTYPE_NAMES[config.dtype]))
    x = torch.ones(1, 1, config.input_size, dtype=next(probe.parameters()).dtype)
    try:
        with warnings.catch_warnings():  # "LSTM with projections is not supported with oneDNN": the probe's business
            warnings.simplefilter("ignore")
            jvp(lambda v: probe(v)[0], (x,), (x,))
    except (NotImplementedError, RuntimeError) as exc:
        return str(exc).splitlines()[0]
    return None


class TorchNativeTarget:
    """torch.nn on CPU (and on CUDA when ``device='cuda'``)."""

    def __init__(self, device: str = "cpu") -> None:
        self.device = device
        self.name = "torch-native" if device == "cpu" else f"torch-native-{device}"
        # The module of the last configuration: every run overwrites all its parameters, so it
        # is reused as a user reuses one (building torch.nn RNNs dominated short runs)
        self._module: tuple[RNNConfig, torch.nn.Module] | None = None

    def supports(self, config: RNNConfig) -> bool | str:
        if config.mode not in _MODULES:
            return f"torch.nn has no {config.mode} cell"
        if self.device != "cpu" and not torch.cuda.is_available():
            return f"{self.name} needs a CUDA device; this machine has none"
        if self.device == "cpu" and config.dtype not in _CPU_DTYPES:
            return f"torch.nn RNNs on CPU are checked in {', '.join(_CPU_DTYPES)} only, not {config.dtype}"
        return True

    def supports_case(self, case: Case) -> bool | str:
        """False for zero-length sequences, which torch.nn's packed sequences cannot hold."""
        if (case.seq_lengths == 0).any():
            return "torch.nn cannot pack a sequence of length 0 (pack_padded_sequence refuses it)"
        return True

    def build_module(self, config: RNNConfig) -> torch.nn.Module:
        kwargs: dict = {"nonlinearity": config.mode[4:]} if config.mode.startswith("rnn_") else {}
        if config.proj_size:
            kwargs["proj_size"] = config.proj_size
        return _MODULES[config.mode](config.input_size, config.hidden_size, num_layers=config.num_layers,
                                     bidirectional=config.bidirectional, bias=config.bias, **kwargs)

    def _module_for(self, config: RNNConfig, dtype: torch.dtype) -> torch.nn.Module:
        if self._module is None or self._module[0] != config:
            self._module = config, self.build_module(config).to(device=self.device, dtype=dtype)
        return self._module[1]

    def run(self, case: Case) -> Outputs:
        with cuda_matmul_precision():  # cuDNN RNNs use TF32 by default: off unless GRADCHECK_RNN_TF32=1
            return self._run(case)

    def _run(self, case: Case) -> Outputs:
        y, hy, cy, loss, requested = self._forward(case)
        grads = torch.autograd.grad(loss, list(requested.values()))
        return Outputs(y=y.detach(), hy=hy.detach(), cy=None if cy is None else cy.detach(),
                       grads=dict(zip(requested, grads)))

    def _forward(self, case: Case) -> tuple:
        """torch.nn's forward of ``case`` on packed sequences: y, hy, cy, the loss
        sum(y·dy) + sum(hy·dhy) + sum(cy·dcy) and the requested leaves by gradient name."""
        cfg = case.config
        dtype = getattr(torch, TORCH_DTYPE_NAMES[cfg.dtype])

        def tensor(array, name: str | None = None) -> torch.Tensor:  # in the case's layout (kernels/strided.py)
            t = as_tensor(array, dtype, self.device)
            return t.requires_grad_(name in case.wants) if name else t

        module = self._module_for(cfg, dtype)
        with torch.no_grad():
            for layer in range(cfg.num_layers):
                for direction in directions(cfg):
                    for kind in unit_kinds(cfg):
                        key = param_key(layer, direction, kind)
                        param = getattr(module, _torch_name(layer, direction, kind))
                        param.copy_(torch.from_numpy(case.params[key]))
                        param.requires_grad_(key in case.wants)
        x = tensor(case.x, "x")
        lengths = torch.from_numpy(case.seq_lengths)
        packed = pack_padded_sequence(x, lengths, enforce_sorted=False)
        if case.h0 is None:
            out, state = module(packed)
            h0 = c0 = None
        else:
            h0 = tensor(case.h0, "h0")
            c0 = tensor(case.c0, "c0") if cfg.has_cell_state else None
            out, state = module(packed, (h0, c0) if cfg.has_cell_state else h0)
        y, _ = pad_packed_sequence(out, total_length=cfg.max_len)
        hy, cy = state if cfg.has_cell_state else (state, None)
        loss = (y * tensor(case.dy)).sum() + (hy * tensor(case.dhy)).sum()
        if cy is not None:
            loss = loss + (cy * tensor(case.dcy)).sum()
        leaves = {"x": x, "h0": h0, "c0": c0}
        leaves.update({param_key(l, d, k): getattr(module, _torch_name(l, d, k))
                       for l in range(cfg.num_layers) for d in directions(cfg) for k in unit_kinds(cfg)})
        return y, hy, cy, loss, {name: leaf for name, leaf in leaves.items() if name in case.wants}

    def supports_hvp(self, case: Case) -> bool | str:
        """Second order (double backward) in f64 and f32."""
        if case.config.dtype not in ("f64", "f32"):
            return f"{self.name}'s second order is judged in f64 and f32 only, not {case.config.dtype}"
        return True

    def hvp(self, case: Case, tangents: Mapping[str, np.ndarray]) -> Outputs:
        """torch's double backward through torch.nn's forward: the derivative of each requested
        gradient along ``tangents``."""
        with cuda_matmul_precision():
            y, hy, cy, loss, requested = self._forward(case)
            leaves = list(requested.values())
            grads = torch.autograd.grad(loss, leaves, create_graph=True)
            along = sum((g * torch.as_tensor(tangents[name], dtype=g.dtype, device=g.device)).sum()
                        for name, g in zip(requested, grads))
            products = torch.autograd.grad(along, leaves, allow_unused=True)
        return Outputs(y=None, hy=None, grads={name: torch.zeros_like(leaf) if p is None else p.detach()
                                               for (name, leaf), p in zip(requested.items(), products)})

    def supports_jvp(self, case: Case) -> bool | str:
        """Forward mode in f64 and f32; a case with sequences shorter than T only where torch's
        forward AD goes through ``pack_padded_sequence`` (see the module docstring)."""
        if case.config.dtype not in ("f64", "f32"):
            return f"{self.name}'s forward mode is judged in f64 and f32 only, not {case.config.dtype}"
        refusal = packed_forward_ad_refusal()
        if refusal is not None and (case.seq_lengths < case.config.max_len).any():
            return f"torch refuses forward-mode AD on packed sequences (variable lengths): {refusal}"
        refusal = dense_forward_ad_refusal(case.config)
        if refusal is not None:
            return f"torch refuses forward-mode AD through its CPU {case.config.mode} op: {refusal}"
        return True

    def jvp(self, case: Case, tangents: Mapping[str, np.ndarray]) -> Outputs:
        """torch.func.jvp of torch.nn's forward along ``tangents`` (y, hy, cy's tangents)."""
        with cuda_matmul_precision():
            return self._jvp(case, tangents)

    def _jvp(self, case: Case, tangents: Mapping[str, np.ndarray]) -> Outputs:
        from torch.func import functional_call, jvp

        cfg = case.config
        dtype = getattr(torch, TORCH_DTYPE_NAMES[cfg.dtype])

        def tensor(array) -> torch.Tensor:
            return torch.tensor(array, dtype=dtype, device=self.device)

        module = self._module_for(cfg, dtype)
        keys = [param_key(l, d, k) for l in range(cfg.num_layers) for d in directions(cfg) for k in unit_kinds(cfg)]
        names = {key: _torch_name(int(key.split(".")[0][1:]), key.split(".")[1], key.split(".")[2]) for key in keys}
        with torch.no_grad():
            for key in keys:
                getattr(module, names[key]).copy_(torch.from_numpy(case.params[key]))
        primals = {"x": tensor(case.x)}
        if case.h0 is not None:
            primals["h0"] = tensor(case.h0)
            if cfg.has_cell_state:
                primals["c0"] = tensor(case.c0)
        primals.update({key: getattr(module, names[key]).detach() for key in keys if key in tangents})
        directions_ = {name: tensor(tangents[name]) if name in tangents else torch.zeros_like(value)
                       for name, value in primals.items()}
        packed = bool((case.seq_lengths < cfg.max_len).any())
        lengths = torch.from_numpy(case.seq_lengths)

        def forward(values: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
            params = {names[key]: value for key, value in values.items() if key in names}
            inp = pack_padded_sequence(values["x"], lengths, enforce_sorted=False) if packed else values["x"]
            state = None if "h0" not in values else (
                (values["h0"], values["c0"]) if cfg.has_cell_state else values["h0"])
            out, final = functional_call(module, params, (inp,) if state is None else (inp, state))
            y = pad_packed_sequence(out, total_length=cfg.max_len)[0] if packed else out
            return (y, *final) if cfg.has_cell_state else (y, final)

        _, outputs = jvp(forward, (primals,), (directions_,))
        return Outputs(y=outputs[0], hy=outputs[1], cy=outputs[2] if cfg.has_cell_state else None)
