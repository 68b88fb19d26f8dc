"""Masked vs unmasked encoder forward: transflow (jit + vmap) beside torch.

A post-LN ``TransformerEncoder`` (fp32) on a ragged batch: lengths spread from n down to
n/4, right padded. Timed interleaved, per round:

- ``transflow``: no mask (the code path of ``bench_layer.py``);
- ``transflow_padding``: ``key_padding_mask=`` (zero token weight);
- ``transflow_padding_mask``: padding plus a float ``attention_mask`` (n × n, causal −∞);
- ``torch`` / ``torch_padding``: the same module, no mask / ``src_key_padding_mask``
  (torch's own choice of path).

Reported: medians, ``masked_over_unmasked`` for transflow (the cost of a mask) and
``ratio_vs_torch`` (torch / transflow) without and with padding. The machine's 1-minute
load average and the core count are recorded; with ``load ≥ cores`` the result is marked
``"reliable": false`` ("not measured reliably": other processes share the cores).

Masks cost nothing when absent: with both masks ``None`` no mask operation is traced (the
masks branch compared the programs with and without the mask code: identical jaxprs,
``benchmarks/jaxpr_unmasked.py``), so the unmasked ratio of ``bench_layer.py`` is
unchanged by the masks.

Run: ``.venv/bin/python benchmarks/bench_masks.py`` (about 1 min on 2 idle cores).
"""

from __future__ import annotations

import argparse
import os

from _common import env_info, fmt, interleaved, pin_threads, write_result


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--threads", type=int, default=None, help="cores (default all)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--d-ff", type=int, default=512)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--out", default=None, help="results directory")
    ap.add_argument("--no-torch", action="store_true", help="time transflow only")
    args = ap.parse_args(argv)
    threads = pin_threads(args.threads)

    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch

    from transflow import padding_mask
    from transflow.interop import from_torch

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    B, n, d, H, ff, L = args.batch, args.tokens, args.d_model, args.heads, args.d_ff, args.layers
    layer = torch.nn.TransformerEncoderLayer(d, H, ff, dropout=0.0, batch_first=True)
    enc = torch.nn.TransformerEncoder(layer, L, enable_nested_tensor=False).eval()
    x = torch.randn(B, n, d)
    lengths = np.linspace(n, max(1, n // 4), B).astype(int)
    pad = padding_mask(lengths, n)
    pad_t = torch.from_numpy(np.array(pad))
    am = jnp.broadcast_to(
        jnp.where(jnp.tril(jnp.ones((n, n), bool)), 0.0, -jnp.inf).astype(jnp.float32), (B, n, n)
    )
    model = from_torch(enc, dtype=jnp.float32)
    xj = jnp.asarray(x.numpy())
    fwd = jax.jit(jax.vmap(model))
    fwd_pad = jax.jit(jax.vmap(lambda u, k: model(u, key_padding_mask=k)))
    fwd_both = jax.jit(jax.vmap(lambda u, k, a: model(u, key_padding_mask=k, attention_mask=a)))

    with torch.inference_mode():
        y_t = enc(x, src_key_padding_mask=pad_t).numpy()
    y_j = np.asarray(fwd_pad(xj, pad))
    keep = ~np.asarray(pad)
    max_abs_diff_kept = float(np.max(np.abs(y_j - y_t)[keep]))

    candidates = {
        "transflow": lambda: fwd(xj).block_until_ready(),
        "transflow_padding": lambda: fwd_pad(xj, pad).block_until_ready(),
        "transflow_padding_mask": lambda: fwd_both(xj, pad, am).block_until_ready(),
    }
    if not args.no_torch:

        def run_torch(mask=None):
            with torch.inference_mode():
                enc(x, src_key_padding_mask=mask)

        candidates["torch"] = run_torch
        candidates["torch_padding"] = lambda: run_torch(pad_t)
    load0 = os.getloadavg()[0]
    timings = interleaved(candidates, warmup=args.warmup, rounds=args.rounds)
    load1 = os.getloadavg()[0]
    med = {k: v["median"] for k, v in timings.items()}
    cores = os.cpu_count() or 1
    load = max(load0, load1)
    result = {
        "benchmark": "masks",
        "shape": {"batch": B, "tokens": n, "d_model": d, "heads": H, "d_ff": ff, "layers": L},
        "lengths": [int(v) for v in lengths],
        "threads": threads,
        "max_abs_diff_vs_torch_kept_rows_fp32": max_abs_diff_kept,
        "timings_s": timings,
        "masked_over_unmasked": {
            "padding": med["transflow_padding"] / med["transflow"],
            "padding_and_attention_mask": med["transflow_padding_mask"] / med["transflow"],
        },
        "load_average_1min": [load0, load1],
        "cores": cores,
        "reliable": load < cores,
        "env": env_info(),
    }
    if not args.no_torch:
        result["ratio_vs_torch"] = {
            "unmasked": med["torch"] / med["transflow"],
            "padding": med["torch_padding"] / med["transflow_padding"],
        }
    path = write_result("masks", result, args.out)
    print(f"shape {result['shape']}, lengths {result['lengths']}, jax {jax.__version__}")
    for k, v in timings.items():
        print(f"  {k:24s} {fmt(v)}")
    print(f"  masked / unmasked (transflow): {result['masked_over_unmasked']}")
    if "ratio_vs_torch" in result:
        print(f"  torch / transflow: {result['ratio_vs_torch']}")
    print(f"  max |Δ| vs torch on kept rows (fp32): {max_abs_diff_kept:.2e}")
    note = "" if result["reliable"] else "  -> NOT MEASURED RELIABLY (load ≥ cores)"
    print(f"  load average {load0:.1f}/{load1:.1f} on {cores} cores{note}")
    print(f"wrote {path}")
    return result


if __name__ == "__main__":
    main()
