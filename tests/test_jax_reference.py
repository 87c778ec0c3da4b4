"""The jax reference: finite differences, an independent numpy forward, bucketing, caching."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from gradcheck_rnn import Case, RNNConfig, make_case
from gradcheck_rnn.model.case import with_changes
from gradcheck_rnn.model.layout import directions, param_key

jax_ref = pytest.importorskip("gradcheck_rnn.references.jax_cudnn")
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

# each mode stays in the default suite one layer unidirectional and two layers bidirectional (a stacked
# input, the reverse direction); its other two corners add no behaviour and run in the slow suite
FD_CONFIGS = [(mode, layers, bi) if layers == 1 + bi else
              pytest.param(mode, layers, bi, marks=pytest.mark.slow)  # test_gradients_match_central_differences[mode-1-False] and [mode-2-True]
              for mode in MODES for layers in (1, 2) for bi in (False, True)]
# three layers: a middle layer (its input and its output both stacked) is what two layers lack;
# rnn_relu's is the fast check, the gated modes' (0.9 s each) run in the slow suite
FD_CONFIGS += [pytest.param("lstm", 3, True, marks=pytest.mark.slow), pytest.param("gru", 3, True, marks=pytest.mark.slow),
               ("rnn_relu", 3, False)]


@pytest.mark.parametrize("mode,layers,bi", FD_CONFIGS)
def test_gradients_match_central_differences(mode, layers, bi):
    cfg = RNNConfig(mode, layers, bi, 2, 2, 3, 3)
    _assert_central_differences(make_case(cfg, [2, 3, 1], seed=100 + layers * 10 + bi))


@pytest.mark.parametrize("config, lengths", [
    # projected and bidirectional, as lstm-P2-zero-length is (with a length-0 sequence besides)
    pytest.param(RNNConfig("lstm", 2, True, 2, 3, 3, 3, proj_size=2), [2, 3, 1], marks=pytest.mark.slow),
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
    assert tuple(key) == (4, 16, 32, 32, 8)  # layers, hidden (and state) width, input width, steps, rows
    assert jax_ref.bucket_key(RNNConfig("lstm", 1, False, 40, 20, 4, 2, proj_size=9)) == (4, 32, 64, 8, 8)
    assert jax_ref.bucket_key(RNNConfig("rnn_relu", 5, False, 3, 2, 4, 2)).num_layers == 8
    # mode, directions, projection and bias are data: the ci profile's extremes share one program
    corners = [RNNConfig(m, layers, bi, i, h, t, b, proj_size=p, bias=bias)
               for m in MODES for layers in (1, 3) for bi in (False, True)
               for i, h, t, b in ((1, 1, 1, 1), (5, 5, 8, 4))
               for p in ((0, 4) if m == "lstm" and h == 5 else (0,)) for bias in (True, False)]
    assert len({jax_ref.bucket_key(c) for c in corners}) == 1


def _random_cases(count: int, seed: int):
    """A seeded table over everything bucketing folds into one program: every mode, heads variant
    and request group, 1-3 layers, uni and bi, projections, no bias, no initial state, lengths 0..T."""
    rng = np.random.default_rng(seed)
    for i in range(count):
        mode = MODES[i % 4]
        H = int(rng.integers(1, 6))
        P = int(rng.integers(1, H)) if mode == "lstm" and H >= 2 and i % 8 == 2 else 0
        cfg = RNNConfig(mode, int(rng.integers(1, 4)), bool(i % 3), int(rng.integers(1, 6)), H,
                        int(rng.integers(1, 9)), int(rng.integers(1, 5)), proj_size=P, bias=i % 5 != 0)
        lengths = [int(n) for n in rng.integers(0, cfg.max_len + 1, cfg.batch_size)]
        yield make_case(cfg, lengths, seed=i, heads=("all", "y", "states", "last")[i // 4 % 4],
                        initial_state=i % 7 != 3)


def _assert_float64_equal(a, b, case_id: str, tol: float = 1e-12):
    """Every output and gradient within tol relative to the tensor's scale (float64 rounding only)."""
    for name in ("y", "hy", "cy"):
        if getattr(b, name) is None:
            assert getattr(a, name) is None, name
    pairs = [(n, getattr(a, n), getattr(b, n)) for n in ("y", "hy", "cy") if getattr(b, n) is not None]
    assert set(a.grads) == set(b.grads), (case_id, set(a.grads) ^ set(b.grads))
    pairs += [(k, a.grads[k], np.asarray(b.grads[k])) for k in b.grads]
    for name, got, want in pairs:
        assert got.shape == want.shape, (case_id, name)
        scale = 1.0 + np.abs(want).max(initial=0.0)
        assert np.abs(got - want).max(initial=0.0) <= tol * scale, f"{case_id} {name}"


