"""What torch 2.13 refuses in forward mode on its CPU RNNs, in its own words: the two reasons the
torch-native target declines the jvp check (gradcheck_rnn/targets/torch_native.py). torch only.

- torch.func.jvp through nn.LSTM/GRU/RNN on a dense float64 batch works, and its tangents match a
  central difference of the outputs;
- pack_padded_sequence has no forward-AD formula: variable-length batches (the packed sequences
  torch.nn takes) cannot be run in forward mode at all;
- a float32 LSTM on CPU runs oneDNN's RNN (mkldnn_rnn_layer), which has no forward-AD formula.
"""

import torch
from torch.func import jvp
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

torch.manual_seed(0)


def first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0]}"


for cls in (torch.nn.RNN, torch.nn.LSTM, torch.nn.GRU):
    module = cls(3, 4, num_layers=2, bidirectional=True).double()
    x, u = torch.randn(5, 2, 3, dtype=torch.float64), torch.randn(5, 2, 3, dtype=torch.float64)
    _, tangent = jvp(lambda v: module(v)[0], (x,), (u,))
    with torch.no_grad():
        central = (module(x + 1e-6 * u)[0] - module(x - 1e-6 * u)[0]) / 2e-6
    print(f"dense float64 {cls.__name__}: forward AD works, max |jvp - central difference| = "
          f"{float((tangent.detach() - central).abs().max()):.1e}")

module = torch.nn.GRU(3, 4).double()
x, u = torch.randn(5, 2, 3, dtype=torch.float64), torch.randn(5, 2, 3, dtype=torch.float64)
try:
    jvp(lambda v: pad_packed_sequence(module(pack_padded_sequence(v, torch.tensor([5, 3])))[0])[0], (x,), (u,))
    print("packed sequences: forward AD works")
except NotImplementedError as exc:
    print(f"packed sequences: refused: {first_line(exc)}")

module = torch.nn.LSTM(3, 4)
x, u = torch.randn(5, 2, 3), torch.randn(5, 2, 3)
try:
    jvp(lambda v: module(v)[0], (x,), (u,))
    print("dense float32 LSTM: forward AD works")
except NotImplementedError as exc:
    print(f"dense float32 LSTM: refused: {first_line(exc)}")
