"""Targets: what is being checked, and the registry that turns a name into one.

A target is any callable ``run(case) -> Outputs``, or an object with ``run``, an optional
``name``, an optional ``supports(config) -> True | str`` (the string is why it is skipped) and
an optional ``supports_case(case) -> True | str`` for what only the case shows (torch-native
declines zero-length sequences there). The runner and every check ask
:meth:`Target.supports_case`, which asks both.
Names resolve as: a built-in (``fused-cpu``, ``torch-native``, ``torch-native-cuda``, ``fused-gpu``;
one this machine cannot run resolves and is skipped with its reason; ``torch-scan`` and
``torch-compiled``, which a default sweep leaves out), ``NAME@PYTHON`` (run in
another interpreter), the foreign built-ins (``mxnet``, ``flax``, ``keras``, ``flashrnn-*``, ``mambapy``:
see :mod:`.foreign`), ``mutant:<name>``,
an entry point of the group ``gradcheck_rnn.targets``, or ``package.module:callable``.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any, Callable, Iterable

from ..errors import INTERRUPTS, UsageError, unknown_name
from ..importing import check_module_found, import_object
from .protocol import Target, as_target

__all__ = ["Target", "as_target", "check_target_name", "default_targets", "describe_targets", "left_out_builtins",
           "resolve_target", "resolve_targets"]

ENTRY_POINT_GROUP = "gradcheck_rnn.targets"


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


BUILTIN_NAMES = ("fused-cpu", "torch-native", "torch-native-cuda", "fused-gpu")
"""The built-in targets' names, known without importing their kernels (torch)."""
TORCH_MACHINERY = ("torch-scan", "torch-compiled")
"""Built-ins that judge torch's own machinery for recurrences (its ``scan`` op, ``torch.compile``)
on every family: named with ``-t`` only, a default sweep leaves them out (each case traces or
compiles for seconds)."""


def _builtin_factories() -> dict[str, Callable[[], Any]]:
    """Every built-in target by name (:data:`BUILTIN_NAMES`), whether or not this machine can run
    it: one that cannot resolves all the same and is skipped with its ``supports()`` reason."""
    from ..kernels.fused_cpu import FusedCPUTarget
    from ..kernels.fused_gpu import FusedGPUTarget
    from .torch_compiled import TorchCompiledTarget
    from .torch_native import TorchNativeTarget
    from .torch_scan import TorchScanTarget

    factories = (FusedCPUTarget, TorchNativeTarget, lambda: TorchNativeTarget("cuda"), FusedGPUTarget,
                 TorchScanTarget, TorchCompiledTarget)
    return dict(zip(BUILTIN_NAMES + TORCH_MACHINERY, factories))


CUDA_TARGETS = ("torch-native-cuda", "fused-gpu")
"""Built-ins that a default sweep checks only where CUDA is present."""


def builtin_names() -> list[str]:
    return list(BUILTIN_NAMES)


def default_targets() -> list[Target]:
    """Every built-in target this machine can run: what ``gradcheck-rnn sweep`` checks by default
    (fused-cpu and torch-native; torch-native-cuda and fused-gpu where CUDA is present)."""
    cuda = _cuda_available()
    return [as_target(factory(), name) for name, factory in _builtin_factories().items()
            if name in BUILTIN_NAMES and (cuda or name not in CUDA_TARGETS)]


def left_out_builtins() -> str:
    """Which built-in targets a default sweep does not judge here, and why, in one phrase for the
    run's header ("" when none): found without importing any framework (that costs seconds)."""
    import importlib.util

    from .foreign import _FRAMEWORK, FOREIGN_BUILTINS, FOREIGN_CUDA_ONLY

    groups: dict[str, list[str]] = {}
    cuda = _cuda_available()
    if not cuda:
        groups.setdefault("no CUDA device", []).extend(CUDA_TARGETS + FOREIGN_CUDA_ONLY)
    for name in FOREIGN_BUILTINS:
        if not cuda and name in FOREIGN_CUDA_ONLY:
            continue
        found = importlib.util.find_spec(_FRAMEWORK[name].split(".")[0]) is not None
        groups.setdefault("installed: name them with -t" if found else "not installed here; NAME@PYTHON runs them "
                          "in another interpreter", []).append(name)
    groups["compile-heavy: name them with -t"] = list(TORCH_MACHINERY)
    return "; ".join(f"{', '.join(names)} ({why})" for why, names in groups.items())


def resolve_targets(items: Iterable[Any]) -> list[Target]:
    """Targets from specs (``"fused-cpu"``, ``"pkg.mod:fn"``) and target objects alike, in order."""
    return [resolve_target(item) if isinstance(item, str) else as_target(item) for item in items]


