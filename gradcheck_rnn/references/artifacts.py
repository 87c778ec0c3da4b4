"""Serialized executables of the JAX reference, beside JAX's compilation cache.

A warm process loads a program from ``$GRADCHECK_RNN_JAX_CACHE/gradcheck-rnn-programs/``
instead of tracing, lowering and compiling it (see programs.py). This module only reads and
writes the files; programs.py decides what may be written (only an executable that its process
really compiled: one that XLA:CPU loaded from the persistent compilation cache serializes
without its object code, and fails elsewhere with ``NOT_FOUND: Function wrapped_iota not found``).

- A file's name is the program's name (its bucket or padded config) and a fingerprint of
  everything that could make it wrong: jax and jaxlib, the backend, its platform version and
  device kind, the host CPU (model and flags), the compile options, x64, and the sources the
  program's maths is read from.
- Writes are atomic (a temp file in the same folder, then ``os.replace``): two workers that
  write the same bucket leave one whole file, never a torn one.
- Reading never raises: a file that cannot be read, unpickled or deserialized is deleted and
  :func:`load` returns None, so the caller compiles as if there were no file.
- Like JAX's own cache, a file is loaded with pickle and holds machine code: the folder must be
  as trusted as the code that runs.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import pickle
import platform
import tempfile
from pathlib import Path
from typing import Any

from ..runtime import jax_cache_folder

FOLDER = "gradcheck-rnn-programs"
FORMAT = 2  # bump when the file layout changes (2: programs named by their store)


def folder() -> Path | None:
    """Where artifacts live, or None when $GRADCHECK_RNN_JAX_CACHE is unset or "" (off)."""
    root = jax_cache_folder()
    return Path(root) / FOLDER if root else None


def _host_cpu() -> str:
    """The CPU's model and feature flags: XLA:CPU code is built for the host's instruction set,
    and a cache folder may be shared by machines (a home directory on a network file system)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.machine() + " " + platform.processor()
    wanted = ("model name", "flags", "Features")  # Features: arm64
    return "\n".join(sorted({line for line in lines if line.split(":")[0].strip() in wanted}))


@functools.lru_cache(maxsize=8)
def fingerprint(sources: tuple[str, ...], options: str, x64: bool) -> str:
    """A short hash of jax, jaxlib, the backend, the host CPU, ``options``, x64 and ``sources``."""
    import jax
    import jaxlib

    device = jax.devices()[0]
    parts = [f"format {FORMAT}", jax.__version__, jaxlib.__version__, device.platform,
             device.client.platform_version, device.device_kind,
             _host_cpu() if device.platform == "cpu" else "", options, f"x64 {x64}"]
    parts += [hashlib.sha256(Path(s).read_bytes()).hexdigest() for s in sources]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def path_for(name: str, fp: str) -> Path | None:
    """The artifact of the program named ``name`` under fingerprint ``fp`` (None when artifacts
    are off)."""
    root = folder()
    if root is None:
        return None
    return root / f"{name}-{fp}.bin"


def discard(path: Path | None) -> None:
    """Delete a bad artifact (another process may have done it already)."""
    if path is not None:
        with contextlib.suppress(OSError):
            path.unlink()


def load(path: Path | None) -> Any:
    """The ``jax.stages.Compiled`` in ``path``, or None (no file; a bad one is deleted)."""
    if path is None:
        return None
    try:
        blob = path.read_bytes()
    except OSError:  # none yet (the usual cold case), or unreadable
        return None
    try:
        from jax.experimental.serialize_executable import deserialize_and_load

        payload, in_tree, out_tree = pickle.loads(blob)
        return deserialize_and_load(payload, in_tree, out_tree)
    except Exception:  # garbage, a truncated file, another jaxlib: compile instead
        discard(path)
        return None


def store(path: Path | None, compiled: Any) -> bool:
    """Write ``compiled`` to ``path`` atomically; False (and nothing written) on any failure."""
    if path is None:
        return False
    tmp = None
    try:
        from jax.experimental.serialize_executable import serialize

        blob = pickle.dumps(serialize(compiled))
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide it from the other users of a shared cache
        os.replace(tmp, path)
        return True
    except Exception:  # a read-only folder, a backend that cannot serialize: memory only
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        return False


def writable() -> bool:
    """Whether artifacts can be written here (creating the folder if need be)."""
    root = folder()
    if root is None:
        return False
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(root, os.W_OK)
