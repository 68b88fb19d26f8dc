#!/usr/bin/env bash
# Run transflow's benchmarks on one GPU, unattended, in under five minutes (issue #15).
#
#   bash benchmarks/gpu.sh            # from the repository root
#
# Needs a JAX build with CUDA in .venv (e.g. `.venv/bin/pip install "jax[cuda12]==$JAX_PIN"`;
# the CPU constraints file of the Makefile installs the CPU build). The code is unchanged:
# the same jit-compiled operators run on whatever `jax.default_backend()` is.
#
# What it does, each step under its own time limit so that a slow step cannot take the
# others with it, and the summary is written from whatever finished (a partial summary):
#   1. agreement at matmul precision "highest": the layer benchmark's transflow output in
#      fp32 against the same model in fp64 on the GPU (no torch: torch here is a CPU build);
#   2. speed at the default matmul precision (TF32 on Hopper/Ampere): bench_layer with 20
#      calls per timed measurement (one dispatch is too short to time), then the compile
#      and chunked benchmarks; no one-thread CPU rerun, no other benchmarks;
#   3. run_all.py --summarize-only --gpu: benchmarks/results/gpu/summary.json, with the
#      jax version it ran with and the precision of each part.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
JAX_PIN=${JAX_PIN:-0.10.2}   # the version these benchmarks were written and measured with
OUT=${OUT_DIR:-benchmarks/results/gpu}
mkdir -p "$OUT"
export XLA_PYTHON_CLIENT_PREALLOCATE=false   # device peak memory then means something
backend=$("$PY" -c 'import jax; print(jax.default_backend())')
if [ "$backend" != "gpu" ] && [ "$backend" != "cuda" ]; then
    echo "gpu.sh: JAX backend is '$backend', not a GPU; install jax[cuda12]==$JAX_PIN first." >&2
    exit 2
fi
have=$("$PY" -c 'import jax; print(jax.__version__)')
if [ "$have" != "$JAX_PIN" ]; then
    echo "gpu.sh: WARNING: jax $have, the benchmarks were measured with $JAX_PIN" >&2
fi
"$PY" -c 'import jax; print("jax", jax.__version__, jax.devices())' | tee "$OUT/env.txt"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee -a "$OUT/env.txt" || true

step() {  # step NAME LIMIT_S CMD...: run with a time limit, record its exit status
    local name=$1 limit=$2; shift 2
    echo "== $name (limit ${limit}s)"
    timeout "$limit" "$@"
    echo "$name $?" >> "$OUT/steps.txt"
}
: > "$OUT/steps.txt"
step agreement 60 env JAX_DEFAULT_MATMUL_PRECISION=highest "$PY" - <<'EOF'
import json, jax, jax.numpy as jnp
jax.config.update("jax_enable_x64", True)
from transflow import LayerControls, stack_controls, evolve
keys = jax.random.split(jax.random.key(0), 6)
th = stack_controls([LayerControls.random(256, n_heads=8, d_ff=1024, eps=1e-5, key=k) for k in keys])
u = jax.random.normal(jax.random.key(1), (256, 256))
y64 = jax.jit(evolve)(u, th)
y32 = jax.jit(evolve)(u.astype(jnp.float32), jax.tree.map(lambda a: a.astype(jnp.float32) if jnp.issubdtype(a.dtype, jnp.floating) else a, th))
rel = float(jnp.max(jnp.abs(y32 - y64)) / jnp.max(jnp.abs(y64)))
print("fp32 (precision highest) vs fp64 on the GPU, max rel diff", rel)
json.dump({"matmul_precision": "highest", "fp32_vs_fp64_rel": rel, "target": 1e-5},
          open("benchmarks/results/gpu/agreement.json", "w"), indent=2)
EOF
step layer 120 "$PY" benchmarks/bench_layer.py --no-torch --inner 20 --rounds 10 --out "$OUT"
step compile 60 "$PY" benchmarks/bench_compile.py --rounds 2 --out "$OUT"
step chunked 90 "$PY" benchmarks/bench_chunked.py --out "$OUT"
"$PY" benchmarks/run_all.py --summarize-only --gpu --out "$OUT"
cat "$OUT/steps.txt"
