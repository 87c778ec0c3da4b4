"""Targets that run in another Python interpreter: ``<target>@PYTHON``, and the foreign built-ins.

A framework pinned to another numpy, CUDA or Python (MXNet 1.9.1 needs numpy < 1.24) cannot be
imported next to torch and JAX. ``mxnet-native@/opt/mx191`` runs the target in that interpreter
through ``client.py`` (numpy only there) over the versioned pipe protocol that ``client.py``
documents (docs/foreign-targets.md). One long-lived client per :class:`ForeignTarget` object, so
one per worker process; it is started on first use and restarted after it dies.

Failure modes, each an exception that the runner turns into that case's ``error`` result (the
run goes on): the client was killed or crashed, it broke the protocol, or it ran past
``GRADCHECK_RNN_CASE_TIMEOUT`` seconds (killed, TimeoutError). A missing interpreter, or a
target that does not load there, is a :class:`UsageError` when the spec is resolved (exit 2,
nothing run): the target is loaded once there before the run (:meth:`ForeignTarget.probe`).
With ``--workers`` the pool's ``--case-timeout`` kills the worker; the client has set
PR_SET_PDEATHSIG, so it dies with it (and EOF on its stdin ends it anywhere).
"""

from __future__ import annotations

import logging
import os
import select
import subprocess
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any


from ...model.case import Case, Outputs, RNNConfig
from ...errors import TargetReported, UsageError
from ...families import convention_attributes
from . import client as protocol
from . import triton_cpu

CLIENT = Path(__file__).with_name("client.py")
TIMEOUT_ENV = "GRADCHECK_RNN_CASE_TIMEOUT"
_HERE = Path(__file__).parent

# Built-in targets that live in a file loadable with only numpy and their framework.
# name -> (file, factory, factory kwargs, extra environment for the client).
FOREIGN_BUILTINS: dict[str, tuple[str, str, dict[str, Any], dict[str, str]]] = {
    "mxnet": ("mxnet_target.py", "make_target", {"native": False}, {}),
    "mxnet-native": ("mxnet_target.py", "make_target", {"native": True}, {}),
    "flax": ("flax_target.py", "make_target", {}, {}),
    "keras": ("keras_target.py", "make_target", {}, {"KERAS_BACKEND": "jax"}),
    **{f"flashrnn-{backend}": ("flashrnn_target.py", "make_target", {"backend": backend}, {})
       for backend in ("vanilla", "fwbw", "triton", "cuda")},
    "mambapy": ("mambapy_target.py", "make_target", {}, {}),
    **{f"fla-{kernel}": ("fla_target.py", "make_target", {"kernel": kernel}, {})
       for kernel in ("recurrent", "chunk", "naive")},
    **{f"mlstm-{kernel}": ("mlstm_target.py", "make_target", {"kernel": kernel}, {})
       for kernel in ("chunkwise", "custbw", "parallel", "triton")},
}


class ForeignTargetError(TargetReported, RuntimeError):
    """The foreign interpreter could not answer: it died, broke the protocol or failed to load the target."""


def interpreter_path(text: str) -> Path:
    """``PYTHON`` of a spec as an executable: a python binary, or a venv folder's ``bin/python``."""
    path = Path(text).expanduser()
    if path.is_dir():
        path = path / "bin" / "python"
    if not path.is_file() or not os.access(path, os.X_OK):
        raise UsageError(f"foreign interpreter {text!r} is not a python executable or a venv folder "
                         f"with bin/python; give --target NAME@/path/to/python")
    return path.absolute()


def _timeout() -> float | None:
    raw = os.environ.get(TIMEOUT_ENV, "")
    try:
        value = float(raw) if raw else None
    except ValueError:
        raise UsageError(f"{TIMEOUT_ENV}={raw!r} is not allowed; it must be a number of seconds") from None
    return value if value and value > 0 else None


def client_environment(extra: dict[str, str]) -> dict[str, str]:
    """This process's environment for the client (the user's: a worker exports nothing of its own)."""
    env = dict(os.environ, **extra)
    env.setdefault("OMP_NUM_THREADS", os.environ.get("GRADCHECK_RNN_TORCH_THREADS", "1"))  # no OpenMP spin
    return env


