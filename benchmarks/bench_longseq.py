"""Long sequences: transflow's chunked attention core vs torch's ``scaled_dot_product_attention``.

Same shapes on both sides: one sequence, ``H`` heads of width ``c`` (default 4 × 32), fp32,
``n`` ∈ {4096, 16384, 32768} tokens, non-causal and causal, forward and forward+backward
(gradient of ``Σ out²`` w.r.t. q, k, v). transflow runs
:func:`transflow.online_softmax_attention` (the memory-linear operator behind
``attention(..., implementation="chunked")``, default blocks) under ``jax.jit``; torch
runs SDPA (on CPU its flash kernel), eager autograd for the backward.

**Time**: in one process, per (tokens, mode) the four candidates (transflow and torch,
non-causal and causal) are timed *interleaved* (one call each per round, the order
reversed every other round, after a warm-up round), on the same ``--threads`` cores
each. Headline figures are medians of *per-round* ratios with their range:
``time_ratio_torch_over_transflow`` (> 1: transflow faster) and ``causal_speedup``
(non-causal time ÷ causal time, per implementation). With 2 or more threads a torch
matmul on one and on all threads runs in the same rounds (the thread-scaling sanity
figure of ``_common.validity``). The forward outputs are compared (fp32 relative max
difference) so that both sides compute the same thing.

**Memory**: every (implementation, tokens, causal, mode) runs once more in a *fresh
subprocess* (its own peak RSS, ``VmHWM``): ``floor_rss_gib`` after the imports and the inputs,
``warm_runtime_rss_gib`` after a tiny warm-up computation (for JAX the compiler's own
start-up, about 0.06 GiB), ``compiled_rss_gib`` after compiling (transflow),
``peak_rss_gib`` after two calls, ``extra_rss_gib = peak − floor`` and
``extra_over_warm_runtime_gib = peak − warm runtime`` (what the computation itself adds
to each runtime's own size, which differs between JAX and torch).

    .venv/bin/python benchmarks/bench_longseq.py               # about 20 min on 2 cores
    .venv/bin/python benchmarks/bench_longseq.py --tokens 4096 --rounds 3   # a quick look

Writes ``longseq.json`` (``--out`` sets the directory). The targets (16k tokens:
forward+backward at least as fast as SDPA and peak RSS no larger, causal ≥ 1.8× faster
than non-causal) are marked ``met`` / ``NOT met`` only for a valid run (load below the
core count, thread scaling sane); otherwise "not measured reliably".
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from _common import (
    env_info,
    interleaved,
    load_average,
    peak_rss_bytes,
    per_round_ratio,
    pin_threads,
    validity,
    write_result,
)

GIB = 2**30
MODES = ("fwd", "fwdbwd")
TARGET_TOKENS = 16384
CAUSAL_TARGET = 1.8


def _maxrss() -> float:
    """Peak resident set size of this process so far, GiB (``_common.peak_rss_bytes``)."""
    return peak_rss_bytes() / GIB


def _inputs(n: int, H: int, c: int):
    import numpy as np

    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((H, n, c), dtype=np.float32) for _ in range(3))
    return q * c**-0.5, k, v  # the score scale folded into q, as in transflow's operator


def _transflow_fn(causal: bool, mode: str):
    import jax
    import jax.numpy as jnp

    from transflow import online_softmax_attention

    def fwd(q, k, v):
        return online_softmax_attention(q, k, v, causal=causal)

    if mode == "fwd":
        return jax.jit(fwd)
    return jax.jit(jax.grad(lambda q, k, v: jnp.sum(fwd(q, k, v) ** 2), argnums=(0, 1, 2)))


def _torch_call(q, k, v, causal: bool, mode: str):
    """A closure running torch SDPA on (1, H, n, c) tensors; ``q`` is pre-scaled, so
    SDPA's own scale is set to 1."""
    import torch

    sdpa = torch.nn.functional.scaled_dot_product_attention
    grad = mode == "fwdbwd"
    q, k, v = (torch.from_numpy(a)[None].requires_grad_(grad) for a in (q, k, v))

    def call():
        if grad:
            for t in (q, k, v):
                t.grad = None
            (sdpa(q, k, v, is_causal=causal, scale=1.0) ** 2).sum().backward()
        else:
            with torch.inference_mode():
                return sdpa(q, k, v, is_causal=causal, scale=1.0)

    return call


