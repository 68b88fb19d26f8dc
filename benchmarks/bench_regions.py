"""Benchmark: regions per second of the exact 1-D linear-region counter (issue #6).

Counts the linear regions of the zigzag maxout family (spec ``maxout-expressivity.md``
§3.5: exactly (2k−1)^L regions on [0, 1]) and of its Variant-A hardmax transformer, with
:func:`transflow.expressivity.count_linear_regions`, and reports the wall time of a cold
call (including JAX compilation) and of a warm call (compiled kernels reused).

Target: at least 10^5 regions counted in under 10 s on 2 CPU cores.

Usage::

    .venv/bin/python benchmarks/bench_regions.py [--quick]

Writes ``benchmarks/results/regions.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import time

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

from transflow.expressivity import (  # noqa: E402
    count_linear_regions,
    maxout_to_transformer,
    zigzag_maxout,
)

RESULTS = pathlib.Path(__file__).parent / "results" / "regions.json"


def _time(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def run_case(name, model, expected, n_seed):
    count = lambda: count_linear_regions(model, 0.0, 1.0, n_seed=n_seed)
    cold, t_cold = _time(count)
    warm, t_warm = _time(count)
    row = {
        "case": name,
        "regions": warm.linear,
        "expected": expected,
        "correct": warm.linear == expected == cold.linear,
        "evaluations": warm.evaluations,
        "seconds_cold": round(t_cold, 3),
        "seconds_warm": round(t_warm, 3),
        "regions_per_second_cold": round(warm.linear / t_cold),
        "regions_per_second_warm": round(warm.linear / t_warm),
        "target_met_cold": warm.linear >= 1e5 and t_cold < 10.0,
    }
    print(
        f"{name:<34} regions={row['regions']:>7} (expected {expected:>7}) "
        f"cold {t_cold:6.2f} s  warm {t_warm:6.2f} s  "
        f"{row['regions_per_second_warm']:>9,} regions/s warm  evals={row['evaluations']}"
    )
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    args = ap.parse_args(argv)
    print(
        f"JAX {jax.__version__} on {jax.devices()[0].platform}, {os.cpu_count()} CPUs, "
        f"python {platform.python_version()}"
    )
    cases = (
        [("maxout zigzag k=3 L=4", 3, 4, "net", 256)]
        if args.quick
        else [
            ("maxout zigzag k=4 L=6", 4, 6, "net", 1 << 14),
            ("maxout zigzag k=2 L=11", 2, 11, "net", 1 << 14),
            # deeper/wider zigzag transformers lose float64 precision in the token-wise
            # shift (IBP bound B ~ (k(2k-1))^L, spec C10); 5^6 is exact
            ("transformer A zigzag T=3 D=7", 3, 6, "A", 1 << 12),
        ]
    )
    rows = []
    for name, k, L, kind, n_seed in cases:
        net = zigzag_maxout(k, L)
        model = net if kind == "net" else maxout_to_transformer(net, 0.0, 1.0, variant=kind)
        rows.append(run_case(name, model, (2 * k - 1) ** L, n_seed))
    out = {
        "benchmark": "exact 1-D linear-region counter, zigzag family",
        "jax_version": jax.__version__,
        "backend": jax.devices()[0].platform,
        "cpu_count": os.cpu_count(),
        "target": ">= 1e5 regions in < 10 s (cold, including compilation)",
        "results": rows,
    }
    if not args.quick:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(out, indent=2) + "\n")
        print(f"wrote {RESULTS}")
    return out


if __name__ == "__main__":
    main()
