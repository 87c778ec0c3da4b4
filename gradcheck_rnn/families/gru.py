"""The ``gru`` family: cuDNN's GRU, gates r, z, n, the reset gate applied after the hidden bias."""

from .cudnn import GRUFamily

GRU = GRUFamily(
    token="gru", gates=("r", "z", "n"), cell_state=False, projections=False, memory_gate="z",
    long_memory_needs="it opens the update gate through the biases, so it needs them (not with -nobias)")
