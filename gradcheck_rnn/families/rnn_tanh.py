"""The ``rnn_tanh`` family: cuDNN's Elman RNN with tanh: h' = tanh(W_ih x + b_ih + W_hh h + b_hh)."""

from .cudnn import ElmanFamily

RNN_TANH = ElmanFamily(
    token="rnn_tanh", gates=("h",), cell_state=False, projections=False, nonlinearity="tanh")
