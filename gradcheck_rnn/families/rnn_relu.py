"""The ``rnn_relu`` family: cuDNN's Elman RNN with relu: h' = relu(W_ih x + b_ih + W_hh h + b_hh)."""

from .cudnn import ElmanFamily

RNN_RELU = ElmanFamily(
    token="rnn_relu", gates=("h",), cell_state=False, projections=False, nonlinearity="relu")
