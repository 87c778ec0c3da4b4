"""Test-wide settings: one torch thread (see gradcheck_rnn.cli.limit_torch_threads) and no
persistent JAX cache, so tests never write outside their temporary folders."""

import os

os.environ["GRADCHECK_RNN_JAX_CACHE"] = ""

from gradcheck_rnn.cli import limit_torch_threads  # noqa: E402

limit_torch_threads()
