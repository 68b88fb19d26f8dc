"""Long sequences: transflow's chunked attention core vs torch's ``scaled_dot_product_attention``.

Same shapes on both sides: one sequence, ``H`` heads of width ``c`` (default 4 × 32), fp32,
``n`` ∈ {4096, 16384, 32768} tokens, non-causal and causal, forward and forward+backward
(gradient of ``Σ out²`` w.r.t. q, k, v). transflow runs
:func:`transflow.online_softmax_attention` (the memory-linear operator behind
``attention(..., implementation="chunked")``) under ``jax.jit``; torch runs SDPA (on CPU
its flash kernel). Every measurement is a *fresh subprocess* (clean peak-RSS counter): it
compiles/warms up once, times ``--reps`` calls (median) and reports its peak resident set
size (``ru_maxrss``, the whole process including the runtime) and, as the floor, the RSS
after setting up the inputs.

    .venv/bin/python benchmarks/bench_longseq.py                 # about 10 min on 2 cores
    .venv/bin/python benchmarks/bench_longseq.py --tokens 4096   # a quick look

Writes ``longseq.json``: per (tokens, causal, mode) the median seconds and peak RSS of
both, ``time_ratio_torch_over_transflow`` (> 1: transflow faster), the RSS ratio, and
``causal_speedup`` (non-causal time ÷ causal time) per implementation, with the load
average before/after and the JAX version.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys

from _common import env_info, load_average, pin_threads, validity, write_result

GIB = 2**30


def _rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def worker(impl: str, n: int, H: int, c: int, causal: bool, mode: str, reps: int) -> dict:
    import statistics
    import time

    import numpy as np

    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((H, n, c), dtype=np.float32) for _ in range(3))
    times = []
    if impl == "transflow":
        import jax
        import jax.numpy as jnp

        from transflow import online_softmax_attention

        q, k, v = (jnp.asarray(a) * (c**-0.25 if a is not v else 1.0) for a in (q, k, v))

        def fwd(q, k, v):
            return online_softmax_attention(q, k, v, causal=causal)

        if mode == "fwd":
            f = jax.jit(fwd)
        else:
            f = jax.jit(jax.grad(lambda q, k, v: jnp.sum(fwd(q, k, v) ** 2), argnums=(0, 1, 2)))
        floor = _rss()
        jax.block_until_ready(f(q, k, v))
        for _ in range(reps):
            t0 = time.perf_counter()
            jax.block_until_ready(f(q, k, v))
            times.append(time.perf_counter() - t0)
    else:
        import torch

        torch.set_num_threads(len(__import__("os").sched_getaffinity(0)))
        q, k, v = (torch.from_numpy(a)[None] for a in (q, k, v))
        grad = mode == "fwdbwd"
        for t in (q, k, v):
            t.requires_grad_(grad)
        sdpa = torch.nn.functional.scaled_dot_product_attention
        floor = _rss()

        def call():
            if grad:
                for t in (q, k, v):
                    t.grad = None
                (sdpa(q, k, v, is_causal=causal) ** 2).sum().backward()
            else:
                with torch.inference_mode():
                    sdpa(q, k, v, is_causal=causal)

        call()
        for _ in range(reps):
            t0 = time.perf_counter()
            call()
            times.append(time.perf_counter() - t0)
    return {
        "seconds": statistics.median(times),
        "seconds_all": times,
        "peak_rss_gib": _rss() / GIB,
        "floor_rss_gib": floor / GIB,
    }


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tokens", type=int, nargs="+", default=[4096, 16384, 32768])
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", default=None, help="results directory")
    ap.add_argument("--worker", nargs=6, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    threads = pin_threads(args.threads)
    if args.worker:
        impl, n, causal, mode, H, c = args.worker
        res = worker(impl, int(n), int(H), int(c), causal == "1", mode, args.reps)
        print("RESULT " + json.dumps(res))
        return res
    load_before = load_average()
    rows = []
    for n in args.tokens:
        for causal in (False, True):
            for mode in ("fwd", "fwdbwd"):
                row = {"tokens": n, "causal": causal, "mode": mode}
                for impl in ("transflow", "torch"):
                    cmd = [
                        sys.executable,
                        __file__,
                        "--reps",
                        str(args.reps),
                        "--worker",
                        impl,
                        str(n),
                        "1" if causal else "0",
                        mode,
                        str(args.heads),
                        str(args.head_dim),
                    ]
                    if args.threads:
                        cmd += ["--threads", str(args.threads)]
                    proc = subprocess.run(cmd, capture_output=True, text=True)
                    line = [s for s in proc.stdout.splitlines() if s.startswith("RESULT ")]
                    if proc.returncode or not line:
                        row[impl] = {"error": proc.stderr.strip().splitlines()[-1:]}
                        continue
                    row[impl] = json.loads(line[0][7:])
                t, s = row.get("transflow", {}), row.get("torch", {})
                if "seconds" in t and "seconds" in s:
                    row["time_ratio_torch_over_transflow"] = s["seconds"] / t["seconds"]
                    row["rss_ratio_transflow_over_torch"] = t["peak_rss_gib"] / s["peak_rss_gib"]
                rows.append(row)
                print(
                    f"  n={n:6d} causal={causal!s:5s} {mode:6s} "
                    f"transflow {t.get('seconds', float('nan')):8.3f} s "
                    f"({t.get('peak_rss_gib', float('nan')):.2f} GiB)  "
                    f"torch {s.get('seconds', float('nan')):8.3f} s "
                    f"({s.get('peak_rss_gib', float('nan')):.2f} GiB)",
                    flush=True,
                )
    causal_speedup = {}
    for impl in ("transflow", "torch"):
        for n in args.tokens:
            for mode in ("fwd", "fwdbwd"):
                pair = {
                    r["causal"]: r[impl].get("seconds")
                    for r in rows
                    if r["tokens"] == n and r["mode"] == mode and impl in r
                }
                if pair.get(True) and pair.get(False):
                    causal_speedup[f"{impl}_{mode}_{n}"] = pair[False] / pair[True]
    load_after = load_average()
    valid, why = validity(cores=1, load_before=load_before, load_after=load_after, speedup=None)
    result = {
        "benchmark": "longseq",
        "heads": args.heads,
        "head_dim": args.head_dim,
        "threads": threads,
        "rows": rows,
        "causal_speedup": causal_speedup,
        "load_average_before": load_before,
        "load_average_after": load_after,
        "valid": valid,
        "validity": why or ["load below the core count"],
        **env_info(),
    }
    path = write_result("longseq", result, args.out)
    print(f"[bench_longseq] jax {result['jax_version']}, torch {result['torch_version']}")
    for k, v in causal_speedup.items():
        print(f"  causal speedup {k}: {v:.2f}x")
    print(f"  valid run: {valid}" + ("" if valid else f" ({'; '.join(why)})"))
    print(f"  -> {path}")
    return result


if __name__ == "__main__":
    main()
