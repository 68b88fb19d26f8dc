"""6-layer post-LN encoder: transflow (jit + vmap) vs torch, forward and forward+backward.

Shape (the issue's): fp32, batch 8, 256 tokens, d_model 256, 8 heads, d_ff 1024, 6 layers.
Both sides run on the same cores (the process's CPU affinity, printed) and are timed
interleaved, the order of the candidates alternating from round to round: per round one
transflow forward, one torch forward (its fused CPU fast path), one transflow
forward+backward (``jax.value_and_grad`` of a mean-square loss w.r.t. every weight), one
torch forward+backward (eager autograd, ``loss.backward()``), one large XLA matmul (the
practical ceiling the flop fraction refers to) and, as the run's sanity figure, one torch
matmul on one thread and one on all the process's threads.

    ratio_vs_torch       = median over rounds of (torch time / transflow time), forward
    ratio_fwdbwd         = the same for forward+backward
    flop_fraction        = (model matmul FLOPs / transflow forward time) / XLA matmul rate
    matmul_speedup       = torch matmul rate on all threads / on one thread (same rounds)

The run is *valid* (its ratios count as measured) only when the 1-minute load average,
read before and after, is below the number of cores and, with 2 or more threads, the
matmul speedup is at least 1.5; ``valid`` and ``validity`` say so in ``layer.json``.

Run: ``.venv/bin/python benchmarks/bench_layer.py`` (about 1 min on 2 cores).
"""

from __future__ import annotations

import argparse

from _common import (
    env_info,
    fmt,
    interleaved,
    load_average,
    per_round_ratio,
    pin_threads,
    validity,
    write_result,
)


def model_flops(batch: int, n: int, d: int, d_ff: int, layers: int) -> int:
    """Matmul FLOPs (2·m·n·k) of the forward: QKV, scores, γV, W_O and the two FFN maps."""
    per_seq = 2 * n * d * 3 * d + 2 * n * n * d * 2 + 2 * n * d * d + 2 * 2 * n * d * d_ff
    return batch * layers * per_seq


