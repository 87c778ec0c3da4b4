"""Test-wide settings: one torch thread (see gradcheck_rnn.cli.limit_torch_threads)."""

from gradcheck_rnn.cli import limit_torch_threads

limit_torch_threads()
