"""One variable moves everything gradcheck-rnn and its tests cache (issue 29): $GRADCHECK_RNN_CACHE_DIR,
~/.cache/gradcheck-rnn by default — the JAX cache (its ``jax``) and the MXNet and flax/Keras venvs
the foreign-target tests build (its ``venvs``, ~300 MB for MXNet)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gradcheck_rnn import runtime

TESTS = Path(__file__).parent


@pytest.fixture
def no_cache_variables(monkeypatch, tmp_path):
    for name in (runtime.JAX_CACHE_ENV, runtime.CACHE_DIR_ENV, "GRADCHECK_RNN_MXNET_VENV",
                 "GRADCHECK_RNN_FLAX_KERAS_VENV"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path


def test_the_jax_cache_defaults_to_the_home_cache(no_cache_variables):
    runtime.use_persistent_jax_cache()
    assert os.environ[runtime.JAX_CACHE_ENV] == str(no_cache_variables / "home" / ".cache" / "gradcheck-rnn" / "jax")


def test_the_cache_dir_variable_moves_the_jax_cache(no_cache_variables, monkeypatch):
    monkeypatch.setenv(runtime.CACHE_DIR_ENV, str(no_cache_variables / "big-disk"))
    runtime.use_persistent_jax_cache()
    assert os.environ[runtime.JAX_CACHE_ENV] == str(no_cache_variables / "big-disk" / "jax")


def test_the_jax_cache_variable_still_wins(no_cache_variables, monkeypatch):
    monkeypatch.setenv(runtime.CACHE_DIR_ENV, str(no_cache_variables / "big-disk"))
    monkeypatch.setenv(runtime.JAX_CACHE_ENV, "")  # "" turns the JAX cache off, whatever the cache dir
    runtime.use_persistent_jax_cache()
    assert runtime.jax_cache_folder() is None


def _venvs(env):
    """The venv folders tests/foreign_env.py chooses in a fresh interpreter with ``env``."""
    code = "import foreign_env; print(foreign_env.MXNET_VENV); print(foreign_env.FLAX_KERAS_VENV)"
    done = subprocess.run([sys.executable, "-c", code], cwd=TESTS, env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_the_cache_dir_variable_moves_the_test_venvs(no_cache_variables):
    env = {**os.environ, runtime.CACHE_DIR_ENV: str(no_cache_variables / "big-disk")}
    assert _venvs(env) == [str(no_cache_variables / "big-disk" / "venvs" / "mxnet191"),
                           str(no_cache_variables / "big-disk" / "venvs" / "flax-keras")]
