"""Reference-free checks: properties any correct RNN kernel has, whatever its numbers.

They need no reference, so they also guard targets whose references disagree, and they catch
stateful bugs a single comparison cannot see (docs/contracts.md, "Reference-free checks"):

* ``padding``     — changing x and dy at padded steps changes nothing (MXNet #19323);
* ``permutation`` — permuting the batch permutes the outputs and input gradients and leaves
  the parameter gradients unchanged;
* ``future``      — extending a sequence by one step (with a non-zero dy there and the loss on
  y only) must change the input gradient of the step before: the MXNet #21143 signature;
* ``determinism`` — two runs are bit-identical, or the target is reported non-deterministic;
* ``linearity``   — gradients for dy1 + dy2 equal the sum of the gradients for dy1 and for dy2
  (PyTorch #1532, TF #26331: repeated backward);
* ``stateless``   — run A, run B (same shapes, other weights), run A again: A is bit-identical
  (ONNX Runtime #3797 stale buffers, MXNet #16037 stale weights).

One more check shares their signature though it is not reference-free: ``fd``
(:mod:`gradcheck_rnn.fd`), the finite-difference witness of the references (and of float64
targets), whose disagreement with a reference is its own status, ``reference-disagreement``.

Every transformed case is derived deterministically from the case (its seed), so a check
reproduces from the case id alone.
"""

from __future__ import annotations

import hashlib
import time
from typing import Callable

import numpy as np

from .case import Case, as_mapping, make_case, round_to_dtype, with_changes
from .compare import TensorError, compare_tensor, to_float64
from .fd import ReferenceDisagreement, check_fd
from .runner import CaseResult, describe_exception, new_result
from .targets import Target
from .tolerances import Tolerances

Arrays = dict[str, np.ndarray]


class Skip(Exception):
    """The check does not apply to this case (e.g. no padded steps to change)."""


def _rng(case: Case, salt: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([case.seed, salt])))


def _run(target: Target, case: Case) -> Arrays:
    """The target's y, hy, cy and requested gradients as float64 arrays."""
    named = as_mapping(target.run(case))
    wanted = ["y", "hy", "cy", *sorted(case.wants)]
    return {k: to_float64(named[k]) for k in wanted if k in named and named[k] is not None}


def _compare_all(case: Case, actual: Arrays, expected: Arrays, tolerances: Tolerances) -> list[TensorError]:
    return [compare_tensor(name, actual.get(name), value, tolerances.for_tensor(case.config.dtype, name),
                           case.config) for name, value in expected.items()]


def _identical(case: Case, first: Arrays, second: Arrays) -> list[TensorError]:
    """Bit-identity, reported with a zero tolerance so the table shows where runs differ."""
    from .tolerances import Tolerance

    return [compare_tensor(n, second.get(n), v, Tolerance(0.0, 0.0), case.config) for n, v in first.items()]


def check_padding(case: Case, target: Target, tolerances: Tolerances) -> list[TensorError]:
    padded = np.arange(case.config.max_len)[:, None] >= case.seq_lengths[None, :]
    if not padded.any():
        raise Skip("no padded steps: every sequence has length T")
    rng = _rng(case, 1)
    mask = padded[:, :, None]
    x = np.where(mask, round_to_dtype(rng.standard_normal(case.x.shape) * 3, case.config.dtype), case.x)
    dy = np.where(mask, round_to_dtype(rng.standard_normal(case.dy.shape) * 3, case.config.dtype), case.dy)
    return _compare_all(case, _run(target, with_changes(case, x=x, dy=dy)), _run(target, case), tolerances)


# Tensors whose axis 1 is the batch; parameter gradients have no batch axis.
_BATCHED = frozenset({"y", "x", "hy", "cy", "h0", "c0"})


def check_permutation(case: Case, target: Target, tolerances: Tolerances) -> list[TensorError]:
    B = case.config.batch_size
    if B < 2:
        raise Skip("batch of one: nothing to permute")
    perm = _rng(case, 2).permutation(B)
    if (perm == np.arange(B)).all():
        perm = np.roll(perm, 1)

    def permuted(a: np.ndarray | None) -> np.ndarray | None:
        return None if a is None else a[:, perm]

    moved = with_changes(case, x=permuted(case.x), seq_lengths=case.seq_lengths[perm], h0=permuted(case.h0),
                         c0=permuted(case.c0), dy=permuted(case.dy), dhy=permuted(case.dhy), dcy=permuted(case.dcy))
    expected = {k: (v[:, perm] if k in _BATCHED else v) for k, v in _run(target, case).items()}
    return _compare_all(case, _run(target, moved), expected, tolerances)


