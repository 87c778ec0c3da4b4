"""Targets that report the process judging them (tests/test_streaming.py): they raise, and the
error row's message carries what they saw."""

import os
import sys


def reports_its_process(case):
    import torch

    seen = {"pid": os.getpid(), "ppid": os.getppid(), "torch_threads": torch.get_num_threads(),
            "omp": os.environ.get("OMP_NUM_THREADS"), "marker": os.environ.get("GRADCHECK_RNN_PROBE"),
            "main": getattr(sys.modules.get("__main__"), "__file__", None)}
    raise RuntimeError("probe " + " ".join(f"{k}={v}" for k, v in seen.items()))