def case_message(case: Case) -> tuple[dict[str, Any], dict[str, Any]]:
    """The case as a protocol header and arrays."""
    header = {"config": case.config.to_wire(), "wants": sorted(case.wants), "wants_group": case.wants_group,
              "heads": case.heads, "initial_state": case.initial_state, "seed": int(case.seed), "id": case.id,
              "kernel_config": [list(pair) for pair in case.kernel_config]}
    arrays: dict[str, Any] = {name: getattr(case, name) for name in protocol.CASE_ARRAYS}
    arrays.update({f"param:{k}": v for k, v in case.params.items()})
    return header, arrays


class ForeignTarget:
    """A target run by ``client.py`` in another interpreter; see the module docstring."""

    def __init__(self, name: str, python: Path, target: dict[str, Any], env: dict[str, str] | None = None) -> None:
        self.name = name
        self.python = python
        self.target = target
        self.env = env or {}
        self._proc: subprocess.Popen | None = None
        self._stderr: Any = None
        self._loaded: dict[str, Any] = {}
        self._load_error: str | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def _start(self) -> None:
        env = client_environment({**self.env, protocol.HOST_PID_ENV: str(os.getpid())})
        self._stderr = tempfile.TemporaryFile()
        self._proc = subprocess.Popen([str(self.python), "-u", str(CLIENT)], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=self._stderr, env=env)
        header, _ = self._request({"type": "load", "protocol": protocol.PROTOCOL, "target": self.target,
                                   "conventions": list(convention_attributes())}, during="loading the target")
        if header["type"] == "error":
            self._load_error = (f"{self.name} could not load its target in {self.python}: {header['error']}"
                                + (f" (at {header['where']})" if header.get("where") else ""))
            self.close()
            raise ForeignTargetError(self._load_error)
        if header["type"] != "loaded" or header.get("protocol") != protocol.PROTOCOL:
            self._fail(f"answered {header['type']!r} for protocol {header.get('protocol')!r} to a "
                       f"protocol {protocol.PROTOCOL} load request")
        self._loaded = header
        for attribute, value in header.get("conventions", {}).items():  # what the judge reads, as in LocalForeignTarget
            setattr(self, attribute, value)
        if header.get("contracts"):
            self.contracts = tuple(header["contracts"])

    def _ensure(self) -> None:
        if self._load_error is not None:  # the same import error every case: do not restart for it
            raise ForeignTargetError(self._load_error)
        if self._proc is None or self._proc.poll() is not None:
            self.close()
            self._start()

    def probe(self) -> None:
        """Load the target once in its interpreter, before any case: a target that does not import
        there is a UsageError (exit 2, nothing run) with that interpreter's own error line, not an
        error row per case and check. The client is stopped again; the first case starts it anew."""
        try:
            self._ensure()
        except ForeignTargetError as exc:
            raise UsageError(str(exc)) from None
        finally:
            self.close()

    def close(self) -> None:
        """Stop the client (EOF, then kill if it lingers)."""
        proc, self._proc = self._proc, None
        if proc is not None:
            try:
                proc.stdin.close()
                proc.wait(timeout=2)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()
                proc.wait()
            proc.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: the pipes may already be gone
            pass

    def __getstate__(self) -> dict[str, Any]:  # a copy in another process starts its own client
        return {**self.__dict__, "_proc": None, "_stderr": None}

    # -- one request -------------------------------------------------------------------------

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        lines = [line for line in self._stderr.read()[-4000:].decode("utf-8", "replace").splitlines() if line.strip()]
        return lines[-1].strip() if lines else ""

    def _fail(self, what: str, error: type[Exception] = ForeignTargetError) -> None:
        """Kill the client and raise ``what`` with the client's last stderr line."""
        tail = self._stderr_tail()
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        self.close()
        raise error(f"{self.name}: the client in {self.python} {what}" + (f"; its last stderr line: {tail}" if tail else ""))

    def _read(self, size: int, deadline: float | None, during: str) -> bytes:
        proc = self._proc
        fd = proc.stdout.fileno()
        chunks, left = [], size
        while left:
            wait = None if deadline is None else deadline - time.monotonic()
            if wait is not None and wait <= 0:
                self._fail(f"ran past {_timeout():g} s ({TIMEOUT_ENV}) while {during}; it was killed", TimeoutError)
            ready, _, _ = select.select([fd], [], [], wait)
            if not ready:
                continue
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                code = proc.wait()
                how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
                self._fail(f"{how} while {during}")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def _request(self, header: dict[str, Any], arrays: dict[str, Any] | None = None,
                 during: str = "") -> tuple[dict[str, Any], dict[str, Any]]:
        timeout = _timeout()
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            self._proc.stdin.write(protocol.frame(header, arrays))
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self._read(1, deadline, during)  # reports how it died
            self._fail(f"closed its input while {during}")
        try:
            head_len, payload_len = protocol.split_prefix(self._read(protocol.PREFIX_SIZE, deadline, during))
            body = self._read(head_len + payload_len, deadline, during)
            return protocol.parse_body(body[:head_len], body[head_len:])
        except protocol.ProtocolError as exc:
            self._fail(f"broke protocol {protocol.PROTOCOL} while {during} ({exc})")
            raise  # not reached

    def _ask(self, header: dict[str, Any], arrays: dict[str, Any] | None, during: str) -> tuple[dict, dict]:
        self._ensure()
        reply, payload = self._request(header, arrays, during)
        if reply["type"] == "error":
            where = f"at {reply['where']}, " if reply.get("where") else ""
            raise ForeignTargetError(f"{reply['error']} ({where}in {self.python})")
        return reply, payload

    # -- the target protocol -----------------------------------------------------------------

    def supports(self, config: RNNConfig) -> bool | str:
        """The foreign target's own ``supports(config)``; True when the client cannot start, so that
        ``run`` reports why as the case's error instead of a skip."""
        try:
            self._ensure()
            if not self._loaded.get("supports"):
                return True
            reply, _ = self._ask({"type": "supports", "config": config.to_wire()}, None, "asking supports()")
        except (ForeignTargetError, TimeoutError):
            return True
        return reply["value"]

    def supports_case(self, case: Case) -> bool | str:
        try:
            self._ensure()
            if not self._loaded.get("supports_case"):
                return True
            header, arrays = case_message(case)
            reply, _ = self._ask({"type": "supports_case", "case": header}, arrays, f"asking supports_case({case.id})")
        except (ForeignTargetError, TimeoutError):
            return True
        return reply["value"]

    def run(self, case: Case) -> Outputs:
        header, arrays = case_message(case)
        _, out = self._ask({"type": "run", "case": header}, arrays, f"running {case.id}")
        return protocol_outputs(out)

    # -- forward mode and second order: offered only where the foreign target has them --------

    def __getattr__(self, name: str) -> Any:
        """``jvp``, ``hvp``, ``supports_jvp`` and ``supports_hvp`` exist only where the loaded target
        has them (its ``loaded`` answer), as the target protocol reads them: a target without ``jvp``
        is declined in the protocol's own words, never asked over the pipe."""
        if name in protocol.FORWARD_METHODS and self.__dict__.get("_loaded", {}).get(name):
            return lambda case, *tangents: self._product(name, case, *tangents)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _product(self, method: str, case: Case, tangents: dict[str, Any] | None = None) -> Any:
        """One ``supports_jvp``/``supports_hvp`` answer (True or the reason), or the ``jvp``/``hvp``
        products as Outputs, from the client."""
        header, arrays = case_message(case)
        if tangents is not None:
            arrays.update({f"tangent:{k}": v for k, v in tangents.items()})
        try:
            reply, out = self._ask({"type": method, "case": header}, arrays, f"asking {method}({case.id})")
        except (ForeignTargetError, TimeoutError):
            if tangents is None:  # as supports(): the product's own call reports why, as the case's error
                return True
            raise
        return reply["value"] if tangents is None else protocol_outputs(out)


