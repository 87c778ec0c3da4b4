"""Case ids round-trip, data is pinned to the seed, bad input is one clear UsageError."""

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gradcheck_rnn import Case, RNNConfig, UsageError, make_case
from gradcheck_rnn.model.case import DTYPES, HEADS, MODES, WANTS_GROUPS, parse_case_id, wanted_gradients
from gradcheck_rnn.model.layout import pack, param_shapes, unpack


@st.composite
def case_specs(draw):
    T = draw(st.integers(1, 9))
    B = draw(st.integers(1, 5))
    mode, H = draw(st.sampled_from(MODES)), draw(st.integers(1, 12))
    proj = draw(st.integers(0, H - 1)) if mode == "lstm" else 0
    config = RNNConfig(mode, draw(st.integers(1, 4)), draw(st.booleans()), draw(st.integers(1, 12)), H, T, B,
                       draw(st.sampled_from(DTYPES)), proj_size=proj, bias=draw(st.booleans()))
    lengths = draw(st.lists(st.integers(0, T), min_size=B, max_size=B))
    return dict(config=config, seq_lengths=lengths, seed=draw(st.integers(0, 2**63 - 1)),
                wants=draw(st.sampled_from(WANTS_GROUPS)), heads=draw(st.sampled_from(HEADS)),
                initial_state=draw(st.booleans()), tail=draw(st.sampled_from([0, 0, 1, 4])),
                grad_layout=draw(st.sampled_from(["", "T", "S", "E"])), input_layout=draw(st.sampled_from(["", "S"])),
                kernel_config=tuple(sorted(draw(st.dictionaries(st.sampled_from(["chunk", "warps", "backend"]),
                                                                st.sampled_from([4, 128, "triton"]), max_size=2)).items())))


@settings(max_examples=150, deadline=None)
@given(case_specs())
def test_case_id_round_trips(spec):
    case = make_case(**spec)
    again = Case.from_id(case.id)
    assert again.id == case.id
    assert parse_case_id(case.id) == {**spec, "seq_lengths": list(spec["seq_lengths"])}
    for name in ("x", "h0", "c0", "dy", "dhy", "dcy"):
        a, b = getattr(case, name), getattr(again, name)
        assert (a is None and b is None) or np.array_equal(a, b)
    assert all(np.array_equal(case.params[k], again.params[k]) for k in case.params)
    assert again.wants == case.wants


def test_documented_example_ids():
    case = Case.from_id("lstm-L2-bi-I3-H5-T7-B3-len7.4.1-f32-s918273")
    assert case.config == RNNConfig("lstm", 2, True, 3, 5, 7, 3, "f32")
    assert list(case.seq_lengths) == [7, 4, 1]
    assert case.x.shape == (7, 3, 3) and case.h0.shape == (4, 3, 5) and case.dy.shape == (7, 3, 10)
    frozen = Case.from_id("gru-L1-uni-I2-H3-T5-B1-len5-f32-s7-wx")
    assert frozen.wants == {"x"} and frozen.wants_group == "x"
    surface = Case.from_id("lstm-L2-bi-I3-H5-P3-nobias-T7-B3-len7.4.1-f32-s9")
    assert surface.config == RNNConfig("lstm", 2, True, 3, 5, 7, 3, "f32", proj_size=3, bias=False)
    assert surface.h0.shape == (4, 3, 3) and surface.c0.shape == (4, 3, 5) and surface.dy.shape == (7, 3, 6)
    assert surface.params["l0.fwd.w_hh"].shape == (20, 3) and surface.params["l1.bwd.w_ih"].shape == (20, 6)
    assert surface.params["l1.bwd.w_hr"].shape == (3, 5) and not any(".b_" in k for k in surface.params)
    empty = Case.from_id("lstm-L1-uni-I2-H3-T4-B3-len4.0.2-f64-s1-glast")
    assert list(empty.seq_lengths) == [4, 0, 2] and not empty.dy[:, 1].any()


