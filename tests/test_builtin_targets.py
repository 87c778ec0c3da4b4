"""Every built-in target, judged in this process on one tiny case (issue 25).

The slow tests run the foreign built-ins through another interpreter, so a fault of the
in-process path (``keras`` once raised ``AttributeError`` from ``supports_case`` on every case)
went unseen by the default suite. Here each built-in resolves by name and is judged as
``gr.check`` judges it: the correct targets must pass, every mutant must be judged (pass or fail,
never an error), and a target whose framework does not import here, or which needs CUDA, is skipped
with its own reason. fused-gpu and the GPU mutants run under Triton's interpreter, as in
tests/test_fused_gpu.py.
"""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest
import torch

from gradcheck_rnn import Case
from gradcheck_rnn.judging.context import CaseContext
from gradcheck_rnn.errors import UsageError
from gradcheck_rnn.judging.judge import judge, judge_one
from gradcheck_rnn.targets import builtin_names, resolve_target
from gradcheck_rnn.targets.foreign import _FRAMEWORK, FOREIGN_BUILTINS, LocalForeignTarget
from gradcheck_rnn.targets.kernel_bugs import BLIND_SPOTS, GPU_MUTANTS, MUTANTS, PRODUCT_MUTANTS

# float32 (the JAX targets compute float64 only under x64), both directions, one short sequence
CASE_ID = "lstm-L1-bi-I2-H3-T3-B2-len3.1-f32-s5"
# mambapy judges the s6 family only (the case of tests/test_flashrnn_mambapy.py: one JAX program)
S6_CASE_ID = "s6-L1-uni-I2-H3-N2-R1-T4-B3-len4.0.2-f32-s5"
S6_TARGETS = ("mambapy",)
# The fla and mlstm_kernels targets judge the matrix-memory families only (tests/test_fla_mlstm.py's cases);
# mlstm-parallel takes no initial state, mlstm-triton needs whole blocks of 16 steps.
MATRIX_CASE_IDS = {"fla-recurrent": "gla-L1-uni-I2-H4-NH2-K2-R1-T5-B3-len5.0.3-f32-s3",
                   "fla-chunk": "gla-L1-uni-I2-H4-NH2-K2-R1-T5-B3-len5.0.3-f32-s3",
                   "fla-naive": "gla-L1-uni-I2-H4-NH2-K2-R1-T5-B3-len5.0.3-f32-s3",
                   "mlstm-chunkwise": "mlstm-L1-uni-I2-H4-NH2-K2-T6-B2-len6.3-f32-s3",
                   "mlstm-parallel": "mlstm-L1-uni-I2-H4-NH2-K2-T6-B2-len6.3-f32-s3-z",
                   "mlstm-triton": "mlstm-L1-uni-I2-H4-NH2-K2-T16-B2-len16.16-f32-s3"}
# mlstm-custbw, judged under its own convention (-headnorm), returns 0 for m_initial's gradient: its reference
# row fails on every case with an initial state (docs/mlstm_kernels-2.0.6/custbw_initial_state_gradients.py),
# its determinism row passes.
FAILS_BY_FINDING = {"mlstm-custbw": "mlstm-L1-uni-I2-H4-NH2-K2-T6-B2-len6.3-f32-s3"}
CUDA_ONLY = ("torch-native-cuda", "flashrnn-triton", "flashrnn-cuda", "fla-chunk", "mlstm-triton")  # see their files
MUTANT_NAMES = [f"mutant:{name}" for name in (*MUTANTS, *BLIND_SPOTS, *PRODUCT_MUTANTS, *GPU_MUTANTS)]
TRITON = importlib.util.find_spec("triton") is not None


@pytest.fixture(scope="module")
def context() -> CaseContext:
    """One case context for every target: the references are computed once."""
    return CaseContext(Case.from_id(CASE_ID))


@pytest.fixture(scope="module")
def s6_context() -> CaseContext:
    return CaseContext(Case.from_id(S6_CASE_ID))


