"""Full analysis (:func:`transflow.analysis.analyze`) of a ViT-base-sized random model.

12 pre-LN layers, 197 tokens (224×224 image, 16×16 patches + class token), d = 768,
12 heads, d_ff = 3072, GELU, float32, on ``--threads`` cores (default 2): the streamed
trajectory with every sub-step's increment, the per-step token geometry (cosine matrices,
clusters, effective rank, distance to S1), the control increments and stride scaling, and
the refinement study at factors 1, 2, 4 (7 forward passes of 12 layers). Target: < 2 min
on 2 CPU cores. Records the wall time per part (compile included: one call), the process
peak RSS (``VmHWM``), the size a non-streamed sub-step trajectory would have, the
1-minute load average and the JAX version. With a load average ≥ 2 (other jobs on the
machine) the timing is marked "not measured reliably".

Run: ``.venv/bin/python benchmarks/bench_analysis.py`` (about 1 min on a quiet machine).
"""

from __future__ import annotations

import argparse
import os
import time

from _common import env_info, peak_rss_bytes, pin_threads, write_result


def build(n_layers: int, d: int, heads: int, d_ff: int, image: int, patch: int):
    import jax
    import jax.numpy as jnp

    from transflow import LayerControls, NormParams, PreNormScheme, SplitTransformer, stack_controls
    from transflow.vision import PatchEmbedding, VisionTransformer

    f32 = jnp.float32
    keys = jax.random.split(jax.random.key(0), n_layers + 1)
    layers = [
        LayerControls.random(
            d,
            n_heads=heads,
            d_ff=d_ff,
            activation="gelu",
            bias=True,
            eps=1e-12,
            dtype=f32,
            key=k,
        )
        for k in keys[1:]
    ]
    controls = jax.tree.map(lambda a: a.astype(f32), stack_controls(layers))
    final = NormParams(jnp.ones((d,), f32), jnp.zeros((d,), f32), 1e-12)
    enc = SplitTransformer(controls, PreNormScheme(), 1.0, final)
    emb = PatchEmbedding.random(3, d, image_size=image, patch_size=patch, dtype=f32, key=keys[0])
    return VisionTransformer(emb, enc, None)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--factors", type=int, nargs="+", default=[1, 2, 4])
    args = p.parse_args(argv)
    threads = pin_threads(args.threads)
    load_before = os.getloadavg()[0]

    import jax
    import jax.numpy as jnp
    import numpy as np

    from transflow.analysis import analyze

    d, heads, d_ff, image, patch = 768, 12, 3072, 224, 16
    model = build(args.layers, d, heads, d_ff, image, patch)
    x = jax.random.normal(jax.random.key(1), (3, image, image), jnp.float32)
    t0 = time.perf_counter()
    res = analyze(model, x, factors=tuple(args.factors))
    total = time.perf_counter() - t0
    load_after = os.getloadavg()[0]
    n_tok = res["diagnostics"]["states"].shape[1]
    # A non-streamed sub-step trajectory: per layer ln1, attention, ln2, residual (n, d)
    # and ffn1, ffn2 ((n, d_ff), (n, d)), 4 bytes each.
    substep_bytes = args.layers * n_tok * (5 * d + d_ff) * 4
    load = max(load_before, load_after)
    result = {
        "model": f"ViT-base-sized random: {args.layers} layers, {n_tok} tokens, d={d}, "
        f"{heads} heads, d_ff={d_ff}, GELU, pre-LN, float32",
        "threads": threads,
        "factors": args.factors,
        "seconds_total": total,
        "seconds_parts": res["seconds"],
        "target_seconds": 120.0,
        "met": total < 120.0,
        "peak_rss_gib": peak_rss_bytes() / 2**30,
        "non_streamed_substep_trajectory_gib": substep_bytes / 2**30,
        "load_average_before_after": [load_before, load_after],
        "reliable": load < 2.0,
        "note": "measured" if load < 2.0 else "not measured reliably (load average >= 2)",
        "refinement_order": res["refinement"]["order"],
        "trajectory_output_error": res["trajectory_output_error"],
        "min_cosine_last": float(np.asarray(res["diagnostics"]["min_cosine"])[-1]),
        **env_info(),
    }
    path = write_result("analysis", result)
    print(
        f"full analysis: {total:.1f} s (target < 120 s; {result['note']}), parts "
        f"{ {k: round(v, 1) for k, v in res['seconds'].items()} }, peak RSS "
        f"{result['peak_rss_gib']:.2f} GiB, load {load_before:.1f}/{load_after:.1f}, "
        f"jax {result['jax_version']}, {threads} threads -> {path}"
    )
    return result


if __name__ == "__main__":
    main()
