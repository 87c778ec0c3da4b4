"""MXNet 1.9.1, native CPU RNN (MXNET_USE_MKLDNN_RNN=0): with the weights frozen (grad_req
'null' on the parameters) the input gradient of every step but the last is wrong for GRU and the
vanilla RNNs. For rnn_tanh and rnn_relu it is truncated BPTT: dx of step t no longer sees the head
gradients of later steps. LSTM is right; so is every mode with the weights' gradient requested, and
the oneDNN path. gradcheck-rnn: gru-L1-uni-I2-H3-T5-B1-len5-f32-s7-wx --target mxnet-native@VENV."""

import numpy as np

from common import max_diff, problem, run

T = 5
findings = []
for mode in ("gru", "rnn_tanh", "rnn_relu", "lstm"):
    p = problem(mode, T=T, B=2)
    inputs = {"data": "write"}
    _, frozen = run(p, inputs, onednn=False)
    _, trained = run(p, {**inputs, "parameters": "write"}, onednn=False)
    _, onednn = run(p, inputs, onednn=True)
    # Change only the head gradient of the last step: with BPTT, dx changes at every step.
    later = dict(p, heads=[p["heads"][0].copy(), *p["heads"][1:]])
    later["heads"][0][-1] += 1.0
    _, frozen_later = run(later, inputs, onednn=False)
    sees = [t for t in range(T) if np.any(frozen_later["data"][t] != frozen["data"][t])]
    wrong = [t for t in range(T) if np.abs(frozen["data"][t] - trained["data"][t]).max() > 1e-5]
    print(f"{mode:8s} native, weights frozen: dx wrong at steps {wrong} (max diff "
          f"{max_diff(frozen['data'], trained['data']):.3g}); steps whose dx sees dy[T-1]: {sees}; "
          f"oneDNN frozen vs native requested: {max_diff(onednn['data'], trained['data']):.3g}")
    expected_wrong = [] if mode == "lstm" else list(range(T - 1))
    truncated = sees == [T - 1] if mode.startswith("rnn_") else True
    findings.append(wrong == expected_wrong and truncated and max_diff(onednn["data"], trained["data"]) < 1e-5)
print("CONFIRMED" if all(findings) else "NOT REPRODUCED", "native frozen-weight input gradients (GRU, RNN: truncated BPTT)")