def test_new_fields_leave_old_ids_bit_identical():
    """proj_size and bias have defaults that keep every id written before them: same data, same id."""
    old = Case.from_id("lstm-L2-bi-I3-H5-T7-B3-len7.4.1-f32-s918273")
    explicit = make_case(RNNConfig("lstm", 2, True, 3, 5, 7, 3, "f32", proj_size=0, bias=True), [7, 4, 1], 918273)
    assert explicit.id == old.id
    assert all(np.array_equal(old.params[k], explicit.params[k]) for k in old.params)
    np.testing.assert_allclose(old.params["l0.fwd.w_ih"][0], [0.17904815, -0.14519221, -0.29470003], atol=1e-8)


def test_draw_order_is_pinned():
    """Changing the documented draw order is a breaking change: these values must not move."""
    case = Case.from_id("rnn_tanh-L1-uni-I2-H4-T3-B2-len3.1-f64-s42")
    rng = np.random.Generator(np.random.PCG64(42))
    expected = {k: rng.uniform(-0.5, 0.5, size=s) for k, s in param_shapes(case.config).items()}
    x, h0, dy, dhy = (rng.standard_normal(s) for s in [(3, 2, 2), (1, 2, 4), (3, 2, 4), (1, 2, 4)])
    assert all(np.array_equal(case.params[k], v) for k, v in expected.items())
    for name, value in dict(x=x, h0=h0, dy=dy, dhy=dhy).items():
        assert np.array_equal(getattr(case, name), value), name
    np.testing.assert_allclose(case.params["l0.fwd.w_ih"][0], [0.27395605, -0.06112156], atol=1e-8)
    np.testing.assert_allclose(case.x[0, 0], [-0.51224273, -0.81377273], atol=1e-8)


def test_values_are_exact_in_the_case_dtype():
    case = Case.from_id("lstm-L1-uni-I3-H4-T4-B2-len4.2-f16-s3")
    assert np.array_equal(case.x, case.x.astype(np.float16).astype(np.float64))
    f32 = Case.from_id("lstm-L1-uni-I3-H4-T4-B2-len4.2-f32-s3")
    assert np.array_equal(f32.dy, f32.dy.astype(np.float32).astype(np.float64))
    assert not np.array_equal(f32.x, case.x)


def test_variants_change_only_what_they_name():
    base = Case.from_id("lstm-L1-bi-I2-H3-T5-B3-len5.2.4-f64-s11")
    y_only = Case.from_id("lstm-L1-bi-I2-H3-T5-B3-len5.2.4-f64-s11-gy")
    assert np.array_equal(base.dy, y_only.dy) and not y_only.dhy.any() and not y_only.dcy.any()
    states = Case.from_id("lstm-L1-bi-I2-H3-T5-B3-len5.2.4-f64-s11-gstates")
    assert not states.dy.any() and np.array_equal(states.dhy, base.dhy)
    last = Case.from_id("lstm-L1-bi-I2-H3-T5-B3-len5.2.4-f64-s11-glast")
    nonzero_steps = [sorted(set(np.nonzero(last.dy[:, b])[0])) for b in range(3)]
    assert nonzero_steps == [[4], [1], [3]]
    no_state = Case.from_id("lstm-L1-bi-I2-H3-T5-B3-len5.2.4-f64-s11-winputs-z")
    assert no_state.h0 is None and no_state.c0 is None and no_state.wants == {"x"}
    assert np.array_equal(no_state.x, base.x)


def test_wants_groups():
    config = RNNConfig("lstm", 2, False, 2, 3, 4, 2)
    assert wanted_gradients(config, "inputs") == {"x", "h0", "c0"}
    assert wanted_gradients(config, "params") == set(param_shapes(config))
    assert wanted_gradients(config, "all") == {"x", "h0", "c0"} | set(param_shapes(config))


