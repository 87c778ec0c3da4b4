"""Test-wide settings: one torch thread (see gradcheck_rnn.runtime.limit_torch_threads), judging
commands in the test process, and one JAX cache for the tests, kept from one run of the suite to
the next in ``$GRADCHECK_RNN_CACHE_DIR/test-jax`` (``~/.cache/gradcheck-rnn/test-jax``), beside the
venvs the tests make; never the user's own ``jax`` folder.

The suite compiles 70 to 90 JAX programs, an eighth of its time on a fresh clone; a later
run loads them (the tool's own warm path: an artifact's name carries the fingerprint of every
source its program is read from, so an edit is a new program, never a stale one). Past
``JAX_CACHE_LIMIT_BYTES`` the oldest files go. Tests that count compiles, or write into the
default folder, use folders of their own.

Judging commands run as with ``--in-process`` (GRADCHECK_RNN_IN_PROCESS=1): a worker process per
command costs ~0.2 s more, over a suite with a time budget, and every executor gives the same
rows (tests/test_isolation.py). ``gr.check`` and ``gr.sweep`` read the variable too. The tests of
the default, isolated executor remove it (the ``worker_processes`` fixture); the cache serves
each new worker the JAX programs an earlier one compiled.
"""

import os
import sys
from collections import Counter
from pathlib import Path

os.environ["GRADCHECK_RNN_WORKERS"] = "1"
os.environ["GRADCHECK_RNN_IN_PROCESS"] = "1"

import pytest  # noqa: E402

from gradcheck_rnn import runtime  # noqa: E402

# Past this size the cache's oldest files go at the start of a session (each edit of a reference's
# sources adds its programs again; one cold run writes about 35 MB).
JAX_CACHE_LIMIT_BYTES = 512 * 2**20


def pytest_configure(config):
    """One torch thread where tests run, and the tests' JAX cache, set before pytest-xdist starts
    its workers, which inherit it. pytest-xdist's controller runs no test: it does not import
    torch, which would delay the start of the workers."""
    if config.getoption("numprocesses", None) in (None, 0) or "PYTEST_XDIST_WORKER" in os.environ:
        runtime.limit_torch_threads()
    if "PYTEST_XDIST_WORKER" in os.environ and os.environ.get(runtime.JAX_CACHE_ENV):
        return  # a worker: the session that started it chose the folder
    folder = runtime.cache_dir() / "test-jax"
    folder.mkdir(parents=True, exist_ok=True)
    _trim(folder, JAX_CACHE_LIMIT_BYTES)
    os.environ[runtime.JAX_CACHE_ENV] = str(folder)


def _trim(folder: Path, limit: int) -> None:
    """Delete the least recently written files of ``folder`` until it holds at most half ``limit``,
    once it holds more than ``limit``."""
    files = sorted((p for p in folder.rglob("*") if p.is_file()), key=lambda p: p.stat().st_mtime)
    total = sum(p.stat().st_size for p in files)
    if total <= limit:
        return
    for path in files:
        if total <= limit // 2:
            break
        total -= path.stat().st_size
        path.unlink(missing_ok=True)


# The foreign interpreters' fixtures (mxnet_python, flax_keras_python, foreign_path), for any test module.
pytest_plugins = ["foreign_env"]


@pytest.fixture(scope="session")
def reference_only(tmp_path_factory):
    """The ci profile with the reference check alone (a TOML file): the fast check, and the one
    drift is read from."""
    from gradcheck_rnn.judging.checks import check_names
    from gradcheck_rnn.model.profiles import CONFIG_DIR

    draw = (CONFIG_DIR / "ci.toml").read_text().split("[checks]")[0]
    path = tmp_path_factory.mktemp("profile") / "reference.toml"
    path.write_text(draw + "[checks]\n" + "".join(f"{c} = {str(c == 'reference').lower()}\n" for c in check_names()))
    return path


@pytest.fixture(scope="session")
def fork_server_kept():
    """The pool's fork server kept from the first test that starts it to the session's end: the
    commands of later tests fork their workers at once instead of waiting for its imports again."""
    from gradcheck_rnn.run import fork_server

    with fork_server.kept():
        yield


