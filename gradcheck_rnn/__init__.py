"""gradcheck-rnn: prove or disprove that the gradients of fused RNN kernels are right.

Public API (docs/contracts.md, "Public API")::

    import gradcheck_rnn as gr

    gr.check(target, case, checks=None, rtol=None, atol=None, config="ci") -> list[CaseResult]
    gr.sweep(targets, cases=None, seed=None, config="ci", modes=None, layers=None,
             bidirectional=None, dtypes=None, checks=None, workers=1) -> Run
    gr.RNNConfig, gr.Case, gr.Outputs, gr.CaseResult, gr.Run, gradcheck_rnn.strategies.cases

Everything else is internal. torch and jax are imported only when a reference or a kernel runs.
"""

from .version import __version__  # noqa: F401  (gradcheck_rnn.__version__)
from . import _compat  # noqa: F401  (the old names of moved modules keep importing)

from .api import check, sweep
from .model.case import Case, Outputs, RNNConfig, make_case
from .errors import UsageError
from .rows.result import CaseResult
from .rows.store import Run

__all__ = ["Case", "CaseResult", "Outputs", "RNNConfig", "Run", "UsageError", "check", "make_case", "sweep"]
