"""The foreign built-in target files, loaded by path as modules of their own, for the planted-slip
targets (tests/foreign_jax_targets.py, tests/foreign_torch_targets.py). Standard library only: the
slip modules are imported in foreign interpreters too."""

import importlib.util
from pathlib import Path

FOREIGN = Path(__file__).resolve().parent.parent / "gradcheck_rnn" / "targets" / "foreign"


def load_target_file(name):
    """A fresh copy of ``gradcheck_rnn/targets/foreign/<name>.py``, free to be broken by a test."""
    spec = importlib.util.spec_from_file_location(f"slipped_{name}", FOREIGN / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
