"""Planted slips in the flax and Keras mappings, for tests/test_foreign_jax.py: each loads the real
target file by path in the foreign interpreter and breaks one detail of its mapping, the kind of
slip that reading a library's gate order or bias placement wrong produces. Each name is a target
object, made when the foreign interpreter imports this module."""

from foreign_files import load_target_file as _load


def _flax_slips():
    """GRUCell's input kernels and biases of r and z exchanged; LSTMCell's bias given b_hh alone,
    forgetting that flax's one bias is b_ih + b_hh. Each slip touches its own mode."""
    module = _load("flax_target")
    correct = module.to_flax

    def slipped(params, config, layer, direction):
        tree = correct(params, config, layer, direction)
        if config.mode == "gru":
            tree["ir"], tree["iz"] = tree["iz"], tree["ir"]
        if config.mode == "lstm":
            H = config.hidden_size
            for k, gate in enumerate("ifgo"):
                tree[f"h{gate}"]["bias"] = params[f"l{layer}.{direction}.b_hh"][k * H:(k + 1) * H]
        return tree

    module.to_flax = slipped
    return module.FlaxRNN()


def _keras_slips():
    """Keras's GRU kernels filled in torch's gate order (r, z, n) instead of Keras's (z, r, h); the
    LSTM's one bias given b_hh alone."""
    module = _load("keras_target")
    module._KERAS_ORDER["gru"] = "rzn"
    correct = module.to_keras

    def slipped(params, config, layer, direction):
        weights = correct(params, config, layer, direction)
        if config.mode == "lstm":
            weights["bias"] = module._reorder(params[f"l{layer}.{direction}.b_hh"], "lstm")
        return weights

    module.to_keras = slipped
    return module.KerasRNN()


flax_slips = _flax_slips()
keras_slips = _keras_slips()
