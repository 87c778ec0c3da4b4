"""The fused CPU kernel against torch.nn, one sequence at a time (torch's packing is not trusted)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from gradcheck_rnn import RNNConfig, make_case
from gradcheck_rnn.model.case import with_changes
from gradcheck_rnn.kernels.packing import Packing
from gradcheck_rnn.kernels.fused_cpu import FusedCPUKernel, FusedCPUTarget, FusedRNNFunction, fused_rnn
from gradcheck_rnn.model.rnn_config import DIRECTIONS
from gradcheck_rnn.model.layout import pack, param_key

MODES = ("rnn_relu", "rnn_tanh", "lstm", "gru")
TORCH_MODULES = {"rnn_relu": torch.nn.RNN, "rnn_tanh": torch.nn.RNN, "lstm": torch.nn.LSTM, "gru": torch.nn.GRU}
F64 = dict(rtol=1e-9, atol=1e-10)


def torch_attr(key: str) -> str:
    """``l1.bwd.w_ih`` -> ``weight_ih_l1_reverse``."""
    layer, direction, kind = key.split(".")
    suffix = "_reverse" if direction == "bwd" else ""
    return f"{'weight' if kind[0] == 'w' else 'bias'}_{kind[2:]}_l{layer[1:]}{suffix}"


def torch_module(config: RNNConfig, params: dict[str, np.ndarray]) -> torch.nn.Module:
    kwargs = {"nonlinearity": config.mode[4:]} if config.mode.startswith("rnn_") else {}
    if config.proj_size:
        kwargs["proj_size"] = config.proj_size
    module = TORCH_MODULES[config.mode](config.input_size, config.hidden_size, config.num_layers,
                                        bidirectional=config.bidirectional, bias=config.bias, **kwargs).double()
    with torch.no_grad():
        for key, value in params.items():
            getattr(module, torch_attr(key)).copy_(torch.from_numpy(value))
    return module


def reference(case) -> dict[str, np.ndarray]:
    """y, hy, cy and every gradient from torch.nn in float64, one sequence at a time."""
    config = case.config
    module = torch_module(config, case.params)
    lstm = config.mode == "lstm"
    x = torch.tensor(case.x, requires_grad=True)
    h0 = None if case.h0 is None else torch.tensor(case.h0, requires_grad=True)
    c0 = None if case.c0 is None else torch.tensor(case.c0, requires_grad=True)
    dy, dhy = torch.from_numpy(case.dy), torch.from_numpy(case.dhy)
    y = torch.zeros(dy.shape, dtype=torch.float64)
    hy, cy, loss = [], [], 0.0
    for b, length in enumerate(case.seq_lengths.tolist()):
        state = None if h0 is None else ((h0[:, b:b + 1], c0[:, b:b + 1]) if lstm else h0[:, b:b + 1])
        out, final = module(x[:length, b:b + 1], state)
        h_b, c_b = final if lstm else (final, None)
        loss = loss + (out * dy[:length, b:b + 1]).sum() + (h_b * dhy[:, b:b + 1]).sum()
        if lstm:
            loss = loss + (c_b * torch.from_numpy(case.dcy[:, b:b + 1])).sum()
            cy.append(c_b.detach())
        y[:length, b:b + 1] = out.detach()
        hy.append(h_b.detach())
    loss.backward()
    result = {"y": y, "hy": torch.cat(hy, 1), "x": x.grad}
    if lstm:
        result["cy"] = torch.cat(cy, 1)
    if h0 is not None:
        result["h0"] = h0.grad
    if c0 is not None:
        result["c0"] = c0.grad
    for key in case.params:
        result[key] = getattr(module, torch_attr(key)).grad
    return {k: v.numpy() for k, v in result.items()}


def outputs(target_outputs) -> dict[str, np.ndarray]:
    named = {"y": target_outputs.y, "hy": target_outputs.hy, **target_outputs.grads}
    if target_outputs.cy is not None:
        named["cy"] = target_outputs.cy
    return {k: np.asarray(v, dtype=np.float64) for k, v in named.items()}


def assert_matches(got: dict[str, np.ndarray], want: dict[str, np.ndarray], names=None, **tol) -> None:
    for name in names if names is not None else want:
        assert name in got, f"{name} missing"
        np.testing.assert_allclose(got[name], want[name], err_msg=name, **(tol or F64))


def config(mode: str, layers: int = 2, bi: bool = True, T: int = 7, B: int = 5, I: int = 3, H: int = 4,
           dtype: str = "f64") -> RNNConfig:
    return RNNConfig(mode, layers, bi, I, H, T, B, dtype)


UNEVEN = [4, 6, 1, 6, 3]  # unsorted, with ties, none reaching T=7


@pytest.mark.parametrize("bi", [False, True], ids=["uni", "bi"])
@pytest.mark.parametrize("layers", [1, 2, 3])
@pytest.mark.parametrize("mode", MODES)
def test_forward_and_every_gradient_match_torch(mode, layers, bi):
    case = make_case(config(mode, layers, bi), UNEVEN, seed=11 + layers)
    assert_matches(outputs(FusedCPUTarget().run(case)), reference(case))


@pytest.mark.parametrize("lengths", [[7, 7, 7], [2, 7, 5], [1, 1, 1]], ids=["full", "uneven", "ones"])
@pytest.mark.parametrize("mode", MODES)
def test_no_initial_state_and_other_lengths(mode, lengths):
    case = make_case(config(mode, B=3), lengths, seed=5, initial_state=False)
    got = outputs(FusedCPUTarget().run(case))
    assert "h0" not in got and "c0" not in got
    assert_matches(got, reference(case))


@pytest.mark.parametrize("mode", MODES)
def test_padding_is_zero_and_unread(mode):
    case = make_case(config(mode), UNEVEN, seed=3)
    got = outputs(FusedCPUTarget().run(case))
    x, dy = case.x.copy(), case.dy.copy()
    for b, length in enumerate(UNEVEN):
        assert not got["y"][length:, b].any() and not got["x"][length:, b].any()
        x[length:, b], dy[length:, b] = 1e3, -1e3
    changed = outputs(FusedCPUTarget().run(with_changes(case, x=x, dy=dy)))
    for name, value in got.items():
        np.testing.assert_array_equal(changed[name], value, err_msg=name)


@pytest.mark.parametrize("mode", MODES)
def test_zero_length_sequence_keeps_its_initial_state(mode):
    case = make_case(config(mode, B=3), [3, 7, 2], seed=8)
    x = torch.tensor(case.x, requires_grad=True)
    h0 = torch.tensor(case.h0, requires_grad=True)
    c0 = None if case.c0 is None else torch.tensor(case.c0, requires_grad=True)
    dhy = torch.from_numpy(case.dhy)
    params = {k: torch.from_numpy(v) for k, v in case.params.items()}
    y, hy, cy = fused_rnn(x, [3, 0, 2], h0, c0, params, mode, 2, True)
    (hy * dhy).sum().backward()
    assert not y[:, 1].any() and not x.grad[:, 1].any()
    torch.testing.assert_close(hy[:, 1], h0[:, 1].detach(), rtol=0, atol=0)
    torch.testing.assert_close(h0.grad[:, 1], dhy[:, 1], rtol=0, atol=0)
    if c0 is not None:
        torch.testing.assert_close(cy[:, 1], c0[:, 1].detach(), rtol=0, atol=0)
    others = [0, 2]  # the other sequences are unaffected
    rest = with_changes(case, config=config(mode, B=2), seq_lengths=[3, 2], x=case.x[:, others],
                        h0=case.h0[:, others], c0=None if c0 is None else case.c0[:, others],
                        dy=0 * case.dy[:, others], dhy=case.dhy[:, others],
                        dcy=None if c0 is None else 0 * case.dcy[:, others])
    want = reference(rest)
    np.testing.assert_allclose(hy.detach().numpy()[:, others], want["hy"], **F64)
    np.testing.assert_allclose(h0.grad.numpy()[:, others], want["h0"], **F64)


def test_all_sequences_empty():
    case = make_case(config("lstm", B=2), [1, 1], seed=8)
    h0 = torch.tensor(case.h0, requires_grad=True)
    x = torch.tensor(case.x, requires_grad=True)
    params = {k: torch.tensor(v, requires_grad=True) for k, v in case.params.items()}
    y, hy, cy = fused_rnn(x, [0, 0], h0, None, params, "lstm", 2, True)
    (y.sum() + hy.sum() + cy.sum()).backward()
    assert not y.any() and not x.grad.any() and not cy.any()
    assert torch.equal(hy, h0.detach()) and torch.equal(h0.grad, torch.ones_like(h0))
    assert all(not p.grad.any() for p in params.values())


def test_flat_parameters_of_the_wrong_size_are_refused():
    case = make_case(config("gru"), UNEVEN, seed=1)
    flat = torch.tensor(pack(case.params, case.config))
    with pytest.raises(ValueError, match="does not fit gru"):
        FusedRNNFunction.apply(torch.tensor(case.x), UNEVEN, None, None, flat[:-1], "gru", 2, True)


@pytest.mark.parametrize("mode", MODES)
def test_float32_close_to_float64(mode):
    case = make_case(config(mode, dtype="f32"), UNEVEN, seed=21)
    f32 = outputs(FusedCPUTarget().run(case))
    f64 = outputs(FusedCPUTarget().run(with_changes(case, config=config(mode))))
    assert_matches(f32, f64, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode, bi", [
    ("rnn_relu", False), ("rnn_relu", True), ("rnn_tanh", False), ("rnn_tanh", True), ("lstm", False), ("gru", False),
    # lstm-uni and gru-uni gradcheck them one way, rnn_*-bi two ways; their two-way gradients match torch.nn
    # in test_forward_and_every_gradient_match_torch[lstm-2-bi] and [gru-2-bi]
    pytest.param("lstm", True, marks=pytest.mark.slow), pytest.param("gru", True, marks=pytest.mark.slow),
], ids=lambda value: {False: "uni", True: "bi"}.get(value, value))
def test_autograd_gradcheck(mode, bi):
    cfg = config(mode, layers=2, bi=bi, T=3, B=2, I=2, H=2)
    case = make_case(cfg, [2, 3], seed=4)
    x = torch.tensor(case.x, requires_grad=True)
    h0 = torch.tensor(case.h0, requires_grad=True)
    c0 = None if case.c0 is None else torch.tensor(case.c0, requires_grad=True)
    flat = torch.tensor(pack(case.params, cfg), requires_grad=True)

    def run(x, h0, c0, flat):
        y, hy, cy = FusedRNNFunction.apply(x, [2, 3], h0, c0, flat, mode, 2, bi)
        return (y, hy) if cy is None else (y, hy, cy)

    inputs = (x, h0, c0, flat)
    assert torch.autograd.gradcheck(run, inputs, eps=1e-6, atol=1e-7, rtol=1e-5)


class Spy(FusedCPUKernel):
    """Records which backward stages ran."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def input_grad(self, units, out):
        self.calls.append(f"input_grad:l{units[0].layer}")
        super().input_grad(units, out)

    def weight_grads(self, unit, packing, grads):
        self.calls.append(f"weight_grads:{unit.name}")
        super().weight_grads(unit, packing, grads)