@pytest.fixture
def worker_processes(monkeypatch, fork_server_kept):
    """Judging commands in worker processes, as for a user (the default executor)."""
    monkeypatch.delenv("GRADCHECK_RNN_IN_PROCESS", raising=False)


# The pictures drawn by the unmarked tests of this process, by what they were drawn from (below).
_PICTURES_DRAWN: dict[str, bytes | None] = {}


@pytest.fixture(autouse=True)
def first_picture_only(request, monkeypatch):
    """A report.html drawn in this process draws the error picture of its worst finding alone, not
    of each of its ``DETAIL_CAP`` findings: drawing them all was a seventh of the suite's CPU
    (benchmarks/RESULTS.md). Each report still draws one, so every kind of failing row a test makes
    is still drawn; the tests marked ``pictures`` draw them all.

    A picture is drawn once per process from the same row (its judging time aside): many tests fail
    the same mutant on the same case, and drawing it again gives the same bytes (the ``pictures``
    tests compare redrawn pages byte for byte)."""
    if request.node.get_closest_marker("pictures"):
        return
    import json

    from gradcheck_rnn.reports import html

    real_render, real_case_png = html.render, html.case_png
    drawn: list[bytes] = []

    def render(run):
        drawn.clear()
        return real_render(run)

    def case_png(row, lengths, num_directions):
        if drawn:
            return None  # as for a row with nothing to draw
        drawn_from = {name: value for name, value in row.items() if name != "seconds"}  # the judging time
        key = json.dumps([drawn_from, lengths, num_directions], sort_keys=True, default=repr)
        if key not in _PICTURES_DRAWN:
            _PICTURES_DRAWN[key] = real_case_png(row, lengths, num_directions)
        png = _PICTURES_DRAWN[key]
        if png is not None:
            drawn.append(png)
        return png

    monkeypatch.setattr(html, "render", render)
    monkeypatch.setattr(html, "case_png", case_png)


@pytest.fixture(scope="module")
def dask_cluster():
    """One real Dask LocalCluster (2 worker processes), started by the first test of a module that
    asks for it, kept for the module's next ones (its workers import torch and JAX, seconds each),
    and closed when the module is done: an idle cluster's heartbeats keep using CPU, and this one
    would idle until the session's end (benchmarks/RESULTS.md). Every test that asks for it lives
    in tests/test_scale.py."""
    distributed = pytest.importorskip("distributed")
    import dask

    # no retries: a lost worker's chunk becomes error rows at once; the nanny restarts the worker
    # for the next test
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        cluster = distributed.LocalCluster(processes=True, n_workers=2, threads_per_worker=1, dashboard_address=None)
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """A pytest-xdist worker ends here: it has sent the controller everything (``workerfinished``,
    at the end of its session), and the interpreter's teardown of torch's, JAX's and the pools'
    state, which the controller waits for with the cores idle, took seconds (benchmarks/RESULTS.md)."""
    if "PYTEST_XDIST_WORKER" in os.environ:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def pytest_collection_modifyitems(items):
    """Modules in the order pytest-xdist's ``--dist loadfile`` gives them out (pyproject's
    ``--no-loadscope-reorder`` keeps this order): the larger first, so that no large one is left
    for the end while the other worker idles, and the tests that run pytest in this process
    (pytester, one module: tests/test_pytest_plugin.py) last. A pytester run drops, when it ends,
    the modules it imported, and a later test would import second copies of them (another rich
    Segment class, another registry): no module runs after it on its worker. Longest measured
    module first was slower (benchmarks/RESULTS.md): it starts the modules that wait on processes
    together."""
    sizes = Counter(item.nodeid.split("::")[0] for item in items)

    def order(item) -> tuple[bool, int, str]:
        module = item.nodeid.split("::")[0]
        return "pytester" in getattr(item, "fixturenames", ()), -sizes[module], module

    items.sort(key=order)  # stable: a module's tests keep their order