@pytest.fixture(autouse=True)
def interpreter(monkeypatch):
    """Triton's CPU interpreter for fused-gpu and the GPU mutants (no other test here imports Triton)."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.delenv("GRADCHECK_RNN_TF32", raising=False)


def why_not_here(name: str) -> str | None:
    """Why this machine cannot run the built-in ``name`` in this process, or None when it can."""
    framework = _FRAMEWORK.get(name)
    if framework is not None and importlib.util.find_spec(framework) is None:
        return f"{framework} is not installed in this interpreter"
    if name in CUDA_ONLY and not torch.cuda.is_available():
        return "no CUDA device"
    if name == "fla-recurrent" and "triton" in sys.modules:  # Triton's choice of interpreter is made at import
        from gradcheck_rnn.targets.foreign import triton_cpu

        if triton_cpu.imported_for_a_gpu("fla") is not None:
            return "Triton was imported in this process without TRITON_INTERPRET=1 (fla-recurrent declines)"
    if (name == "fused-gpu" or name.removeprefix("mutant:") in GPU_MUTANTS) and not TRITON:
        return "triton is not installed"
    return None


def judged(context: CaseContext, name: str) -> list:
    """The rows of every check that touches the target's own paths (supports_case, run, the outputs)."""
    reason = why_not_here(name)
    if name in _FRAMEWORK and importlib.util.find_spec(_FRAMEWORK[name]) is None:  # named where it cannot load: exit 2
        with pytest.raises(UsageError, match=f"importing {_FRAMEWORK[name]} failed here"):
            resolve_target(name)
        pytest.skip(f"{name}: {reason} (naming it is a usage error)")
    if reason is not None:
        row = judge_one(context, resolve_target(name))
        assert row.status == "skip" and row.message, (name, row.status, row.message)
        pytest.skip(f"{name}: {reason} (the target skips with: {row.message})")
    return list(judge(context, [resolve_target(name)], checks=("reference", "determinism")))


@pytest.mark.parametrize("name", [*builtin_names(), *FOREIGN_BUILTINS])
def test_each_builtin_target_passes_a_tiny_case_in_process(context, s6_context, name):
    case_id = MATRIX_CASE_IDS.get(name) or FAILS_BY_FINDING.get(name)
    if case_id is not None:
        context = CaseContext(Case.from_id(case_id))
    rows = judged(s6_context if name in S6_TARGETS else context, name)
    expected = ["fail", "pass"] if name in FAILS_BY_FINDING else ["pass", "pass"]
    assert [r.status for r in rows] == expected, [(r.check, r.status, r.message) for r in rows]


@pytest.mark.parametrize("name", MUTANT_NAMES)
def test_each_mutant_is_judged_in_process(context, name):
    rows = judged(context, name)
    assert {r.status for r in rows} <= {"pass", "fail", "nondeterministic"}, \
        [(r.check, r.status, r.message) for r in rows]


class _BareTarget:
    """A file-loaded target that has only what the protocol requires: ``name`` and ``run``."""

    name = "bare"

    def run(self, case: Case) -> dict:
        out = resolve_target("fused-cpu").run(case)
        return {"y": out.y, "hy": out.hy, "cy": out.cy, "grads": out.grads}


class _DecliningTarget(_BareTarget):
    """One with both optional methods: each answer reaches the engine."""

    def supports(self, config) -> bool | str:
        return True

    def supports_case(self, case: Case) -> bool | str:
        return "declined by supports_case" if (np.asarray(case.seq_lengths) < case.config.max_len).any() else True


def test_an_in_process_target_is_asked_only_the_optional_methods_it_has(context):
    """The root cause of keras's error rows: the in-process wrapper claimed ``supports_case`` for
    every target and called the target's, which the protocol lets a target leave out."""
    bare = LocalForeignTarget(_BareTarget())
    assert not hasattr(bare, "supports") and not hasattr(bare, "supports_case")
    assert judge_one(context, bare).status == "pass"
    declining = judge_one(context, LocalForeignTarget(_DecliningTarget()))
    assert (declining.status, declining.message) == ("skip", "declined by supports_case")
