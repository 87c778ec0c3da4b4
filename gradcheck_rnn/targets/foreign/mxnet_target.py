"""The ``mxnet`` and ``mxnet-native`` targets: MXNet 1.9.1's fused ``RNN`` operator on CPU.

This file is loaded by path inside an interpreter that has only numpy and mxnet (the client of
docs/foreign-targets.md), so it imports nothing from gradcheck_rnn. It passes each case the way
an MXNet program does: ``mx.sym.RNN`` bound with ``grad_req`` per argument, so MXNet's own
``req = null`` branches are exercised (MXNet 1.9.1's native CPU backward truncates BPTT exactly
when the weights request no gradient):

- the flat parameter vector in MXNet's layout (per layer, per direction: w_ih, w_hh; then all
  biases in the same order: b_ih, b_hh); gradient ``parameters`` is ``write`` when any weight or
  bias is requested, else ``null``; x, h0, c0 likewise, one by one;
- variable lengths through ``sequence_length`` with ``use_sequence_length=True``; a batch whose
  sequences all have length T is called without them, as MXNet's CPU users do;
- head gradients dy, dhy, dcy into ``backward`` (``state_outputs=True``);
- no initial state: zeros with ``grad_req='null'``, as gluon's ``begin_state`` passes them;
- no bias: zero biases (MXNet's RNN op has no bias switch), their gradients not returned.

``mxnet`` is MXNet's default CPU path (its oneDNN RNN for float32); ``mxnet-native`` switches
oneDNN's RNN off through ``MXNET_USE_MKLDNN_RNN=0``, the variable MXNet 1.9.1 reads on every call
(``MXNET_USE_ONEDNN_RNN`` in later versions; both are set). Declined, each because MXNet 1.9.1
itself refuses it with the error quoted in the reason: float16 and bfloat16, projections (no
training support on CPU), and ``sequence_length`` wherever the native kernel runs (mxnet-native,
and float64 on the default path, which oneDNN does not take).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Any, Iterator

import numpy as np

ONEDNN_RNN_ENV = ("MXNET_USE_MKLDNN_RNN", "MXNET_USE_ONEDNN_RNN")
_DTYPES = {"f64": "float64", "f32": "float32"}
_REFUSED_DTYPES = {
    "f16": 'MXNet 1.9.1 refuses float16 RNNs on CPU ("FP16 gemm on cpu not implemented!")',
    "bf16": "MXNet 1.9.1 has no bfloat16 NDArray (\"data type 'bfloat16' not understood\")",
}
PROJECTION_REFUSED = ('MXNet 1.9.1 refuses LSTM projections in training on CPU ("No training support for '
                      'LSTM with projection on CPU currently.")')
SEQUENCE_LENGTH_REFUSED = ("MXNet 1.9.1's native CPU RNN refuses variable lengths (\"RNN use_sequence_length "
                           "option is only available for cuDNN version >= 7.2\")")


def _units(config: Any) -> list[tuple[int, str]]:
    dirs = ("fwd", "bwd") if config.bidirectional else ("fwd",)
    return [(layer, d) for layer in range(config.num_layers) for d in dirs]


def pack_mxnet(params: dict[str, np.ndarray], config: Any) -> np.ndarray:
    """MXNet's flat parameter vector: all weights (w_ih, w_hh per layer and direction), then all
    biases in the same order; zeros where a config has no bias, since MXNet's op always has them."""
    gh = config.num_gates * config.hidden_size
    weights, biases = [], []
    for layer, d in _units(config):
        weights += [params[f"l{layer}.{d}.w_ih"].ravel(), params[f"l{layer}.{d}.w_hh"].ravel()]
        for kind in ("b_ih", "b_hh"):
            biases.append(params[f"l{layer}.{d}.{kind}"].ravel() if config.bias else np.zeros(gh))
    return np.concatenate(weights + biases)


