"""MXNet 1.9.1, default CPU path (oneDNN RNN, float32): use_sequence_length=True with a
sequence_length input is accepted and ignored: outputs and every gradient equal the call without
it (each sequence runs to T, y is non-zero at padded steps, hy is the state at T-1). The native
kernel and float64 refuse the option ("only available for cuDNN"). gradcheck-rnn:
lstm-L1-uni-I2-H3-T4-B2-len4.2-f32-s3 --target mxnet@VENV."""

import numpy as np

from common import max_diff, problem, run

findings = []
for mode, bi in (("lstm", False), ("gru", True), ("rnn_tanh", False), ("rnn_relu", True)):
    p = problem(mode, bi=bi, T=4, B=2)
    req = {"data": "write", "state": "write", "parameters": "write"}
    (y, hy, *_), grads = run(p, req, lengths=[4, 2])
    (y_full, hy_full, *_), grads_full = run(p, req)
    same = max(max_diff(a, b) for a, b in [(y, y_full), (hy, hy_full)] + [(grads[k], grads_full[k]) for k in grads])
    padded = float(np.abs(y[2:, 1]).max())
    print(f"{mode:8s} {'bi ' if bi else 'uni'} lengths [4, 2] vs no lengths: max diff {same:.3g}; "
          f"max |y| at the padded steps of sequence 1: {padded:.3g}")
    findings.append(same == 0.0 and padded > 0)
try:
    run(problem("lstm", T=4, B=2), {"data": "write"}, onednn=False, lengths=[4, 2])
    refused = False
except Exception as exc:  # mxnet.base.MXNetError
    refused = "only available for cuDNN" in str(exc)
print("native kernel refuses use_sequence_length:", refused)
print("CONFIRMED" if all(findings) and refused else "NOT REPRODUCED", "oneDNN RNN ignores sequence_length")
