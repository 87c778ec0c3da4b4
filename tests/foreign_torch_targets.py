"""Planted slips in the FlashRNN and mambapy maps, for tests/test_flashrnn_mambapy.py: each loads the
real target file by path and breaks one detail of its map, the kind of slip that reading a library's
gate order or bias placement wrong produces. Each name is a target object, wrapped as the in-process
foreign built-ins are (their run returns a dict of arrays)."""

from foreign_files import load_target_file as _load

from gradcheck_rnn.targets.foreign import InProcess


def _flashrnn_slips(backend):
    """FlashRNN's GRU recurrent gates filled in our order (r, z, n) instead of FlashRNN's (n, r, z);
    the LSTM's one bias given b_hh alone, forgetting b_ih. Elman is untouched."""
    module = _load("flashrnn_target")
    module._R_GATES["gru"] = "rzn"
    module._B_GATES["lstm"] = tuple((gate, "hh") for gate, _ in module._B_GATES["lstm"])
    return InProcess(module.FlashRNNTarget(backend))


def _mambapy_slip(slip):
    """mambapy's map with in_proj's halves exchanged (z taken for u), or dt_proj's bias (delta_bias) dropped."""
    module = _load("mambapy_target")
    correct = module.to_mambapy

    def slipped(params, config, layer):
        weights = correct(params, config, layer)
        if slip == "swapped_in_proj":
            H = config.hidden_size
            weights["in_proj.weight"] = weights["in_proj.weight"][list(range(H, 2 * H)) + list(range(H))]
        else:
            weights["dt_proj.bias"] = weights["dt_proj.bias"] * 0
        return weights

    module.to_mambapy = slipped
    return InProcess(module.MambaPyTarget())


flashrnn_vanilla_slips = _flashrnn_slips("vanilla")
flashrnn_fwbw_slips = _flashrnn_slips("fwbw")
mambapy_swapped_in_proj = _mambapy_slip("swapped_in_proj")
mambapy_no_delta_bias = _mambapy_slip("no_delta_bias")