def memory_worker(impl: str, n: int, H: int, c: int, causal: bool, mode: str) -> dict:
    """Fresh-process peak RSS of one configuration (two calls after compiling).

    ``floor``: imports and inputs; ``warm_runtime``: after a tiny warm-up computation
    (JAX: a small jitted matmul + exp, i.e. the compiler's own start-up size; torch: the
    same ops eagerly); ``peak``: after two calls of the measured computation.
    """
    q, k, v = _inputs(n, H, c)
    out: dict = {"measures": "peak RSS (VmHWM) of a fresh process (whole process, GiB)"}
    if impl == "transflow":
        import jax
        import jax.numpy as jnp

        q, k, v = (jnp.asarray(a) for a in (q, k, v))
        out["floor_rss_gib"] = _maxrss()
        tiny = jax.jit(lambda a, b: jnp.sum(a @ b.T) + jnp.sum(jnp.exp(a)))
        jax.block_until_ready(tiny(q[0, :64], k[0, :64]))
        out["warm_runtime_rss_gib"] = _maxrss()
        f = _transflow_fn(causal, mode).lower(q, k, v).compile()
        out["compiled_rss_gib"] = _maxrss()
        for _ in range(2):
            jax.block_until_ready(f(q, k, v))
    else:
        import torch

        torch.set_num_threads(len(os.sched_getaffinity(0)))
        call = _torch_call(q, k, v, causal, mode)
        out["floor_rss_gib"] = _maxrss()
        a, b = torch.from_numpy(q[0, :64]), torch.from_numpy(k[0, :64])
        float(torch.sum(a @ b.T) + torch.sum(torch.exp(a)))
        out["warm_runtime_rss_gib"] = _maxrss()
        for _ in range(2):
            call()
    out["peak_rss_gib"] = _maxrss()
    out["extra_rss_gib"] = out["peak_rss_gib"] - out["floor_rss_gib"]
    out["extra_over_warm_runtime_gib"] = out["peak_rss_gib"] - out["warm_runtime_rss_gib"]
    return out