def backward_flops(batch: int, n: int, d: int, d_ff: int, layers: int) -> int:
    """Matmul FLOPs of the backward w.r.t. the weights: every forward matmul twice (the
    input and the weight cotangents; scores and γV: both operands), less the input
    cotangent of the first layer's Q, K, V maps (the input is not differentiated)."""
    return 2 * model_flops(batch, n, d, d_ff, layers) - batch * 2 * n * d * 3 * d


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
    ap.add_argument("--no-grad", action="store_true", help="forward only (no backward timing)")
    ap.add_argument(
        "--inner", type=int, default=1, help="calls per timed measurement (GPU: e.g. 20)"
    )
    ap.add_argument(
        "--torch-compile",
        action="store_true",
        help="also time torch.compile (inductor) forward and forward+backward (reported, "
        "no target; compiling takes about a minute on 2 cores)",
    )
    args = ap.parse_args(argv)
    threads = pin_threads(args.threads)
    load_before = load_average()

    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch

    from transflow import ConstantSteps
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
    params, static = eqx.partition(model, eqx.is_inexact_array)

    def loss(p, x):
        return jnp.mean(jax.vmap(eqx.combine(p, static))(x) ** 2)

    fwdbwd = jax.jit(jax.value_and_grad(loss))

    def loss_scan(p, x):  # the rolled layer loop (lax.scan), the default before "auto"
        m = eqx.combine(p, static)
        rolled = ConstantSteps(unroll=1)
        return jnp.mean(jax.vmap(lambda u: m(u, stepsize_controller=rolled))(x) ** 2)

    fwdbwd_scan = jax.jit(jax.value_and_grad(loss_scan))
    m = args.matmul
    a = jax.random.normal(jax.random.key(0), (m, m), jnp.float32)
    b = jax.random.normal(jax.random.key(1), (m, m), jnp.float32)
    matmul = jax.jit(lambda a, b: a @ b)
    ta, tb = torch.randn(m, m), torch.randn(m, m)

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

    def run_torch_fwdbwd():
        enc.train()  # dropout is 0: train mode only switches off the inference fast path
        enc.zero_grad(set_to_none=True)
        (enc(x) ** 2).mean().backward()
        enc.eval()

    def torch_matmul(n_threads):
        def f():
            torch.set_num_threads(n_threads)
            torch.mm(ta, tb)
            torch.set_num_threads(threads)

        return f

    candidates = {
        "transflow": lambda: fwd(xj).block_until_ready(),
        "torch": run_torch,
        "transflow_fwdbwd": lambda: jax.block_until_ready(fwdbwd(params, xj)),
        "transflow_fwdbwd_scan": lambda: jax.block_until_ready(fwdbwd_scan(params, xj)),
        "torch_fwdbwd": run_torch_fwdbwd,
        "xla_matmul": lambda: matmul(a, b).block_until_ready(),
        "torch_matmul_1thread": torch_matmul(1),
        "torch_matmul_all": torch_matmul(threads),
    }
    compile_s = None
    if args.torch_compile and not args.no_torch:
        import time

        t0 = time.perf_counter()
        enc_c = torch.compile(enc)  # inductor, the default backend
        enc_c.eval()
        with torch.inference_mode():
            enc_c(x)
        enc_c.train()
        (enc_c(x) ** 2).mean().backward()
        enc_c.eval()
        compile_s = time.perf_counter() - t0

        def run_compiled():
            with torch.inference_mode():
                enc_c(x)

        def run_compiled_fwdbwd():
            enc_c.train()
            enc_c.zero_grad(set_to_none=True)
            (enc_c(x) ** 2).mean().backward()
            enc_c.eval()

        candidates["torch_compile"] = run_compiled
        candidates["torch_compile_fwdbwd"] = run_compiled_fwdbwd
    if args.no_torch:
        for k in ("torch", "torch_fwdbwd", "torch_matmul_1thread", "torch_matmul_all"):
            del candidates[k]
    if args.no_grad:
        candidates.pop("transflow_fwdbwd")
        candidates.pop("transflow_fwdbwd_scan")
        candidates.pop("torch_fwdbwd", None)
    timings = interleaved(candidates, warmup=args.warmup, rounds=args.rounds, inner=args.inner)
    load_after = load_average()
    nan = {"median": float("nan"), "min": float("nan"), "max": float("nan"), "n": 0}
    for k in ("torch", "torch_fwdbwd", "transflow_fwdbwd", "transflow_fwdbwd_scan"):
        timings.setdefault(k, {**nan, "samples": []})
    flops = model_flops(B, n, d, ff, L)
    mm_rate = 2 * m**3 / timings["xla_matmul"]["median"]
    tf_rate = flops / timings["transflow"]["median"]
    torch_rate = flops / timings["torch"]["median"]
    speedup = None
    if "torch_matmul_all" in timings:
        speedup = per_round_ratio(timings, "torch_matmul_1thread", "torch_matmul_all")["median"]
    # Without torch (e.g. on a GPU) there is no thread-scaling sanity figure to check.
    valid, why = validity(
        cores=1 if args.no_torch else threads,
        load_before=load_before,
        load_after=load_after,
        speedup=speedup,
        spread=timings["xla_matmul"]["max"] / timings["xla_matmul"]["median"],
    )
    fwd_ratio = per_round_ratio(timings, "torch", "transflow")
    fb_ratio = per_round_ratio(timings, "torch_fwdbwd", "transflow_fwdbwd")
    fbu_ratio = per_round_ratio(timings, "torch_fwdbwd", "transflow_fwdbwd_scan")
    tc_ratio = tcb_ratio = None
    if "torch_compile" in timings:
        tc_ratio = per_round_ratio(timings, "torch_compile", "transflow")
        tcb_ratio = per_round_ratio(timings, "torch_compile_fwdbwd", "transflow_fwdbwd")
    torch_mm_rate = None
    if "torch_matmul_all" in timings:
        torch_mm_rate = 2 * m**3 / timings["torch_matmul_all"]["median"]
    # The ceiling: forward + backward at the run's own XLA matmul rate. A ratio above
    # torch_fwdbwd / ceiling needs transflow to beat the matmul kernel itself.
    fb_flops = flops + backward_flops(B, n, d, ff, L)
    fb_ideal_s = fb_flops / mm_rate
    fb_best = min(timings["transflow_fwdbwd"]["median"], timings["transflow_fwdbwd_scan"]["median"])
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
        # Headline ratios: medians of per-round ratios (robust to load between rounds).
        "ratio_vs_torch": None if fwd_ratio is None else fwd_ratio["median"],
        "ratio_vs_torch_per_round": fwd_ratio,
        "ratio_fwdbwd_vs_torch": None if fb_ratio is None else fb_ratio["median"],
        "ratio_fwdbwd_vs_torch_per_round": fb_ratio,
        "ratio_fwdbwd_scan_vs_torch": None if fbu_ratio is None else fbu_ratio["median"],
        "ratio_fwdbwd_scan_vs_torch_per_round": fbu_ratio,
        "ratio_vs_torch_compile": None if tc_ratio is None else tc_ratio["median"],
        "ratio_fwdbwd_vs_torch_compile": None if tcb_ratio is None else tcb_ratio["median"],
        "torch_compile_s": compile_s,
        "torch_matmul_gflops": None if torch_mm_rate is None else torch_mm_rate / 1e9,
        "fwdbwd_matmul_flops": fb_flops,
        # The default (`evolve`'s unroll="auto": unrolled at 6 layers) is the headline; the
        # rolled lax.scan loop is reported beside it.
        "fwdbwd_flop_fraction": fb_flops / timings["transflow_fwdbwd"]["median"] / mm_rate,
        "fwdbwd_flop_fraction_scan": (
            fb_flops / timings["transflow_fwdbwd_scan"]["median"] / mm_rate
        ),
        "fwdbwd_flop_fraction_best": fb_flops / fb_best / mm_rate,
        "torch_fwdbwd_flop_fraction": fb_flops / timings["torch_fwdbwd"]["median"] / mm_rate,
        "ratio_fwdbwd_ceiling": timings["torch_fwdbwd"]["median"] / fb_ideal_s,
        "flop_fraction": tf_rate / mm_rate,
        "torch_flop_fraction": torch_rate / mm_rate,
        "matmul_speedup_all_vs_1thread": speedup,
        "load_average_before": load_before,
        "load_average_after": load_after,
        "inner_calls_per_measurement": args.inner,
        "matmul_precision": str(jax.config.jax_default_matmul_precision),
        "valid": valid,
        "validity": why or ["load below the core count; threads scale"],
        **env_info(),
    }
    path = write_result("layer", result, args.out)
    print(
        f"[bench_layer] jax {result['jax_version']}, torch {result['torch_version']}, "
        f"threads: xla cores={threads}, torch={torch.get_num_threads()}, "
        f"torch fast path={fast_path}, load {load_before:.2f} -> {load_after:.2f}"
    )
    print(f"  shape B={B} n={n} d={d} H={H} d_ff={ff} L={L}; max|Δ| vs torch {max_abs_diff:.2e}")
    for k, s in timings.items():
        if s["n"]:
            print(f"  {k:21s} {fmt(s)}")
    print(
        f"  XLA matmul {mm_rate / 1e9:.1f} GFLOP/s; transflow {tf_rate / 1e9:.1f} GFLOP/s "
        f"(flop_fraction {result['flop_fraction']:.2f}); torch {torch_rate / 1e9:.1f} GFLOP/s "
        f"({result['torch_flop_fraction']:.2f})"
    )
    print(
        f"  fwd+bwd at {result['fwdbwd_flop_fraction']:.2f} of the XLA matmul rate "
        f"(torch {result['torch_fwdbwd_flop_fraction']:.2f}); at the matmul rate the ratio "
        f"would be {result['ratio_fwdbwd_ceiling']:.2f}"
    )
    for name, r in (
        ("forward", fwd_ratio),
        ("fwd+bwd", fb_ratio),
        ("fwd+bwd (rolled scan, unroll=1)", fbu_ratio),
        ("forward, torch.compile", tc_ratio),
        ("fwd+bwd, torch.compile", tcb_ratio),
    ):
        if r is not None:
            print(
                f"  torch/transflow {name}: {r['median']:.2f} "
                f"(per round {r['min']:.2f}-{r['max']:.2f}, n={r['n']})"
            )
    if speedup is not None:
        print(f"  sanity: torch matmul {threads} threads / 1 thread = {speedup:.2f}x")
    print(f"  valid run: {valid}" + ("" if valid else f" ({'; '.join(why)})"))
    print(f"  -> {path}")
    return result


if __name__ == "__main__":
    main()
