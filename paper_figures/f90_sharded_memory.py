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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    from transflow.experiments.figures import figure_smoke, save_figure

    from transflow.parallel._selftest import run_subprocess

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
    fig, ax = plt.subplots(figsize=(5.2, 3.8))
    out: dict = {"n_tokens": n_tokens, "dtype": "float32", "records": records}
    headline = {}
    for m, marker in zip(methods, ("o", "s")):
        rs = sorted((r for r in records if r["method"] == m), key=lambda r: r["token_devices"])
        ps = [r["token_devices"] for r in rs]
        temp = [r["temp"] / 2**20 for r in rs]
        ax.loglog(ps, temp, marker=marker, label=f"{m}: temporaries")
        headline[f"temp_ratio_P{ps[-1]}_{m}"] = rs[-1]["temp"] / rs[0]["temp"]
    g = sorted((r for r in records if r["method"] == "gspmd"), key=lambda r: r["token_devices"])
    ps = [r["token_devices"] for r in g]
    ax.loglog(ps, [g[0]["temp"] / 2**20 / p for p in ps], "k--", lw=1, label="1/P")
    ax.set_xticks(ps, [str(p) for p in ps])
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("token devices P")
    ax.set_ylabel("per-device temporaries [MiB]")
    ax.set_title(f"F90: token-sharded evolution, n = {n_tokens}, float32", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    save_figure(fig, out_dir, FIGURE["id"], out)
    return headline
