"""The ``rnn_relu`` family: cuDNN's Elman RNN with relu: h' = relu(W_ih x + b_ih + W_hh h + b_hh)."""

from .cudnn import CudnnFamily

RNN_RELU = CudnnFamily(
    token="rnn_relu", gates=("h",), cell_state=False, projections=False)
