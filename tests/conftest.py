"""Test-wide settings: one torch thread (see gradcheck_rnn.runtime.limit_torch_threads), no
persistent JAX cache, so tests never write outside their temporary folders, and sweeps in-process."""

import os

os.environ["GRADCHECK_RNN_JAX_CACHE"] = ""
# CLI runs judge in the test process unless a test asks for workers (tests/test_scale.py does).
os.environ["GRADCHECK_RNN_WORKERS"] = "1"

from gradcheck_rnn.runtime import limit_torch_threads  # noqa: E402

limit_torch_threads()