def protocol_outputs(out: dict[str, Any]) -> Outputs:
    """The arrays of an ``outputs`` answer (y, hy, cy, grad:<name>) as :class:`Outputs`."""
    grads = {k[len("grad:"):]: v for k, v in out.items() if k.startswith("grad:")}
    return Outputs(y=out.get("y"), hy=out.get("hy"), cy=out.get("cy"), grads=grads)


def foreign_spec(spec: str) -> tuple[str, Path]:
    """``TARGET@PYTHON`` split into the target's name and the interpreter; UsageError for a missing
    interpreter or an empty target. Starts nothing, so a bad spec is refused in a moment."""
    name, _, python_text = spec.partition("@")
    if not name or not python_text:
        raise UsageError(f"target {spec!r} is not allowed; a foreign target is NAME@PYTHON, "
                         f"e.g. mxnet-native@/opt/mx191")
    return name, interpreter_path(python_text)


def foreign_target(spec: str) -> ForeignTarget:
    """``TARGET@PYTHON`` as a :class:`ForeignTarget` named by the whole spec, its target loaded once
    there (:meth:`ForeignTarget.probe`); UsageError as :func:`foreign_spec` says, or when it does not load."""
    name, python = foreign_spec(spec)
    if name in FOREIGN_BUILTINS:
        file, factory, kwargs, env = FOREIGN_BUILTINS[name]
        target = ForeignTarget(spec, python, {"kind": "file", "path": str(_HERE / file), "factory": factory,
                                              "kwargs": kwargs}, env)
    elif ":" in name and not name.startswith("mutant:"):
        target = ForeignTarget(spec, python, {"kind": "import", "spec": name})
    else:
        target = ForeignTarget(spec, python, {"kind": "builtin", "name": name})
    target.probe()
    return target


