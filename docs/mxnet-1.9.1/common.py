"""Shared by the standalone MXNet 1.9.1 scripts in this folder: one RNN call through the symbol
API with a grad_req per argument, the way gradcheck-rnn's mxnet targets make it. numpy + mxnet only."""

import os

os.environ.setdefault("MXNET_SUBGRAPH_VERBOSE", "0")

import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402

GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}


def problem(mode, L=1, bi=False, T=5, B=2, I=2, H=3, seed=0):
    """Random inputs, flat parameters (MXNet layout), states and head gradients."""
    rng = np.random.default_rng(seed)
    D, G = 2 if bi else 1, GATES[mode]
    n = sum(D * (G * H * (I if l == 0 else D * H) + G * H * H + 2 * G * H) for l in range(L))
    args = dict(data=rng.standard_normal((T, B, I)), parameters=rng.uniform(-0.5, 0.5, n),
                state=rng.standard_normal((L * D, B, H)))
    if mode == "lstm":
        args["state_cell"] = rng.standard_normal((L * D, B, H))
    heads = [rng.standard_normal((T, B, D * H)), rng.standard_normal((L * D, B, H))]
    heads += [rng.standard_normal((L * D, B, H))] if mode == "lstm" else []
    return dict(mode=mode, L=L, bi=bi, H=H, args=args, heads=heads)


def run(p, req, onednn=True, dtype="float32", lengths=None):
    """Forward and backward once; returns (outputs, gradients) as float64 numpy."""
    os.environ["MXNET_USE_MKLDNN_RNN"] = "1" if onednn else "0"  # read by MXNet 1.9.1 on every call
    args = {k: mx.nd.array(v, dtype=dtype) for k, v in p["args"].items()}
    kwargs = {}
    if lengths is not None:
        args["sequence_length"] = mx.nd.array(lengths, dtype="int32")
        kwargs["use_sequence_length"] = True
    grads = {k: mx.nd.zeros_like(v) for k, v in args.items()}
    grad_req = {k: req.get(k, "null") for k in args}
    symbol = mx.sym.RNN(**{k: mx.sym.Variable(k) for k in args}, state_size=p["H"], num_layers=p["L"],
                        bidirectional=p["bi"], mode=p["mode"], state_outputs=True, **kwargs)
    executor = symbol.bind(mx.cpu(), args=args, args_grad=grads, grad_req=grad_req)
    outputs = executor.forward(is_train=True)
    executor.backward([mx.nd.array(h, dtype=dtype) for h in p["heads"]])
    mx.nd.waitall()
    return ([o.asnumpy().astype(np.float64) for o in outputs],
            {k: g.asnumpy().astype(np.float64) for k, g in grads.items() if grad_req[k] == "write"})


def max_diff(a, b):
    return float(np.max(np.abs(a - b))) if np.isfinite(a).all() and np.isfinite(b).all() else float("nan")