@pytest.mark.parametrize("mode", MODES)
def test_each_wants_group_matches_all(mode):
    base = make_case(config(mode, layers=2), UNEVEN, seed=9)
    everything = outputs(FusedCPUTarget().run(base))
    for group in ("inputs", "x", "params"):
        spy = Spy()
        case = with_changes(base, wants=group)
        got = outputs(FusedCPUTarget(kernel=spy).run(case))
        assert case.wants <= got.keys()
        assert_matches(got, everything, names=sorted(case.wants) + ["y", "hy"], rtol=0, atol=0)
        assert any(c.startswith("weight_grads") for c in spy.calls) == (group == "params")
        assert ("input_grad:l0" in spy.calls) == (group != "params")
        assert "input_grad:l1" in spy.calls


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_function_respects_needs_input_grad(mode):
    case = make_case(config(mode), UNEVEN, seed=2)
    x = torch.tensor(case.x, requires_grad=True)
    h0 = torch.tensor(case.h0)
    flat = torch.tensor(pack(case.params, case.config))
    spy = Spy()
    y, hy, _ = FusedRNNFunction.apply(x, case.seq_lengths, h0, None, flat, mode, 2, True, spy)
    ((y * torch.from_numpy(case.dy)).sum() + (hy * torch.from_numpy(case.dhy)).sum()).backward()
    assert spy.calls == ["input_grad:l1", "input_grad:l0"]
    with_flat = flat.clone().requires_grad_()
    y2, hy2, _ = FusedRNNFunction.apply(x.detach().requires_grad_(), case.seq_lengths, h0, None, with_flat,
                                        mode, 2, True)
    ((y2 * torch.from_numpy(case.dy)).sum() + (hy2 * torch.from_numpy(case.dhy)).sum()).backward()
    assert with_flat.grad is not None and with_flat.grad.abs().sum() > 0


