"""The foreign-interpreter client: runs a target in another Python and answers over pipes.

This file is started as a script (``PYTHON client.py``) in an interpreter that may have nothing
but numpy and a framework pinned to its own numpy, CUDA or Python (MXNet 1.9.1 needs numpy < 1.24,
which cannot live next to today's torch and JAX). So it imports only the standard library and
numpy, never gradcheck_rnn's dependencies; gradcheck_rnn itself imports the framing functions
from here, so host and client share one implementation of the protocol.

Protocol (version 1, docs/foreign-targets.md). Every message, in both directions, is one frame:

    u32 big-endian  header length   |  u64 big-endian  payload length  |  header  |  payload

The header is a UTF-8 JSON object with ``"type"``; the payload is empty or a numpy ``.npz``
archive (``np.savez``), read with ``allow_pickle=False``: arrays and plain values, never code.
Requests (host -> client) and their answers:

- ``load`` {protocol, target: {kind: "file", path, factory, kwargs} | {kind: "import", spec} |
  {kind: "builtin", name}, conventions: [attribute]} -> ``loaded`` {protocol, name, supports,
  supports_case, jvp, hvp, supports_jvp, supports_hvp (whether the target has each), conventions: {attribute: value} (those the target has), contracts: [{precondition, quote,
  source, outside}] (its optional ``contracts``, docs/contracts.md "Target contracts"), python, numpy}
- ``supports`` {config} -> ``answer`` {value: true | "reason"}
- ``supports_case`` {case} + case arrays -> ``answer`` {value}
- ``run`` {case} + case arrays -> ``outputs`` {} + arrays ``y``, ``hy``, ``cy``, ``grad:<name>``
  (float64; absent keys are absent outputs)
- ``supports_jvp`` / ``supports_hvp`` {case} + case arrays -> ``answer`` {value} (asked only of a
  target that has the method)
- ``jvp`` {case} + case arrays + ``tangent:<name>`` for each requested name -> ``outputs`` {} + the
  output tangents ``y``, ``hy``, ``cy``; ``hvp`` likewise -> ``outputs`` {} + ``grad:<name>``, the
  Hessian-vector product of each requested gradient (asked only of a target that has the method)
- any request -> ``error`` {error: "Type: message", where: "file:line in function"} when the
  target raised; the process stays up for the next request (a failed ``load`` ends it).

Case arrays are ``x``, ``seq_lengths``, ``h0``, ``c0``, ``dy``, ``dhy``, ``dcy`` (absent when
None) and ``param:<key>`` for each parameter. The target sees a case object with the fields of
``gradcheck_rnn.Case``: ``config`` (every attribute of ``RNNConfig``: mode, num_layers, ...,
options, long_memory, num_gates, has_cell_state, h_size, c_size, ...), the arrays, ``params`` (dict), ``wants`` (frozenset), ``wants_group``,
``heads``, ``initial_state``, ``seed``, ``id`` and ``kernel_config``.

A ``config`` travels as ``RNNConfig.to_wire()`` makes it: ``{"id": <config part of the case id>,
"attributes": {...}}``, every field, property and option (defaults included) of the config; the
client shows the attributes as they are, with ``option(name)``, and knows nothing of any family.

EOF on stdin ends the client; so does the host's death (the client sets PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import importlib
import importlib.util
import io
import json
import os
import struct
import sys
import traceback
from types import SimpleNamespace
from typing import Any, BinaryIO

import numpy as np

PROTOCOL = 1
HOST_PID_ENV = "GRADCHECK_RNN_HOST_PID"
_PREFIX = struct.Struct(">IQ")
CASE_ARRAYS = ("x", "seq_lengths", "h0", "c0", "dy", "dhy", "dcy")
# The target protocol's optional forward mode and second order (docs/contracts.md)
FORWARD_METHODS = ("jvp", "hvp", "supports_jvp", "supports_hvp")


class ProtocolError(RuntimeError):
    """A frame that is not what protocol version 1 says (truncated, oversized, not JSON)."""


def encode_arrays(arrays: dict[str, Any]) -> bytes:
    """An npz archive of the non-None arrays (b'' when there are none)."""
    present = {k: np.asarray(v) for k, v in arrays.items() if v is not None}
    if not present:
        return b""
    buffer = io.BytesIO()
    np.savez(buffer, **present)
    return buffer.getvalue()


def decode_arrays(payload: bytes) -> dict[str, np.ndarray]:
    if not payload:
        return {}
    with np.load(io.BytesIO(payload), allow_pickle=False) as archive:
        return {k: archive[k] for k in archive.files}


def frame(header: dict[str, Any], arrays: dict[str, Any] | None = None) -> bytes:
    """One message as bytes: prefix, JSON header, npz payload."""
    head = json.dumps(header).encode("utf-8")
    payload = encode_arrays(arrays or {})
    return _PREFIX.pack(len(head), len(payload)) + head + payload


def split_prefix(prefix: bytes) -> tuple[int, int]:
    """Header and payload lengths from a frame's 12-byte prefix."""
    head_len, payload_len = _PREFIX.unpack(prefix)
    if head_len > 1 << 24 or payload_len > 1 << 40:
        raise ProtocolError(f"frame announces a {head_len}-byte header and a {payload_len}-byte payload")
    return head_len, payload_len


