"""Fixtures for the foreign-target tests: an MXNet 1.9.1 interpreter made by the test session.

MXNet 1.9.1 needs numpy < 1.24 and cannot live in this venv, so the session makes its own venv
with ``pip install mxnet==1.9.1 "numpy<1.24"`` (under ~/.cache/gradcheck-rnn/venvs/mxnet191, or
``$GRADCHECK_RNN_MXNET_VENV``), reuses it when it is complete (a marker written last), and skips
the MXNet tests with the reason when the package registry cannot provide it. CI then runs the
out-of-process path against the real framework, never a mock. Imported by the test modules that
need it (not from conftest.py, so other tests never pay for it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
MXNET_VENV = Path(os.environ.get("GRADCHECK_RNN_MXNET_VENV", "~/.cache/gradcheck-rnn/venvs/mxnet191")).expanduser()
MXNET_REQUIREMENTS = ("mxnet==1.9.1", "numpy<1.24")
_MARKER = ".gradcheck-rnn-complete"


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip() and "is ignored" not in line]
    return lines[-1].strip() if lines else "no output"


def ensure_mxnet_venv(venv: Path = MXNET_VENV) -> Path | str:
    """The venv's python when it is (or could be made) complete, else the reason why not."""
    python = venv / "bin" / "python"
    if (venv / _MARKER).is_file() and python.is_file():
        return python
    shutil.rmtree(venv, ignore_errors=True)  # half made by an interrupted session
    venv.parent.mkdir(parents=True, exist_ok=True)
    made = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True)
    if made.returncode != 0:
        return f"could not create a venv at {venv} ({_last_line(made.stderr)})"
    try:
        pip = subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                              *MXNET_REQUIREMENTS], capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        return f"pip install {' '.join(MXNET_REQUIREMENTS)} ran past 15 minutes"
    if pip.returncode != 0:
        return f"pip cannot provide {' '.join(MXNET_REQUIREMENTS)} here ({_last_line(pip.stderr)})"
    probe = subprocess.run([str(python), "-c", "import mxnet; print(mxnet.__version__)"], capture_output=True, text=True)
    if probe.returncode != 0 or probe.stdout.strip() != "1.9.1":
        return f"mxnet 1.9.1 installed at {venv} but does not import ({_last_line(probe.stderr)})"
    (venv / _MARKER).write_text("mxnet 1.9.1\n")
    return python


@pytest.fixture(scope="session")
def mxnet_python() -> Path:
    """Path of an interpreter where ``import mxnet`` gives MXNet 1.9.1 (made once per machine)."""
    python = ensure_mxnet_venv()
    if isinstance(python, str):
        pytest.skip(python)
    return python


@pytest.fixture
def foreign_path(monkeypatch):
    """The foreign interpreter imports test targets (tests/foreign_targets.py) from PYTHONPATH."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))
    monkeypatch.syspath_prepend(str(TESTS))