class LocalForeignTarget:
    """A foreign built-in run in this process (its framework imports here): same file, same
    answers, its dict of outputs turned into :class:`Outputs`.

    ``supports`` and ``supports_case`` are optional in the target protocol, so they are passed on
    only where the target has them (and ``kernel_configs``, which a ``NAME@PYTHON`` target does not
    declare yet), as the client reports them for ``NAME@PYTHON``: the wrapper
    must not claim a method that the target lacks (keras has no ``supports_case``); so are ``jvp``,
    ``hvp``, ``supports_jvp`` and ``supports_hvp``, their dicts turned into Outputs too. So are the
    gradient conventions it declares (flashrnn-fwbw's ``stabilizer_gradient``) and its ``contracts``
    (fla's ``T == cu_seqlens[-1]``), which the judge reads.
    """

    def __init__(self, impl: Any) -> None:
        self.impl = impl
        self.name = impl.name
        for method in ("supports", "supports_case", "kernel_configs", "supports_jvp", "supports_hvp"):
            if callable(getattr(impl, method, None)):
                setattr(self, method, getattr(impl, method))
        for method in ("jvp", "hvp"):
            if callable(getattr(impl, method, None)):
                setattr(self, method, partial(self._product, method))
        for attribute in (*convention_attributes(), "contracts"):
            if hasattr(impl, attribute):
                setattr(self, attribute, getattr(impl, attribute))

    def run(self, case: Case) -> Outputs:
        return self._outputs(self.impl.run(case))

    def _product(self, method: str, case: Case, tangents: dict[str, Any]) -> Outputs:
        """The target's ``jvp`` or ``hvp`` (forward mode, second order), its dict turned into Outputs."""
        return self._outputs(getattr(self.impl, method)(case, tangents))

    @staticmethod
    def _outputs(returned: Any) -> Outputs:
        if isinstance(returned, Outputs):  # a packed target's own Outputs, its tails included (model/packed.py)
            return returned
        return protocol_outputs(protocol.outputs_arrays(returned))


_FRAMEWORK = {"mxnet": "mxnet", "mxnet-native": "mxnet", "flax": "flax", "keras": "keras", "mambapy": "mambapy",
              **{name: "flashrnn" for name in FOREIGN_BUILTINS if name.startswith("flashrnn-")},
              **{name: "fla" for name in FOREIGN_BUILTINS if name.startswith("fla-")},
              **{name: "mlstm_kernels" for name in FOREIGN_BUILTINS if name.startswith("mlstm-")}}


# Triton libraries: imported with TRITON_INTERPRET=1 where there is no CUDA (triton_cpu.py).
_TRITON_LIBRARIES = ("fla", "mlstm_kernels")


def _import_error(module: str) -> str | None:
    """None when ``module`` imports in this process, else why not (one line)."""
    if module == "keras":
        os.environ.setdefault("KERAS_BACKEND", "jax")  # the backend the keras target runs on
    cpp_extension = logging.getLogger("torch.utils.cpp_extension")  # flashrnn's import warns on CPU
    level = cpp_extension.level
    cpp_extension.setLevel(logging.ERROR)
    try:
        if module in _TRITON_LIBRARIES:  # its kernels are decorated at import: in the interpreter on CPU
            triton_cpu.import_interpreted(module)
        else:
            __import__(module)
    except Exception as exc:  # not installed, or built against another numpy: both mean "not here"
        return f"{type(exc).__name__}: {exc}".splitlines()[0]
    finally:
        cpp_extension.setLevel(level)
    return None