@pytest.mark.parametrize("bad_id, words", [
    ("lstm-L2-bi", "expected"),
    ("lstmx-L2-bi-I3-H5-T7-B3-len7.4.1-f32-s9", "'lstmx'"),
    ("lstm-L0-bi-I3-H5-T7-B3-len7.4.1-f32-s9", "num_layers=0"),
    ("lstm-L2-bi-I3-H0-T7-B3-len7.4.1-f32-s9", "hidden_size=0"),
    ("lstm-L2-bi-I3-H5-T7-B3-len8.4.1-f32-s9", "sequence length 8"),
    ("lstm-L2-bi-I3-H5-T7-B3-len7.-1.1-f32-s9", "len<l_0>"),
    ("lstm-L2-bi-I3-H5-P0-T7-B3-len7.4.1-f32-s9", "'P0' is not allowed"),
    ("lstm-L2-bi-I3-H5-P5-T7-B3-len7.4.1-f32-s9", "proj_size=5"),
    ("gru-L2-bi-I3-H5-P2-T7-B3-len7.4.1-f32-s9", "LSTM only"),
    ("lstm-L2-bi-I3-H5-nobias-P2-T7-B3-len7.4.1-f32-s9", "'P2'"),
    ("lstm-L2-bi-I3-H5-T7-B3-len7.4-f32-s9", "2 sequence lengths"),
    ("lstm-L2-bi-I3-H5-T7-B3-len7.4.1-f8-s9", "'f8'"),
    ("lstm-L2-up-I3-H5-T7-B3-len7.4.1-f32-s9", "uni or bi"),
    ("lstm-L2-bi-I3-H5-T7-B3-len7.4.1-f32-s9-z-wx", "'wx'"),
    ("lstm-L2-bi-I3-H5-T7-B3-len7.4.1-f32-s9-wall", "'wall'"),
])
def test_bad_ids_raise_one_clear_error(bad_id, words):
    with pytest.raises(UsageError, match=words.replace(".", r"\.")):
        Case.from_id(bad_id)


@pytest.mark.parametrize("kwargs, words", [
    (dict(mode="lstmx"), "unknown mode 'lstmx'"),
    (dict(hidden_size=0), "hidden_size=0"),
    (dict(dtype="f8"), "unknown dtype 'f8'"),
    (dict(batch_size=-1), "batch_size=-1"),
])
def test_bad_configs_raise(kwargs, words):
    base = dict(mode="gru", num_layers=1, bidirectional=False, input_size=2, hidden_size=3, max_len=4,
                batch_size=2, dtype="f64")
    with pytest.raises(UsageError, match=words):
        RNNConfig(**{**base, **kwargs})


