"""The flax and keras targets, run for real in the venv tests/foreign_env.py makes (this venv's
jax, flax 0.12.8, Keras 3.15.1), through the foreign-interpreter client.

Marked slow: each client imports JAX and compiles every case (about 60 s of CPU on the shared
2-core machine, over the default suite's budget); run them with
``python -m pytest -m slow tests/test_foreign_jax.py`` (the first run makes the venv, ~1 min).

The mapping is checked both ways: the real targets pass cases of every mode (gradients of our
parameters come back through the same map), and a planted slip of the kind a misread gate order
or bias placement produces fails on the tensors it touches.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from docs_scripts import run_scripts
from gradcheck_rnn import Case
from gradcheck_rnn.targets import resolve_target

pytestmark = pytest.mark.slow

try:  # one check of one target on one case: gradcheck_rnn.judging.judge, runner.check_case before it
    from gradcheck_rnn.judging.judge import judge_one
except ImportError:
    from gradcheck_rnn.runner import check_case as judge_one

# float32, so that the clients need no x64; every mode, both directions, two layers, variable
# lengths, the frozen paths and no initial state between them.
CASES = ("gru-L2-bi-I3-H4-T5-B3-len5.2.4-f32-s8", "lstm-L2-uni-I2-H3-T4-B2-len4.1-f32-s9-wx",
         "rnn_relu-L1-bi-I2-H3-T4-B2-len4.3-f32-s10-z", "rnn_tanh-L1-uni-I2-H3-nobias-T4-B2-len2.4-f32-s11-wparams")


@pytest.fixture(scope="module")
def targets(flax_keras_python):
    """flax and keras clients started without x64, whatever this shell says, so that their float64
    decline is what the tests see."""
    resolved = {name: resolve_target(f"{name}@{flax_keras_python}") for name in ("flax", "keras")}
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("JAX_ENABLE_X64", raising=False)
        for target in resolved.values():
            target.supports(Case.from_id(CASES[0]).config)  # starts the client here
    return resolved


def failing(result) -> set[str]:
    return {t.name for t in result.tensors if not t.passed}


@pytest.mark.parametrize("name", ["flax", "keras"])
def test_every_mode_passes(targets, name):
    for case_id in CASES:
        result = judge_one(Case.from_id(case_id), targets[name])
        assert result.status == "pass", (case_id, result.message)


def test_a_planted_mapping_slip_is_caught(flax_keras_python, foreign_path):
    """Each library's target with its gate order or bias placement slipped (tests/foreign_jax_targets.py)
    fails on what the slip touches, and only there."""
    gru, lstm = Case.from_id("gru-L1-uni-I2-H3-T4-B2-len4.2-f32-s3"), Case.from_id("lstm-L1-uni-I2-H3-T4-B2-len4.2-f32-s3")
    for library, touched in [("flax", {"gru": {"y", "x", "l0.fwd.w_ih", "l0.fwd.b_ih"}, "lstm": {"y", "hy", "cy"}}),
                             ("keras", {"gru": {"y", "x", "l0.fwd.w_hh"}, "lstm": {"y", "hy", "cy"}})]:
        target = resolve_target(f"foreign_jax_targets:{library}_slips@{flax_keras_python}")
        for case in (gru, lstm):
            result = judge_one(case, target)
            assert result.status == "fail" and touched[case.config.mode] <= failing(result), (library, result.message)
        relu = judge_one(Case.from_id("rnn_relu-L1-uni-I2-H3-T4-B2-len4.2-f32-s3"), target)
        assert relu.status == "pass", (library, relu.message)  # no slip there


def test_declines_say_why(targets):
    flax, keras = targets["flax"], targets["keras"]
    empty = Case.from_id("gru-L1-uni-I2-H3-T4-B2-len4.0-f32-s3")
    assert "seq_lengths - 1" in flax.supports_case(empty)
    assert keras.supports_case(empty) is True  # Keras keeps the state over a fully masked sequence
    assert judge_one(empty, keras).status == "pass"
    projected = Case.from_id("lstm-L1-uni-I2-H3-P2-T4-B1-len4-f32-s3")
    assert "projections" in flax.supports_case(projected) and "projections" in keras.supports_case(projected)
    double = Case.from_id("gru-L1-uni-I2-H3-T4-B1-len4-f64-s3")  # the clients were started without x64
    assert flax.supports_case(double).startswith("jax_enable_x64 is off in this process")
    assert keras.supports_case(double).startswith("Keras computes tanh of float64 tensors in float32")
    relu = Case.from_id("rnn_relu-L1-uni-I2-H3-T4-B1-len4-f64-s3")
    assert keras.supports_case(relu).startswith("jax_enable_x64 is off in this process")


def test_the_standalone_scripts_show_each_library_behaviour(flax_keras_python):
    """docs/flax-0.12/zero_length_carry.py and docs/keras-3.15/float64_tanh.py, in one interpreter."""
    docs = Path(__file__).parent.parent / "docs"
    scripts = [docs / "flax-0.12" / "zero_length_carry.py", docs / "keras-3.15" / "float64_tanh.py"]
    done = run_scripts(flax_keras_python, scripts, env={"KERAS_BACKEND": "jax", "JAX_ENABLE_X64": "1"})
    verdicts = [line for line in done.stdout.splitlines() if line.startswith(("CONFIRMED", "NOT REPRODUCED"))]
    assert verdicts == ["CONFIRMED length 0 returns a carry that is not the initial one",
                        "CONFIRMED Keras computes float64 tanh in float32"], done.stdout + done.stderr
