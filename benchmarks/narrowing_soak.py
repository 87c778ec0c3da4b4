"""Soak of the narrowing (gradcheck_rnn/model/narrowing.py): random narrowings of every shipped profile,
each either refused with one sentence (nothing left to draw) or drawing only cases that have it.

    python benchmarks/narrowing_soak.py [NARROWINGS] [CASES_EACH]

Prints the narrowings tried, refused and drawn, the cases checked and the violations (must be 0).
"""

from __future__ import annotations

import sys

import numpy as np

from gradcheck_rnn.model.profiles import profile_names
from gradcheck_rnn.model.rnn_config import HEADS, LENGTH_PATTERNS
from gradcheck_rnn.errors import UsageError
from gradcheck_rnn.model.profiles import draw_case_ref, load_profile
from gradcheck_rnn.model.narrowing import Narrowing


def lengths(case_id: str) -> list[int]:
    return [int(v) for v in case_id.split("-len", 1)[1].split("-", 1)[0].split(".")]


def violations(n: Narrowing, ref) -> list[str]:
    """What of ``n`` the case ``ref`` breaks."""
    c, found = ref.config, []
    head = next((h for h in HEADS if f"-g{h}" in ref.id), "all")
    checks = {
        "projections": n.projections is None or (c.proj_size > 0) == n.projections,
        "bias": n.bias is None or c.bias == n.bias,
        "initial_state": n.initial_state is None or (not ref.id.endswith("-z")) == n.initial_state,
        "zero_length": n.zero_length is None or (0 in lengths(ref.id)) == n.zero_length,
        "heads": not n.heads or head in n.heads,
        "input_size": n.input_size is None or n.input_size[0] <= c.input_size <= n.input_size[1],
        "hidden_size": n.hidden_size is None or n.hidden_size[0] <= c.hidden_size <= n.hidden_size[1],
    }
    found += [name for name, ok in checks.items() if not ok]
    return found


def random_narrowing(rng: np.random.Generator) -> Narrowing:
    def switch():
        return [None, True, False][rng.integers(3)]

    def names(pool):
        return tuple(p for p in pool if rng.random() < 0.3) if rng.random() < 0.4 else ()

    def size():
        if rng.random() < 0.6:
            return None
        low = int(rng.integers(1, 10))
        return (low, low + int(rng.integers(0, 6)))

    return Narrowing(projections=switch(), bias=switch(), initial_state=switch(), heads=names(HEADS),
                     input_size=size(), hidden_size=size(), lengths=names(LENGTH_PATTERNS), zero_length=switch())


def main(count: int, cases: int) -> int:
    rng = np.random.default_rng(2026)
    profiles = [load_profile(name) for name in profile_names()]
    refused = drawn = checked = 0
    bad = []
    for i in range(count):
        profile = profiles[i % len(profiles)]
        narrowing = random_narrowing(rng)
        try:
            narrowed = narrowing.apply(profile)
        except UsageError as exc:
            refused += 1
            assert "leaves nothing to draw" in str(exc) and "\n" not in str(exc), exc
            continue
        drawn += 1
        for index in range(cases):
            ref = draw_case_ref(narrowed, i, index)
            checked += 1
            if broken := violations(narrowing, ref):
                bad.append((profile.name, narrowing, ref.id, broken))
    print(f"{count} narrowings of {len(profiles)} profiles: {refused} refused (one sentence), {drawn} drawn, "
          f"{checked} cases checked, {len(bad)} violations")
    for entry in bad[:10]:
        print("  ", *entry)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000, int(sys.argv[2]) if len(sys.argv) > 2 else 10))
