"""MXNet 1.9.1, native CPU RNN (MXNET_USE_MKLDNN_RNN=0, and float64 on the default path, which
oneDNN does not take): with the inputs frozen (grad_req 'null' on data and states, 'write' on the
parameters) a stacked RNN's weight gradients are wrong, sometimes NaN: the gradient that flows
from layer l down into layer l-1 is the dx MXNet skips computing. One layer, and the oneDNN path
in float32, are right. gradcheck-rnn: lstm-L3-bi-I1-H1-T1-B3-len1.1.1-f32-s1610504820-wparams."""

from common import max_diff, problem, run

findings = []
for mode, L, bi in (("lstm", 2, False), ("gru", 3, True), ("rnn_tanh", 3, False), ("rnn_relu", 3, True), ("gru", 1, True)):
    p = problem(mode, L=L, bi=bi, T=3)
    weights = {"parameters": "write"}
    everything = {"data": "write", "state": "write", "state_cell": "write", **weights}
    native = [max_diff(run(p, weights, False, dtype)[1]["parameters"], run(p, everything, False, dtype)[1]["parameters"])
              for dtype in ("float32", "float64")]
    onednn = max_diff(run(p, weights, True)[1]["parameters"], run(p, everything, True)[1]["parameters"])
    print(f"{mode:8s} L{L} {'bi ' if bi else 'uni'} weight grad, inputs frozen vs requested: native f32 {native[0]:.3g}, "
          f"native f64 {native[1]:.3g}, oneDNN f32 {onednn:.3g}")
    wrong = not all(d < 1e-5 for d in native)  # NaN compares False: wrong too
    findings.append(wrong == (L > 1) and onednn < 1e-5)
print("CONFIRMED" if all(findings) else "NOT REPRODUCED", "native frozen-input weight gradients of stacked RNNs are wrong")
