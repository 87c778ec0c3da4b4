#!/usr/bin/env bash
# One command for a machine with one CUDA GPU (under 5 minutes): checks and times fused-gpu.
#
#   benchmarks/gpu.sh [REPORT_DIR]        # default REPORT_DIR: reports/gpu
#
# 1. sweeps fused-gpu (Triton) and torch-native-cuda (cuDNN) with the gpu profile (f32, f16, bf16),
#    fused-gpu's s6, slstm and conv1d kernels with the families profile (--mode s6, --mode slstm,
#    --mode conv1d: f64, f32)
#    and its mlstm, gla, gdn, deltaproduct, rwkv7 and kda kernels (Triton chunk hand-off; rwkv7's per
#    step) with the matrix profile (f64, f32);
# 2. runs the fused-gpu mutants on CUDA (each must be caught, no false alarm), the s6, slstm and
#    matrix-family ones on their family's cases;
# 3. times fused-gpu against cuDNN, forward + backward, on DeepBench-like shapes
#    (benchmarks/gpu_kernel.py: ratios side by side, with the GPU name and the date);
# 4. where flashrnn is installed (extra: flashrnn), sweeps flashrnn-triton, FlashRNN's Triton LSTM,
#    which cannot run on CPU (docs/foreign-targets.md). flashrnn-cuda is left out: FlashRNN compiles
#    its CUDA kernels for every hidden size and batch size, minutes each; judge it with a few cases:
#    gradcheck-rnn sweep -c gpu -t flashrnn-cuda -n 4;
# 5. where fla or mlstm_kernels is installed (extras: fla, mlstm), sweeps their Triton targets, which the
#    CPU interpreter cannot run or runs only slowly (docs/foreign-targets.md): fla-chunk, fla-recurrent
#    (compiled, not interpreted) and mlstm-triton, with the matrix-libs-gpu profile.
# Uses .venv/bin/python when present (else python3, or $PYTHON) with the project and its `gpu`
# extra installed (pip install -e '.[gpu]'); installs nothing itself. TF32 stays off unless
# GRADCHECK_RNN_TF32=1. Exit status: 0 when every step passed, 1 when a step failed, 3 without CUDA.
set -u
cd "$(dirname "$0")/.."
if [ -n "${PYTHON:-}" ]; then PY=$PYTHON; elif [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
REPORTS=${1:-reports/gpu}

if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "benchmarks/gpu.sh needs a CUDA GPU, and torch ($PY) sees none on this machine; nothing was run." >&2
    exit 3
fi
if ! "$PY" -c 'import triton' 2>/dev/null; then
    echo "benchmarks/gpu.sh needs triton: pip install -e '.[gpu]' (with $PY); nothing was run." >&2
    exit 3
fi
unset TRITON_INTERPRET  # compiled kernels on the GPU, never the interpreter here

status=0
step() {  # step NAME COMMAND...: run, time, remember a failure, go on
    local name=$1 start=$SECONDS
    shift
    echo "== $name"
    "$@" || status=1
    echo "== $name: $((SECONDS - start)) s"
}
family_mutants() {  # family_mutants FAMILY...: "-m NAME" for each GPU mutant of those families
    "$PY" -c 'import sys; from gradcheck_rnn.targets.kernel_bugs import GPU_FAMILY_MUTANTS as M
print(" ".join(f"-m {n}" for n, (f, _) in M.items() if f in sys.argv[1:]))' "$@"
}
mutants=$("$PY" -c 'from gradcheck_rnn.targets.kernel_bugs import GPU_MUTANTS; print(" ".join(f"-m {n}" for n in GPU_MUTANTS))')
s6_mutants=$(family_mutants s6)
slstm_mutants=$(family_mutants slstm)
matrix_mutants=$(family_mutants mlstm gla gdn deltaproduct rwkv7 kda)

# shellcheck disable=SC2086  # $mutants is a list of options
step "1/5 sweep: fused-gpu and torch-native-cuda, gpu profile" \
    "$PY" -m gradcheck_rnn.cli sweep -c gpu -t fused-gpu -t torch-native-cuda --report-dir "$REPORTS"
step "1/5 sweep: fused-gpu, families profile, s6" \
    "$PY" -m gradcheck_rnn.cli sweep -c families --mode s6 -t fused-gpu --report-dir "$REPORTS"
step "1/5 sweep: fused-gpu, families profile, slstm" \
    "$PY" -m gradcheck_rnn.cli sweep -c families --mode slstm -t fused-gpu --report-dir "$REPORTS"
step "1/5 sweep: fused-gpu, families profile, conv1d" \
    "$PY" -m gradcheck_rnn.cli sweep -c families --mode conv1d -t fused-gpu --report-dir "$REPORTS"
# the float64 references of a matrix case take seconds of CPU: 8 workers, not the default one per 100 cases
step "1/5 sweep: fused-gpu, matrix profile, mlstm gla gdn deltaproduct rwkv7 kda" \
    "$PY" -m gradcheck_rnn.cli sweep -c matrix -t fused-gpu -j 8 --report-dir "$REPORTS"
step "2/5 fused-gpu mutants on CUDA" \
    "$PY" -m gradcheck_rnn.cli mutants -c gpu -n 24 $mutants --report-dir "$REPORTS"
# shellcheck disable=SC2086
step "2/5 fused-gpu s6 mutants on CUDA, families profile" \
    "$PY" -m gradcheck_rnn.cli mutants -c families --mode s6 -n 24 $s6_mutants --report-dir "$REPORTS"
# shellcheck disable=SC2086
step "2/5 fused-gpu slstm mutants on CUDA, families profile" \
    "$PY" -m gradcheck_rnn.cli mutants -c families --mode slstm -n 24 $slstm_mutants --report-dir "$REPORTS"
# shellcheck disable=SC2086
step "2/5 fused-gpu mlstm, gla, gdn, deltaproduct, rwkv7 and kda mutants on CUDA, matrix profile" \
    "$PY" -m gradcheck_rnn.cli mutants -c matrix -n 24 -j 8 $matrix_mutants --report-dir "$REPORTS"
step "3/5 fused-gpu vs cuDNN timing" "$PY" benchmarks/gpu_kernel.py
if "$PY" -c 'import flashrnn' 2>/dev/null; then
    step "4/5 sweep: flashrnn-triton, gpu profile" \
        "$PY" -m gradcheck_rnn.cli sweep -c gpu -t flashrnn-triton --report-dir "$REPORTS"
else
    echo "== 4/5 skipped: flashrnn is not installed (pip install -e '.[flashrnn]')"
fi
if "$PY" -c 'import fla' 2>/dev/null; then
    step "5/5 sweep: fla-chunk and fla-recurrent, matrix-libs-gpu profile" \
        "$PY" -m gradcheck_rnn.cli sweep -c matrix-libs-gpu --mode gla --mode gdn -t fla-chunk -t fla-recurrent \
        --report-dir "$REPORTS"
    # chunk_rwkv7 (fla-recurrent declines rwkv7: fused_recurrent_rwkv7 has no backward); f32 only, as fla computes
    step "5/5 sweep: fla-chunk on rwkv7, matrix profile" \
        "$PY" -m gradcheck_rnn.cli sweep -c matrix --mode rwkv7 --dtype f32 -n 40 -t fla-chunk -j 8 --report-dir "$REPORTS"
else
    echo "== 5/5 skipped: fla is not installed (pip install -e '.[fla]')"
fi
if "$PY" -c 'import mlstm_kernels' 2>/dev/null; then
    step "5/5 sweep: mlstm-triton, matrix-libs-gpu profile" \
        "$PY" -m gradcheck_rnn.cli sweep -c matrix-libs-gpu --mode mlstm -t mlstm-triton --report-dir "$REPORTS"
else
    echo "== 5/5 skipped: mlstm_kernels is not installed (pip install -e '.[mlstm]')"
fi
exit $status
