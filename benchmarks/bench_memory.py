"""Memory of one training step against the number of time steps N_t (issue 7).

For the digits ViT of ``transflow.control`` (float32) and N_t ∈ {8, 16, 32, 64}, compiles
one full training step (loss, gradient through the split scheme, AdamW update:
``transflow.control.make_step``) and the gradient alone, and reads XLA's compiled memory
analysis (``jax.jit(...).lower(...).compile().memory_analysis()``):

- ``temp``: the working memory of the step (activations kept for the backward pass,
  their recomputation, gradient and update temporaries) — what rematerialisation acts on;
- ``args``/``outputs``: parameters, optimizer state, batch, and the returned state. The
  controls are one set per time step, so these grow linearly with N_t by construction.

Three rematerialisation modes: ``none`` (store every sub-step), ``step``
(``jax.checkpoint`` per step: one state per step) and ``nested`` (two-level √N_t
checkpointing, ``transflow.evolve(..., remat=Remat("nested"))``). The headline is
``temp(64) / temp(8)`` of the training step with ``nested`` (required: ≤ 2).

Run: ``.venv/bin/python benchmarks/bench_memory.py`` (~1-3 min on 2 cores); writes
``benchmarks/results/memory.json`` and prints a table and the JAX version.
"""

from __future__ import annotations

import json
import pathlib
import platform
import sys
import time

RESULTS = pathlib.Path(__file__).resolve().parent / "results" / "memory.json"


def measure(n_steps: int, remat: str, *, batch: int, d: int, n_heads: int) -> dict:
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    from transflow.control import cross_entropy_loss, make_optimizer, make_vit

    model = make_vit(
        d=d, n_steps=n_steps, n_heads=n_heads, remat=remat, dtype=jnp.float32, key=jax.random.key(0)
    )
    opt = make_optimizer(1e-3, num_steps=100)
    params, static = eqx.partition(model, eqx.is_inexact_array)
    opt_state = opt.init(params)
    x = jnp.zeros((batch, 8, 8), jnp.float32)
    y = jnp.zeros((batch,), jnp.int32)

    def loss(p, x, y):
        return cross_entropy_loss(eqx.combine(p, static), x, y)[0]

    def train_step(p, s, x, y):  # the body of make_step, on the array part of the model
        g = jax.grad(loss)(p, x, y)
        updates, s = opt.update(g, s, p)
        return eqx.apply_updates(p, updates), s

    out = {"n_steps": n_steps, "remat": remat}
    for name, fn, args in (
        ("train_step", train_step, (params, opt_state, x, y)),
        ("grad", jax.grad(loss), (params, x, y)),
    ):
        t0 = time.perf_counter()
        ma = jax.jit(fn).lower(*args).compile().memory_analysis()
        out[name] = {
            "temp_bytes": int(ma.temp_size_in_bytes),
            "argument_bytes": int(ma.argument_size_in_bytes),
            "output_bytes": int(ma.output_size_in_bytes),
            "compile_seconds": time.perf_counter() - t0,
        }
    out["param_bytes"] = int(sum(a.size * a.dtype.itemsize for a in jax.tree.leaves(params)))
    return out


def _total(row: dict) -> int:
    t = row["train_step"]
    return t["temp_bytes"] + t["argument_bytes"] + t["output_bytes"]


def main(argv=None) -> dict:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="only N_t = 8, 64")
    parser.add_argument("--out", default=None, help="results directory")
    args = parser.parse_args(argv)
    import jax
    import jaxlib

    batch, d, n_heads = 256, 32, 2
    depths = (8, 64) if args.quick else (8, 16, 32, 64)
    modes = ("none", "step", "nested")
    print(
        f"jax {jax.__version__}, jaxlib {jaxlib.__version__}, backend "
        f"{jax.default_backend()}, python {platform.python_version()}"
    )
    rows = [measure(n, m, batch=batch, d=d, n_heads=n_heads) for m in modes for n in depths]
    print(f"\nDigits ViT, d={d}, {n_heads} heads, 16 tokens, batch {batch}, float32")
    print(f"{'remat':>7} {'N_t':>4} {'step temp MiB':>14} {'grad temp MiB':>14} {'params MiB':>11}")
    for r in rows:
        print(
            f"{r['remat']:>7} {r['n_steps']:>4} {r['train_step']['temp_bytes'] / 2**20:14.2f} "
            f"{r['grad']['temp_bytes'] / 2**20:14.2f} {r['param_bytes'] / 2**20:11.2f}"
        )
    ratios = {}
    for m in modes:
        by = {r["n_steps"]: r for r in rows if r["remat"] == m}
        ratios[m] = {
            "train_step_temp_64_over_8": by[64]["train_step"]["temp_bytes"]
            / by[8]["train_step"]["temp_bytes"],
            "grad_temp_64_over_8": by[64]["grad"]["temp_bytes"] / by[8]["grad"]["temp_bytes"],
            # temp + arguments + outputs: also counts the per-step controls, gradients'
            # outputs and optimizer state, which grow linearly with N_t by construction
            "train_step_total_64_over_8": _total(by[64]) / _total(by[8]),
        }
    print("\ntemp(64)/temp(8):", json.dumps(ratios, indent=1))
    result = {
        "measures": "XLA's compile-time memory analysis of the jitted step and gradient "
        "(temp = working memory incl. residuals kept for the backward pass; argument and "
        "output bytes); not a resident-set size",
        "jax_version": jax.__version__,
        "backend": jax.default_backend(),
        "config": {"batch": batch, "d": d, "n_heads": n_heads, "tokens": 16, "dtype": "float32"},
        "rows": rows,
        "ratios": ratios,
        "headline": {
            "nested_train_step_temp_64_over_8": ratios["nested"]["train_step_temp_64_over_8"],
            "nested_train_step_total_64_over_8": ratios["nested"]["train_step_total_64_over_8"],
            "required_at_most": 2.0,
        },
    }
    path = RESULTS if args.out is None else pathlib.Path(args.out) / RESULTS.name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    print(f"wrote {path}")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