def local_builtin(name: str) -> Any:
    """A foreign built-in (``mxnet``, ``flax``, ``flashrnn-vanilla``, ``mambapy``, ...) in this process.

    A target is resolved only when it is named (``-t``, the API): one whose framework does not
    import here is a UsageError (exit 2, nothing run) quoting the import's own error line, since
    a skip of every case (exit 5) hid a broken install behind "not importable here"."""
    framework = _FRAMEWORK[name]
    if (error := _import_error(framework)) is not None:
        raise UsageError(f"target {name!r} cannot load: importing {framework} failed here ({error}); install "
                         f"what it lacks, or run it in an interpreter where it imports: {name}@/path/to/venv")
    import importlib.util

    file, factory, kwargs, _ = FOREIGN_BUILTINS[name]
    spec = importlib.util.spec_from_file_location(f"gradcheck_rnn.targets.foreign.{Path(file).stem}", _HERE / file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return LocalForeignTarget(getattr(module, factory)(**kwargs))


# Built-in foreign targets that run on a CUDA device only (a CPU machine can only skip them).
FOREIGN_CUDA_ONLY = ("flashrnn-triton", "flashrnn-cuda", "fla-chunk", "mlstm-triton")


def foreign_rows(cuda: bool) -> list[tuple[str, bool, str]]:
    """(name, available here, note) for ``gradcheck-rnn targets``; without a CUDA device (``cuda``)
    the CUDA-only ones are not available, as a default sweep's header says."""
    notes = {"mxnet": "MXNet's RNN operator on CPU (oneDNN where MXNet uses it)",
             "mxnet-native": "MXNet's own CPU RNN kernel (MXNET_USE_MKLDNN_RNN=0)",
             "flax": "flax.linen nn.RNN over LSTMCell, GRUCell, SimpleCell (extra: flax)",
             "keras": "Keras 3 LSTM, GRU, SimpleRNN on the JAX backend (extra: keras)",
             "flashrnn-vanilla": "FlashRNN's LSTM, GRU, Elman in PyTorch autograd (extra: flashrnn)",
             "flashrnn-fwbw": "FlashRNN's LSTM with its hand-written PyTorch backward (extra: flashrnn)",
             "flashrnn-triton": "FlashRNN's fused Triton LSTM, CUDA only (extra: flashrnn)",
             "flashrnn-cuda": "FlashRNN's CUDA kernels, compiled on first use (extra: flashrnn)",
             "mambapy": "mambapy's Mamba selective scan (pscan) for s6 (extra: mambapy)",
             "fla-recurrent": "flash-linear-attention's fused_recurrent GLA kernel and its causal_conv1d, Triton (interpreter on CPU; extra: fla)",
             "fla-chunk": "flash-linear-attention's chunk GLA and gated delta rule kernels, CUDA only (extra: fla)",
             "fla-naive": "flash-linear-attention's naive torch GLA, gated delta rule and KDA loops (extra: fla)",
             "mlstm-chunkwise": "mlstm_kernels' chunkwise--native_autograd mLSTM (extra: mlstm)",
             "mlstm-custbw": "mlstm_kernels' chunkwise--native_custbw mLSTM, hand-written backward (extra: mlstm)",
             "mlstm-parallel": "mlstm_kernels' parallel--native_autograd mLSTM (extra: mlstm)",
             "mlstm-triton": "mlstm_kernels' chunkwise--triton_xl_chunk mLSTM, CUDA only (extra: mlstm)"}
    rows = []
    for name, note in notes.items():
        if not cuda and name in FOREIGN_CUDA_ONLY:
            rows.append((name, False, f"{note}; no CUDA device on this machine"))
            continue
        available = _import_error(_FRAMEWORK[name]) is None
        rows.append((name, available, note if available else f"{note}; not importable here, use {name}@PYTHON"))
    rows.append(("NAME@PYTHON", True, "any target run in another Python interpreter (docs/foreign-targets.md)"))
    return rows