def parse_body(head: bytes, payload: bytes) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    try:
        header = json.loads(head.decode("utf-8"))
    except ValueError as exc:
        raise ProtocolError(f"frame header is not JSON ({exc})") from None
    if not isinstance(header, dict) or "type" not in header:
        raise ProtocolError("frame header is not a JSON object with a 'type'")
    return header, decode_arrays(payload)


PREFIX_SIZE = _PREFIX.size


def _read_exact(stream: BinaryIO, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = stream.read(left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_frame(stream: BinaryIO) -> tuple[dict[str, Any], dict[str, np.ndarray]] | None:
    """The next message from a blocking stream, or None at a clean EOF."""
    prefix = _read_exact(stream, PREFIX_SIZE)
    if prefix is None:
        return None
    head_len, payload_len = split_prefix(prefix)
    body = _read_exact(stream, head_len + payload_len)
    if body is None:
        raise ProtocolError("stream ended inside a frame")
    return parse_body(body[:head_len], body[head_len:])


# --- the client side -------------------------------------------------------------------------


def make_config(wire: dict[str, Any]) -> SimpleNamespace:
    """The config a foreign target sees, from ``RNNConfig.to_wire()``: its attributes as they are
    (the host's config computed every one), and ``option(name)`` as on an RNNConfig."""
    config = SimpleNamespace(**wire["attributes"])
    config.option = config.options.__getitem__
    return config


def make_case(header: dict[str, Any], arrays: dict[str, np.ndarray]) -> SimpleNamespace:
    """The case object a foreign target sees: Case's field names on plain numpy data."""
    params = {k[len("param:"):]: v for k, v in arrays.items() if k.startswith("param:")}
    case = SimpleNamespace(config=make_config(header["config"]), params=params,
                           **{name: arrays.get(name) for name in CASE_ARRAYS})
    case.wants = frozenset(header["wants"])
    for name in ("wants_group", "heads", "initial_state", "seed", "id"):
        setattr(case, name, header[name])
    # (name, value) pairs of the kernel configuration it runs under; none from an older sender
    case.kernel_config = tuple(tuple(pair) for pair in header.get("kernel_config", ()))
    return case


def _load_target(spec: dict[str, Any]) -> Any:
    kind = spec["kind"]
    if kind == "file":  # a built-in foreign target shipped as a file: loadable without gradcheck_rnn
        module_spec = importlib.util.spec_from_file_location(f"_gradcheck_foreign_{spec['factory']}", spec["path"])
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
        return getattr(module, spec["factory"])(**spec.get("kwargs", {}))
    if kind == "import":  # package.module:callable, importable in this interpreter
        module_name, _, attr = spec["spec"].partition(":")
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
        return obj() if isinstance(obj, type) else obj
    if kind == "builtin":  # e.g. fused-cpu@PYTHON: gradcheck_rnn must be installed there
        from gradcheck_rnn.targets import resolve_target

        return resolve_target(spec["name"]).impl
    raise ProtocolError(f"unknown target kind {kind!r}")


def _as_float(value: Any) -> np.ndarray:
    """Any array-like (numpy, torch, jax, mxnet) as float64 numpy; the upcast is exact."""
    if hasattr(value, "detach"):  # torch: bfloat16 has no numpy dtype, so widen first
        value = value.detach().cpu().double()
    if hasattr(value, "asnumpy"):  # mxnet NDArray
        value = value.asnumpy()
    array = np.asarray(value)
    return array if array.dtype == np.float64 else array.astype(np.float64)


def outputs_arrays(outputs: Any) -> dict[str, np.ndarray]:
    """Flatten an Outputs (or any object or dict with y, hy, cy, grads) into protocol arrays."""
    get = outputs.get if isinstance(outputs, dict) else lambda k: getattr(outputs, k, None)
    arrays = {k: _as_float(get(k)) for k in ("y", "hy", "cy") if get(k) is not None}
    for name, grad in (get("grads") or {}).items():
        if grad is not None:
            arrays[f"grad:{name}"] = _as_float(grad)
    return arrays


def _plain_contract(contract: Any) -> dict[str, Any]:
    """A declared contract (a mapping, or an object with the fields) as plain data for the host."""
    keys = ("precondition", "quote", "source", "outside")
    return {k: contract.get(k) for k in keys} if isinstance(contract, dict) else {k: getattr(contract, k, None) for k in keys}


def _where(exc: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<frozen")]
    if not frames:
        return ""
    last = frames[-1]
    return f"{os.path.basename(last.filename)}:{last.lineno} in {last.name}"


def _answer(target: Any, header: dict[str, Any], arrays: dict[str, np.ndarray]) -> tuple[dict, dict]:
    kind = header["type"]
    if kind == "supports":
        return {"type": "answer", "value": target.supports(make_config(header["config"]))}, {}
    if kind == "supports_case":
        return {"type": "answer", "value": target.supports_case(make_case(header["case"], arrays))}, {}
    if kind == "run":
        run = getattr(target, "run", None) or target
        return {"type": "outputs"}, outputs_arrays(run(make_case(header["case"], arrays)))
    if kind in ("supports_jvp", "supports_hvp"):
        return {"type": "answer", "value": getattr(target, kind)(make_case(header["case"], arrays))}, {}
    if kind in ("jvp", "hvp"):
        tangents = {k[len("tangent:"):]: v for k, v in arrays.items() if k.startswith("tangent:")}
        return {"type": "outputs"}, outputs_arrays(getattr(target, kind)(make_case(header["case"], arrays), tangents))
    raise ProtocolError(f"unknown request type {kind!r}")


def _plain(value: Any) -> bool | str:
    """A supports() answer as JSON: True, or the reason as a string."""
    return True if value is True else str(value)


def serve(inp: BinaryIO, out: BinaryIO) -> int:
    """Answer requests until EOF; the first must be ``load``."""

    def send(header: dict[str, Any], arrays: dict[str, Any] | None = None) -> None:
        out.write(frame(header, arrays))
        out.flush()

    request = read_frame(inp)
    if request is None:
        return 0
    header, _ = request
    if header.get("type") != "load" or header.get("protocol") != PROTOCOL:
        send({"type": "error", "error": f"ProtocolError: expected a protocol {PROTOCOL} load request, got "
                                        f"{header.get('type')!r} for protocol {header.get('protocol')!r}"})
        return 1
    try:
        target = _load_target(header["target"])
    except BaseException as exc:  # import errors, missing frameworks: the host reports them per case
        send({"type": "error", "error": f"{type(exc).__name__}: {exc}", "where": _where(exc), "during": "load"})
        return 1
    send({"type": "loaded", "protocol": PROTOCOL, "name": getattr(target, "name", None),
          "supports": callable(getattr(target, "supports", None)),
          "supports_case": callable(getattr(target, "supports_case", None)),
          **{method: callable(getattr(target, method, None)) for method in FORWARD_METHODS},
          "conventions": {name: getattr(target, name) for name in header.get("conventions", ()) if hasattr(target, name)},
          "contracts": [_plain_contract(c) for c in getattr(target, "contracts", None) or ()],
          "python": sys.version.split()[0], "numpy": np.__version__})
    while True:
        request = read_frame(inp)
        if request is None:
            return 0
        header, arrays = request
        try:
            reply, payload = _answer(target, header, arrays)
            if reply["type"] == "answer":
                reply["value"] = _plain(reply["value"])
        except Exception as exc:  # the target's own error: reported, and the next case goes on
            reply, payload = {"type": "error", "error": f"{type(exc).__name__}: {exc}", "where": _where(exc)}, {}
        send(reply, payload)


def _die_with_host() -> None:
    """SIGKILL this process when the host dies (Linux PR_SET_PDEATHSIG), so a worker killed for
    a timeout takes its client along; then make sure the host did not die before that was set."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            import signal

            ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
        except (OSError, AttributeError):
            pass
    host = int(os.environ.get(HOST_PID_ENV, "0") or 0)
    if host and os.getppid() != host:
        os._exit(1)


def main() -> int:
    _die_with_host()
    # Keep the protocol on private copies of fds 0 and 1, so a target that prints (MXNet logs,
    # print debugging) writes to stderr instead of corrupting the frames.
    inp = os.fdopen(os.dup(0), "rb", buffering=0)
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    # Imports resolve from the host's working folder (as plugin targets do there), not from this
    # file's folder, which would shadow nothing useful and could shadow a user's module.
    sys.path[0] = os.getcwd()
    return serve(inp, out)


if __name__ == "__main__":
    sys.exit(main())