def test_repeated_backward_is_identical():
    case = make_case(config("lstm"), UNEVEN, seed=6)
    x = torch.tensor(case.x, requires_grad=True)
    flat = torch.tensor(pack(case.params, case.config), requires_grad=True)
    y, hy, cy = FusedRNNFunction.apply(x, case.seq_lengths, torch.tensor(case.h0), torch.tensor(case.c0), flat,
                                       "lstm", 2, True)
    loss = (y * torch.from_numpy(case.dy)).sum() + (cy * torch.from_numpy(case.dcy)).sum()
    first = torch.autograd.grad(loss, (x, flat), retain_graph=True)
    second = torch.autograd.grad(loss, (x, flat))
    for a, b in zip(first, second):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


class TruncatedBPTT(FusedCPUKernel):
    """dh from step t+1 never reaches step t (MXNet #21143)."""

    def handoff(self, step, segments):
        pass


SURFACE = [RNNConfig("lstm", 2, True, 3, 5, 7, 5, proj_size=3), RNNConfig("lstm", 3, False, 3, 4, 7, 5, proj_size=1),
           RNNConfig("lstm", 2, True, 3, 5, 7, 5, proj_size=2, bias=False), RNNConfig("gru", 2, True, 3, 4, 7, 5, bias=False),
           RNNConfig("rnn_relu", 2, False, 3, 4, 7, 5, bias=False), RNNConfig("rnn_tanh", 1, True, 3, 4, 7, 5, bias=False)]


