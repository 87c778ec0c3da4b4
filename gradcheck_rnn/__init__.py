"""gradcheck-rnn: prove or disprove that the gradients of fused RNN kernels are right.

Public API::

    from gradcheck_rnn import RNNConfig, Case, Outputs, make_case, check_case, run_sweep

torch and jax are imported only when a reference or a kernel runs.
"""

__version__ = "0.1.0"

from .case import Case, Outputs, RNNConfig, make_case
from .errors import UsageError
from .runner import CaseResult, check_case, run_sweep

__all__ = ["Case", "CaseResult", "Outputs", "RNNConfig", "UsageError", "check_case", "make_case", "run_sweep"]
