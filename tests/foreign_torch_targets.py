"""Planted slips in the FlashRNN and mambapy maps, for tests/test_flashrnn_mambapy.py: each loads the
real target file by path and breaks one detail of its map, the kind of slip that reading a library's
gate order or bias placement wrong produces. Each name is a target object, wrapped as the in-process
foreign built-ins are (their run returns a dict of arrays)."""

from foreign_files import load_target_file as _load

from gradcheck_rnn.targets.foreign import LocalForeignTarget


def _flashrnn_slips(backend):
    """FlashRNN's GRU recurrent gates filled in our order (r, z, n) instead of FlashRNN's (n, r, z);
    the LSTM's one bias given b_hh alone, forgetting b_ih. Elman is untouched."""
    module = _load("flashrnn_target")
    module._R_GATES["gru"] = "rzn"
    module._B_GATES["lstm"] = tuple((gate, "hh") for gate, _ in module._B_GATES["lstm"])
    return LocalForeignTarget(module.FlashRNNTarget(backend))


def _flashrnn_slstm_swapped_bias(backend):
    """The sLSTM's bias handed to FlashRNN with its i and f gate rows exchanged; the lstm map is untouched."""
    module = _load("flashrnn_target")
    correct = module.to_flashrnn

    def slipped(params, config, layer, direction, x):
        Wx, R, b = correct(params, config, layer, direction, x)
        return Wx, R, b[[1, 0, 2, 3]] if config.mode == "slstm" else b

    module.to_flashrnn = slipped
    return LocalForeignTarget(module.FlashRNNTarget(backend))


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
    return LocalForeignTarget(module.MambaPyTarget())


flashrnn_vanilla_slips = _flashrnn_slips("vanilla")
flashrnn_fwbw_slips = _flashrnn_slips("fwbw")
flashrnn_vanilla_slstm_swapped_bias = _flashrnn_slstm_swapped_bias("vanilla")
flashrnn_fwbw_slstm_swapped_bias = _flashrnn_slstm_swapped_bias("fwbw")
mambapy_swapped_in_proj = _mambapy_slip("swapped_in_proj")
mambapy_no_delta_bias = _mambapy_slip("no_delta_bias")
