"""Benchmark: certified exact linear-region counts of the zigzag family (issue #14).

Counts, with :func:`transflow.expressivity.count_linear_regions` (certified, ``certified=True``
required; the models here have ``interval_forward``, so the layerwise interval counter of
``transflow.expressivity._layerwise`` runs: float64 interval propagation with rigorous
round-off bounds, exact rational fallback for the intervals it cannot certify):

- the Variant-A hardmax **transformer** of the zigzag maxout net of rank 4 and depth 6
  (T = 4 tokens, D = 7 blocks): exactly 7^6 = 117649 regions on [0, 1] — target
  ≥ 1e5 transformer regions exact and certified in < 10 s on 2 cores;
- the Variant-B transformer of the same net (T = 5, D = 18): 117649 regions;
- the zigzag **maxout network** of rank 2 and depth 13: 3^13 = 1594323 regions — target
  ≥ 1e6 maxout-network regions in < 30 s on 2 cores.

Every case is timed cold (first call in the process) and warm (second call), wall and CPU
time of this process. The machine may be shared: the 1-minute load average is recorded
before and after every case; a case is *measured reliably* only when both are below the
number of cores, and a target counts as met only for a reliable, correct, certified run
(under load the wall time is not valid; the CPU seconds are then the better guide).

Usage::

    .venv/bin/python benchmarks/bench_regions.py [--quick]

Writes ``benchmarks/results/regions.json`` (not with ``--quick``).
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
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - t0, time.process_time() - c0


def run_case(name, model, expected, n_seed, target_s):
    count = lambda: count_linear_regions(model, 0.0, 1.0, n_seed=n_seed)
    cores = os.cpu_count()
    load0 = os.getloadavg()[0]
    cold, t_cold, c_cold = _time(count)
    warm, t_warm, c_warm = _time(count)
    load1 = os.getloadavg()[0]
    reliable = max(load0, load1) < cores
    correct = warm.linear == expected == cold.linear
    certified = bool(warm.certified and cold.certified)
    row = {
        "case": name,
        "regions": warm.linear,
        "expected": expected,
        "correct": correct,
        "certified": certified,
        "method": warm.certificate["method"],
        "junctions_exact": warm.certificate["junctions_exact"],
        "holes": warm.certificate.get("holes"),
        "evaluations": warm.evaluations,
        "seconds_cold": round(t_cold, 3),
        "seconds_warm": round(t_warm, 3),
        "cpu_seconds_cold": round(c_cold, 3),
        "cpu_seconds_warm": round(c_warm, 3),
        "regions_per_second_warm": round(warm.linear / t_warm),
        "target_seconds": target_s,
        "load_average_1min": [round(load0, 2), round(load1, 2)],
        "cores": cores,
        "measured_reliably": reliable,
        "target_met_warm_wall": bool(reliable and correct and certified and t_warm < target_s),
    }
    print(
        f"{name:<42} regions={row['regions']:>8} (expected {expected:>8}, certified "
        f"{row['certified']}) cold {t_cold:6.2f} s (cpu {c_cold:5.1f})  warm {t_warm:6.2f} s "
        f"(cpu {c_warm:5.1f})  load {load0:.1f}->{load1:.1f} "
        f"({'valid' if reliable else 'NOT valid: load >= cores'})",
        flush=True,
    )
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    args = ap.parse_args(argv)
    print(
        f"JAX {jax.__version__} on {jax.devices()[0].platform}, {os.cpu_count()} CPUs, "
        f"python {platform.python_version()}, load average {os.getloadavg()}"
    )
    if args.quick:
        cases = [("transformer A zigzag T=3 D=4", 3, 3, "A", 64, 10.0)]
    else:
        cases = [
            ("transformer A zigzag T=4 D=7 (rank 4, depth 6)", 4, 6, "A", 1 << 14, 10.0),
            ("transformer B zigzag T=5 D=18 (rank 4, depth 6)", 4, 6, "B", 1 << 14, 10.0),
            ("maxout zigzag rank 2 depth 13", 2, 13, "net", 1 << 16, 30.0),
        ]
    rows = []
    for name, k, L, kind, n_seed, target in cases:
        net = zigzag_maxout(k, L)
        model = net if kind == "net" else maxout_to_transformer(net, 0.0, 1.0, variant=kind)
        rows.append(run_case(name, model, (2 * k - 1) ** L, n_seed, target))
    reliable = all(r["measured_reliably"] for r in rows)
    out = {
        "benchmark": "certified exact 1-D linear-region counter, zigzag family (issue #14)",
        "jax_version": jax.__version__,
        "backend": jax.devices()[0].platform,
        "cpu_count": os.cpu_count(),
        "targets": ">= 1e5 transformer regions exact+certified in < 10 s; >= 1e6 maxout "
        "regions in < 30 s (2 cores)",
        "status": "measured"
        if reliable
        else "not measured reliably (1-min load average >= cores during a case); rerun on a "
        "quiet machine",
        "results": rows,
    }
    if not args.quick:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(out, indent=2) + "\n")
        print(f"wrote {RESULTS}")
    return out


if __name__ == "__main__":
    main()
