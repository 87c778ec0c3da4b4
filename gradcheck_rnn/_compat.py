"""The old names of moved modules, in this one place, so that imports written for them keep working.

An import of an old name (``import gradcheck_rnn.compare``, ``from gradcheck_rnn.judging.tolerances
import Tolerances``) gets the module that holds those names now: :data:`MOVED` maps each old dotted
name to the new one, and a finder first on ``sys.meta_path`` (before any other finder could find a
stale copy at the old place, an editable install's say) answers for the old names only, with the
new module object itself (one module under two names: identity and ``isinstance`` hold).
A module that moves adds one line here; no file is left behind at the old place.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import Sequence

MOVED: dict[str, str] = {
    "gradcheck_rnn.packed": "gradcheck_rnn.model.packed",
    "gradcheck_rnn.result": "gradcheck_rnn.rows.result",
    "gradcheck_rnn.compare": "gradcheck_rnn.model.compare",
    "gradcheck_rnn.statuses": "gradcheck_rnn.model.statuses",
    "gradcheck_rnn.judge": "gradcheck_rnn.judging.judge",
    "gradcheck_rnn.cli.advice": "gradcheck_rnn.run.advice",
    "gradcheck_rnn.judging.tolerances": "gradcheck_rnn.model.tolerances",
    "gradcheck_rnn.rows.numbers": "gradcheck_rnn.model.numbers",
    "gradcheck_rnn.rows.statuses": "gradcheck_rnn.model.statuses",
    "gradcheck_rnn.judging.compare": "gradcheck_rnn.model.compare",
    "gradcheck_rnn.references.jax_ref": "gradcheck_rnn.references.jax_cudnn",
    "gradcheck_rnn.targets.mutants": "gradcheck_rnn.targets.kernel_bugs",
    "gradcheck_rnn.workflows.mutants": "gradcheck_rnn.workflows.detection",
    "gradcheck_rnn.rows.log": "gradcheck_rnn.rows.store",
    "gradcheck_rnn.rows.tally": "gradcheck_rnn.rows.store",
    "gradcheck_rnn.rows.verdict": "gradcheck_rnn.rows.store",
}


class _OldNames(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old module name of :data:`MOVED` and loads it as the module now holding it."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        return importlib.util.spec_from_loader(fullname, self) if fullname in MOVED else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module was imported under its own name."""


if not any(isinstance(finder, _OldNames) for finder in sys.meta_path):
    sys.meta_path.insert(0, _OldNames())
