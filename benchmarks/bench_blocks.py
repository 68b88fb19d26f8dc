"""Block sizes of the chunked operator: forward+backward time per (query_block, key_block).

One sequence, ``H × c`` heads (default 4 × 32), fp32, ``--tokens`` tokens; transflow's
:func:`transflow.online_softmax_attention` at each block size and torch's
``scaled_dot_product_attention`` (eager autograd), timed interleaved in one process on the
same ``--threads`` cores (gradient of ``Σ out²`` w.r.t. q, k, v).

    .venv/bin/python benchmarks/bench_blocks.py --threads 2 --tokens 4096

Writes ``blocks.json`` (medians, load average, JAX version).
"""

from __future__ import annotations

import argparse

from _common import env_info, fmt, interleaved, load_average, pin_threads, write_result

BLOCKS = ((256, 256), (512, 512), (1024, 512), (1024, 1024))


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=32)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=None, help="results directory")
    args = ap.parse_args(argv)
    threads = pin_threads(args.threads)
    load_before = load_average()

    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch

    from transflow import online_softmax_attention

    torch.set_num_threads(threads)
    n, H, c, causal = args.tokens, args.heads, args.head_dim, args.causal
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((H, n, c), dtype=np.float32) for _ in range(3))
    qj, kj, vj = map(jnp.asarray, (q, k, v))
    qt, kt, vt = (torch.tensor(a[None]).requires_grad_(True) for a in (q, k, v))
    candidates = {}
    for bq, bk in BLOCKS:

        def loss(q, k, v, bq=bq, bk=bk):
            out = online_softmax_attention(q, k, v, causal=causal, query_block=bq, key_block=bk)
            return jnp.sum(out**2)

        f = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))
        jax.block_until_ready(f(qj, kj, vj))
        candidates[f"transflow_{bq}x{bk}"] = lambda f=f: jax.block_until_ready(f(qj, kj, vj))

    def run_torch():
        for a in (qt, kt, vt):
            a.grad = None
        o = torch.nn.functional.scaled_dot_product_attention(
            qt, kt, vt, is_causal=causal, scale=1.0
        )
        (o**2).sum().backward()

    candidates["torch_sdpa"] = run_torch
    timings = interleaved(candidates, warmup=1, rounds=args.rounds)
    load_after = load_average()
    result = {
        "benchmark": "blocks",
        "shape": {"tokens": n, "heads": H, "head_dim": c, "causal": causal},
        "threads": threads,
        "timings_s": timings,
        "load_average_before": load_before,
        "load_average_after": load_after,
        **env_info(),
    }
    path = write_result("blocks", result, args.out)
    print(
        f"[bench_blocks] jax {result['jax_version']}, {threads} thread(s), n={n}, "
        f"H={H}x{c}, causal={causal}, load {load_before:.2f} -> {load_after:.2f}"
    )
    for key, s in timings.items():
        print(f"  {key:22s} {fmt(s)}")
    print(f"  -> {path}")
    return result


if __name__ == "__main__":
    main()
