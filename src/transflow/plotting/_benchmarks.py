"""Figures of the benchmarks (F-perf): forward time vs torch, compile time vs depth,
chunked-attention memory, from the JSON results of ``make bench``."""

from __future__ import annotations

from typing import Any

from ._style import FIGURE_WIDTH, _pyplot, new_figure, styled, threshold_line

__all__ = ["BENCHMARK_PARTS", "plot_benchmarks"]

#: The result files (``benchmarks/results/<name>.json``) :func:`plot_benchmarks` needs.
BENCHMARK_PARTS = ("layer", "compile", "chunked")

#: The claim of benchmarks/bench_chunked.py: chunked attention's peak RSS ≤ this (GiB).
RSS_TARGET_GIB = 1.5


def _bar(ax, labels, stats, scale, color):
    med = [s["median"] * scale for s in stats]
    lo = [s["median"] * scale - s["min"] * scale for s in stats]
    hi = [s["max"] * scale - s["median"] * scale for s in stats]
    ax.bar(labels, med, yerr=[lo, hi], capsize=4, color=color, ecolor="k")
    return med


@styled
def plot_benchmarks(results: dict[str, Any]):
    """F-perf: three panels from the benchmark results ``{"layer", "compile", "chunked",
    optionally "threads1/layer"}`` (the parsed JSON files).

    (a) encoder forward time, transflow vs torch's fused fast path (median, min–max; with
    ``threads1/layer`` also one thread each); (b) trace+lower+compile time of ``evolve``
    at 1 and 48 steps; (c) peak RSS of the chunked attention against the JAX-runtime floor
    and the size of a dense score matrix; (a) spans the top row, (b) and (c) share the
    bottom one. Without one of :data:`BENCHMARK_PARTS` it draws a placeholder saying
    "run make bench".
    """
    if not set(BENCHMARK_PARTS) <= results.keys():
        fig, ax = new_figure(2.0)
        ax.axis("off")
        ax.text(
            0.5,
            0.5,
            "no benchmark results yet:\nrun make bench",
            ha="center",
            va="center",
            fontsize=12,
        )
        return fig

    layer, comp, chunk = results["layer"], results["compile"], results["chunked"]
    fig = _pyplot().figure(figsize=(FIGURE_WIDTH, 5.4), layout="constrained")
    mosaic = fig.subplot_mosaic([["a", "a"], ["b", "c"]], height_ratios=[1.0, 1.1])
    axes = [mosaic["a"], mosaic["b"], mosaic["c"]]
    t = layer["timings_s"]
    shp = layer["shape"]
    labels = ["transflow\n(jit+vmap)", "torch\n(fast path)"]
    series = [t["transflow"], t["torch"]]
    colors = ["C0", "C1"]
    one = results.get("threads1/layer")
    if one is not None:  # the same comparison with one thread each
        labels = [f"{lbl}\n{layer['threads']['torch']} thr" for lbl in labels]
        labels += ["transflow\n1 thr", "torch\n1 thr"]
        series += [one["timings_s"]["transflow"], one["timings_s"]["torch"]]
        colors += ["C0", "C1"]
    _bar(axes[0], labels, series, 1e3, colors)
    axes[0].set_ylabel("forward time [ms]")
    axes[0].set_xlabel("implementation, threads")
    axes[0].set_title(
        f"(a) {shp['layers']}-layer post-LN, B={shp['batch']}, n={shp['tokens']}, "
        f"d={shp['d_model']}\nratio torch/transflow = {layer['ratio_vs_torch']:.2f}, "
        f"flop fraction {layer['flop_fraction']:.2f}"
        + ("" if one is None else f"; 1 thread: ratio {one['ratio_vs_torch']:.2f}"),
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
    axes[1].set_xlabel("depth of evolve")
    axes[1].set_title(
        f"(b) compile time of evolve\nratio {comp['compile_ratio']:.2f} (target ≤ 1.5)"
    )

    rss_labels = ["JAX runtime\n(baseline)", "chunked\nforward"]
    vals = [chunk["baseline_rss_gib"], chunk["chunked_peak_rss_gib"]]
    if chunk.get("chunked_grad_peak_rss_gib") is not None:
        rss_labels.append("chunked\ngradient")
        vals.append(chunk["chunked_grad_peak_rss_gib"])
    axes[2].bar(rss_labels, vals, color="C4")
    threshold_line(
        axes[2],
        "chunked_peak_rss_gib",
        RSS_TARGET_GIB,
        label=f"target {RSS_TARGET_GIB:g} GiB",
        color="k",
        ls="--",
        lw=1,
    )
    threshold_line(
        axes[2],
        "dense_scores_gib",
        chunk["dense_scores_gib"],
        label=f"dense scores alone ({chunk['dense_scores_gib']:.0f} GiB)",
        color="C3",
        ls=":",
        lw=1.5,
    )
    axes[2].set_ylabel("peak RSS [GiB]")
    axes[2].set_xlabel("process")
    axes[2].set_title(
        f"(c) chunked attention, n={chunk['tokens']}, d={chunk['d']}, fp32\n"
        f"rel. error vs dense (n={chunk['agreement_tokens']}): "
        f"{chunk['agreement_rel_err']:.1e}"
    )
    axes[2].legend(loc="center right")
    fig.suptitle(
        f"jax {layer['jax_version']}, torch {layer['torch_version']}, "
        f"{layer['backend']}, {layer['threads']['torch']} threads each"
    )
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    key = [
        Patch(color="C0", label="transflow"),
        Patch(color="C1", label="torch"),
        *(Patch(color=c, label=f"compile, {st} step(s)") for c, st in zip(("C2", "C3"), steps)),
        Patch(color="C4", label="peak RSS"),
        Line2D(
            [], [], color="k", marker="|", ms=8, ls="", label="error bar: min–max of the rounds"
        ),
    ]
    fig.legend(handles=key, loc="outside lower center", ncol=6, title="bars: median of the rounds")
    return fig
