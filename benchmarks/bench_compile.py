"""Compile time of ``evolve`` at 48 steps vs 1 step (the issue's target: ratio ≤ 1.5).

The controls are stacked over time and ``evolve`` runs the steps with ``lax.scan``, so the
compiled program holds one step whatever N_t is. Each measurement traces, lowers and
compiles a fresh ``jax.jit(jax.vmap(evolve))`` (no cache hit possible: a new function
object each time); 1-step and 48-step compilations alternate, medians are reported.

Run: ``.venv/bin/python benchmarks/bench_compile.py`` (about 30 s on 2 cores).
"""

from __future__ import annotations

import argparse
import time

from _common import env_info, pin_threads, stats, write_result


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--steps", type=int, nargs=2, default=(1, 48))
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--d-ff", type=int, default=1024)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    threads = pin_threads(args.threads)

    import jax
    import jax.numpy as jnp

    from transflow import LayerControls, evolve, stack_controls

    d, H, ff = args.d_model, args.heads, args.d_ff
    one = LayerControls.random(
        d, n_heads=H, d_ff=ff, bias=True, eps=1e-5, dtype=jnp.float32, key=jax.random.key(0)
    )
    one = jax.tree.map(lambda x: x.astype(jnp.float32), one)
    controls = {N: stack_controls([one] * N) for N in args.steps}
    x = jnp.zeros((args.batch, args.tokens, d), jnp.float32) + jnp.arange(d, dtype=jnp.float32)

    def compile_once(N):
        f = jax.jit(jax.vmap(lambda u, th: evolve(u, th), in_axes=(0, None)))
        t0 = time.perf_counter()
        traced = f.trace(x, controls[N])
        t1 = time.perf_counter()
        lowered = traced.lower()
        t2 = time.perf_counter()
        compiled = lowered.compile()
        t3 = time.perf_counter()
        compiled(x, controls[N]).block_until_ready()  # it runs
        return t1 - t0, t2 - t1, t3 - t2, t3 - t0

    compile_once(args.steps[0])  # warm-up: imports, first-use initialisation
    samples = {N: {"trace": [], "lower": [], "compile": [], "total": []} for N in args.steps}
    for _ in range(args.rounds):
        for N in args.steps:
            for key, t in zip(("trace", "lower", "compile", "total"), compile_once(N)):
                samples[N][key].append(t)
    timings = {str(N): {k: stats(v) for k, v in s.items()} for N, s in samples.items()}
    n0, n1 = (str(s) for s in args.steps)
    ratio = timings[n1]["total"]["median"] / timings[n0]["total"]["median"]
    ratio_min = timings[n1]["total"]["min"] / timings[n0]["total"]["min"]
    f = jax.jit(jax.vmap(lambda u, th: evolve(u, th), in_axes=(0, None)))
    hlo_chars = {str(N): len(f.lower(x, controls[N]).as_text()) for N in args.steps}
    result = {
        "benchmark": "compile",
        "steps": list(args.steps),
        "shape": {"batch": args.batch, "tokens": args.tokens, "d_model": d, "heads": H, "d_ff": ff},
        "threads": threads,
        "timings_s": timings,
        f"compile_ratio_{n1}_vs_{n0}": ratio,
        "compile_ratio": ratio,
        "compile_ratio_of_minima": ratio_min,
        "lowered_program_chars": hlo_chars,
        **env_info(),
    }
    path = write_result("compile", result, args.out)
    print(
        f"[bench_compile] jax {result['jax_version']}, cores={threads}, "
        f"load={result['load_average_1min']:.1f}"
    )
    for N in (n0, n1):
        t = timings[N]
        print(
            f"  {N:>3} steps: trace+lower+compile {t['total']['median']:.3f} s "
            f"(min {t['total']['min']:.3f}, max {t['total']['max']:.3f}); "
            f"XLA compile alone {t['compile']['median']:.3f} s"
        )
    print(
        f"  compile_ratio_{n1}_vs_{n0} = {ratio:.2f} (target <= 1.5); ratio of minima "
        f"{ratio_min:.2f}; lowered program size {hlo_chars} chars -> {path}"
    )
    return result


if __name__ == "__main__":
    main()
