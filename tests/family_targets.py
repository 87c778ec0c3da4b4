"""The user family of docs/examples/my_family.py (minGRU), as the tests load it: by name
(``--family family_targets:MINGRU``) and registered directly (tests/test_families.py), with the
kernel's planted slip."""

import sys
from pathlib import Path

from docs_scripts import no_bytecode

sys.path.insert(0, str(Path(__file__).parent.parent / "docs" / "examples"))

with no_bytecode():  # no __pycache__ in docs/examples
    from my_family import MINGRU, my_mingru as mingru_target  # noqa: E402

from gradcheck_rnn import Outputs  # noqa: E402

__all__ = ["MINGRU", "NOT_A_FAMILY", "mingru_slipped", "mingru_target"]


def mingru_slipped(case) -> Outputs:
    """The planted slip: padded steps update the state."""
    return mingru_target(case, masked=False)


NOT_A_FAMILY = object()
TOKEN_TAKEN = type(MINGRU)(token="gru", gates=("h",))  # a second family named like a built-in
