# my_rnn.py
import torch
from gradcheck_rnn import Outputs


class MyGRU:
    name = "my-gru"

    def supports(self, config):
        if config.mode != "gru" or config.num_layers != 1 or config.bidirectional:
            return "my-gru is a one-layer unidirectional GRU"
        return True if config.dtype in ("f64", "f32") else "my-gru computes in f32/f64"

    def supports_case(self, case):
        return "torch.nn cannot pack length 0" if (case.seq_lengths == 0).any() else True

    def run(self, case):
        cfg, dtype = case.config, {"f64": torch.float64, "f32": torch.float32}[case.config.dtype]
        gru = torch.nn.GRU(cfg.input_size, cfg.hidden_size, bias=cfg.bias).to(dtype)
        torch_names = {f"l0.fwd.{k}": ("weight_" if k[0] == "w" else "bias_") + k[2:] + "_l0"
                       for k in ("w_ih", "w_hh", "b_ih", "b_hh")}
        params = {key: getattr(gru, torch_names[key]) for key in case.params}  # no b_* keys in -nobias cases
        with torch.no_grad():
            for key, param in params.items():
                param.copy_(torch.from_numpy(case.params[key]))
                param.requires_grad_(key in case.wants)  # frozen weights (-winputs, -wx) take their own path
        x = torch.tensor(case.x, dtype=dtype, requires_grad="x" in case.wants)
        inputs = {"x": x}
        if case.h0 is not None:  # case ids ending in -z: no initial state, torch's own zero-state path
            inputs["h0"] = torch.tensor(case.h0, dtype=dtype, requires_grad="h0" in case.wants)
        packed = torch.nn.utils.rnn.pack_padded_sequence(x, torch.from_numpy(case.seq_lengths),
                                                         enforce_sorted=False)
        out, hy = gru(packed, inputs.get("h0"))
        y, _ = torch.nn.utils.rnn.pad_packed_sequence(out, total_length=cfg.max_len)
        loss = (y * torch.tensor(case.dy, dtype=dtype)).sum() + (hy * torch.tensor(case.dhy, dtype=dtype)).sum()
        names, leaves = zip(*[(k, v) for k, v in {**inputs, **params}.items() if k in case.wants])
        grads = torch.autograd.grad(loss, leaves)
        return Outputs(y=y.detach(), hy=hy.detach(), grads=dict(zip(names, grads)))


my_gru = MyGRU()