def test_bucketed_reference_equals_the_unpadded_loop_reference():
    """The one padded ci program against the never-padded loop reference (torch, float64), on a
    seeded table of 48 cases: padding units, steps, rows, layers, the reverse direction of a
    unidirectional config and the identity projection change nothing beyond float64 rounding."""
    from gradcheck_rnn.references.loop import run_loop_reference

    keys = set()
    for case in _random_cases(48, seed=2026):
        keys.add(jax_ref.bucket_key(case.config))
        _assert_float64_equal(run_jax_reference(case), run_loop_reference(case), case.id)
    assert len(keys) == 1  # all of it one program


def test_bucketed_equals_exact_shapes_with_projection_and_no_bias():
    # H 11 -> 16 (P 9 pads to the same width), I 3 -> W 32, T 6 -> 8, B 3 -> 8, L 2 -> 4, against
    # the program compiled for the exact sizes (two directions, no padded layer, unit, step or row)
    cfg = RNNConfig("lstm", 2, True, 3, 11, 6, 3, proj_size=9, bias=False)
    case = make_case(cfg, [4, 0, 6], seed=21)
    assert jax_ref.bucket_key(cfg) != jax_ref.bucket_key(cfg, bucketed=False)
    _assert_outputs_close(jax_ref.run_padded(case, bucketed=True), jax_ref.run_padded(case, bucketed=False), 1e-12)
    y, hy, cy = numpy_forward(case)
    np.testing.assert_allclose(run_jax_reference(case).y, y, rtol=0, atol=1e-12)


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


def test_one_program_per_bucket():
    cfg = RNNConfig("rnn_tanh", 1, False, 3, 3, 3, 2)
    first = run_jax_reference(make_case(cfg, [3, 2], seed=1))
    before = jax_ref.compile_count()
    loaded = jax_ref.load_count()
    assert jax_ref.bucket_key(cfg) in jax_ref.cached_buckets()
    again = run_jax_reference(make_case(cfg, [3, 2], seed=1))
    np.testing.assert_array_equal(first.y, again.y)
    # other mode, layers, directions, projection, bias and shapes: the same program
    for other, lengths in [(RNNConfig("lstm", 3, True, 5, 5, 8, 4, proj_size=3, bias=False), [8, 1, 0, 7]),
                           (RNNConfig("gru", 2, False, 1, 1, 1, 1), [1])]:
        out = run_jax_reference(make_case(other, lengths, seed=2))
        assert out.y.shape == (other.max_len, other.batch_size, other.num_directions * other.state_size)
        assert out.grads["x"].shape == (other.max_len, other.batch_size, other.input_size)
    assert (jax_ref.compile_count(), jax_ref.load_count()) == (before, loaded)
    run_jax_reference(make_case(RNNConfig("rnn_tanh", 1, False, 33, 3, 3, 2), [3, 2], seed=1))
    # a new bucket (W 64) is a new program: compiled, or loaded where an earlier run of the suite wrote it
    assert jax_ref.compile_count() + jax_ref.load_count() == before + loaded + 1


_CHILD = """
import json, sys
import jax, jax.monitoring, jax.numpy as jnp, numpy as np
events = {"traced": 0, "lowered": 0}
names = {"/jax/core/compile/jaxpr_trace_duration": "traced", "/jax/core/compile/jaxpr_to_mlir_module_duration": "lowered"}
def on_duration(name, seconds, **_):
    if name in names:
        events[names[name]] += 1
jax.monitoring.register_event_duration_secs_listener(on_duration)
from gradcheck_rnn import Case
import gradcheck_rnn.references.jax_cudnn as m
exec(sys.argv[2] if len(sys.argv) > 2 else "")  # a test's own set-up
out = m.run_jax_reference(Case.from_id(sys.argv[1]))
counted = dict(events)  # the reference's own (jnp.zeros below traces a program too)
result = {"cache_dir": jax.config.jax_compilation_cache_dir, "x64": bool(jax.config.jax_enable_x64),
          "user_dtype": str(jnp.zeros(1).dtype), "compiled": m.compile_count(), "loaded": m.load_count(),
          "written": m.write_count(), **counted, "y": out.y.tolist(), "dx": out.grads["x"].tolist()}
exec(sys.argv[3] if len(sys.argv) > 3 else "")  # a test's own follow-up, in the same process
print(json.dumps(result))
"""


