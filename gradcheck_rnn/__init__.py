"""gradcheck-rnn: prove or disprove that the gradients of fused RNN kernels are right.

Public API::

    from gradcheck_rnn import RNNConfig, Case, Outputs, check_case, sweep
"""

__version__ = "0.1.0"

from .case import Case, Outputs, RNNConfig, make_case
from .errors import UsageError

__all__ = ["Case", "Outputs", "RNNConfig", "UsageError", "make_case"]
