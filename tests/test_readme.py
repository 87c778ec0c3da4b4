"""The README's plugin example really runs, and the README's test command is the one CI runs."""

import re
from pathlib import Path

from gradcheck_rnn import Case
from gradcheck_rnn.judging.judge import judge_one

ROOT = Path(__file__).parent.parent
README = (ROOT / "README.md").read_text()


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README, flags=re.S)


def test_plugin_example_passes_and_skips():
    namespace: dict = {}
    exec(python_blocks()[0], namespace)
    my_gru = namespace["my_gru"]
    passed = judge_one(Case.from_id("gru-L1-uni-I3-H4-T5-B2-len5.2-f32-s7"), my_gru)
    assert passed.status == "pass", passed.message
    skipped = judge_one(Case.from_id("lstm-L1-uni-I3-H4-T5-B2-len5.2-f32-s7"), my_gru)
    assert skipped.status == "skip" and "one-layer" in skipped.message
    exec(python_blocks()[1], namespace)  # the library snippet runs as written


def test_ci_runs_the_readme_test_command_verbatim():
    commands = [line.strip() for line in README.splitlines() if "pytest" in line and "pip install" in line]
    assert commands, "the README has no test command"
    assert commands[0] in (ROOT / ".ci" / "run").read_text()
