"""The names of the tensors of a fused RNN call, in one place (parameters are named in layout.py).

A target returns the outputs and the gradients of the requested inputs and parameters; the
scalar being differentiated is ``sum(y·dy) + sum(hy·dhy) + sum(cy·dcy)``. ``cy``, ``c0`` and
``dcy`` exist only for cells with a cell state (LSTM).
"""

OUTPUTS = ("y", "hy", "cy")  # the forward's results, compared as they are
INPUTS = ("x", "h0", "c0")  # the inputs whose gradients a case may request (its wants)
HEAD_GRADIENTS = ("dy", "dhy", "dcy")  # the head gradients a case gives, one per output
CELL_STATE = frozenset({"cy", "c0", "dcy"})  # present only where the cell has a cell state
TAIL = "[tail]"  # the row name of a gradient's packed tail is its name + TAIL: ``x[tail]`` (model/packed.py)


def is_output(name: str) -> bool:
    """Whether ``name`` is a forward output (else it is a gradient: an input's or a parameter's)."""
    return name in OUTPUTS
