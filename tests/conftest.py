"""Test-wide settings: one torch thread (see gradcheck_rnn.runtime.limit_torch_threads), one
worker process per judging command unless a test asks for more, and a JAX cache of this test
session's own, removed at its end, so tests never write outside their temporary folders.

The cache matters since judging happens in worker processes: each new worker loads the JAX
reference's programs that an earlier one compiled, instead of compiling them again.
"""

import atexit
import os
import shutil
import tempfile

_JAX_CACHE = tempfile.mkdtemp(prefix="gradcheck-rnn-test-jax-")
atexit.register(shutil.rmtree, _JAX_CACHE, ignore_errors=True)
os.environ["GRADCHECK_RNN_JAX_CACHE"] = _JAX_CACHE
os.environ["GRADCHECK_RNN_WORKERS"] = "1"

from gradcheck_rnn.runtime import limit_torch_threads  # noqa: E402

limit_torch_threads()
