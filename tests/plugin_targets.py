"""Plugin targets used by the tests: torch.nn wrapped with one historical bug each."""

import torch

from gradcheck_rnn import Outputs
from gradcheck_rnn.families.ops import torch_ops
from gradcheck_rnn.model.layout import directions, param_key
from gradcheck_rnn.targets.torch_native import TorchNativeTarget


def zero_top_bhh(case):
    """MXNet #17818: the top layer's h2h bias gradient comes back all zeros."""
    outputs = TorchNativeTarget().run(case)
    key = f"l{case.config.num_layers - 1}.fwd.b_hh"
    if key in outputs.grads:
        outputs.grads[key] = torch.zeros_like(outputs.grads[key])
    return outputs


def raises(case):
    raise RuntimeError("kernel exploded")


def returns_nan(case):
    outputs = TorchNativeTarget().run(case)
    outputs.grads["x"] = outputs.grads["x"] * float("nan")
    return outputs


class TruncatedBPTT:
    """MXNet #21143: dh from step t+1 never reaches step t (the state is detached between steps).

    The forward is exact; only the gradients flowing backward through time are lost.
    """

    name = "truncated-bptt"

    def supports(self, config):
        return True if config.dtype in ("f64", "f32") else "f64/f32 only"

    def run(self, case):
        cfg = case.config
        dtype = torch.float64 if cfg.dtype == "f64" else torch.float32

        def leaf(a):
            return None if a is None else torch.tensor(a, dtype=dtype, requires_grad=True)

        x, h0, c0 = leaf(case.x), leaf(case.h0), leaf(case.c0)
        params = {k: leaf(v) for k, v in case.params.items()}
        T, B, H = cfg.max_len, cfg.batch_size, cfg.hidden_size
        zeros = torch.zeros(H, dtype=dtype)
        y = [[None] * B for _ in range(T)]
        hy, cy, loss = {}, {}, torch.zeros((), dtype=dtype)
        for b in range(B):
            length = int(case.seq_lengths[b])
            layer_input = x[:length, b]
            for layer in range(cfg.num_layers):
                outs = []
                for d, direction in enumerate(directions(cfg)):
                    s = layer * cfg.num_directions + d
                    h = zeros if h0 is None else h0[s, b]
                    c = (zeros if c0 is None else c0[s, b]) if cfg.mode == "lstm" else None
                    unit = {k: params[param_key(layer, direction, k)] for k in cfg.family.unit_shapes(cfg, layer)}
                    hs = [None] * length
                    steps = range(length) if direction == "fwd" else range(length - 1, -1, -1)
                    for i, t in enumerate(steps):
                        if i > 0:  # the bug: the recurrent gradient is cut
                            h = h.detach()
                            c = None if c is None else c.detach()
                        hs[t], h, c = cfg.family.step(torch_ops(), unit, layer_input[t], h, c, cfg)
                    outs.append(torch.stack(hs))
                    hy[s, b], cy[s, b] = h, c
                layer_input = torch.cat(outs, -1)
            loss = loss + (layer_input * torch.tensor(case.dy[:length, b], dtype=dtype)).sum()
            for t in range(T):
                y[t][b] = layer_input[t] if t < length else torch.zeros(cfg.num_directions * H, dtype=dtype)
        states = range(cfg.num_layers * cfg.num_directions)
        hy_t = torch.stack([torch.stack([hy[s, b] for b in range(B)]) for s in states])
        loss = loss + (hy_t * torch.tensor(case.dhy, dtype=dtype)).sum()
        cy_t = None
        if cfg.mode == "lstm":
            cy_t = torch.stack([torch.stack([cy[s, b] for b in range(B)]) for s in states])
            loss = loss + (cy_t * torch.tensor(case.dcy, dtype=dtype)).sum()
        leaves = {"x": x, "h0": h0, "c0": c0, **params}
        wanted = [(k, v) for k, v in leaves.items() if k in case.wants]
        grads = torch.autograd.grad(loss, [v for _, v in wanted], allow_unused=True)
        y_t = torch.stack([torch.stack(row) for row in y])
        return Outputs(y_t.detach(), hy_t.detach(), None if cy_t is None else cy_t.detach(),
                       {k: torch.zeros_like(v) if g is None else g for (k, v), g in zip(wanted, grads)})


truncated_bptt = TruncatedBPTT()


def returns_non_finite(case):
    """One NaN in dx and +inf in y: the values a checker exists to catch must never crash it."""
    outputs = TorchNativeTarget().run(case)
    if "x" in outputs.grads:  # requested
        outputs.grads["x"][0, 0, 0] = float("nan")
    outputs.y = outputs.y.clone()
    outputs.y[0, 0, 0] = float("inf")
    return outputs


class OnlyF16:
    """A target that supports nothing a CPU sweep draws: every case is a skip."""

    name = "only-f16"

    def supports(self, config):
        return True if config.dtype == "f16" else "only-f16 computes in float16 only"

    def run(self, case):
        return TorchNativeTarget().run(case)


only_f16 = OnlyF16()


def key_error(case):
    """A plugin bug: the traceback must name this file and line."""
    return {"a": 1}["nope"]


# --- targets that take their process down (isolation with worker processes, tests/test_scale.py) --
# Never judge these with --workers 1: they would end the test process itself.


def segfaults(case):
    """A native crash: the worker process dies by SIGSEGV in the middle of a case."""
    import os
    import signal

    os.kill(os.getpid(), signal.SIGSEGV)


class SegfaultsOnThreeLayers:
    """Crashes its worker on a case of three layers and skips the others: on a Dask worker each
    crash costs its pool a new process (seconds of imports), and one shows the isolation."""

    def supports(self, config):
        return True if config.num_layers == 3 else "crashes on three layers only"

    def run(self, case):
        return segfaults(case)


segfaults_on_three_layers = SegfaultsOnThreeLayers()


def exits(case):
    """A library that calls os._exit: no exception, no traceback, the process is just gone."""
    import os

    os._exit(3)


def hangs(case):
    """A kernel that never returns (a deadlock, a spin on a flag no one sets)."""
    import time

    time.sleep(3600)


def kills_its_dask_worker(case):
    """Takes the Dask worker judging the case down with it (as the OOM killer would).

    The case runs in a worker process whose parent is the Dask worker; anywhere else (a parent
    not started by multiprocessing) it only raises, so it can never kill a test run.
    """
    import os
    import signal

    with open(f"/proc/{os.getppid()}/cmdline", "rb") as stream:
        if b"spawn_main" not in stream.read():
            raise RuntimeError("kills_its_dask_worker runs only under a Dask worker")
    os.kill(os.getppid(), signal.SIGKILL)


class KillsItsDaskWorkerUnderAnEnvironment:
    """:func:`kills_its_dask_worker` with a repro environment: the rows of its lost chunk are
    written by the submitting process, which never loaded the target."""

    repro_env = "PLUGIN_TARGETS_MODE=kill"

    def run(self, case):
        kills_its_dask_worker(case)


kills_its_dask_worker_under_an_environment = KillsItsDaskWorkerUnderAnEnvironment()


class SegfaultsUnderAChunk:
    """Declares chunk sizes (kernel configurations) and crashes its worker under any of them."""

    name = "segfaults-under-a-chunk"

    def kernel_configs(self, config):
        return {"chunk": (2, 4)}

    def run(self, case):
        return segfaults(case)


segfaults_under_a_chunk = SegfaultsUnderAChunk()
