"""Fixtures for the foreign-target tests: MXNet 1.9.1 and flax/Keras interpreters made by the tests.

MXNet 1.9.1 needs numpy < 1.24 and cannot live in this venv, so the session makes its own venv
with ``pip install mxnet==1.9.1 "numpy<1.24"`` (about 300 MB, under ``$GRADCHECK_RNN_CACHE_DIR/venvs/mxnet191``,
~/.cache/gradcheck-rnn by default, or ``$GRADCHECK_RNN_MXNET_VENV``), reuses it when it is complete (a marker written last), and skips
the MXNet tests with the reason when the package registry cannot provide it. The flax and
Keras targets get a venv the same way (``$GRADCHECK_RNN_CACHE_DIR/venvs/flax-keras``: this venv's jax
version, flax, keras), so that the main venv never changes. CI then runs the
out-of-process path against the real framework, never a mock. Imported by the test modules that
need it (not from conftest.py, so other tests never pay for it).

Skipped or failed: a test is skipped only when the packages are truly unavailable here, that is
when pip says the registry has no such distribution for this Python or cannot be reached (an
offline machine); every other failure to make the venv (creating it, pip stopping mid-install on
a temporary file, a 15-minute timeout, an install that does not import) fails the tests that need
it, since a broken set-up reported as a skip hides that the foreign targets went unchecked.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from gradcheck_rnn.runtime import cache_dir

TESTS = Path(__file__).parent
MXNET_VENV = Path(os.environ.get("GRADCHECK_RNN_MXNET_VENV") or cache_dir() / "venvs" / "mxnet191").expanduser()
MXNET_REQUIREMENTS = ("mxnet==1.9.1", "numpy<1.24")
FLAX_KERAS_VENV = Path(os.environ.get("GRADCHECK_RNN_FLAX_KERAS_VENV") or cache_dir() / "venvs" / "flax-keras").expanduser()
_MARKER = ".gradcheck-rnn-complete"
# pip's words when the packages are truly unavailable here: no distribution for this Python, or no
# registry to ask (offline, no name resolution, a proxy refusing). Anything else is a set-up failure.
UNAVAILABLE = ("No matching distribution found", "Could not find a version that satisfies",
               "Failed to establish a new connection", "Temporary failure in name resolution",
               "Name or service not known", "Network is unreachable", "ProxyError")


def installed(module: str, extra: str) -> None:
    """Skip unless ``module`` is installed; never import it here: on CPU the targets import these
    Triton libraries under the interpreter themselves (an import without it builds GPU kernels)."""
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (extra: {extra})")


@dataclass(frozen=True)
class NoVenv:
    """Why a foreign venv could not be made: ``unavailable`` (skip) when the registry cannot provide
    the packages here, else a set-up failure (the tests that need it fail)."""

    reason: str
    unavailable: bool = False

    def end_test(self) -> None:
        """Skip the test that needed the venv, or fail it (see the module docstring)."""
        (pytest.skip if self.unavailable else pytest.fail)(self.reason)


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip() and "is ignored" not in line]
    return lines[-1].strip() if lines else "no output"


def ensure_venv(venv: Path, requirements: tuple[str, ...], probe: str, expected: str) -> Path | NoVenv:
    """The venv's python when it is (or could be made) complete with ``requirements`` (``probe``
    printing ``expected`` there), else why not. A venv whose marker names other requirements, or
    none (an interrupted set-up), is made again."""
    python = venv / "bin" / "python"
    wanted = " ".join(requirements) + "\n"
    if (venv / _MARKER).is_file() and (venv / _MARKER).read_text() == wanted and python.is_file():
        return python
    shutil.rmtree(venv, ignore_errors=True)  # half made by an interrupted session
    venv.parent.mkdir(parents=True, exist_ok=True)
    made = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True)
    if made.returncode != 0:
        return NoVenv(f"could not create a venv at {venv} ({_last_line(made.stderr)})")
    try:
        pip = subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                              *requirements], capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        return NoVenv(f"pip install {' '.join(requirements)} ran past 15 minutes")
    if pip.returncode != 0:
        unavailable = any(words in pip.stderr for words in UNAVAILABLE)
        said = "cannot provide" if unavailable else "failed to install"
        return NoVenv(f"pip {said} {' '.join(requirements)} here ({_last_line(pip.stderr)})", unavailable)
    done = subprocess.run([str(python), "-c", probe], capture_output=True, text=True)
    if done.returncode != 0 or done.stdout.strip() != expected:
        return NoVenv(f"{' '.join(requirements)} installed at {venv} but does not import ({_last_line(done.stderr)})")
    (venv / _MARKER).write_text(wanted)
    return python


def ensure_mxnet_venv(venv: Path = MXNET_VENV) -> Path | NoVenv:
    return ensure_venv(venv, MXNET_REQUIREMENTS, "import mxnet; print(mxnet.__version__)", "1.9.1")


def jax_requirements() -> tuple[str, ...]:
    """flax and keras (the versions the mappings were read from) beside this venv's jax."""
    from importlib.metadata import version

    return (f"jax=={version('jax')}", "flax==0.12.8", "keras==3.15.1")


def ensure_flax_keras_venv(venv: Path = FLAX_KERAS_VENV) -> Path | NoVenv:
    probe = "import os; os.environ['KERAS_BACKEND'] = 'jax'; import flax, keras; print('ok')"
    return ensure_venv(venv, jax_requirements(), probe, "ok")


@pytest.fixture(scope="session")
def mxnet_python() -> Path:
    """Path of an interpreter where ``import mxnet`` gives MXNet 1.9.1 (made once per machine)."""
    python = ensure_mxnet_venv()
    if isinstance(python, NoVenv):
        python.end_test()
    return python


@pytest.fixture(scope="session")
def flax_keras_python() -> Path:
    """Path of an interpreter with flax and Keras 3 beside this venv's jax (made once per machine)."""
    python = ensure_flax_keras_venv()
    if isinstance(python, NoVenv):
        python.end_test()
    return python


@pytest.fixture
def foreign_path(monkeypatch):
    """The foreign interpreter imports test targets (tests/foreign_targets.py) from PYTHONPATH."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))
    monkeypatch.syspath_prepend(str(TESTS))
