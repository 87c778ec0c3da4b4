"""Two default sweeps back to back: the worker count each chose, and what each left behind.

    .venv/bin/python benchmarks/back_to_back.py                 # 2 × `gradcheck-rnn sweep -n 200 -t fused-cpu`
    .venv/bin/python benchmarks/back_to_back.py --cases 40

Issue 42: a finished run's fork server lived on, importing torch and jax, and the next run counted
its core as busy (1 worker on an idle 2-core machine). Each sweep here starts in a session of its
own; a second after it exits, the processes still in that session (zombies too) are listed: there
should be none, and on an idle machine the second header should say "2 of 2".
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMAND = [sys.executable, "-c", "from gradcheck_rnn.cli import main; main()", "sweep", "-t", "fused-cpu"]


def session_processes(session: int) -> list[str]:
    """``pid state`` of every process of ``session`` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split() if entry.name.isdigit() else None
        except OSError:  # ended meanwhile
            continue
        if fields and int(fields[3]) == session:
            found.append(f"{entry.name} {fields[0]}")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=200)
    args = parser.parse_args()
    reports = tempfile.mkdtemp(prefix="gradcheck-rnn-back-to-back-")
    for run in (1, 2):
        load = Path("/proc/loadavg").read_text().split()[0]
        start = time.monotonic()
        process = subprocess.Popen([*COMMAND, "-n", str(args.cases), "--report-dir", reports], text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        output, _ = process.communicate()
        wall = time.monotonic() - start
        time.sleep(1.0)
        header = " ".join(line.strip() for line in output.splitlines()[:3] if line.strip())
        print(f"run {run} (load {load}): exit {process.returncode}, {wall:.1f} s; {header}")
        print(f"  its processes 1 s after it exited: {session_processes(process.pid) or 'none'}", flush=True)


if __name__ == "__main__":
    main()
