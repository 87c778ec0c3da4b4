"""flax 0.12: nn.RNN with seq_lengths returns, for a sequence of length 0, the carry after the
last padded step instead of the initial carry: it picks index seq_lengths - 1, which is -1.
numpy + jax + flax only; the flax target declines zero-length sequences for this reason."""

import jax
import jax.numpy as jnp
import flax.linen as nn

rnn = nn.RNN(nn.SimpleCell(2), time_major=True, return_carry=True)
x = jax.random.normal(jax.random.key(0), (3, 2, 1))  # T=3, B=2, I=1
h0 = jnp.zeros((2, 2))
params = rnn.init(jax.random.key(1), x, initial_carry=h0, seq_lengths=jnp.array([3, 0]))
carry, _ = rnn.apply(params, x, initial_carry=h0, seq_lengths=jnp.array([3, 0]))
print("carry of the length-0 sequence:", carry[1], "initial carry:", h0[1])
print("CONFIRMED" if bool(jnp.any(carry[1] != h0[1])) else "NOT REPRODUCED", "length 0 returns a carry that is not the initial one")
