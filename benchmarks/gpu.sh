#!/usr/bin/env bash
# Run the whole transflow benchmark on a GPU in under five minutes (issue #8).
#
#   bash benchmarks/gpu.sh            # from the repository root
#
# Needs a JAX build with CUDA in .venv (e.g. `.venv/bin/pip install -U "jax[cuda12]"`; the
# CPU constraints file of the Makefile installs the CPU build). The code itself is
# unchanged: the same jit-compiled operators run on whatever `jax.default_backend()` is.
# torch is the CPU build here, so the torch comparison is skipped (a GPU-vs-CPU ratio
# would mean nothing); absolute GPU times, the flop fraction against the XLA matmul rate
# on the GPU, the compile ratio and the chunked run at 32768 tokens (host RSS and device
# peak memory) are recorded in benchmarks/results/gpu/.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
export XLA_PYTHON_CLIENT_PREALLOCATE=false   # device peak memory then means something
backend=$("$PY" -c 'import jax; print(jax.default_backend())')
if [ "$backend" != "gpu" ] && [ "$backend" != "cuda" ]; then
    echo "gpu.sh: JAX backend is '$backend', not a GPU; install jax[cuda12] first." >&2
    exit 2
fi
"$PY" -c 'import jax; print("jax", jax.__version__, jax.devices())'
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
timeout 290 "$PY" benchmarks/run_all.py --skip-torch --no-others --out benchmarks/results/gpu
