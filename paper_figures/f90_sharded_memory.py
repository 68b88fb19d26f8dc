"""F90: per-device memory of the token-sharded evolution vs the number of devices P.

The token grid (1024 tokens, d = 32, 2 heads, 2 Lie steps, float32) is split over
P = 1, 2, 4, 8 CPU host devices (a child process with
``XLA_FLAGS=--xla_force_host_platform_device_count=8``); the program of
:func:`transflow.parallel.shard_evolve` is compiled for each P and the per-device
temporaries (activations, attention scores, collective buffers) are read from
``compiled.memory_analysis()``. Two partitionings: ``gspmd`` (``jax.jit`` with
``NamedSharding``: keys/values all-gathered, each device holds an ``n/P × n`` score
block) and ``ring`` (``shard_map`` ring of ``ppermute`` with an online softmax: an
``n/P × n/P`` block). Expected: the gspmd curve follows 1/P (≈ 0.15 at P = 8), the ring
falls faster (≈ 0.06 at P = 8).
"""

from __future__ import annotations

import pathlib

FIGURE = {
    "id": "F90",
    "title": "Per-device memory of the token-sharded evolution vs number of devices",
    "command": "make figures  (python paper_figures/make_all.py F90)",
    "config": "library call: transflow.parallel.memory_report (as experiment=sharded)",
}


def make(out_dir: pathlib.Path) -> dict:
    from transflow.parallel._selftest import run_subprocess
    from transflow.plotting import figure_smoke, plot_sharded_memory, save_figure

    smoke = figure_smoke()
    devices = [1, 2] if smoke else [1, 2, 4, 8]
    n_tokens = 256 if smoke else 1024
    methods = ["gspmd", "ring"]
    records = run_subprocess(
        "memory",
        dict(
            devices=8,
            n_tokens=n_tokens,
            d_model=32,
            n_heads=2,
            d_ff=None,
            n_layers=2,
            grid="index",
            dtype="float32",
            methods=methods,
            token_devices=devices,
        ),
        timeout=600,
    )
    fig = plot_sharded_memory(records, title=f"token-sharded evolution, n = {n_tokens}, float32")
    headline = {}
    for m in methods:
        rs = sorted((r for r in records if r["method"] == m), key=lambda r: r["token_devices"])
        headline[f"temp_ratio_P{rs[-1]['token_devices']}_{m}"] = rs[-1]["temp"] / rs[0]["temp"]
    save_figure(
        fig, out_dir, FIGURE["id"], {"n_tokens": n_tokens, "dtype": "float32", "records": records}
    )
    return headline
