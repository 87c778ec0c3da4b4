"""What MXNet 1.9.1's RNN operator refuses on CPU, with its own error: the cases the mxnet and
mxnet-native targets decline (gradcheck_rnn/targets/foreign/mxnet_target.py quotes these)."""

from common import problem, run


def refusal(**kwargs):
    try:
        run(**kwargs)
        return "accepted"
    except Exception as exc:  # mxnet.base.MXNetError, or numpy's TypeError for bfloat16
        return [line for line in str(exc).splitlines() if line.strip()][-1].strip()


print("float16:", refusal(p=problem("lstm"), req={"data": "write"}, dtype="float16"))
print("bfloat16:", refusal(p=problem("lstm"), req={"data": "write"}, dtype="bfloat16"))
print("native use_sequence_length:", refusal(p=problem("gru"), req={"data": "write"}, onednn=False, lengths=[5, 2]))
print("float64 use_sequence_length:", refusal(p=problem("gru"), req={"data": "write"}, dtype="float64", lengths=[5, 2]))
