"""Running the standalone scripts of docs/ (the MXNet, flax and Keras findings, the example family)
from the tests without leaving bytecode beside them.

A script that imports a sibling (docs/mxnet-1.9.1/common.py, docs/examples/my_family.py) would
otherwise write ``__pycache__/`` into docs/, where git ignores it but the site build copies it into
``site/``. mkdocs.yml excludes ``__pycache__/`` as well; this keeps the checkout clean.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# Runs each script given on the command line, with its own folder first on the import path (so it
# imports its siblings, as when a reader runs it from there).
_RUNNER = ("import runpy, sys, os\n"
           "for script in sys.argv[1:]:\n"
           "    sys.path.insert(0, os.path.dirname(script))\n"
           "    runpy.run_path(script)\n")


def run_scripts(python: str | Path, scripts: list[Path], env: dict[str, str]) -> subprocess.CompletedProcess:
    """Run ``scripts`` one after the other in one ``python`` (a foreign venv's), with only ``env``
    (and PYTHONDONTWRITEBYTECODE) in its environment; their output captured as text."""
    return subprocess.run([str(python), "-B", "-c", _RUNNER, *map(str, scripts)], capture_output=True, text=True,
                          env={**env, "PYTHONDONTWRITEBYTECODE": "1"})


@contextmanager
def no_bytecode() -> Iterator[None]:
    """Imports in this process write no ``__pycache__`` while inside (a module of docs/)."""
    before, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        yield
    finally:
        sys.dont_write_bytecode = before


def bytecode_folders(folder: Path) -> list[Path]:
    """Every ``__pycache__`` under ``folder``."""
    return sorted(Path(root) / "__pycache__" for root, dirs, _ in os.walk(folder) if "__pycache__" in dirs)
