"""Keras 3.15 on the JAX backend: keras.ops.tanh of a float64 tensor returns float32 (its
result_type(float64, float) is float32), so an LSTM, GRU or tanh SimpleRNN built with
dtype="float64" computes its tanh in float32: float32 accuracy in a float64 model, and a tanh
SimpleRNN raises (its scan's float64 carry comes back float32). relu is unaffected. numpy + jax + keras only; run with JAX_ENABLE_X64=1."""

import os

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("JAX_ENABLE_X64", "1")

import jax.numpy as jnp  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402

x = np.linspace(-3, 3, 7)
y = keras.ops.tanh(jnp.asarray(x))
error = float(np.abs(np.asarray(y, dtype=np.float64) - np.tanh(x)).max())
print(f"keras {keras.__version__}: ops.tanh(float64) returns {y.dtype}, max error {error:.3g} against np.tanh")
keras.config.set_floatx("float64")
print("with floatx float64 too:", keras.ops.tanh(jnp.asarray(x)).dtype)
try:
    out = keras.layers.SimpleRNN(3, return_sequences=True, dtype="float64")(np.ones((1, 2, 2)))
    print(f"SimpleRNN(dtype='float64') returns {out.dtype}")
except TypeError as exc:  # the scan's float64 carry comes back float32
    print("SimpleRNN(dtype='float64') raises:", str(exc).strip().splitlines()[0][:120])
print("CONFIRMED" if str(y.dtype) == "float32" and error > 1e-12 else "NOT REPRODUCED", "Keras computes float64 tanh in float32")