def resolve_target(spec: str) -> Target:
    """Turn a target name from the command line into a :class:`Target`; UsageError if unknown,
    or if importing or making it raised anything, ``SystemExit`` included (a plugin that exits
    while it loads must not end the run with its own exit code)."""
    try:
        return _resolve(spec)
    except (UsageError, *INTERRUPTS):
        raise
    except BaseException as exc:
        raise UsageError(f"target {spec!r} could not be loaded ({type(exc).__name__}: {exc})") from None


def check_target_name(spec: str) -> None:
    """UsageError for a target name that cannot resolve, found without importing torch, JAX or any
    framework: an unknown name or mutant (with the closest name), a ``module:callable`` whose module
    is nowhere on the import path, or ``NAME@PYTHON`` without its interpreter. A command checks its
    targets so before the heavy imports, so that a typo is refused in a moment, not in seconds."""
    from .foreign import FOREIGN_BUILTINS, foreign_spec
    from .mutant_names import check_mutant_name

    if "@" in spec:
        foreign_spec(spec)
        return
    if spec.startswith("mutant:"):
        check_mutant_name(spec.removeprefix("mutant:"))
        return
    plugins = [ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)]
    if spec in BUILTIN_NAMES or spec in TORCH_MACHINERY or spec in FOREIGN_BUILTINS or spec in plugins:
        return
    module, _, attribute = spec.partition(":")
    if module and attribute:
        check_module_found(spec, "target")
        return
    raise unknown_name("target", spec, [*BUILTIN_NAMES, *TORCH_MACHINERY, *FOREIGN_BUILTINS, *plugins],
                       "'gradcheck-rnn targets' lists them")



def _resolve(spec: str) -> Target:
    check_target_name(spec)
    if spec in BUILTIN_NAMES or spec in TORCH_MACHINERY:
        return as_target(_builtin_factories()[spec](), spec)
    from .foreign import FOREIGN_BUILTINS, foreign_target, local_builtin

    if "@" in spec:  # TARGET@PYTHON: run in another interpreter (docs/foreign-targets.md)
        return as_target(foreign_target(spec), spec)
    if spec in FOREIGN_BUILTINS:
        return as_target(local_builtin(spec), spec)
    if spec.startswith("mutant:"):
        from .kernel_bugs import mutant_target

        return mutant_target(spec.removeprefix("mutant:"))
    plugins = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    if spec in plugins:
        return as_target(plugins[spec].load(), spec)
    return as_target(import_object(spec, "target"), spec)  # package.module:callable (check_target_name)


def describe_targets() -> list[tuple[str, bool, str]]:
    """(name, available, note) for every target this installation knows, mutants included."""
    from ..kernels.fused_gpu import unavailable_reason
    from .torch_scan import scan_unavailable

    cuda = _cuda_available()
    gpu_reason = unavailable_reason()
    gpu_note = gpu_reason or ("Triton on CUDA" if cuda else "Triton interpreter on CPU (TRITON_INTERPRET=1)")
    rows = [("fused-cpu", True, "built in: the project's fused CPU kernel"),
            ("torch-native", True, "built in: torch.nn on CPU"),
            ("torch-native-cuda", cuda, "built in: torch.nn on cuDNN" if cuda else "no CUDA device on this machine"),
            ("fused-gpu", gpu_reason is None, gpu_note),
            ("torch-scan", scan_unavailable() is None, scan_unavailable() or "built in: each family's step through torch's scan op (name it with -t)"),
            ("torch-compiled", True, "built in: each family's step through torch.compile, Inductor (name it with -t)")]
    from .foreign import foreign_rows

    rows.extend(foreign_rows(cuda))
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        rows.append((ep.name, True, f"entry point {ep.value}"))
    from .kernel_bugs import BLIND_SPOTS, GPU_MUTANTS, MUTANTS, family_mutants

    rows.extend((f"mutant:{name}", True, cls.__doc__.strip().splitlines()[0])
                for name, cls in {**MUTANTS, **BLIND_SPOTS}.items())
    rows.extend((f"mutant:{name}", True, cls.__doc__.strip().splitlines()[0])
                for name, (_, cls) in family_mutants("fused-cpu").items())
    rows.extend((f"mutant:{name}", gpu_reason is None, cls.__doc__.strip().splitlines()[0])
                for name, cls in GPU_MUTANTS.items())
    rows.extend((f"mutant:{name}", gpu_reason is None, cls.__doc__.strip().splitlines()[0])
                for name, (_, cls) in family_mutants("fused-gpu").items())
    return rows