def test_pack_unpack_projection_and_no_bias():
    config = RNNConfig("lstm", 2, True, 3, 5, 2, 1, proj_size=2)
    case = make_case(config, [2], seed=5)
    flat = pack(case.params, config)
    # cudnn LSTMP order: per unit w_ih, w_hh, w_hr, then all biases
    offset = case.params["l0.fwd.w_ih"].size + case.params["l0.fwd.w_hh"].size
    assert flat[offset] == case.params["l0.fwd.w_hr"][0, 0]
    assert all(np.array_equal(v, case.params[k]) for k, v in unpack(flat, config).items())
    bare = RNNConfig("gru", 2, False, 3, 4, 2, 1, bias=False)
    case = make_case(bare, [2], seed=5)
    assert flat.size > pack(case.params, bare).size == sum(v.size for v in case.params.values())
    assert list(unpack(pack(case.params, bare), bare)) == ["l0.fwd.w_ih", "l0.fwd.w_hh", "l1.fwd.w_ih", "l1.fwd.w_hh"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("bidirectional", [False, True])
def test_pack_unpack_cudnn_layout(mode, bidirectional):
    case = make_case(RNNConfig(mode, 2, bidirectional, 3, 4, 2, 1), [2], seed=5)
    flat = pack(case.params, case.config)
    back = unpack(flat, case.config)
    assert list(back) == list(case.params)
    assert all(np.array_equal(back[k], case.params[k]) for k in back)
    # cudnn order: all weights first (layer, direction, w_ih, w_hh), then all biases
    first_bias = flat.size - sum(v.size for k, v in case.params.items() if ".b_" in k)
    assert flat[first_bias] == case.params["l0.fwd.b_ih"][0]
    assert flat[0] == case.params["l0.fwd.w_ih"][0, 0]
    with pytest.raises(UsageError, match="shape"):
        unpack(flat[:-1], case.config)


@pytest.mark.parametrize("case_id", ["lstm-L3-bi-I3-H5-P3-nobias-T7-B3-len7.4.0-f32-s9",
                                     "gru-L2-uni-I4-H6-nobias-T5-B2-len5.1-f64-s1",
                                     "lstm-L2-bi-I3-H5-T7-B3-len7.4.1-f32-s918273-z"])
def test_size_budget_counts_what_is_drawn(case_id):
    from gradcheck_rnn.model.case import case_elements

    case = Case.from_id(case_id)
    full = make_case(case.config, case.seq_lengths, case.seed)  # states drawn even where -z drops them
    arrays = [full.x, full.h0, full.c0, full.dy, full.dhy, full.dcy, *full.params.values()]
    assert case_elements(case.config) == sum(a.size for a in arrays if a is not None)


def test_profile_switches_leave_the_rest_of_each_case_as_drawn():
    """proj, bias, zero_length and long_memory come from generators of their own: with them on, case
    i keeps its mode, sizes, variants and data seed."""
    import dataclasses

    from gradcheck_rnn.model.profiles import draw_cases, load_profile

    profile = load_profile("ci")
    off = dataclasses.replace(profile, proj=0.0, bias=1.0, zero_length=0.0, long_memory=0.0)
    changed = held = 0
    for a, b in zip(draw_cases(profile, 3, 60), draw_cases(off, 3, 60)):
        assert dataclasses.replace(a.config, proj_size=0, bias=True, long_memory=False) == b.config
        held += a.config.long_memory
        assert a.seed == b.seed and a.heads == b.heads and a.wants_group == b.wants_group
        assert all(x in (0, y) for x, y in zip(a.seq_lengths, b.seq_lengths))
        changed += a.id != b.id
    assert changed > 10 and held > 3  # the switches really draw


@pytest.mark.parametrize("mode, options", [("lstm", ""), ("gru", ""), ("s6", "-N2-R1"), ("slstm", "-NH2")])
def test_long_memory_keeps_gradients_alive_at_long_lags(mode, options):
    """-longmem shifts only the parameters that set the decay; the rest of the case is as drawn, and
    the gradient that reaches the initial state from the final one is far larger (no decay to hide in)."""
    from gradcheck_rnn.references.loop import run_loop_reference

    for seed in range(3):
        plain = Case.from_id(f"{mode}-L1-uni-I3-H4{options}-T12-B2-len12.12-f64-s{seed}-gstates")
        held = Case.from_id(f"{mode}-L1-uni-I3-H4{options}-longmem-T12-B2-len12.12-f64-s{seed}-gstates")
        assert held.id.endswith(f"-s{seed}-gstates") and "-longmem-" in held.id
        assert np.array_equal(plain.x, held.x) and np.array_equal(plain.dhy, held.dhy)
        moved = [k for k in plain.params if not np.array_equal(plain.params[k], held.params[k])]
        assert moved and all(k.endswith((".b_ih", ".b_hh", ".a_log", ".b")) for k in moved)

        def reached(case):
            grads = run_loop_reference(case).grads
            return sum(np.abs(grads[name]).sum() for name in ("h0", "c0") if name in grads)

        assert reached(held) > 10 * reached(plain)


@pytest.mark.parametrize("case_id, words", [
    ("rnn_tanh-L1-uni-I2-H3-longmem-T4-B2-len4.2-f64-s5", "no long-memory regime"),
    ("gru-L1-uni-I2-H3-nobias-longmem-T4-B2-len4.2-f64-s5", "needs them (not with -nobias)"),
    ("lstm-L1-uni-I2-H3-longmem-nobias-T4-B2-len4.2-f64-s5", "should be"),
])
def test_long_memory_is_refused_where_the_family_has_no_such_regime(case_id, words):
    with pytest.raises(UsageError, match=re.escape(words)):
        Case.from_id(case_id)