def unpack_mxnet(flat: np.ndarray, config: Any) -> dict[str, np.ndarray]:
    """Inverse of :func:`pack_mxnet`, keeping only the keys the config has."""
    gh, H = config.num_gates * config.hidden_size, config.hidden_size
    shapes = {}
    for layer, d in _units(config):
        width = config.input_size if layer == 0 else config.num_directions * H
        shapes[f"l{layer}.{d}.w_ih"], shapes[f"l{layer}.{d}.w_hh"] = (gh, width), (gh, H)
    for layer, d in _units(config):
        shapes[f"l{layer}.{d}.b_ih"] = shapes[f"l{layer}.{d}.b_hh"] = (gh,)
    out, offset = {}, 0
    for key, shape in shapes.items():
        size = int(np.prod(shape))
        out[key] = flat[offset:offset + size].reshape(shape)
        offset += size
    return {k: v for k, v in out.items() if config.bias or ".w_" in k}


@contextmanager
def _onednn_rnn(enabled: bool) -> Iterator[None]:
    """MXNet reads the switch on every RNN call, so set it for this call only and restore it."""
    saved = {name: os.environ.get(name) for name in ONEDNN_RNN_ENV}
    os.environ.update({name: "1" if enabled else "0" for name in ONEDNN_RNN_ENV})
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class MXNetRNN:
    """MXNet's RNN operator on CPU: the default path, or the native kernel (``native=True``)."""

    def __init__(self, native: bool = False) -> None:
        self.native = native
        self.name = "mxnet-native" if native else "mxnet"

    def supports(self, config: Any) -> bool | str:
        if config.dtype in _REFUSED_DTYPES:
            return _REFUSED_DTYPES[config.dtype]
        if config.proj_size:
            return PROJECTION_REFUSED
        return True

    def supports_case(self, case: Any) -> bool | str:
        """Variable lengths reach MXNet's native kernel on mxnet-native and, for float64 (which
        oneDNN's RNN does not take), on the default path too; that kernel refuses them."""
        variable = bool((np.asarray(case.seq_lengths) != case.config.max_len).any())
        if variable and (self.native or case.config.dtype == "f64"):
            return SEQUENCE_LENGTH_REFUSED
        return True

    def run(self, case: Any) -> dict[str, Any]:
        import mxnet as mx

        cfg = case.config
        dtype = _DTYPES[cfg.dtype]
        L, D, B, H = cfg.num_layers, cfg.num_directions, cfg.batch_size, cfg.hidden_size
        zeros = np.zeros((L * D, B, H))
        args = {"data": case.x, "parameters": pack_mxnet(case.params, cfg),
                "state": case.h0 if case.initial_state else zeros}
        wants = {"data": "x" in case.wants, "parameters": any(k in case.wants for k in case.params),
                 "state": "h0" in case.wants}
        if cfg.has_cell_state:
            args["state_cell"] = case.c0 if case.initial_state else zeros
            wants["state_cell"] = "c0" in case.wants
        kwargs: dict[str, Any] = {}
        arrays = {k: mx.nd.array(v, dtype=dtype) for k, v in args.items()}
        if (np.asarray(case.seq_lengths) != cfg.max_len).any():
            arrays["sequence_length"] = mx.nd.array(case.seq_lengths, dtype="int32")
            wants["sequence_length"] = False
            kwargs["use_sequence_length"] = True
        symbol = mx.sym.RNN(**{k: mx.sym.Variable(k) for k in arrays}, state_size=H, num_layers=L,
                            bidirectional=cfg.bidirectional, mode=cfg.mode, state_outputs=True, **kwargs)
        grads = {k: mx.nd.zeros_like(v) for k, v in arrays.items()}
        req = {k: "write" if wanted else "null" for k, wanted in wants.items()}
        heads = [case.dy, case.dhy] + ([case.dcy] if cfg.has_cell_state else [])
        with _onednn_rnn(not self.native):
            executor = symbol.bind(mx.cpu(), args=arrays, args_grad=grads, grad_req=req)
            outputs = executor.forward(is_train=True)
            executor.backward([mx.nd.array(h, dtype=dtype) for h in heads])
            mx.nd.waitall()
            out = [o.asnumpy() for o in outputs]
            got = {k: grads[k].asnumpy() for k, wanted in wants.items() if wanted}
        result = {"x": got.get("data"), "h0": got.get("state"), "c0": got.get("state_cell")}
        if "parameters" in got:
            result.update(unpack_mxnet(got["parameters"], cfg))
        return {"y": out[0], "hy": out[1], "cy": out[2] if cfg.has_cell_state else None,
                "grads": {k: v for k, v in result.items() if k in case.wants and v is not None}}


def make_target(native: bool = False) -> MXNetRNN:
    return MXNetRNN(native)
