"""Where the default test suite's time goes: a pytest plugin, and a summary of what it wrote.

Each test's wall time, this process's CPU time (every thread: the tests' own code, JAX's compiles),
the CPU of the child processes reaped meanwhile (interpreters the test started; a fork server is
reaped, with its workers' CPU, when the session ends, so its CPU lands on the last test of its
pytest worker) and the XLA compiles it caused (``jax.monitoring``'s ``backend_compile_duration``),
one JSON line per test, appended to ``$SUITE_PROFILE`` (default ``suite-profile.jsonl``):

    PYTHONPATH=benchmarks python -m pytest -q -n auto -p suite_profile
    python benchmarks/suite_profile.py suite-profile.jsonl      # the summary

Measured with it: benchmarks/RESULTS.md, "The default suite, cold and warm".
"""

from __future__ import annotations

import collections
import json
import os
import resource
import sys
import time
from typing import Any

import pytest

_COMPILES: dict[str, float] = {"seconds": 0.0, "count": 0}


def _on_duration(name: str, seconds: float, **_: Any) -> None:
    if name == "/jax/core/compile/backend_compile_duration":
        _COMPILES["seconds"] += seconds
        _COMPILES["count"] += 1


def pytest_configure(config: pytest.Config) -> None:
    import jax.monitoring

    jax.monitoring.register_event_duration_secs_listener(_on_duration)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    wall, cpu, children = time.perf_counter(), time.process_time(), _children_cpu()
    compiled = dict(_COMPILES)
    yield
    row = {"id": item.nodeid, "wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu,
           "children_cpu": _children_cpu() - children,
           "compile_seconds": _COMPILES["seconds"] - compiled["seconds"],
           "compiles": _COMPILES["count"] - compiled["count"]}
    with open(os.environ.get("SUITE_PROFILE", "suite-profile.jsonl"), "a") as out:
        out.write(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}) + "\n")


def summarize(path: str, top: int = 25) -> None:
    """Totals, the modules by CPU (own + children) and the costliest tests."""
    rows = [json.loads(line) for line in open(path)]
    keys = ("wall", "cpu", "children_cpu", "compile_seconds", "compiles")
    totals = {k: sum(r[k] for r in rows) for k in keys}
    print(f"{len(rows)} tests: " + ", ".join(f"{k} {v:.1f} s" for k, v in totals.items() if k != "compiles")
          + f", {totals['compiles']} XLA compiles")
    modules: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for r in rows:
        modules[r["id"].split("::")[0]].update({k: r[k] for k in keys} | {"tests": 1})
    print(f"\n{'cpu':>7} {'child':>7} {'wall':>7} {'xla s':>6} {'tests':>5}  module")
    for name, m in sorted(modules.items(), key=lambda kv: -(kv[1]["cpu"] + kv[1]["children_cpu"]))[:top]:
        print(f"{m['cpu']:7.1f} {m['children_cpu']:7.1f} {m['wall']:7.1f} {m['compile_seconds']:6.1f} {m['tests']:5d}  {name}")
    print(f"\n{'cpu':>7} {'child':>7} {'wall':>7}  test")
    for r in sorted(rows, key=lambda r: -(r["cpu"] + r["children_cpu"]))[:top]:
        print(f"{r['cpu']:7.2f} {r['children_cpu']:7.2f} {r['wall']:7.2f}  {r['id'][:100]}")


if __name__ == "__main__":
    summarize(sys.argv[1] if len(sys.argv) > 1 else "suite-profile.jsonl")
