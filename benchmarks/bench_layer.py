"""6-layer post-LN encoder forward: transflow (jit + vmap) vs torch's fused CPU fast path.

Shape (the issue's): fp32, batch 8, 256 tokens, d_model 256, 8 heads, d_ff 1024, 6 layers.
Both sides run on the same cores (the process's CPU affinity, printed) and are timed
interleaved: per round one transflow forward, one torch forward and one large XLA matmul,
whose rate is the practical ceiling the flop fraction refers to.

    ratio_vs_torch = median torch time / median transflow time          (target ≥ 1.0)
    flop_fraction  = (model matmul FLOPs / transflow time) / XLA matmul rate  (target ≥ 0.5)

Run: ``.venv/bin/python benchmarks/bench_layer.py`` (about 1 min on 2 cores).
"""

from __future__ import annotations

import argparse

from _common import env_info, fmt, interleaved, pin_threads, write_result


def model_flops(batch: int, n: int, d: int, d_ff: int, layers: int) -> int:
    """Matmul FLOPs (2·m·n·k) of the forward: QKV, scores, γV, W_O and the two FFN maps."""
    per_seq = 2 * n * d * 3 * d + 2 * n * n * d * 2 + 2 * n * d * d + 2 * 2 * n * d * d_ff
    return batch * layers * per_seq


def torch_uses_fast_path(enc, x) -> bool:
    import torch

    with torch.inference_mode(), torch.profiler.profile() as prof:
        enc(x)
    return any("_transformer_encoder_layer_fwd" in e.name for e in prof.events())


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--threads", type=int, default=None, help="cores for both (default all)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--d-ff", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--matmul", type=int, default=2048, help="size of the reference matmul")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--out", default=None, help="results directory")
    ap.add_argument(
        "--no-torch", action="store_true", help="time transflow and the matmul only (e.g. on a GPU)"
    )
    args = ap.parse_args(argv)
    threads = pin_threads(args.threads)

    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch

    from transflow.interop import from_torch

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    B, n, d, H, ff, L = args.batch, args.tokens, args.d_model, args.heads, args.d_ff, args.layers
    layer = torch.nn.TransformerEncoderLayer(d, H, ff, dropout=0.0, batch_first=True)
    enc = torch.nn.TransformerEncoder(layer, L, enable_nested_tensor=False).eval()
    x = torch.randn(B, n, d)
    model = from_torch(enc, dtype=jnp.float32)
    xj = jnp.asarray(x.numpy())
    fwd = jax.jit(jax.vmap(model))
    m = args.matmul
    a = jax.random.normal(jax.random.key(0), (m, m), jnp.float32)
    b = jax.random.normal(jax.random.key(1), (m, m), jnp.float32)
    matmul = jax.jit(lambda a, b: a @ b)

    y = np.asarray(fwd(xj))
    with torch.inference_mode():
        y_torch = enc(x).numpy()
    max_abs_diff = float(np.max(np.abs(y - y_torch)))
    fast_path = None if args.no_torch else torch_uses_fast_path(enc, x)
    xla_flops = fwd.lower(xj).compile().cost_analysis()
    xla_flops = xla_flops[0] if isinstance(xla_flops, list | tuple) else xla_flops

    def run_torch():
        with torch.inference_mode():
            enc(x)

    candidates = {
        "transflow": lambda: fwd(xj).block_until_ready(),
        "torch": run_torch,
        "xla_matmul": lambda: matmul(a, b).block_until_ready(),
    }
    if args.no_torch:
        del candidates["torch"]
    timings = interleaved(candidates, warmup=args.warmup, rounds=args.rounds)
    if args.no_torch:
        timings["torch"] = {
            "median": float("nan"),
            "min": float("nan"),
            "max": float("nan"),
            "n": 0,
            "samples": [],
        }
    flops = model_flops(B, n, d, ff, L)
    mm_rate = 2 * m**3 / timings["xla_matmul"]["median"]
    tf_rate = flops / timings["transflow"]["median"]
    torch_rate = flops / timings["torch"]["median"]
    # Per-round ratios as well: robust to load that changes between rounds.
    per_round = [
        t / j for t, j in zip(timings["torch"]["samples"], timings["transflow"]["samples"])
    ]
    result = {
        "benchmark": "layer",
        "shape": {"batch": B, "tokens": n, "d_model": d, "heads": H, "d_ff": ff, "layers": L},
        "threads": {"transflow_xla_cores": threads, "torch": torch.get_num_threads()},
        "torch_fast_path": fast_path,
        "max_abs_diff_vs_torch": max_abs_diff,
        "model_matmul_flops": flops,
        "xla_cost_analysis_flops_one_scan_step": float(xla_flops.get("flops", float("nan"))),
        "timings_s": timings,
        "xla_matmul_gflops": mm_rate / 1e9,
        "transflow_gflops": tf_rate / 1e9,
        "torch_gflops": torch_rate / 1e9,
        "ratio_vs_torch": None
        if args.no_torch
        else timings["torch"]["median"] / timings["transflow"]["median"],
        "ratio_vs_torch_per_round": {
            "median": float(np.median(per_round)),
            "min": min(per_round),
            "max": max(per_round),
        }
        if per_round
        else None,
        "flop_fraction": tf_rate / mm_rate,
        "torch_flop_fraction": torch_rate / mm_rate,
        **env_info(),
    }
    path = write_result("layer", result, args.out)
    print(
        f"[bench_layer] jax {result['jax_version']}, torch {result['torch_version']}, "
        f"threads: xla cores={threads}, torch={torch.get_num_threads()}, "
        f"torch fast path={fast_path}, load={result['load_average_1min']:.1f}"
    )
    print(f"  shape B={B} n={n} d={d} H={H} d_ff={ff} L={L}; max|Δ| vs torch {max_abs_diff:.2e}")
    for k, s in timings.items():
        print(f"  {k:11s} {fmt(s)}")
    print(
        f"  XLA matmul {mm_rate / 1e9:.1f} GFLOP/s; transflow {tf_rate / 1e9:.1f} GFLOP/s "
        f"(flop_fraction {result['flop_fraction']:.2f}); torch {torch_rate / 1e9:.1f} GFLOP/s "
        f"({result['torch_flop_fraction']:.2f})"
    )
    if not args.no_torch:
        print(
            f"  ratio_vs_torch = {result['ratio_vs_torch']:.2f} (target >= 1.0); "
            f"per-round median {result['ratio_vs_torch_per_round']['median']:.2f}"
        )
    print(f"  -> {path}")
    return result


if __name__ == "__main__":
    main()
