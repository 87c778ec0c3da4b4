"""The ``lstm`` family: cuDNN's LSTM, gates i, f, g, o; optional projection h = W_hr (o ⊙ tanh c)."""

from .cudnn import LSTMFamily

LSTM = LSTMFamily(
    token="lstm", gates=("i", "f", "g", "o"), cell_state=True, projections=True, memory_gate="f",
    long_memory_needs="it opens the forget gate through the biases, so it needs them (not with -nobias)")
