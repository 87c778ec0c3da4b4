"""What mlstm_kernels 2.0.6 refuses, in its own words: each reason the mlstm-* targets decline with
(gradcheck_rnn/targets/foreign/mlstm_target.py). torch and mlstm_kernels only.

- the parallel kernels take no initial state and return no final one;
- the chunkwise kernels need a length divisible by the chunk size, triton_xl_chunk by 16;
- on a machine without CUDA, Triton's interpreter cannot run the Triton kernels.
"""

import os

import torch

if not torch.cuda.is_available():  # Triton reads it when the kernels are decorated and when gluon loads
    os.environ["TRITON_INTERPRET"] = "1"

from mlstm_kernels.torch import get_mlstm_kernel  # noqa: E402

B, NH, S, K = 1, 1, 16, 16
q, k, v = torch.randn(B, NH, S, K), torch.randn(B, NH, S, K), torch.randn(B, NH, S, K)
i, f = torch.randn(B, NH, S), torch.randn(B, NH, S)


def said(call):
    try:
        call()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}".splitlines()[0]
    return "ran"


print("parallel--native_autograd with c_initial:",
      said(lambda: get_mlstm_kernel("parallel--native_autograd")(q, k, v, i, f, c_initial=torch.zeros(B, NH, K, K))))
print("parallel--native_autograd with return_last_states:",
      said(lambda: get_mlstm_kernel("parallel--native_autograd")(q, k, v, i, f, return_last_states=True)))
print("chunkwise--native_autograd, S = 6, chunk_size = 4:",
      said(lambda: get_mlstm_kernel("chunkwise--native_autograd")(q[:, :, :6], k[:, :, :6], v[:, :, :6], i[:, :, :6],
                                                                  f[:, :, :6], chunk_size=4)))
print("chunkwise--triton_xl_chunk, S = 8:",
      said(lambda: get_mlstm_kernel("chunkwise--triton_xl_chunk")(q[:, :, :8], k[:, :, :8], v[:, :, :8], i[:, :, :8],
                                                                  f[:, :, :8])))
if not torch.cuda.is_available():
    print("chunkwise--triton_xl_chunk in the interpreter:",
          said(lambda: get_mlstm_kernel("chunkwise--triton_xl_chunk")(q, k, v, i, f, chunk_size=16)))
