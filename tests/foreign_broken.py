"""A foreign target whose module cannot import: its framework is missing from the interpreter."""

import a_framework_missing_from_this_interpreter  # noqa: F401


def run(case):
    raise AssertionError("never reached: the import above fails")
