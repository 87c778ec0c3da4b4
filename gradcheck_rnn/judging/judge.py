"""Judging: the one place that calls a target and turns what happens into result rows.

:func:`judge` alone, for each target on a case (in a worker process, or in this one with
``--in-process``; :mod:`gradcheck_rnn.run`):

1. asks the target's ``supports(config)`` / ``supports_case(case)``: a reason makes every row a
   ``skip``; every case a check derives is asked too (a decline skips that check);
2. runs each enabled check (:mod:`gradcheck_rnn.judging.checks`) through a :class:`TargetCall`, which
   hands the target a *private copy* of the case on every call (a target that writes into its
   inputs can only hurt its own verdict), times it, catches anything it raises (``SystemExit``
   too; only SIGINT and SIGTERM stop the run) keeping the target's own frames, and validates
   what it returned once — an ``Outputs``; every compared
   tensor present, of a float dtype, of the right shape and finite — so no check ever reaches
   into an unvalidated result;
3. assigns the row's status from how the check ended: its tensors (``pass``/``fail``),
   :class:`~gradcheck_rnn.judging.checks.base.Skip`, :class:`~gradcheck_rnn.judging.checks.base.Nondeterministic`,
   :class:`~gradcheck_rnn.judging.checks.base.ReferenceDisagreement`, :class:`InvalidOutputs` (``fail``,
   or ``error`` when the target did not return an ``Outputs`` at all) or :class:`TargetRaised`
   (``error``);
4. on a case that breaks a contract the target declares (:mod:`gradcheck_rnn.targets.contracts`),
   marks every tensor the broken precondition can reach that did not pass ``out-of-contract``
   (such a tensor that is unusable, non-finite say, is set aside rather than ending the check), and
   a row whose only failures are those becomes ``out-of-contract`` (:func:`apply_contracts`).
"""

from __future__ import annotations

import dataclasses
import time
import traceback
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np

from ..model.case import Case, Outputs, as_mapping, private_copy, with_changes
from .checks import CHECKS
from .checks.base import Nondeterministic, ReferenceDisagreement, Skip
from ..model.compare import TensorError, tail_name, to_float64
from .context import Arrays, CaseContext
from ..errors import INTERRUPTS, TargetReported, UsageError
from ..model.layouts import draw_kernel_config, kernel_config_refusal
from ..model.streams import case_rng, claim
from ..rows.result import CaseResult
from ..targets import Target, as_target
from ..targets.contracts import Contract, broken, declared_contracts, reached
from ..model.tolerances import Tolerances

_PACKAGE_DIR = str(Path(__file__).resolve().parents[1])


class TargetRaised(Exception):
    """The target raised: ``message`` names the exception and the target's own frame;
    ``error_type`` is the exception's class name (the row's, so nobody parses it from the message)."""

    def __init__(self, message: str, frames: str, error_type: str = "") -> None:
        super().__init__(message)
        self.message, self.frames, self.error_type = message, frames, error_type