@pytest.mark.parametrize("cfg", SURFACE, ids=lambda c: c.prefix)
def test_projection_and_no_bias_match_torch(cfg):
    """torch.nn's proj_size and bias=False, one sequence at a time: every output and gradient."""
    case = make_case(cfg, UNEVEN, seed=13)
    got = outputs(FusedCPUTarget().run(case))
    assert set(got) == {"y", "hy", "x", "h0", *(["cy", "c0"] if cfg.mode == "lstm" else []), *case.params}
    assert_matches(got, reference(case))
    # the autograd entry solves H from the flat vector of the same layout
    leaves = {k: torch.tensor(v, requires_grad=True) for k, v in case.params.items()}
    x = torch.tensor(case.x, requires_grad=True)
    h0 = torch.tensor(case.h0, requires_grad=True)
    c0 = None if case.c0 is None else torch.tensor(case.c0)
    y, hy, cy = fused_rnn(x, UNEVEN, h0, c0, leaves, cfg.mode, cfg.num_layers, cfg.bidirectional)
    loss = (y * torch.from_numpy(case.dy)).sum() + (hy * torch.from_numpy(case.dhy)).sum()
    if cy is not None:
        loss = loss + (cy * torch.from_numpy(case.dcy)).sum()
    loss.backward()
    assert_matches({"x": x.grad.numpy(), "h0": h0.grad.numpy(), **{k: v.grad.numpy() for k, v in leaves.items()}},
                   got, names=["x", "h0", *case.params])


