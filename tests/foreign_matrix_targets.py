"""Planted slips in the fla and mlstm_kernels maps, for tests/test_fla_mlstm.py: each loads the real
target file by path and breaks one detail of its map, the kind of slip that reading a library's
state layout or gate order wrong produces: a state read as (V, K) instead of (K, V), or two gates
exchanged. Each name is a target object, wrapped as the in-process foreign built-ins are."""

from foreign_files import load_target_file as _load

from gradcheck_rnn.targets.foreign import LocalForeignTarget


def _transposed(state):
    """A (…, K, V) state read with its last two axes in the other order, as a misread layout does."""
    return None if state is None else state.transpose(-1, -2).reshape(state.shape)


def _fla_slip(kernel, slip):
    """fla's map with the initial state transposed, conv1d's taps in the reverse order, or gla's decay
    replaced by its complement (logsigmoid(−x)) and gdn's decay and write gates exchanged."""
    module = _load("fla_target")
    target = module.FlaTarget(kernel)
    if slip == "transposed_state":
        call = target._kernel
        target._kernel = lambda mode, inputs, h0, cu_seqlens=None: call(mode, inputs, _transposed(h0), cu_seqlens)
    elif slip == "flipped_taps":  # conv1d: the window read newest first, as a misread weight layout does
        conv = target._conv_layers
        target._conv_layers = lambda cfg, params, x, h0, cu_seqlens: conv(
            cfg, {k: v.flip(-1) if k.endswith("w_conv") else v for k, v in params.items()}, x, h0, cu_seqlens)
    else:
        correct = module.layer_map

        def swapped(params, config, layer, x):
            out = correct(params, config, layer, x)
            if config.mode == "gla":
                import torch

                out["gk"] = torch.log(-torch.expm1(out["gk"]))  # log(1 − α): the gate's complement
            else:
                import torch.nn.functional as F

                out["g"], out["beta"] = F.logsigmoid(out["beta"].logit()), out["g"].exp()
            return out

        module.layer_map = swapped
    return LocalForeignTarget(target)


def _mlstm_slip(kernel, slip):
    """mlstm_kernels' map with the initial C transposed, or the input and forget gates exchanged."""
    module = _load("mlstm_target")
    if slip == "transposed_state":
        correct_call = module.MLSTMTarget._call

        def call(self, name, q, k, v, i, f, states, *chunk_size):
            return correct_call(self, name, q, k, v, i, f, (_transposed(states[0]), *states[1:]), *chunk_size)

        module.MLSTMTarget._call = call
    else:
        correct = module.layer_map

        def swapped(params, config, layer, x):
            q, k, v, i, f = correct(params, config, layer, x)
            return q, k, v, f, i

        module.layer_map = swapped
    return LocalForeignTarget(module.MLSTMTarget(kernel))


fla_recurrent_transposed_state = _fla_slip("recurrent", "transposed_state")
fla_recurrent_swapped_gate = _fla_slip("recurrent", "swapped_gate")
fla_recurrent_flipped_taps = _fla_slip("recurrent", "flipped_taps")
fla_naive_transposed_state = _fla_slip("naive", "transposed_state")
fla_naive_swapped_gate = _fla_slip("naive", "swapped_gate")
mlstm_chunkwise_transposed_state = _mlstm_slip("chunkwise", "transposed_state")
mlstm_chunkwise_swapped_gate = _mlstm_slip("chunkwise", "swapped_gate")
mlstm_parallel_swapped_gate = _mlstm_slip("parallel", "swapped_gate")