class InvalidOutputs(Exception):
    """The target returned something no check can judge; ``rows`` say what, tensor by tensor."""

    def __init__(self, status: str, message: str, rows: list[TensorError] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.rows = status, message, rows or []


def describe_exception(exc: BaseException, max_frames: int = 6, target: Any = None) -> tuple[str, str]:
    """A one-line message and a short traceback of the target's own frames.

    Frames inside gradcheck_rnn are left out (they only say "the engine called the target"), so
    a plugin's error points at the plugin: ``KeyError: 'nope' (at my_rnn.py:12 in run)``. When no
    frame is the target's own (it could not even be called: ``run()`` takes no case), the
    message names where ``target`` is defined instead of the engine's line.
    """
    if isinstance(exc, TargetReported):  # the adapter's message already says where, and ours would mislead
        return f"{type(exc).__name__}: {exc}", ""
    every = traceback.extract_tb(exc.__traceback__)
    own = [f for f in every if not str(Path(f.filename).resolve()).startswith(_PACKAGE_DIR)]
    frames = (own or every)[-max_frames:]
    message = f"{type(exc).__name__}: {exc}"
    if not own and (where := _defined_at(target)):
        message += f" (calling the target defined at {where})"
    elif frames:
        last = frames[-1]
        message += f" (at {Path(last.filename).name}:{last.lineno} in {last.name})"
    lines = [f'  File "{f.filename}", line {f.lineno}, in {f.name}' + (f"\n    {f.line}" if f.line else "")
             for f in frames]
    return message, "\n".join(lines)


def _defined_at(target: Any) -> str | None:
    """``file.py:line`` of a target's ``run`` (or of the callable itself), if Python knows it."""
    import inspect

    if target is None:
        return None
    run = getattr(target, "run", None) if not inspect.isfunction(target) else target
    try:
        function = inspect.unwrap(run)
        return f"{Path(inspect.getsourcefile(function)).name}:{inspect.getsourcelines(function)[1]}"
    except (TypeError, OSError):
        return None


def expected_shapes(case: Case, returns: str = "run") -> dict[str, tuple[int, ...]]:
    """The shape of every tensor a target must return for ``case``: y, hy, cy (LSTM), requested
    gradients; a forward-mode product (``returns="jvp"``) returns the outputs' tangents alone, a
    Hessian-vector product (``"hvp"``) the gradients' alone."""
    cfg = case.config
    T, B, S = cfg.max_len, cfg.batch_size, cfg.state_size
    states = cfg.num_layers * cfg.num_directions
    shapes: dict[str, tuple[int, ...]] = {}
    if returns != "hvp":
        shapes.update(y=(T, B, cfg.num_directions * S), hy=(states, B, cfg.h_size))
        if cfg.has_cell_state:
            shapes["cy"] = (states, B, cfg.c_size)
    inputs = {"x": case.x, "h0": case.h0, "c0": case.c0}
    for name in () if returns == "jvp" else sorted(case.wants):
        shapes[name] = tuple((inputs[name] if name in inputs else case.params[name]).shape)
    return shapes


def _as_float_array(value: Any) -> np.ndarray | str:
    """A float64 copy of a numpy/torch array, or why it is not a float array."""
    kind = getattr(value, "dtype", None)
    if kind is None:
        return f"a {type(value).__name__}, not an array"
    if hasattr(value, "is_floating_point"):  # torch
        if not value.is_floating_point():
            return f"dtype {kind}, not a float dtype"
    elif np.dtype(kind).kind != "f" and str(kind) != "bfloat16":
        return f"dtype {kind}, not a float dtype"
    try:
        return to_float64(value)
    except Exception as exc:  # e.g. an array type numpy cannot read
        return f"unreadable ({type(exc).__name__}: {exc})"


def validate(case: Case, returned: Any, returns: str = "run") -> tuple[Arrays, list[TensorError]]:
    """What a target returned: its usable tensors as float64 arrays by name, and one row per
    problem (missing, not a float dtype, wrong shape, NaN/Inf — a non-finite tensor is usable,
    the others are not); :class:`InvalidOutputs` (``error``) if it is not an ``Outputs`` at all.
    ``returns``: the method that returned it, run, jvp or hvp (:func:`expected_shapes`)."""
    method = f"{returns}()"
    if not isinstance(returned, Outputs):
        raise InvalidOutputs("error", f"{method} returned {type(returned).__name__}, expected gradcheck_rnn.Outputs")
    named = as_mapping(returned)
    arrays: Arrays = {}
    problems: list[TensorError] = []
    for name, shape in expected_shapes(case, returns).items():
        value = named.get(name)
        if value is None:
            problems.append(TensorError(name, "missing", message=f"{name}: missing (the target returned no value)"))
            continue
        array = _as_float_array(value)
        if isinstance(array, str):
            problems.append(TensorError(name, "fail", message=f"{name}: {array}"))
        elif array.shape != shape:
            problems.append(TensorError(name, "fail", message=f"{name}: shape {array.shape}, expected {shape}"))
        else:
            arrays[name] = array
            if not np.isfinite(array).all():
                bad = int((~np.isfinite(array)).sum())
                problems.append(TensorError(name, "fail", message=f"{name}: {bad} non-finite value(s) in the target"))
    for name, value in returned.tails.items():  # a packed target's rows past cu_seqlens[-1] (packed.py)
        if name in case.wants and value is not None:
            array = _as_float_array(value)
            if isinstance(array, str):
                problems.append(TensorError(tail_name(name), "fail", message=f"{tail_name(name)}: {array}"))
            else:
                arrays[tail_name(name)] = array
    return arrays, problems


def _invalid(rows: list[TensorError]) -> InvalidOutputs:
    return InvalidOutputs("fail", "; ".join(r.message for r in rows[:3])
                          + (f"; and {len(rows) - 3} more" if len(rows) > 3 else ""), rows)


class TargetCall:
    """Every run of one target on one case's context: private copies, validation.

    ``run(case)`` runs the target on ``case`` (the context's case or one a check derived from it);
    ``base()`` is the run on the unchanged case, made once and shared by the checks that may
    share it (an exception it raised included). Both raise :class:`InvalidOutputs` when the
    outputs have any problem; ``base_with_problems()`` returns the usable tensors and the problem
    rows instead, for the reference comparison, which shows every tensor it can.
    """

    def __init__(self, target: Target, context: CaseContext, broken_contracts: tuple[Contract, ...] = ()) -> None:
        self.target, self.context = target, context
        self.broken_contracts = broken_contracts  # the target's contracts that the case breaks
        # tensors outside a broken contract that a run could not give usable (non-finite, ...):
        # set aside by _usable, so that the check judges the rest, and reported by apply_contracts
        self.set_aside: dict[str, TensorError] = {}
        self._base: tuple[Arrays, list[TensorError]] | TargetRaised | InvalidOutputs | None = None
        # the latest call, if it returned: the case it ran and what it gave
        self._latest: tuple[Case, tuple[Arrays, list[TensorError]]] | None = None

    def run(self, case: Case) -> Arrays:
        """The target's validated run of ``case``; a case a check derived (any but the context's
        case) is first put to ``supports_case``, which :func:`judge` asked of the base case only:
        a decline ends that check as a ``skip``, never as the target's error."""
        self._ask_about(case)
        return self._usable(self._run(case))

    def run_poisoned(self, case: Case) -> tuple[Arrays, list[TensorError]]:
        """The target's run of ``case`` with the memory torch hands out uninitialised filled with
        NaN (:func:`gradcheck_rnn.runtime.poisoned_memory`): its usable tensors, non-finite ones
        included, and the problem rows, for a check that reads where the NaN went."""
        from ..runtime import poisoned_memory

        self._ask_about(case)
        try:
            with poisoned_memory():
                return self._run(case)
        finally:
            self._latest = None  # never the first of two back-to-back runs: it ran in another mode

    def run_between(self, case: Case) -> None:
        """Run the target on ``case`` only to have called it (stateless's other case in between):
        what it returns is not judged. That case is not the one under test, and a correct kernel
        may legitimately overflow on it in a low precision; only what it raises counts."""
        self._ask_about(case)
        self._run(case)

    def declines(self, case: Case) -> str | None:
        """Why the target declines ``case`` (its ``supports_case`` answer), or None when it takes it:
        a check that can derive its cases another way asks before it runs them."""
        supported, frames = _supported(self.target, case)
        if frames:
            raise TargetRaised(str(supported), frames)
        return None if supported is True else str(supported)

    def _ask_about(self, case: Case) -> None:
        if case is not self.context.case:
            declined = self.declines(case)
            if declined is not None:
                raise Skip(f"the target declines the case this check derives: {declined}")

    def offers(self, method: str) -> bool | str:
        """The target's answer to whether it offers ``method`` ("jvp" or "hvp") on the context's
        case (True, or why not); what asking raises is the target's error."""
        try:
            return getattr(self.target, f"supports_{method}")(self.context.case)
        except INTERRUPTS:
            raise
        except BaseException as exc:
            raise TargetRaised(*describe_exception(exc, target=self.target.impl), type(exc).__name__) from None

    def product(self, method: str, tangents: Arrays) -> Arrays:
        """The target's validated ``method`` ("jvp": output tangents y, hy, cy; "hvp": the requested
        gradients' tangents) of the context's case along ``tangents`` (private copies of both)."""
        case = self.context.case
        copies = {name: np.array(value) for name, value in tangents.items()}
        self._latest = None  # a call in between: determinism must not pair the base run with a later run
        call = getattr(self.target, method)
        return self._usable(self._call(case, lambda private: call(private, copies), returns=method))

    def _run(self, case: Case) -> tuple[Arrays, list[TensorError]]:
        self._latest = None
        validated = self._call(case, self.target.run)
        self._latest = case, validated
        return validated

    def _call(self, case: Case, method: Any, returns: str = "run") -> tuple[Arrays, list[TensorError]]:
        """``method`` (the target's run, jvp or hvp) on a private copy of ``case``: what it raises
        kept with its frames, what it returns validated."""
        private = private_copy(case)
        try:
            returned = method(private)
        except INTERRUPTS:
            raise
        except BaseException as exc:  # SystemExit too: a target that raises is an "error" row, never the run's end
            raise TargetRaised(*describe_exception(exc, target=self.target.impl), type(exc).__name__) from None
        try:  # reading what it returned runs the target's code too (properties, array conversions)
            return validate(case, returned, returns)
        except (InvalidOutputs, *INTERRUPTS):
            raise
        except BaseException as exc:
            raise TargetRaised(*describe_exception(exc, target=self.target.impl), type(exc).__name__) from None

    def latest_run_of(self, case: Case) -> Arrays | None:
        """What the target's latest call returned if that call ran ``case`` itself (the same
        object), else None: nothing ran since, so a check that needs two back-to-back runs of the
        case may take it as the first (determinism after the base run)."""
        if self._latest is None or self._latest[0] is not case:
            return None
        return self._usable(self._latest[1])

    def base(self) -> Arrays:
        return self._usable(self.base_with_problems())

    def base_with_problems(self) -> tuple[Arrays, list[TensorError]]:
        if self._base is None:
            try:
                self._base = self._run(self.context.case)
            except (TargetRaised, InvalidOutputs) as exc:
                self._base = exc
        if isinstance(self._base, Exception):
            raise self._base
        return self._base

    def _usable(self, validated: tuple[Arrays, list[TensorError]]) -> Arrays:
        arrays, problems = validated
        outside = {p.name: p for p in problems if reached(self.broken_contracts, p.name)}
        if len(outside) < len(problems):
            raise _invalid(problems)
        for name, problem in outside.items():
            self.set_aside.setdefault(name, problem)
        return {name: value for name, value in arrays.items() if name not in outside}


def _row(case: Case, target: Target, check: str, status: str, **fields: Any) -> CaseResult:
    return CaseResult.of_case(case, target.name, status, check, importable=target.importable,
                              repro_env=target.repro_env, **fields)


def apply_contracts(row: CaseResult, contracts: tuple[Contract, ...], set_aside: dict[str, TensorError]) -> CaseResult:
    """``row`` judged against the contracts its case breaks (docs/contracts.md, "Target
    contracts"): the tensors set aside as unusable join it, every tensor a broken contract can
    reach that did not pass becomes ``out-of-contract``, and a ``fail`` or ``nondeterministic`` row
    whose only failures are those becomes ``out-of-contract``, its message the contract's
    statement and what was seen there. Other rows, and the tensors the contracts cannot reach, are
    as judged."""
    if not contracts or row.status not in ("pass", "fail", "nondeterministic"):
        return row
    row.tensors += [t for name, t in set_aside.items() if name not in row.compared]
    outside = []
    for tensor in row.tensors:
        if not tensor.passed and reached(contracts, tensor.name) is not None:
            tensor.status = "out-of-contract"
            outside.append(tensor)
    if outside and all(t.status in ("pass", "out-of-contract") for t in row.tensors):
        contract = reached(contracts, outside[0].name)
        seen = ", ".join(f"{t.name} up to {abs(t.a):.3g}" if np.isfinite(t.a) else t.name for t in outside[:3])
        row.status = "out-of-contract"
        row.message = f"{contract.statement}; seen here: {seen}" + (
            f" and {len(outside) - 3} more" if len(outside) > 3 else "")
    return row


def judge_check(call: TargetCall, check: str, tolerances: Tolerances) -> CaseResult:
    """One check of one target on one case, as one result row, judged against the contracts the
    case breaks (:func:`apply_contracts`); its ``seconds`` are the wall time of judging it: the
    target's runs and, for the first row that needs them, the references (the context computes
    them once, when first asked), so a case's rows add up to its judging time."""
    start = time.perf_counter()
    call.set_aside = {}
    row = apply_contracts(_judge_check(call, check, tolerances), call.broken_contracts, call.set_aside)
    row.seconds = time.perf_counter() - start
    return row


def _judge_check(call: TargetCall, check: str, tolerances: Tolerances) -> CaseResult:
    case, target = call.context.case, call.target
    try:
        tensors = CHECKS[check].run(call.context, call, tolerances)
    except Skip as skip:
        return _row(case, target, check, "skip", message=str(skip))
    except Nondeterministic as exc:
        return _row(case, target, check, "nondeterministic", message=exc.message, tensors=exc.rows)
    except ReferenceDisagreement as exc:  # the truth itself is in doubt: never the target's fault
        return _row(case, target, check, "reference-disagreement", message=exc.message, tensors=exc.rows)
    except InvalidOutputs as exc:
        return _row(case, target, check, exc.status, message=exc.message, tensors=exc.rows)
    except TargetRaised as exc:
        return _row(case, target, check, "error", message=exc.message, traceback=exc.frames,
                    error_type=exc.error_type)
    failing = [t for t in tensors if not t.passed]
    return _row(case, target, check, "fail" if failing else "pass", tensors=tensors,
                message="; ".join(t.message for t in failing[:3]))


def _supported(target: Target, case: Case) -> tuple[bool | str, str]:
    """The target's answer to supports/supports_case, and its frames if asking raised."""
    try:
        return target.supports_case(case), ""
    except INTERRUPTS:
        raise
    except BaseException as exc:  # SystemExit too
        message, frames = describe_exception(exc)
        return f"supports_case raised {message}", frames


class Declined(str):
    """Why a target's declared convention judges nothing of a case (its rows are skips)."""


def judged_case(case: Case, target: Target) -> Case | str:
    """The case under the gradient conventions ``target`` declares (docs/contracts.md, "Gradient
    conventions"): each convention of the case's family that the target names by its attribute
    (``stabilizer_gradient = "constant"``) sets the family option that makes the references follow
    it, and a convention that claims exact gradients only for losses through y (mLSTM's per-head
    norm) takes the case with no head gradient on the final states (``-gy``); a target that
    declares none is judged on the default. A value the family does not know is returned as the
    sentence that says so; a case whose head gradients such a convention cannot judge (only on the
    final states, or on y's last step) as a :class:`Declined` sentence."""
    family = case.config.family
    if not family.conventions:
        return case
    options, heads = dict(case.config.options), case.heads
    for convention in family.conventions:
        default = next(iter(convention.values))
        declared = getattr(target.impl, convention.attribute, default)
        if declared not in convention.values:
            return (f"{convention.attribute}={declared!r} is not a {family.token} convention; "
                    f"allowed: {', '.join(map(repr, convention.values))}")
        options[convention.option] = convention.values[declared]
        if convention.heads and options[convention.option] and heads != convention.heads:
            if heads != "all":
                return Declined(f"the {convention.attribute}={declared!r} convention is exact only for losses "
                                f"through all of y, and this case's head gradients are -g{heads}")
            heads = convention.heads
    config = dataclasses.replace(case.config, options=options)
    if config == case.config and heads == case.heads:
        return case
    if heads != case.heads:  # as make_case zeroes them for -gy
        return with_changes(case, config=config, heads=heads, dhy=np.zeros_like(case.dhy),
                            dcy=None if case.dcy is None else np.zeros_like(case.dcy))
    return with_changes(case, config=config)


KERNEL_CONFIG_SALT = claim(6, "the kernel configuration a target runs a case under")


def configured_case(case: Case, target: Target) -> Case | str:
    """``case`` under the kernel configuration ``target`` runs it with (docs/contracts.md, "Kernel
    configurations"): every name the target declares (``kernel_configs(config)``) and the case
    does not name gets one of its candidates, drawn from the case's own generator (salt
    :data:`KERNEL_CONFIG_SALT`), so the same case id and target always draw the same; the case
    comes back unchanged when there is nothing to draw, and a :class:`Declined` sentence when the
    case names a value the target does not offer."""
    candidates = target.kernel_configs(case.config)
    if not candidates:
        return case
    refusal = kernel_config_refusal(candidates, case.kernel_config)
    if refusal is not None:
        return Declined(refusal)
    chosen = draw_kernel_config(case_rng(case.seed, KERNEL_CONFIG_SALT), candidates, case.kernel_config)
    return case if chosen == case.kernel_config else with_changes(case, kernel_config=chosen)


def judged_case_id(case: Case, target: Any) -> str:
    """The id ``target``'s rows of ``case`` carry: the case under its declared gradient conventions
    (:func:`judged_case`) and the kernel configuration drawn for it (:func:`configured_case`); the
    case's own id where either declines or the target's declaration raises. What an executor names
    the error row of a target that ended its worker with, so that the row reproduces the case the
    target was judging."""
    target = as_target(target)
    try:
        convention = judged_case(case, target)
        if isinstance(convention, str):
            return case.id
        configured = configured_case(convention, target)
    except Exception:  # noqa: BLE001 - the judge makes the target's own error its row; here: its case
        return case.id
    return convention.id if isinstance(configured, str) else configured.id


def _configured(context: CaseContext, target: Target) -> tuple[CaseContext, bool | str, str]:
    """The context ``target`` is judged in under its kernel configuration (:func:`configured_case`),
    and whether it takes that case: (context, True or why not, the frames when asking raised)."""
    try:
        configured = configured_case(context.case, target)
    except INTERRUPTS:
        raise
    except BaseException as exc:  # the target's own declaration raised: its error, not the run's
        message, _ = describe_exception(exc, target=target.impl)
        return context, f"kernel_configs raised {message}", "(the target's declared kernel configurations)"
    if isinstance(configured, str):
        return context, str(configured), ""
    if configured is not context.case:
        context = context.configured(configured)
    return (context, *_supported(target, context.case))


def judge(case: Case | CaseContext, targets: Iterable[Any], tolerances: Tolerances | None = None,
          checks: Iterable[str] = ("reference",), start: int = 0) -> Iterator[CaseResult]:
    """Every enabled check of every target on one case: rows target by target, check by check.

    The case's context (references, witness, drift allowance) is shared by all of them, and each
    target's run on the unchanged case by the checks that may share it. A target that declares a
    gradient convention other than the default is judged on the case under it (:func:`judged_case`,
    its rows named by that case's id), whose context the targets that declare the same share.
    ``start`` skips the first rows of that order: a worker process resumes a case there after
    the row before crashed its predecessor. A target that declares kernel configurations is
    judged on the case under the one drawn for it (:func:`configured_case`), its rows named by
    that case's id, with the truth of the case it was drawn for.
    """
    base = case if isinstance(case, CaseContext) else CaseContext(case)
    contexts = {base.case.id: base}
    tolerances = tolerances or Tolerances()
    checks = list(checks)
    unknown = [c for c in checks if c not in CHECKS]
    if unknown:
        raise UsageError(f"unknown checks {', '.join(unknown)}; allowed: {', '.join(CHECKS)}")
    row = 0
    for target in (as_target(t) for t in targets):
        context, supported, frames = base, True, ""
        if row + len(checks) > start:
            convention = judged_case(base.case, target)
            if isinstance(convention, str):
                declined = isinstance(convention, Declined)
                supported, frames = str(convention), "" if declined else "(the target's declared gradient convention)"
            else:
                context = contexts.setdefault(convention.id, CaseContext(convention))
                context, supported, frames = _configured(context, target)
        try:
            contracts = broken(declared_contracts(target.impl, target.name), context.case)
        except UsageError as exc:  # a declaration the tool cannot test: the target's own error
            contracts, supported, frames = (), str(exc), "(the target's declared contracts)"
        call = TargetCall(target, context, contracts)
        for check in checks:
            row += 1
            if row <= start:
                continue
            if supported is not True:
                status = "error" if frames else "skip"
                yield _row(context.case, target, check, status, message=str(supported), traceback=frames)
            else:
                yield judge_check(call, check, tolerances)


def judge_one(case: Case | CaseContext, target: Any, tolerances: Tolerances | None = None,
              check: str = "reference") -> CaseResult:
    """One check of one target on one case (the reference comparison by default)."""
    return next(judge(case, [target], tolerances, [check]))