@pytest.mark.parametrize("case_id", [
    "lstm-L2-bi-I3-H5-P3-nobias-T7-B3-len7.4.0-f64-s9", "lstm-L2-uni-I3-H5-P2-T7-B3-len7.0.1-f32-s3-wparams",
    "gru-L2-bi-I3-H5-nobias-T7-B3-len0.4.2-f64-s9", "rnn_relu-L2-uni-I3-H5-T7-B3-len0.0.0-f64-s9-glast",
    "lstm-L1-bi-I3-H5-P4-nobias-T6-B3-len6.1.1-f64-s3-winputs-z",
])
def test_api_surface_passes_both_references(case_id):
    """fused-cpu passes; torch-native passes, or declines a zero-length case with its reason."""
    from gradcheck_rnn import Case
    from gradcheck_rnn.judging.judge import judge_one
    from gradcheck_rnn.targets import resolve_target

    case = Case.from_id(case_id)
    assert judge_one(case, resolve_target("fused-cpu")).status == "pass"
    native = judge_one(case, resolve_target("torch-native"))
    if (case.seq_lengths == 0).any():
        assert native.status == "skip" and "length 0" in native.message
    else:
        assert native.status == "pass", native.message


class ProjectionGradTransposed(FusedCPUKernel):
    def projection_grad(self, unit, packing, out):
        super().projection_grad(unit, packing, out)
        out.copy_(out.t().reshape(out.shape) if out.shape[0] != out.shape[1] else out.t())


def test_a_broken_projection_is_caught():
    case = make_case(RNNConfig("lstm", 1, False, 3, 5, 7, 5, proj_size=2), UNEVEN, seed=1)
    want = reference(case)
    got = outputs(FusedCPUTarget(kernel=ProjectionGradTransposed()).run(case))
    assert_matches(got, want, names=["y", "hy", "x", "l0.fwd.w_hh"])
    with pytest.raises(AssertionError):
        assert_matches(got, want, names=["l0.fwd.w_hr"])


def test_a_broken_kernel_is_caught():
    case = make_case(config("gru", layers=1, bi=False), UNEVEN, seed=1)
    want = reference(case)
    got = outputs(FusedCPUTarget(kernel=TruncatedBPTT(), name="mutant:truncated").run(case))
    assert_matches(got, want, names=["y", "hy"])
    with pytest.raises(AssertionError):
        assert_matches(got, want, names=["x"])


def test_packing_layout():
    packing = Packing([2, 0, 3, 3], max_len=4)
    assert packing.slot_lengths == [3, 3, 2, 0] and packing.batch_sizes == [3, 3, 2]
    assert packing.offsets == [0, 3, 6] and packing.rows == 8 and not packing.identity
    # forward reads h0 then the previous step's prefix; reverse admits sequence 0 at its last step
    assert [packing.prev_segments(t, False) for t in range(3)] == [[(0, 3)], [(4, 7)], [(7, 9)]]
    assert [packing.prev_segments(t, True) for t in range(3)] == [[(7, 10)], [(10, 12), (14, 15)], [(12, 14)]]
    assert packing.final_rows(False).tolist() == [9, 3, 10, 11] and packing.final_rows(True).tolist() == [6, 15, 4, 5]
    assert Packing([4, 4], max_len=4).identity


def test_target_supports_every_dtype():
    target = FusedCPUTarget()
    assert target.name == "fused-cpu"
    for dtype in ("f64", "f32", "f16", "bf16"):
        assert target.supports(config("lstm", dtype=dtype)) is True


@pytest.mark.parametrize("dtype, bound", [("f16", 5e-3), ("bf16", 5e-2)])
@pytest.mark.parametrize("mode", MODES)
def test_half_precision_is_close_to_float64_and_computed_in_half(mode, dtype, bound):
    """f16/bf16 buffers with float32 accumulation: close to the float64 reference, and not the
    float64 result in disguise (the outputs come back in the half dtype)."""
    case = make_case(config(mode, dtype=dtype), UNEVEN, seed=4)
    out = FusedCPUTarget().run(case)
    assert out.y.dtype == {"f16": torch.float16, "bf16": torch.bfloat16}[dtype]
    from gradcheck_rnn.model.case import as_mapping
    from gradcheck_rnn.model.compare import to_float64

    got, want = {k: to_float64(v) for k, v in as_mapping(out).items()}, reference(case)
    for name in ("y", "hy", "x"):
        scale = 1.0 + np.abs(want[name])
        assert np.max(np.abs(got[name] - want[name]) / scale) < bound, name
        assert np.max(np.abs(got[name] - want[name])) > 0, name