def _memory(impl, n, H, c, causal, mode, threads) -> dict:
    cmd = [sys.executable, __file__, "--threads", str(threads), "--worker", impl, str(n)]
    cmd += ["1" if causal else "0", mode, str(H), str(c)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    line = [s for s in proc.stdout.splitlines() if s.startswith("RESULT ")]
    if proc.returncode or not line:
        return {"error": proc.stderr.strip().splitlines()[-1:]}
    return json.loads(line[0][7:])


def _status(ok: bool, valid: bool) -> str:
    if not valid:
        return "not measured reliably"
    return "met" if ok else "NOT met"


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tokens", type=int, nargs="+", default=[4096, 16384, 32768])
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=5, help="timed interleaved rounds")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--no-memory", action="store_true", help="skip the fresh-process RSS")
    ap.add_argument("--out", default=None, help="results directory")
    ap.add_argument("--worker", nargs=6, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    threads = pin_threads(args.threads)
    H, c = args.heads, args.head_dim
    if args.worker:
        impl, n, causal, mode, H, c = args.worker
        res = memory_worker(impl, int(n), int(H), int(c), causal == "1", mode)
        print("RESULT " + json.dumps(res))
        return res

    import jax
    import numpy as np
    import torch

    torch.set_num_threads(threads)
    load_before = load_average()
    mm = torch.randn(2048, 2048), torch.randn(2048, 2048)

    def torch_matmul(n_threads):
        def f():
            torch.set_num_threads(n_threads)
            torch.mm(*mm)
            torch.set_num_threads(threads)

        return f

    rows, speedups, agreement, mm_speedups = [], {}, {}, []
    for n in args.tokens:
        qn, kn, vn = _inputs(n, H, c)
        qj, kj, vj = (jax.numpy.asarray(a) for a in (qn, kn, vn))
        for causal in (False, True):
            ours = np.asarray(_transflow_fn(causal, "fwd")(qj, kj, vj))
            ref = _torch_call(qn, kn, vn, causal, "fwd")()[0].numpy()
            agreement[f"{n}_{'causal' if causal else 'full'}"] = float(
                np.max(np.abs(ours - ref)) / np.max(np.abs(ref))
            )
        for mode in MODES:
            fns = {}
            for causal in (False, True):
                tag = "causal" if causal else "full"
                f = _transflow_fn(causal, mode)
                fns[f"transflow_{tag}"] = lambda f=f, x=(qj, kj, vj): jax.block_until_ready(f(*x))
                fns[f"torch_{tag}"] = _torch_call(qn, kn, vn, causal, mode)
            if threads >= 2:
                fns["torch_matmul_1thread"] = torch_matmul(1)
                fns["torch_matmul_all"] = torch_matmul(threads)
            t = interleaved(fns, warmup=args.warmup, rounds=args.rounds)
            if threads >= 2:
                mm_speedups.append(
                    per_round_ratio(t, "torch_matmul_1thread", "torch_matmul_all")["median"]
                )
            for causal in (False, True):
                tag = "causal" if causal else "full"
                row = {
                    "tokens": n,
                    "causal": causal,
                    "mode": mode,
                    "transflow_seconds": t[f"transflow_{tag}"],
                    "torch_seconds": t[f"torch_{tag}"],
                    "time_ratio_torch_over_transflow": per_round_ratio(
                        t, f"torch_{tag}", f"transflow_{tag}"
                    ),
                }
                if not args.no_memory:
                    for impl in ("transflow", "torch"):
                        row[f"{impl}_memory"] = _memory(impl, n, H, c, causal, mode, threads)
                    a, b = row["transflow_memory"], row["torch_memory"]
                    if "peak_rss_gib" in a and "peak_rss_gib" in b:
                        row["peak_rss_ratio_transflow_over_torch"] = (
                            a["peak_rss_gib"] / b["peak_rss_gib"]
                        )
                rows.append(row)
                r = row["time_ratio_torch_over_transflow"]
                mem = row.get("transflow_memory", {}), row.get("torch_memory", {})
                print(
                    f"  n={n:6d} {tag:6s} {mode:6s} transflow "
                    f"{row['transflow_seconds']['median']:8.3f} s  torch "
                    f"{row['torch_seconds']['median']:8.3f} s  torch/transflow "
                    f"{r['median']:.2f} [{r['min']:.2f}, {r['max']:.2f}]  peak RSS "
                    f"{mem[0].get('peak_rss_gib', float('nan')):.3f} vs "
                    f"{mem[1].get('peak_rss_gib', float('nan')):.3f} GiB "
                    f"(extra {mem[0].get('extra_rss_gib', float('nan')):.3f} vs "
                    f"{mem[1].get('extra_rss_gib', float('nan')):.3f})",
                    flush=True,
                )
            for impl in ("transflow", "torch"):
                speedups[f"{impl}_{mode}_{n}"] = per_round_ratio(
                    t, f"{impl}_full", f"{impl}_causal"
                )
    load_after = load_average()
    mm_speedup = min(mm_speedups) if mm_speedups else None
    valid, why = validity(
        cores=threads, load_before=load_before, load_after=load_after, speedup=mm_speedup
    )
    targets = {}
    at = [r for r in rows if r["tokens"] == TARGET_TOKENS and r["mode"] == "fwdbwd"]
    for r in at:
        tag = "causal" if r["causal"] else "full"
        ratio = r["time_ratio_torch_over_transflow"]["median"]
        targets[f"fwdbwd_{tag}_time_ratio_16k"] = {
            "value": ratio,
            "bound": ">= 1",
            "status": _status(ratio >= 1, valid),
        }
        if "peak_rss_ratio_transflow_over_torch" in r:
            m = r["peak_rss_ratio_transflow_over_torch"]
            targets[f"fwdbwd_{tag}_peak_rss_ratio_16k"] = {
                "value": m,
                "bound": "<= 1 (transflow / torch, whole-process peak RSS)",
                "status": _status(m <= 1, valid),
            }
    for mode in MODES:
        s = speedups.get(f"transflow_{mode}_{TARGET_TOKENS}")
        if s:
            targets[f"transflow_causal_speedup_{mode}_16k"] = {
                "value": s["median"],
                "bound": f">= {CAUSAL_TARGET}",
                "status": _status(s["median"] >= CAUSAL_TARGET, valid),
            }
    result = {
        "benchmark": "longseq",
        "heads": H,
        "head_dim": c,
        "threads": {"transflow_xla_cores": threads, "torch": torch.get_num_threads()},
        "rounds": args.rounds,
        "rows": rows,
        "causal_speedup": speedups,
        "forward_rel_diff_vs_torch": agreement,
        "matmul_speedup_all_over_1thread": mm_speedup,
        "targets": targets,
        "load_average_before": load_before,
        "load_average_after": load_after,
        "valid": valid,
        "validity": why or ["load below the core count"],
        **env_info(),
    }
    path = write_result("longseq", result, args.out)
    print(f"[bench_longseq] jax {result['jax_version']}, torch {result['torch_version']}")
    for k, v in speedups.items():
        print(f"  causal speedup {k}: {v['median']:.2f}x [{v['min']:.2f}, {v['max']:.2f}]")
    for k, v in agreement.items():
        print(f"  forward rel. diff vs torch {k}: {v:.1e}")
    for k, v in targets.items():
        print(f"  target {k}: {v['value']:.2f} ({v['bound']}): {v['status']}")
    print(f"  load {load_before:.2f} -> {load_after:.2f}; valid run: {valid}")
    if not valid:
        print(f"  ({'; '.join(why)})")
    print(f"  -> {path}")
    return result


if __name__ == "__main__":
    main()
