"""The target protocol (docs/contracts.md, "Targets") and how an object is named on a command line.

A target is any callable ``run(case) -> Outputs``, or an object with ``run``, an optional
``name``, an optional ``supports(config) -> True | str``, an optional
``supports_case(case) -> True | str`` (the string is why it is skipped), optional gradient
conventions its family names (sLSTM's ``stabilizer_gradient``), which the judge reads
(:func:`gradcheck_rnn.judging.judge.judged_case`), and an optional ``repro_env``: the environment its
repro lines set first (``TRITON_INTERPRET=1`` for fused-gpu under Triton's interpreter).

Forward mode (the ``jvp`` check) is optional too: ``jvp(case, tangents) -> Outputs`` returns the
output tangents y, hy, cy (``grads`` left empty) along ``tangents``, a dict of float64 arrays keyed
by gradient name (x, h0, c0, parameter keys: exactly the names in ``case.wants``; every other
input has a zero tangent), each shaped like its input and rounded to the case dtype. An optional
``supports_jvp(case) -> True | str`` declines a case (the string says why); a target without
``jvp`` makes the check a skip ("offers no forward mode").

Second order (the ``gradgrad`` check) likewise: ``hvp(case, tangents) -> Outputs`` returns in
``grads``, for every name in ``case.wants``, the derivative of that gradient of the loss
sum(y·dy) + sum(hy·dhy) + sum(cy·dcy) along ``tangents`` (the Hessian-vector product; y and hy
may be None), and ``supports_hvp(case) -> True | str`` may decline, even without ``hvp``: a
target whose backward cannot be differentiated says so there.

Kernel configurations are optional too: ``kernel_configs(config) -> dict[str, tuple]`` names what
the target can run ``config`` with (chunk sizes, block sizes, warps, backends, autotune candidates:
name -> candidate values, names lower-case words, values ints or words). The judge draws one value
per name for each case that names none (:func:`gradcheck_rnn.judging.judge.configured_case`),
names it in the case id (``-kc.chunk.8``) and hands it over as ``case.kernel_config``, sorted
(name, value) pairs; a target that declares none sees ``case.kernel_config`` of whatever the id
named and may ignore it. A value the case names that the target does not offer declines the case.

A target given as an object (the Python API, the pytest fixture) is named ``module:qualname``
when that name imports back to the very same object, so every repro line is a command that
runs; otherwise it keeps its own name and is marked not importable, and its repro lines say so.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from typing import Any

from ..model.case import Case, Outputs
from ..model.rnn_config import RNNConfig
from ..errors import UsageError


@dataclass
class Target:
    """A target normalised to the protocol: a name, ``supports`` and ``run``."""

    name: str
    impl: Any
    importable: bool = True  # False: no command line can name it (see importable_name)

    def supports(self, config: RNNConfig) -> bool | str:
        check = getattr(self.impl, "supports", None)
        return True if check is None else check(config)

    def supports_case(self, case: Case) -> bool | str:
        """``supports(case.config)``, then the target's own optional ``supports_case(case)``."""
        reason = self.supports(case.config)
        if reason is not True:
            return reason
        check = getattr(self.impl, "supports_case", None)
        return True if check is None else check(case)

    def run(self, case: Case) -> Outputs:
        run = getattr(self.impl, "run", None) or self.impl
        return run(case)

    def supports_jvp(self, case: Case) -> bool | str:
        """True when the target offers forward mode on ``case`` (an optional ``jvp`` method, and its
        optional ``supports_jvp(case)``); else why not."""
        if not callable(getattr(self.impl, "jvp", None)):
            return "the target offers no forward mode (no jvp(case, tangents) method)"
        check = getattr(self.impl, "supports_jvp", None)
        return True if check is None else check(case)

    def jvp(self, case: Case, tangents: dict[str, Any]) -> Outputs:
        """The target's output tangents of ``case`` along ``tangents`` (see the module docstring)."""
        return self.impl.jvp(case, tangents)

    def supports_hvp(self, case: Case) -> bool | str:
        """True when the target offers second order on ``case`` (its optional ``supports_hvp(case)``
        first, then an ``hvp`` method); else why not."""
        check = getattr(self.impl, "supports_hvp", None)
        reason = True if check is None else check(case)
        if reason is True and not callable(getattr(self.impl, "hvp", None)):
            return "the target offers no second order (no hvp(case, tangents) method)"
        return reason

    def hvp(self, case: Case, tangents: dict[str, Any]) -> Outputs:
        """The target's Hessian-vector product of ``case``'s loss along ``tangents``."""
        return self.impl.hvp(case, tangents)

    def kernel_configs(self, config: RNNConfig) -> dict[str, tuple]:
        """The kernel configurations the target can run ``config`` with (its optional
        ``kernel_configs(config)``): name -> candidate values; {} for a target that declares none."""
        declare = getattr(self.impl, "kernel_configs", None)
        return {} if declare is None else {name: tuple(values) for name, values in dict(declare(config)).items()}

    @property
    def repro_env(self) -> str:
        """The environment its repro lines must set to judge as this process did (the target's
        optional ``repro_env``, e.g. ``TRITON_INTERPRET=1`` for a Triton kernel run by the
        interpreter); "" when none."""
        return getattr(self.impl, "repro_env", "") or ""


def _resolves_to(spec: str, obj: Any) -> bool:
    module_name, _, qualname = spec.partition(":")
    try:
        found: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            found = getattr(found, part)
    except Exception:
        return False
    return found is obj


def importable_name(obj: Any, given: Any = None) -> str | None:
    """``module:qualname`` naming ``obj`` (or the class ``given`` it was made from), if that imports back to it."""
    for candidate in (given, obj):
        module, qualname = getattr(candidate, "__module__", None), getattr(candidate, "__qualname__", None)
        if module and qualname and module != "__main__" and "<" not in qualname:
            spec = f"{module}:{qualname}"
            if _resolves_to(spec, candidate):
                return spec
    module = sys.modules.get(getattr(type(obj), "__module__", None) or "")
    if module is not None and module.__name__ != "__main__":  # an instance bound to a module-level name
        for attr, value in vars(module).items():
            if value is obj and not attr.startswith("_"):
                return f"{module.__name__}:{attr}"
    return None


def as_target(obj: Any, name: str | None = None) -> Target:
    """Wrap a callable or an object with ``run`` as a :class:`Target`.

    ``name`` is the spec it was resolved from (always runnable); without it the object is
    named ``module:qualname`` when importable, else by its own ``name`` and marked not importable.
    """
    if isinstance(obj, Target):
        return obj
    given = obj
    if isinstance(obj, type):
        obj = obj()
    if not callable(getattr(obj, "run", None)) and not callable(obj):
        raise UsageError(f"target {name or obj!r} is neither callable nor has a run(case) method")
    if name is not None:
        return Target(name, obj)
    spec = importable_name(obj, given if isinstance(given, type) else None)
    if spec is not None:
        return Target(spec, obj)
    return Target(getattr(obj, "name", None) or getattr(obj, "__name__", None) or repr(obj), obj, importable=False)