def test_parameter_keys_cover_every_layer_and_direction():
    case = make_case(config("gru", layers=3), UNEVEN, seed=0)
    grads = FusedCPUTarget().run(case).grads
    expected = {param_key(l, d, k) for l in range(3) for d in DIRECTIONS for k in ("w_ih", "w_hh", "b_ih", "b_hh")}
    assert expected <= grads.keys()


@pytest.mark.parametrize("cfg", [RNNConfig(mode, 2, True, 3, 5, 7, 5, "f32") for mode in MODES]
                         + [RNNConfig("lstm", 2, True, 3, 5, 7, 5, "f32", proj_size=3),
                            RNNConfig("gru", 3, True, 3, 4, 7, 5, "f32", bias=False)], ids=lambda c: c.prefix)
def test_onednn_gemms_match_float64(cfg, monkeypatch):
    """Every GEMM on the oneDNN route (which only large float32 products take): float32 rounding of
    the float64 result, and bit-identical from run to run."""
    from gradcheck_rnn.kernels import gemm

    if gemm._ONEDNN_LINEAR is None:
        pytest.skip("this torch build has no oneDNN linear op")
    monkeypatch.setattr(gemm, "ONEDNN_MIN_MACS", 0)
    case = make_case(cfg, UNEVEN, seed=3)
    f32 = outputs(FusedCPUTarget().run(case))
    assert_matches(f32, outputs(FusedCPUTarget().run(with_changes(case, config=dataclasses.replace(cfg, dtype="f64")))),
                   rtol=1e-4, atol=1e-5)
    again = outputs(FusedCPUTarget().run(case))
    for name, value in f32.items():
        np.testing.assert_array_equal(again[name], value, err_msg=name)


def test_a_changed_onednn_signature_falls_back_to_mm_for_the_rest_of_the_process(monkeypatch):
    """The oneDNN route calls a private torch op positionally; a torch that changed its arguments
    must slow the kernel down, not make it raise (issue 25): the failed call is done by torch.mm,
    one warning says so, and oneDNN is not asked again."""
    from gradcheck_rnn import Case
    from gradcheck_rnn.judging.judge import judge_one
    from gradcheck_rnn.kernels import gemm

    calls = []

    def changed(*args, **kwargs):
        calls.append(args)
        raise TypeError("_linear_pointwise() takes from 2 to 3 positional arguments but 6 were given")

    changed.binary = changed
    monkeypatch.setattr(gemm, "_ONEDNN_LINEAR", changed)
    generator = torch.Generator().manual_seed(0)
    a, b, c = (torch.randn(shape, generator=generator) for shape in [(128, 96), (96, 128), (128, 128)])
    assert a.shape[0] * a.shape[1] * b.shape[1] >= gemm.ONEDNN_MIN_MACS
    with pytest.warns(RuntimeWarning, match="torch.mm for the rest of this process") as warned:
        product = gemm.matmul(a, b)
        added = gemm.matmul(a, b, c.clone(), accumulate=True)
    assert len(warned) == 1 and len(calls) == 1
    assert torch.equal(product, torch.mm(a, b))
    assert torch.equal(added, c.clone().addmm_(a, b))

    monkeypatch.setattr(gemm, "_ONEDNN_LINEAR", changed)  # every GEMM of a case above the threshold
    monkeypatch.setattr(gemm, "ONEDNN_MIN_MACS", 0)
    with pytest.warns(RuntimeWarning, match="torch.mm"):
        result = judge_one(Case.from_id("lstm-L2-bi-I3-H5-T7-B5-len7.4.1.6.2-f32-s3"), FusedCPUTarget())
    assert result.status == "pass", result.message
