"""F-perf: performance of transflow vs PyTorch, compile time vs depth, chunked attention memory.

Reads ``benchmarks/results/{layer,compile,chunked,summary}.json`` written by ``make bench``
(it never runs a benchmark itself: timings need a quiet machine and minutes). Three panels:
(a) 6-layer encoder forward time, transflow vs torch's fused fast path (median, min–max);
(b) trace+lower+compile time of ``evolve`` at 1 and 48 steps; (c) peak RSS of the chunked
attention at 32 768 tokens against the JAX-runtime floor and the 4 GiB a dense score
matrix would need. Without results it draws a placeholder saying "run make bench" and
still writes F-perf.png/.pdf/.json.
"""

from __future__ import annotations

import json
import pathlib

FIGURE = {
    "id": "FPERF",
    "title": "Performance: transflow vs torch fast path, compile time vs depth, chunked memory",
    "command": "make bench && make figures  (python paper_figures/make_all.py FPERF)",
    "config": "library call (benchmarks/run_all.py; reads benchmarks/results/*.json)",
}

RESULTS = pathlib.Path(__file__).resolve().parent.parent / "benchmarks" / "results"


def _load(results: pathlib.Path) -> dict:
    out = {}
    for name in ("layer", "compile", "chunked", "summary", "threads1/layer"):
        path = results / f"{name}.json"
        if path.exists():
            out[name] = json.loads(path.read_text())
    return out


def _save(fig, out_dir: pathlib.Path, fid: str, data: dict) -> None:
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_dir / f"{fid}.png", dpi=150, bbox_inches="tight")
    fig.savefig(out_dir / f"{fid}.pdf", bbox_inches="tight")
    plt.close(fig)
    (out_dir / f"{fid}.json").write_text(json.dumps(data, indent=2) + "\n")


def _bar(ax, labels, stats, scale, color):
    med = [s["median"] * scale for s in stats]
    lo = [s["median"] * scale - s["min"] * scale for s in stats]
    hi = [s["max"] * scale - s["median"] * scale for s in stats]
    ax.bar(labels, med, yerr=[lo, hi], capsize=4, color=color)
    return med


def make(out_dir: pathlib.Path, results: pathlib.Path = RESULTS) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fid = FIGURE["id"]
    out_dir = pathlib.Path(out_dir)
    res = _load(pathlib.Path(results))
    if not {"layer", "compile", "chunked"} <= res.keys():
        fig, ax = plt.subplots(figsize=(6, 2.5))
        ax.axis("off")
        ax.text(
            0.5,
            0.5,
            "F-perf: no benchmark results yet.\nrun make bench",
            ha="center",
            va="center",
            fontsize=14,
        )
        _save(
            fig,
            out_dir,
            fid,
            {
                "placeholder": True,
                "missing": sorted({"layer", "compile", "chunked"} - res.keys()),
                "results_dir": str(results),
            },
        )
        return {"placeholder": True}

    layer, comp, chunk = res["layer"], res["compile"], res["chunked"]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    t = layer["timings_s"]
    shp = layer["shape"]
    labels = ["transflow\n(jit+vmap)", "torch\n(fast path)"]
    series = [t["transflow"], t["torch"]]
    colors = ["C0", "C1"]
    one = res.get("threads1/layer")
    if one is not None:  # the same comparison with one thread each
        labels = [f"{lbl}\n{layer['threads']['torch']} thr" for lbl in labels]
        labels += ["transflow\n1 thr", "torch\n1 thr"]
        series += [one["timings_s"]["transflow"], one["timings_s"]["torch"]]
        colors += ["C0", "C1"]
    med = _bar(axes[0], labels, series, 1e3, colors)
    axes[0].set_ylabel("forward time [ms]")
    axes[0].set_title(
        f"(a) {shp['layers']}-layer post-LN, B={shp['batch']}, n={shp['tokens']}, "
        f"d={shp['d_model']}\nratio torch/transflow = {layer['ratio_vs_torch']:.2f}, "
        f"flop fraction {layer['flop_fraction']:.2f}"
        + ("" if one is None else f"; 1 thread: ratio {one['ratio_vs_torch']:.2f}"),
        fontsize=9,
    )

    steps = [str(s) for s in comp["steps"]]
    _bar(
        axes[1],
        [f"{s} step(s)" for s in steps],
        [comp["timings_s"][s]["total"] for s in steps],
        1.0,
        ["C2", "C3"],
    )
    axes[1].set_ylabel("trace + lower + compile [s]")
    axes[1].set_title(
        f"(b) evolve compile time, ratio {comp['compile_ratio']:.2f} (target ≤ 1.5)", fontsize=9
    )

    labels = ["JAX runtime\n(baseline)", "chunked\nforward"]
    vals = [chunk["baseline_rss_gib"], chunk["chunked_peak_rss_gib"]]
    if chunk.get("chunked_grad_peak_rss_gib") is not None:
        labels.append("chunked\ngradient")
        vals.append(chunk["chunked_grad_peak_rss_gib"])
    axes[2].bar(labels, vals, color="C4")
    axes[2].axhline(1.5, color="k", ls="--", lw=1, label="target 1.5 GiB")
    axes[2].axhline(
        chunk["dense_scores_gib"],
        color="C3",
        ls=":",
        lw=1.5,
        label=f"dense scores alone ({chunk['dense_scores_gib']:.0f} GiB)",
    )
    axes[2].set_ylabel("peak RSS [GiB]")
    axes[2].set_title(
        f"(c) chunked attention, n={chunk['tokens']}, d={chunk['d']}, 1 head, "
        f"fp32\nrel. error vs dense (n={chunk['agreement_tokens']}): "
        f"{chunk['agreement_rel_err']:.1e}",
        fontsize=9,
    )
    axes[2].legend(fontsize=8, loc="center right")
    fig.suptitle(
        f"F-perf (jax {layer['jax_version']}, torch {layer['torch_version']}, "
        f"{layer['backend']}, {layer['threads']['torch']} threads each)",
        fontsize=10,
    )
    fig.tight_layout()
    numbers = {
        "ratio_vs_torch": layer["ratio_vs_torch"],
        "flop_fraction": layer["flop_fraction"],
        "compile_ratio_48_vs_1": comp["compile_ratio"],
        "chunked_peak_rss_gib": chunk["chunked_peak_rss_gib"],
        "chunked_agreement_rel_err": chunk["agreement_rel_err"],
    }
    data = {
        **numbers,
        "forward_ms": dict(zip([lbl.replace("\n", " ") for lbl in labels], med)),
        "ratio_vs_torch_1thread": None if one is None else one["ratio_vs_torch"],
        "layer_timings_s": {k: {q: v[q] for q in ("median", "min", "max")} for k, v in t.items()},
        "compile_s": {s: comp["timings_s"][s]["total"]["median"] for s in steps},
        "rss_gib": dict(zip([lbl.replace("\n", " ") for lbl in labels], vals)),
        "jax_version": layer["jax_version"],
        "torch_version": layer["torch_version"],
    }
    _save(fig, out_dir, fid, data)
    return numbers