def _child_env(cache) -> dict[str, str]:
    env = {**os.environ, "GRADCHECK_RNN_JAX_CACHE": str(cache), "JAX_PLATFORMS": "cpu"}
    env.pop("JAX_ENABLE_X64", None)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _child(cache, case_id: str, setup: str = "", after: str = "") -> dict:
    """The reference of ``case_id`` in a new process with the cache folder ``cache`` (``setup``
    runs before it, ``after`` after it, adding to its ``result``)."""
    done = subprocess.run([sys.executable, "-c", _CHILD, case_id, setup, after], env=_child_env(cache),
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


# The old rule (before 9be385b): serialize whatever .compile() returned, here a program that XLA
# loaded from the persistent compilation cache. Its serialization lacks XLA:CPU's object code.
_OLD_RULE = """
import gradcheck_rnn.references.programs as store
real = store._compile
store._compile = lambda function, args, name: (real(function, args, name)[0], True)
"""


def _planted_artifact(tmp_path, monkeypatch, case_id):
    """The case, its reference computed here (no cache), and the path of its artifact in a new cache."""
    case = Case.from_id(case_id)
    here = run_jax_reference(case)  # the test process compiles (no cache)
    monkeypatch.setenv("GRADCHECK_RNN_JAX_CACHE", str(tmp_path))
    with jax_ref.x64():
        artifact = jax_ref.PROGRAMS.artifact(jax_ref.artifact_name(jax_ref.bucket_key(case.config)))
    artifact.parent.mkdir(parents=True)
    return here, artifact


@pytest.mark.slow  # four fresh processes, each importing jax: the garbage artifact of
# test_forked_pool_workers_artifacts_serve_a_new_process_in_scoped_x64_and_garbage_is_replaced is the fast check
def test_an_incomplete_artifact_falls_back_and_is_replaced(tmp_path, monkeypatch):
    """An incomplete executable that deserializes and then fails when called ("NOT_FOUND:
    Function wrapped_iota not found") is compiled again (past the compilation cache, which holds
    the program) and rewritten, with the numbers of a fresh compile."""
    case_id = "lstm-L1-uni-I2-H3-T4-B2-len4.3-f32-s5"
    here, artifact = _planted_artifact(tmp_path, monkeypatch, case_id)
    assert _child(tmp_path, case_id)["compiled"] == 1  # fills the compilation cache (and writes the artifact)
    artifact.unlink()  # a process that finds the program in the compilation cache, old rule
    assert _child(tmp_path, case_id, _OLD_RULE)["written"] == 1
    child = _child(tmp_path, case_id)  # loads it, the call fails, compiles past the cache, rewrites
    assert (child["compiled"], child["loaded"], child["written"]) == (1, 1, 1)
    np.testing.assert_array_equal(np.array(child["y"]), here.y)
    np.testing.assert_array_equal(np.array(child["dx"]), here.grads["x"])

    child = _child(tmp_path, case_id)  # and the rewritten one is whole
    assert (child["compiled"], child["loaded"], child["traced"], child["lowered"]) == (0, 1, 0, 0)
    np.testing.assert_array_equal(np.array(child["y"]), here.y)


# After the reference in _CHILD: the ci profile's reference check in that process, serially.
_SERIAL_CI = """
from gradcheck_rnn.run import Execution, Judging, RunSpec, Selection, execute
rows = execute(RunSpec.build("ci", ("fused-cpu",), Selection(cases=3), Judging(checks=("reference",)))[0],
               Execution(in_process=True))
result.update({"statuses": sorted({r.status for r in rows}), "rows": len(rows),
               "reference": sorted({r.status for r in rows if r.check == "reference"}),
               "compiled_with_ci": m.compile_count(), "loaded_with_ci": m.load_count()})
"""


def _reference_rows(rows) -> set[str]:
    return {r.status for r in rows if r.check == "reference"}


def test_forked_pool_workers_artifacts_serve_a_new_process_in_scoped_x64_and_garbage_is_replaced(
        tmp_path, monkeypatch, fork_server_kept):
    """One cache folder, one pool and two new processes for three claims (each new process
    imports jax, seconds):

    - the failure of 9be385b: workers forked from the pool's fork server write the artifacts; a
      new process loads them (no trace, no lowering) and every reference row passes;
    - the reference computes in float64 without switching the process to x64 (a JAX user target
      keeps float32 defaults), and a new process with the cache folder gives bit-identical numbers;
    - garbage bytes in the artifact's place are compiled again and rewritten, with the numbers of
      a fresh compile."""
    import jax
    import jax.numpy as jnp

    from gradcheck_rnn.run import Execution, Judging, RunSpec, Selection, execute

    case_id = "gru-L2-bi-I3-H4-T5-B2-len5.2-f32-s3"  # in the bucket of the ci profile's cases
    x64_before = bool(jax.config.jax_enable_x64)
    here = run_jax_reference(Case.from_id(case_id))  # the suite's cache
    assert bool(jax.config.jax_enable_x64) == x64_before
    if not x64_before:
        assert jnp.zeros(1).dtype == np.float32

    monkeypatch.setenv("GRADCHECK_RNN_JAX_CACHE", str(tmp_path))
    # the reference check alone: its programs are the artifacts (the other checks' rows cost time, not evidence)
    spec = RunSpec.build("ci", ("fused-cpu",), Selection(cases=3), Judging(checks=("reference",)))[0]
    # one worker forked from the fork server (a second would compile the same program beside it)
    rows = execute(spec, Execution(workers=1, in_process=False))
    assert rows and {r.status for r in rows} <= {"pass", "skip"} and _reference_rows(rows) == {"pass"}
    with jax_ref.x64():
        artifact = jax_ref.PROGRAMS.artifact(jax_ref.artifact_name(jax_ref.bucket_key(Case.from_id(case_id).config)))
    assert list((tmp_path / "gradcheck-rnn-programs").glob("*.bin")) == [artifact]

    warm = _child(tmp_path, case_id, after=_SERIAL_CI)
    assert warm["statuses"] == sorted({r.status for r in rows}) and warm["rows"] == len(rows)
    assert warm["reference"] == ["pass"]
    # loaded: _forward_backward neither traced nor lowered, and the ci rows used the same program
    assert (warm["compiled"], warm["loaded"], warm["traced"], warm["lowered"]) == (0, 1, 0, 0)
    assert (warm["compiled_with_ci"], warm["loaded_with_ci"]) == (0, 1)

    artifact.write_bytes(os.urandom(4096))
    fresh = _child(tmp_path, case_id)
    assert (fresh["compiled"], fresh["loaded"], fresh["written"]) == (1, 0, 1)
    assert list((tmp_path / "gradcheck-rnn-programs").glob("*.bin")) == [artifact]
    for child in (warm, fresh):
        # the cache folder serves the reference's compiles while jax.config stays the process's own
        assert child["cache_dir"] is None and any(tmp_path.glob("jit_gradcheck_rnn_*"))
        assert (child["x64"], child["user_dtype"]) == (False, "float32")
        np.testing.assert_array_equal(np.array(child["y"]), here.y)
        np.testing.assert_array_equal(np.array(child["dx"]), here.grads["x"])


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



CUDNN_PROJECTED_BIDIRECTIONAL = RNNConfig("lstm", 2, True, 2, 3, 3, 3, proj_size=2)  # a bucket other tests compile


def test_a_cudnn_family_names_its_bucketed_program_as_its_jax_program():
    from gradcheck_rnn import references

    case = make_case(CUDNN_PROJECTED_BIDIRECTIONAL, [2, 3, 1], seed=7)
    offered, bucketed = references.run_reference("jax", case), run_jax_reference(case)
    for name in ("y", "hy", "cy"):
        np.testing.assert_array_equal(getattr(offered, name), getattr(bucketed, name))


@pytest.mark.slow
def test_the_generic_program_of_a_cudnn_familys_step_gives_the_bucketed_programs_result():
    """Bidirectional and projected, the generic step program (a compile of its own) computes what
    the bucketed program does. The bucketed one stays the family's: it compiles one program for
    the whole ci profile where the generic one compiles one per mode and shape."""
    from gradcheck_rnn.references.jax_family import run_jax_family_reference

    case = make_case(CUDNN_PROJECTED_BIDIRECTIONAL, [2, 3, 1], seed=7)
    bucketed, generic = run_jax_reference(case), run_jax_family_reference(case, bucketed=False)
    for name in ("y", "hy", "cy"):
        np.testing.assert_allclose(getattr(generic, name), getattr(bucketed, name), rtol=0, atol=1e-12)
    assert set(generic.grads) == set(bucketed.grads)
    for name, grad in bucketed.grads.items():
        np.testing.assert_allclose(generic.grads[name], grad, rtol=0, atol=1e-12, err_msg=name)
