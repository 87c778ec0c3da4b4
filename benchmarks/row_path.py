"""The path a sweep's rows take from the command to results.json: which modules, how often back.

    python benchmarks/row_path.py                        # this checkout
    git worktree add --detach /tmp/gr-before <commit>    # an earlier commit, outside this checkout
    python benchmarks/row_path.py --before /tmp/gr-before  # both, side by side

Each column is one fresh process that imports the package from one checkout (``PYTHONPATH``) and
runs ``gradcheck-rnn sweep -n CASES --in-process`` (the ci profile, fused-cpu) through the command
line's own entry point under a profiler hook. A *hand-off* is a call into a function of the
package that receives rows (a ``CaseResult`` or a stored row dict, a list or tuple of them, a run's
store (the row log, ``KeptRows``), its stored rows, a tally (``Tally``, a stored run's
``StoredTally``), a results document, bare or ``Published``, or the stored run the writers are
handed, ``StoredRun``) or a return from one that gives
rows back. The hand-offs, in the order they happen, name a sequence of
modules (repeats in a row collapsed). Reported:

- ``modules``: how many different modules the rows pass through;
- ``hand-offs``: how many different hand-offs from one module to another the sequence holds;
- ``returns``: how many of them go back to a module the rows reached earlier;
- the sequence itself with ``--show``.

A row is the same object whichever executor judges it, and the in-process executor keeps every
hand-off in one process where a profiler sees it; the default executor adds the pipe between a
worker and the supervisor (rows cross it pickled), which this count does not see.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent

# Runs in the measured process: the hook, then the command.
_PROBE = r"""
import json, sys
from dataclasses import is_dataclass

PACKAGE = "gradcheck_rnn"
sequence = []


ROW_HOLDERS = {"CaseResult", "StoredRows", "RowLog", "KeptRows", "Tally", "StoredTally", "Published", "StoredRun"}


def row_like(value, depth=0):
    if type(value).__name__ in ROW_HOLDERS:
        return True
    if isinstance(value, dict):
        return ("case_id" in value and "status" in value) or (depth == 0 and row_like(value.get("results"), 1))
    if depth == 0 and isinstance(value, (list, tuple)) and value:
        return any(row_like(item, 1) for item in value[:4])
    return False


def note(frame):
    module = frame.f_globals.get("__name__", "")
    if module.startswith(PACKAGE) and (not sequence or sequence[-1] != module):
        sequence.append(module)


def hook(frame, event, arg):
    if not frame.f_globals.get("__name__", "").startswith(PACKAGE):
        return
    if event == "call":
        code = frame.f_code
        names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
        if any(row_like(frame.f_locals.get(name)) for name in names):
            note(frame)
    elif event == "return" and row_like(arg):
        note(frame)


from gradcheck_rnn.cli import main

sys.setprofile(hook)
try:
    main(sys.argv[2:], standalone_mode=False)
except SystemExit:
    pass
finally:
    sys.setprofile(None)
with open(sys.argv[1], "w") as out:
    json.dump(sequence, out)
"""


def measure(checkout: Path, cases: int) -> list[str]:
    """The collapsed module sequence of one sweep run from ``checkout``."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "sequence.json"
        env = {**os.environ, "PYTHONPATH": str(checkout), "GRADCHECK_RNN_JAX_CACHE": str(Path(scratch) / "jax")}
        command = [sys.executable, "-c", _PROBE, str(out), "sweep", "-n", str(cases), "--in-process",
                   "-t", "fused-cpu", "--report-dir", str(Path(scratch) / "runs")]
        subprocess.run(command, env=env, cwd=scratch, check=False, stdout=subprocess.DEVNULL)
        return json.loads(out.read_text())


def summary(sequence: list[str]) -> dict[str, int]:
    """Modules, hand-offs and returns of a collapsed sequence, each hand-off counted once however
    many rows take it (a writer that takes rows one by one would otherwise count per row)."""
    first_seen = {module: i for i, module in reversed(list(enumerate(sequence)))}
    hand_offs = set(zip(sequence, sequence[1:]))
    returns = {(a, b) for a, b in hand_offs if first_seen[b] < first_seen[a]}
    return {"modules": len(first_seen), "hand-offs": len(hand_offs), "returns": len(returns)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, help="an earlier checkout to measure beside this one")
    parser.add_argument("--cases", type=int, default=2)
    parser.add_argument("--show", action="store_true", help="print each module sequence")
    args = parser.parse_args()
    checkouts = {"before": args.before, "this": HERE} if args.before else {"this": HERE}
    results = {name: measure(path, args.cases) for name, path in checkouts.items()}
    print(f"{'':12}" + "".join(f"{name:>10}" for name in results))
    for key in ("modules", "hand-offs", "returns"):
        print(f"{key:12}" + "".join(f"{summary(seq)[key]:>10}" for seq in results.values()))
    if args.show:
        for name, sequence in results.items():
            hand_offs = dict.fromkeys(zip(sequence, sequence[1:]))
            print(f"\n{name}:\n  " + "\n  ".join(f"{a.removeprefix('gradcheck_rnn.')} -> {b.removeprefix('gradcheck_rnn.')}"
                                                 for a, b in hand_offs))


if __name__ == "__main__":
    main()
