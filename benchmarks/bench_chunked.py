"""Chunked attention on a fine token grid: peak memory and agreement with dense.

At 32 768 tokens, 64 features, one head, fp32 the dense score matrix alone is 4 GiB. Each
measurement runs in a *fresh subprocess* and reports the process's peak resident set size
(``VmHWM``), including the JAX runtime itself; a baseline subprocess that only starts
JAX and runs one tiny op gives the floor. Agreement with the dense operator is measured at
sizes where dense fits (relative max error, fp32; target ≤ 1e-5).

Run: ``.venv/bin/python benchmarks/bench_chunked.py`` (about 1–2 min on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from _common import env_info, peak_rss_bytes, pin_threads, write_result

GIB = 2**30


def worker(mode: str, n: int, d: int, qb: int, kb: int) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from transflow import AttentionParams, attention

    p = AttentionParams.random(d, n_heads=1, dtype=jnp.float32, key=jax.random.key(0))
    p = jax.tree.map(lambda x: x.astype(jnp.float32), p)
    u = jax.random.normal(jax.random.key(1), (n, d), jnp.float32)
    out: dict = {"mode": mode, "n_tokens": n, "d": d, "query_block": qb, "key_block": kb}
    if mode == "baseline":
        (u[:8] @ p.wq).block_until_ready()
    elif mode in ("chunked", "dense"):
        f = jax.jit(lambda u: attention(u, p, implementation=mode, query_block=qb, key_block=kb))
        f(u).block_until_ready()
        t0 = time.perf_counter()
        f(u).block_until_ready()
        out["seconds"] = time.perf_counter() - t0
    elif mode == "chunked_grad":
        f = jax.jit(
            jax.grad(
                lambda u: jnp.sum(
                    attention(u, p, implementation="chunked", query_block=qb, key_block=kb) ** 2
                )
            )
        )
        t0 = time.perf_counter()
        f(u).block_until_ready()
        out["seconds_incl_compile"] = time.perf_counter() - t0
    elif mode == "agree":
        kw = dict(query_block=qb, key_block=kb)
        for causal in (False, True):
            a = np.asarray(attention(u, p, causal=causal, implementation="dense"))
            b = np.asarray(attention(u, p, causal=causal, implementation="chunked", **kw))
            out[f"rel_err_causal_{causal}"] = float(np.max(np.abs(a - b)) / np.max(np.abs(a)))
    else:
        raise ValueError(f"unknown worker mode {mode!r}")
    stats = jax.devices()[0].memory_stats() or {}
    if "peak_bytes_in_use" in stats:  # accelerators: device memory, not host RSS
        out["device_peak_gib"] = stats["peak_bytes_in_use"] / GIB
    out["peak_rss_bytes"] = peak_rss_bytes()
    out["peak_rss_gib"] = out["peak_rss_bytes"] / GIB
    return out


def spawn(mode: str, n: int, d: int, qb: int, kb: int, threads: int | None) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        mode,
        "--tokens",
        str(n),
        "--d",
        str(d),
        "--query-block",
        str(qb),
        "--key-block",
        str(kb),
    ]
    if threads is not None:
        cmd += ["--threads", str(threads)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode:
        raise RuntimeError(f"worker {mode} n={n} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--tokens", type=int, default=32768)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--query-block", type=int, default=512)
    ap.add_argument("--key-block", type=int, default=512)
    ap.add_argument("--agree-tokens", type=int, default=4096, help="where dense fits")
    ap.add_argument("--no-grad", action="store_true", help="skip the gradient run")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    threads = pin_threads(args.threads)
    n, d, qb, kb = args.tokens, args.d, args.query_block, args.key_block
    if args.worker:
        print(json.dumps(worker(args.worker, n, d, qb, kb)))
        return {}

    runs = {
        "baseline": spawn("baseline", n, d, qb, kb, args.threads),
        "chunked": spawn("chunked", n, d, qb, kb, args.threads),
    }
    if not args.no_grad:
        runs["chunked_grad"] = spawn("chunked_grad", n, d, qb, kb, args.threads)
    m = args.agree_tokens
    runs["agree"] = spawn("agree", m, d, min(qb, m), min(kb, m), args.threads)
    runs["dense_small"] = spawn("dense", m, d, qb, kb, args.threads)
    runs["chunked_small"] = spawn("chunked", m, d, qb, kb, args.threads)
    rel = max(v for k, v in runs["agree"].items() if k.startswith("rel_err"))
    result = {
        "benchmark": "chunked",
        "tokens": n,
        "d": d,
        "heads": 1,
        "dtype": "float32",
        "blocks": {"query": qb, "key": kb},
        "threads": threads,
        "dense_scores_gib": n * n * 4 / GIB,
        "measures": "peak resident set size (VmHWM) of a fresh process per run, "
        "JAX runtime included (baseline_rss_gib: the runtime alone)",
        "runs": runs,
        "chunked_peak_rss_gib": runs["chunked"]["peak_rss_gib"],
        "chunked_grad_peak_rss_gib": runs.get("chunked_grad", {}).get("peak_rss_gib"),
        "baseline_rss_gib": runs["baseline"]["peak_rss_gib"],
        "agreement_tokens": m,
        "agreement_rel_err": rel,
        **env_info(),
    }
    path = write_result("chunked", result, args.out)
    print(
        f"[bench_chunked] jax {result['jax_version']}, cores={threads}; n={n}, d={d}, 1 head, "
        f"fp32, blocks q={qb} k={kb}; dense scores would be {result['dense_scores_gib']:.1f} GiB"
    )
    print(
        f"  peak RSS: baseline (JAX runtime) {result['baseline_rss_gib']:.2f} GiB, chunked "
        f"forward {result['chunked_peak_rss_gib']:.2f} GiB (target <= 1.5), "
        f"{runs['chunked']['seconds']:.2f} s"
    )
    if "chunked_grad" in runs:
        g = runs["chunked_grad"]
        print(
            f"  chunked gradient: peak RSS {g['peak_rss_gib']:.2f} GiB, "
            f"{g['seconds_incl_compile']:.1f} s incl. compile"
        )
    print(
        f"  n={m}: dense {runs['dense_small']['seconds'] * 1e3:.1f} ms / "
        f"{runs['dense_small']['peak_rss_gib']:.2f} GiB, chunked "
        f"{runs['chunked_small']['seconds'] * 1e3:.1f} ms / "
        f"{runs['chunked_small']['peak_rss_gib']:.2f} GiB; rel. error {rel:.2e} "
        f"(target <= 1e-5) -> {path}"
    )
    return result


if __name__ == "__main__":
    main()
