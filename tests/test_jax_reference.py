"""The jax reference: finite differences, an independent numpy forward, bucketing, caching."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from gradcheck_rnn import RNNConfig, make_case
from gradcheck_rnn.case import with_changes
from gradcheck_rnn.layout import directions, param_key

jax_ref = pytest.importorskip("gradcheck_rnn.references.jax_ref")
run_jax_reference = jax_ref.run_jax_reference

MODES = ("rnn_relu", "rnn_tanh", "lstm", "gru")
EPS = 1e-6
FD_RTOL, FD_ATOL = 1e-5, 1e-8


def loss(case, out) -> float:
    total = np.sum(out.y * case.dy) + np.sum(out.hy * case.dhy)
    if out.cy is not None:
        total += np.sum(out.cy * case.dcy)
    return float(total)


def replaced(case, name: str, array: np.ndarray):
    if name in ("x", "h0", "c0"):
        return with_changes(case, **{name: array})
    return with_changes(case, params={**case.params, name: array})


def master(case, name: str) -> np.ndarray:
    return getattr(case, name) if name in ("x", "h0", "c0") else case.params[name]


# --------------------------------------------------------------------------- independent numpy forward

def _sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def _np_cell(mode, x, h, c, w_ih, w_hh, b_ih, b_hh, w_hr=None):
    gi = w_ih @ x + (0 if b_ih is None else b_ih)
    gh = w_hh @ h + (0 if b_hh is None else b_hh)
    H = w_hh.shape[0] // {"rnn_tanh": 1, "rnn_relu": 1, "lstm": 4, "gru": 3}[mode]
    if mode == "rnn_tanh":
        return np.tanh(gi + gh), None
    if mode == "rnn_relu":
        return np.maximum(gi + gh, 0.0), None
    if mode == "lstm":
        a = gi + gh
        i, f, g, o = (a[k * H:(k + 1) * H] for k in range(4))
        c_new = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        h_new = _sigmoid(o) * np.tanh(c_new)
        return (h_new if w_hr is None else w_hr @ h_new), c_new
    r = _sigmoid(gi[:H] + gh[:H])
    z = _sigmoid(gi[H:2 * H] + gh[H:2 * H])
    n = np.tanh(gi[2 * H:] + r * gh[2 * H:])
    return (1 - z) * n + z * h, None


def numpy_forward(case):
    """One sequence at a time, cut to its length, no padding anywhere: y, hy, cy."""
    cfg = case.config
    T, B, H, D, L = cfg.max_len, cfg.batch_size, cfg.hidden_size, cfg.num_directions, cfg.num_layers
    S = cfg.state_size
    lstm = cfg.mode == "lstm"
    y = np.zeros((T, B, D * S))
    hy = np.zeros((L * D, B, S))
    cy = np.zeros((L * D, B, H)) if lstm else None
    for b in range(B):
        n = int(case.seq_lengths[b])
        inp = case.x[:n, b]
        for layer in range(L):
            outs = []
            for d, direction in enumerate(directions(cfg)):
                s = layer * D + d
                h = np.zeros(S) if case.h0 is None else case.h0[s, b]
                c = (np.zeros(H) if case.c0 is None else case.c0[s, b]) if lstm else None
                w = [case.params.get(param_key(layer, direction, k)) for k in ("w_ih", "w_hh", "b_ih", "b_hh", "w_hr")]
                seq = np.zeros((n, S))
                for t in (range(n) if direction == "fwd" else range(n - 1, -1, -1)):
                    h, c = _np_cell(cfg.mode, inp[t], h, c, *w)
                    seq[t] = h
                outs.append(seq)
                hy[s, b] = h
                if lstm:
                    cy[s, b] = c
            inp = np.concatenate(outs, axis=-1)
        y[:n, b] = inp
    return y, hy, cy


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("initial_state", [True, False])
def test_forward_matches_independent_numpy(mode, initial_state):
    cfg = RNNConfig(mode, 2, True, 3, 2, 5, 4)
    case = make_case(cfg, [2, 5, 1, 4], seed=11, initial_state=initial_state)
    out = run_jax_reference(case)
    y, hy, cy = numpy_forward(case)
    assert out.y.shape == y.shape and out.hy.shape == hy.shape
    np.testing.assert_allclose(out.y, y, rtol=0, atol=1e-12)
    np.testing.assert_allclose(out.hy, hy, rtol=0, atol=1e-12)
    if mode == "lstm":
        np.testing.assert_allclose(out.cy, cy, rtol=0, atol=1e-12)
    else:
        assert out.cy is None
    for b, n in enumerate(case.seq_lengths):
        assert np.all(out.y[n:, b] == 0.0)
        assert np.all(out.grads["x"][n:, b] == 0.0)


def test_numpy_forward_pins_reverse_start():
    """Sanity of the test's own reference: the reverse direction starts at len_b - 1, not T - 1."""
    cfg = RNNConfig("rnn_tanh", 1, True, 2, 3, 6, 2)
    case = make_case(cfg, [3, 6], seed=5)
    shifted = with_changes(case, x=np.concatenate([case.x[:3], case.x[:3] * 0 + 7.0], axis=0))
    y0, hy0, _ = numpy_forward(case)
    y1, hy1, _ = numpy_forward(shifted)
    np.testing.assert_array_equal(y0[:, 0], y1[:, 0])   # sequence 0 never sees steps 3..5
    np.testing.assert_array_equal(hy0[:, 0], hy1[:, 0])
    out = run_jax_reference(shifted)
    np.testing.assert_allclose(out.y, y1, rtol=0, atol=1e-12)


