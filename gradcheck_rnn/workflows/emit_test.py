"""Emitted regression tests: a failing case, kept in the user's own test suite as a pytest file.

``gradcheck-rnn repro CASE_ID --target T --emit-test FILE`` writes a standalone pytest module
that rebuilds the case from its id (bit for bit, so no data is stored) and judges the target
against the float64 references — and with the reference-free check that failed, when that is
not ``reference`` — under the tolerances in force when it was written: those of the profile for
the case's dtype with any ``--rtol``/``--atol`` override folded in, written out as numbers so a
later change of the defaults cannot loosen the test silently. The test fails while the bug is
there and passes once it is fixed; a target that does not support the case skips, never passes.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterable

from ..version import __version__
from ..model.case import Case
from ..errors import UsageError
from ..model.tolerances import KINDS, Tolerances

# One tensor of each kind, to read the tolerance in force for that kind (overrides included).
_KIND_EXAMPLES = {"output": "y", "input_grad": "x", "weight_grad": "l0.fwd.w_ih"}

_TEMPLATE = '''"""Regression test emitted by gradcheck-rnn {version}: {case_id} on {target}.

Rebuilds the case bit for bit from its id and judges the target with these checks: {checks}
(``reference`` = against the float64 references), under the tolerances that were in force.
It fails while the bug is there. Reproduce by hand (one command per check):
{repro_lines}
"""

import pytest

import gradcheck_rnn as gr

CASE_ID = {case_id!r}
TARGET = {target!r}
# rtol / atol per tensor kind for {dtype}, as in force when this test was emitted.
RTOL = {{
{rtol}
}}
ATOL = {{
{atol}
}}


@pytest.mark.parametrize("check", {checks_tuple!r})
def test_{name}(check):
    (result,) = gr.check(TARGET, CASE_ID, checks=[check], rtol=RTOL, atol=ATOL)
    if result.status == "skip":
        pytest.skip(result.message)
    assert result.status == "pass", f"{{check}}: {{result.status}}: {{result.message}}\\nreproduce: {{REPRO[check]}}"


REPRO = {{
{repro_table}
}}
'''


def emit_test(case: Case, target: str, checks: Iterable[str], tolerances: Tolerances, repro_options: str = "") -> str:
    """The source of a standalone pytest module judging ``target`` on ``case``, using only the
    public API (``gradcheck_rnn.check``).

    ``checks`` are the checks that judge it; ``reference`` is always among them (first), the
    comparison a regression test is about. ``repro_options`` (e.g. ``--config nightly --rtol
    0.001``) end the repro command each failure message quotes.
    """
    from ..rows.result import CaseResult
    from ..targets import resolve_target

    resolved = resolve_target(target)  # an unknown target is a usage error now, not a broken test later
    ordered = tuple(dict.fromkeys(["reference", *checks]))
    repros = {check: CaseResult(case.id, target, "fail", case.config.mode, case.config.dtype, case.wants_group,
                                check=check, repro_options=repro_options, repro_env=resolved.repro_env).repro
              for check in ordered}
    dtype = case.config.dtype
    frozen = {kind: tolerances.for_tensor(dtype, _KIND_EXAMPLES[kind]) for kind in KINDS}
    return _TEMPLATE.format(version=__version__, case_id=case.id, target=target, dtype=dtype,
                            repro_lines="\n".join(f"    {line}" for line in repros.values()),
                            repro_table="\n".join(f"    {c!r}: {line!r}," for c, line in repros.items()),
                            rtol="\n".join(f"    {kind!r}: {tol.rtol!r}," for kind, tol in frozen.items()),
                            atol="\n".join(f"    {kind!r}: {tol.atol!r}," for kind, tol in frozen.items()),
                            checks=", ".join(ordered), checks_tuple=ordered, name=re.sub(r"\W", "_", case.id))


def write_test(path: str | os.PathLike[str], source: str) -> Path:
    """Write an emitted test; a folder that does not exist or cannot be written is a UsageError."""
    path = Path(path)
    if path.suffix != ".py":
        raise UsageError(f"--emit-test {str(path)!r} is not allowed; give a .py file (pytest collects test_*.py)")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir() or not os.access(folder, os.W_OK):
        raise UsageError(f"--emit-test {str(path)!r}: folder {str(folder)!r} does not exist or is not writable")
    if path.is_dir():
        raise UsageError(f"--emit-test {str(path)!r} is a folder; give a .py file")
    path.write_text(source)
    return path


__all__ = ["emit_test", "write_test"]
