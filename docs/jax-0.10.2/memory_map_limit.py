"""jax 0.10.2 (XLA:CPU): a process at the kernel's limit of memory maps (vm.max_map_count, 65,530
by default on Linux) dies by a signal at its next compile, not with a Python exception.

XLA:CPU maps the code of every program it compiles, and a program kept (a jitted function alive,
its executable cached) keeps its maps. A process that compiles and keeps a program per shape (the
flax target: three per configuration, ~350 maps a case) reaches the limit after ~150 cases;
then LLVM cannot map the next program ("LLVM compilation error: Cannot allocate memory") and the
process is killed by SIGSEGV or SIGABRT. That is a resource limit every JIT compiler meets, not a
wrong result: gradcheck-rnn's worker processes retire before it (gradcheck_rnn/run/worker.py,
maps_near_limit). Linux only; numpy + jax. The child process is the one that dies.
"""

import subprocess
import sys

CHILD = r"""
import mmap
import jax, jax.numpy as jnp

limit = int(open("/proc/sys/vm/max_map_count").read())
def maps():
    return sum(1 for _ in open("/proc/self/maps"))
held = []  # anonymous shared maps, never merged: stand-ins for the code of earlier programs
while maps() < limit - 100:
    held += [mmap.mmap(-1, mmap.PAGESIZE) for _ in range((limit - 100 - maps()) // 2 + 1)]
print("maps in use:", maps(), "of", limit, flush=True)
for n in range(1, 200):  # one new program per shape, each kept, as a per-shape cache does
    f = jax.jit(lambda x: jax.jvp(lambda x: jnp.tanh(x @ x.T).sum(), (x,), (x,)))
    held.append(f)
    jax.block_until_ready(f(jnp.ones((n, 2))))
print("compiled every program", flush=True)
"""

done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=False)
print(done.stdout.strip())
print("\n".join(line for line in done.stderr.splitlines() if "LLVM" in line or "Cannot allocate" in line))
died = done.returncode < 0
print("CONFIRMED" if died else "NOT REPRODUCED", "XLA:CPU at the memory-map limit kills its process"
      + (f" (signal {-done.returncode})" if died else f" (exit code {done.returncode})"))