# --------------------------------------------------------------------------- finite differences

FD_CONFIGS = [(mode, layers, bi) for mode in MODES for layers in (1, 2) for bi in (False, True)]
FD_CONFIGS += [("lstm", 3, True), ("gru", 3, True), ("rnn_relu", 3, False)]


@pytest.mark.parametrize("mode,layers,bi", FD_CONFIGS)
def test_gradients_match_central_differences(mode, layers, bi):
    cfg = RNNConfig(mode, layers, bi, 2, 2, 3, 3)
    _assert_central_differences(make_case(cfg, [2, 3, 1], seed=100 + layers * 10 + bi))


@pytest.mark.parametrize("config, lengths", [
    (RNNConfig("lstm", 2, True, 2, 3, 3, 3, proj_size=2), [2, 3, 1]),
    (RNNConfig("lstm", 1, False, 2, 3, 3, 3, proj_size=1, bias=False), [2, 3, 1]),
    (RNNConfig("gru", 2, True, 2, 2, 3, 3, bias=False), [2, 3, 1]),
    (RNNConfig("rnn_tanh", 2, True, 2, 2, 3, 4), [2, 3, 1, 0]),
    (RNNConfig("lstm", 2, True, 2, 3, 3, 4, proj_size=2), [2, 3, 1, 0]),
], ids=["lstm-P2", "lstm-P1-nobias", "gru-nobias", "tanh-zero-length", "lstm-P2-zero-length"])
def test_api_surface_gradients_match_central_differences(config, lengths):
    _assert_central_differences(make_case(config, lengths, seed=17))


def _assert_central_differences(case):
    mode = case.config.mode
    out = run_jax_reference(case)
    names = ["x", "h0", *(["c0"] if mode == "lstm" else []), *case.params]
    assert set(out.grads) == set(names)
    rng = np.random.default_rng(7)
    for name in names:
        base = master(case, name)
        grad = out.grads[name]
        assert grad.shape == base.shape and grad.dtype == np.float64, name
        flat = np.arange(base.size)
        picks = list(rng.choice(flat, size=min(6, base.size), replace=False))
        if name == "x":  # a padded step too: its gradient must be exactly 0
            picks.append(int(np.ravel_multi_index((2, 2, 1), base.shape)))
        for k in picks:
            idx = np.unravel_index(k, base.shape)
            plus, minus = base.copy(), base.copy()
            plus[idx] += EPS
            minus[idx] -= EPS
            fd = (loss(case, run_jax_reference(replaced(case, name, plus)))
                  - loss(case, run_jax_reference(replaced(case, name, minus)))) / (2 * EPS)
            g = grad[idx]
            assert abs(g - fd) <= FD_ATOL + FD_RTOL * abs(g), f"{case.id} d/d{name}{idx}: vjp {g!r}, fd {fd!r}"
    for b, length in enumerate(case.seq_lengths):  # padded steps (every step of a length-0 sequence)
        assert np.all(out.grads["x"][length:, b] == 0.0)


# --------------------------------------------------------------------------- bucketing and caching

def _assert_outputs_close(a, b, atol):
    np.testing.assert_allclose(a.y, b.y, rtol=0, atol=atol)
    np.testing.assert_allclose(a.hy, b.hy, rtol=0, atol=atol)
    if b.cy is None:
        assert a.cy is None
    else:
        np.testing.assert_allclose(a.cy, b.cy, rtol=0, atol=atol)
    assert set(a.grads) == set(b.grads)
    for k in b.grads:
        assert a.grads[k].shape == b.grads[k].shape, k
        np.testing.assert_allclose(a.grads[k], b.grads[k], rtol=0, atol=atol, err_msg=k)


def test_bucket_rule():
    assert [jax_ref.bucket(n) for n in (1, 5, 8, 9, 16, 17, 100)] == [8, 8, 8, 16, 16, 32, 128]
    key = jax_ref.bucket_key(RNNConfig("gru", 2, True, 3, 9, 17, 2))
    assert tuple(key) == ("gru", 2, 2, 8, 16, 32, 8, 0)
    assert jax_ref.bucket_key(RNNConfig("lstm", 1, False, 3, 20, 4, 2, proj_size=9)).proj_size == 16


