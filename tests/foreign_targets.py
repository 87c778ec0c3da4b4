"""Targets for tests/test_foreign.py that run in a foreign interpreter: numpy only, no gradcheck_rnn.

``numpy_tanh`` is a correct one-layer unidirectional tanh RNN with variable lengths, written
out with its hand BPTT, so that a foreign target that passes is real arithmetic, not a copy of
the reference. The others misbehave on purpose on the case with data seed 1 and behave like
``numpy_tanh`` otherwise, so a test sees the failure and then the recovery.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import numpy as np


class NumpyTanh:
    """rnn_tanh, one layer, one direction, any lengths (0 included), any wants group."""

    name = "numpy-tanh"

    def supports(self, config):
        if config.mode != "rnn_tanh" or config.num_layers != 1 or config.bidirectional or config.proj_size:
            return "numpy_tanh runs one-layer unidirectional rnn_tanh only"
        return True

    def run(self, case):
        p, T, B = case.params, case.config.max_len, case.config.batch_size
        H = case.config.hidden_size
        w_ih, w_hh = p["l0.fwd.w_ih"], p["l0.fwd.w_hh"]
        bias = p["l0.fwd.b_ih"] + p["l0.fwd.b_hh"] if case.config.bias else np.zeros(H)
        mask = (np.arange(T)[:, None] < case.seq_lengths[None, :])[:, :, None].astype(float)
        h = [case.h0[0] if case.initial_state else np.zeros((B, H))]
        for t in range(T):  # a finished sequence keeps its state
            h.append(mask[t] * np.tanh(case.x[t] @ w_ih.T + h[t] @ w_hh.T + bias) + (1 - mask[t]) * h[t])
        y = mask * np.stack(h[1:])
        grads = {k: np.zeros_like(v) for k, v in p.items()}
        dx, dh = np.zeros_like(case.x), case.dhy[0].copy()
        for t in reversed(range(T)):
            dh = dh + mask[t] * case.dy[t]
            da = dh * mask[t] * (1 - np.tanh(case.x[t] @ w_ih.T + h[t] @ w_hh.T + bias) ** 2)
            grads["l0.fwd.w_ih"] += da.T @ case.x[t]
            grads["l0.fwd.w_hh"] += da.T @ h[t]
            for key in ("l0.fwd.b_ih", "l0.fwd.b_hh"):
                if key in grads:
                    grads[key] += da.sum(0)
            dx[t] = da @ w_ih
            dh = dh * (1 - mask[t]) + da @ w_hh
        grads.update(x=dx, h0=dh[None])
        return {"y": y, "hy": h[-1][None], "cy": None, "grads": {k: v for k, v in grads.items() if k in case.wants}}


numpy_tanh = NumpyTanh()


class _OnSeedOne(NumpyTanh):
    def run(self, case):
        if case.seed == 1:
            self.misbehave(case)
        return super().run(case)


class Killer(_OnSeedOne):
    def misbehave(self, case):
        os.kill(os.getpid(), signal.SIGKILL)


class Sleeper(_OnSeedOne):
    def misbehave(self, case):
        time.sleep(120)


class Raiser(_OnSeedOne):
    def misbehave(self, case):
        raise ValueError("planted failure in the foreign target")


class Noisy(NumpyTanh):
    """Prints to stdout and stderr: the protocol's frames must not be disturbed."""

    def run(self, case):
        print("noise on stdout", case.id)
        print("noise on stderr", file=sys.stderr)
        return super().run(case)


class Slipped(NumpyTanh):
    """Returns W_hh's gradient transposed: a layout slip the tool must catch."""

    def run(self, case):
        out = super().run(case)
        if "l0.fwd.w_hh" in out["grads"]:
            out["grads"]["l0.fwd.w_hh"] = out["grads"]["l0.fwd.w_hh"].T.copy()
        return out


def where_am_i(case):
    """Raises with the foreign interpreter's numpy version, so a test sees where it ran."""
    raise RuntimeError(f"numpy {np.__version__} at {sys.executable}")


class EchoesItsConfig:
    """Skips every case with, as the reason, the JSON of every attribute of the config it was sent:
    what a target in another interpreter sees of a case's config."""

    def supports_case(self, case):
        import json

        config = case.config
        seen = {name: getattr(config, name) for name in vars(config) if not callable(getattr(config, name))}
        seen["option()"] = {name: config.option(name) for name in seen["options"]}
        return json.dumps(seen, sort_keys=True)

    def run(self, case):
        raise AssertionError("never run: every case is skipped")