def _future_pair(case: Case) -> tuple[Case, Case, list[int]]:
    """The two cases the ``future`` check compares: the loss on y only, then every sequence that
    is shorter than T and has a non-zero dy at the step after its end extended by one step.
    A sequence of length 0 has no step before the new one, so it is never a candidate."""
    cfg = case.config
    candidates = [b for b in range(cfg.batch_size)
                  if 0 < case.seq_lengths[b] < cfg.max_len and case.dy[case.seq_lengths[b], b].any()]
    # The loss is on y only: a head gradient on hy would move from step t to t+1 and change
    # dx[t] even in a kernel that drops the future, hiding the bug this check looks for.
    base = with_changes(case, dhy=np.zeros_like(case.dhy), dcy=None if case.dcy is None else np.zeros_like(case.dcy))
    lengths = case.seq_lengths.copy()
    lengths[candidates] += 1
    return base, with_changes(base, seq_lengths=lengths), candidates


_FUTURE_REFERENCES: dict[str, tuple[np.ndarray, np.ndarray]] = {}


def _fingerprint(case: Case) -> str:
    """The case id plus a digest of its data: a hand-built Case need not match its id's data."""
    digest = hashlib.sha1(case.id.encode())
    for array in (case.x, case.h0, case.c0, case.dy, case.dhy, case.dcy, *case.params.values()):
        digest.update(b"-" if array is None else np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def _future_reference(case: Case) -> tuple[np.ndarray, np.ndarray]:
    """dx of the float64 loop reference on the ``future`` pair of a case, computed once per case
    and shared by every target judged on it (a few recent cases are kept)."""
    from .references.loop import run_loop_reference

    key = _fingerprint(case)
    if key not in _FUTURE_REFERENCES:
        base, extended, _ = _future_pair(case)
        if len(_FUTURE_REFERENCES) >= 8:
            _FUTURE_REFERENCES.pop(next(iter(_FUTURE_REFERENCES)))
        _FUTURE_REFERENCES[key] = (to_float64(run_loop_reference(base).grads["x"]),
                                   to_float64(run_loop_reference(extended).grads["x"]))
    return _FUTURE_REFERENCES[key]


def check_future(case: Case, target: Target, tolerances: Tolerances) -> list[TensorError]:
    """Extending a sequence by one step must change dx at its old last step exactly as much as the
    float64 reference says it does.

    Whether a change is *required* is decided per sequence by the loop reference on the same pair
    of cases, never by a fixed noise floor: a dead relu unit, a saturated gate or a contribution
    that decays below what the x tolerance resolves legitimately changes (almost) nothing, and
    such sequences are not judged. On the others, the target's change must match the
    reference's change within the sum of the x tolerances of the two runs it is the difference of.
    """
    cfg = case.config
    if "x" not in case.wants:
        raise Skip("the input gradient is not requested")
    base, extended, candidates = _future_pair(case)
    if not candidates:
        raise Skip("no sequence of length 1..T-1 with a non-zero dy at the step after its end")
    ref_before, ref_after = _future_reference(case)
    tol = tolerances.for_tensor(cfg.dtype, "x")
    steps = case.seq_lengths[candidates] - 1
    ref_old, ref_new = ref_before[steps, candidates], ref_after[steps, candidates]  # (sequences, I)
    ref_change = ref_new - ref_old
    # Each run of a correct target is within atol + rtol·|reference| of the reference, so their
    # difference is within the sum of the two bounds of the reference's difference.
    slack = 2 * tol.atol + tol.rtol * (np.abs(ref_old) + np.abs(ref_new))
    decisive = (np.abs(ref_change) > slack).any(axis=1)
    if not decisive.any():
        raise Skip("the float64 reference's change of dx at each extended sequence's last step is within the x "
                   "tolerance (dead relu units, saturated gates or a decayed gradient): nothing to judge")
    before, after = _run(target, base), _run(target, extended)
    target_change = after["x"][steps, candidates] - before["x"][steps, candidates]
    with np.errstate(invalid="ignore", over="ignore"):
        ratios = np.abs(target_change - ref_change) / slack
    ratios = np.where(np.isfinite(ratios), ratios, np.inf)[decisive]
    k, unit = np.unravel_index(int(np.argmax(ratios)), ratios.shape)
    seq = int(np.asarray(candidates)[decisive][k])
    t, ratio = int(case.seq_lengths[seq]) - 1, float(ratios[k, unit])
    a, b = float(target_change[decisive][k, unit]), float(ref_change[decisive][k, unit])
    error = TensorError("x", "pass" if ratio <= 1 else "fail", abs(a - b), abs(a - b) / abs(b) if b else np.inf,
                        ratio, {"t": t, "b": seq, "unit": int(unit)}, a, b, rtol=tol.rtol, atol=tol.atol,
                        reference="loop")
    if ratio > 1:
        error.message = (f"x: extending sequence {seq} by one step changed dx at its last step t={t} by a={a:.3g} "
                         f"where the float64 reference changes it by b={b:.3g}: the gradient from the future "
                         f"does not reach it (truncated BPTT, MXNet #21143)")
    return [error]


def check_determinism(case: Case, target: Target, tolerances: Tolerances) -> list[TensorError]:
    errors = _identical(case, _run(target, case), _run(target, case))
    for e in errors:
        if not e.passed:
            e.message = f"{e.name}: non-deterministic — two runs of the same case differ by up to {e.max_abs:.3g}"
    return errors


def check_linearity(case: Case, target: Target, tolerances: Tolerances) -> list[TensorError]:
    rng = _rng(case, 3)
    dtype = case.config.dtype

    def other(a: np.ndarray | None) -> np.ndarray | None:
        return None if a is None else round_to_dtype(rng.standard_normal(a.shape), dtype)

    dy2, dhy2, dcy2 = other(case.dy), other(case.dhy), other(case.dcy)

    def plus(a, b):
        return None if a is None else round_to_dtype(a + b, dtype)

    first, second = _run(target, case), _run(target, with_changes(case, dy=dy2, dhy=dhy2, dcy=dcy2))
    both = _run(target, with_changes(case, dy=plus(case.dy, dy2), dhy=plus(case.dhy, dhy2),
                                     dcy=plus(case.dcy, dcy2)))
    grads = [k for k in first if k not in ("y", "hy", "cy")]
    return _compare_all(case, {k: both[k] for k in grads if k in both}, {k: first[k] + second[k] for k in grads},
                        tolerances)


def check_stateless(case: Case, target: Target, tolerances: Tolerances) -> list[TensorError]:
    first = _run(target, case)
    other = make_case(case.config, case.seq_lengths, (case.seed + 1) % 2**31, wants=case.wants_group,
                      heads=case.heads, initial_state=case.initial_state)
    _run(target, other)
    errors = _identical(case, first, _run(target, case))
    for e in errors:
        if not e.passed:
            e.message = f"{e.name}: state carried between calls — a run of another case changed this one's result"
    return errors


CHECK_FUNCTIONS: dict[str, Callable[[Case, Target, Tolerances], list[TensorError]]] = {
    "padding": check_padding, "permutation": check_permutation, "future": check_future,
    "determinism": check_determinism, "linearity": check_linearity, "stateless": check_stateless,
    "fd": check_fd,
}
CHECKS = tuple(CHECK_FUNCTIONS)
# Everything a sweep can run per case × target: the reference comparison, then these checks.
ALL_CHECKS = ("reference", *CHECKS)


def run_check(name: str, case: Case, target: Target, tolerances: Tolerances | None = None) -> CaseResult:
    """One reference-free check of one target on one case, as its own result row."""
    tolerances = tolerances or Tolerances()
    result = new_result(case, target, "pass", check=name)
    reason = target.supports_case(case)
    if reason is not True:
        result.status, result.message = "skip", str(reason)
        return result
    start = time.perf_counter()
    try:
        result.tensors = CHECK_FUNCTIONS[name](case, target, tolerances)
    except Skip as skip:
        result.status, result.message = "skip", str(skip)
    except ReferenceDisagreement as disagreement:  # the witness caught a reference: never the target's fault
        result.status, result.tensors = "reference-disagreement", disagreement.rows
        result.message = "; ".join(row.message for row in disagreement.rows[:3])
    except Exception as exc:  # a target that raises is an "error" row; the sweep goes on
        result.status = "error"
        result.message, result.traceback = describe_exception(exc)
    else:
        failing = result.failing
        result.status = "fail" if failing else "pass"
        result.message = "; ".join(t.message for t in failing[:3])
    result.seconds = time.perf_counter() - start
    return result


__all__ = ["ALL_CHECKS", "CHECKS", "run_check"]