def test_bucketed_equals_exact_shapes_with_projection_and_no_bias():
    # H 11 -> 16 and P 9 -> 16 pad separately: w_hh is (4·16, 16), w_hr (16, 16), layer 1 sees [fwd | bwd] of P
    cfg = RNNConfig("lstm", 2, True, 3, 11, 6, 3, proj_size=9, bias=False)
    case = make_case(cfg, [4, 0, 6], seed=21)
    _assert_outputs_close(jax_ref.run_padded(case, bucketed=True), jax_ref.run_padded(case, bucketed=False), 1e-12)
    y, hy, cy = numpy_forward(case)
    np.testing.assert_allclose(run_jax_reference(case).y, y, rtol=0, atol=1e-12)


@pytest.mark.parametrize("mode", MODES)
def test_bucketed_equals_exact_shapes(mode):
    # every dimension is padded (I 3->8, H 5->8, T 6->8, B 3->8), layer > 0 sees [fwd | bwd]
    cfg = RNNConfig(mode, 2, True, 3, 5, 6, 3)
    case = make_case(cfg, [4, 6, 1], seed=21)
    assert jax_ref.bucket_key(cfg) != jax_ref.bucket_key(cfg, bucketed=False)
    _assert_outputs_close(jax_ref.run_padded(case, bucketed=True), jax_ref.run_padded(case, bucketed=False), 1e-12)


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_no_initial_state_equals_zero_states(mode):
    cfg = RNNConfig(mode, 2, True, 3, 4, 5, 3)
    without = make_case(cfg, [5, 2, 3], seed=31, initial_state=False)
    assert without.h0 is None
    full = make_case(cfg, [5, 2, 3], seed=31)
    zeros = with_changes(full, h0=np.zeros_like(full.h0), c0=None if full.c0 is None else np.zeros_like(full.c0))
    a, b = run_jax_reference(without), run_jax_reference(zeros)
    assert "h0" not in a.grads and "c0" not in a.grads
    assert "h0" in b.grads
    b.grads.pop("h0")
    b.grads.pop("c0", None)
    _assert_outputs_close(a, b, 1e-14)
    # and the explicit random states do matter (the comparison above is not vacuous)
    assert np.abs(run_jax_reference(full).hy - b.hy).max() > 1e-3


def test_same_bucket_does_not_recompile():
    cfg = RNNConfig("rnn_tanh", 1, False, 9, 3, 3, 2)  # bucket I16-H8-T8-B8, used nowhere else here
    before = jax_ref.compile_count()
    first = run_jax_reference(make_case(cfg, [3, 2], seed=1))
    assert jax_ref.compile_count() == before + 1
    assert jax_ref.bucket_key(cfg) in jax_ref.cached_buckets()
    again = run_jax_reference(make_case(cfg, [3, 2], seed=1))
    np.testing.assert_array_equal(first.y, again.y)
    other = RNNConfig("rnn_tanh", 1, False, 12, 7, 8, 5)  # other shapes, same bucket
    out = run_jax_reference(make_case(other, [8, 1, 5, 2, 7], seed=2))
    assert out.y.shape == (8, 5, 7) and out.grads["x"].shape == (8, 5, 12)
    assert jax_ref.compile_count() == before + 1
    run_jax_reference(make_case(RNNConfig("rnn_tanh", 1, False, 17, 3, 3, 2), [3, 2], seed=1))
    assert jax_ref.compile_count() == before + 2  # a new bucket does compile


def test_persistent_cache_env(tmp_path):
    code = ("import jax, gradcheck_rnn.references.jax_ref as m; "
            "print(jax.config.jax_compilation_cache_dir, jax.config.jax_enable_x64)")
    env = {**os.environ, "GRADCHECK_RNN_JAX_CACHE": str(tmp_path), "JAX_PLATFORMS": "cpu"}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(tmp_path), "True"]


def test_zero_length_sequence():
    """Profiles may allow length 0 (docs/contracts.md, "Case variants"): y = 0, hy = h0, dh0 = dhy, dx = 0."""
    case = make_case(RNNConfig("lstm", 2, True, 3, 2, 5, 3), [2, 0, 1], seed=4)
    out = run_jax_reference(case)
    y, hy, cy = numpy_forward(case)
    np.testing.assert_allclose(out.y, y, rtol=0, atol=1e-12)
    np.testing.assert_allclose(out.hy, hy, rtol=0, atol=1e-12)
    np.testing.assert_allclose(out.cy, cy, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(out.hy[:, 1], case.h0[:, 1])
    np.testing.assert_array_equal(out.grads["h0"][:, 1], case.dhy[:, 1])
    np.testing.assert_array_equal(out.grads["c0"][:, 1], case.dcy[:, 1])
    assert np.all(out.grads["x"][:, 1] == 0.0)
