"""Figures of the trained-expressivity study (issue #39, docs/trained-regions.md): certified
region counts of trained hardmax transformers and ReLU MLPs against depth, and a 2-D
partition of one trained model beside its target's. The records come from
``experiments/tasks/trained_regions.py``."""

from __future__ import annotations

from ._style import integer_axis, new_figure, smoke_note, styled, threshold_line

__all__ = ["plot_trained_partition", "plot_trained_regions"]


def _mean_std(rows, key):
    import numpy as np

    v = np.array([r[key] for r in rows], float)
    return float(v.mean()), float(v.std())


@styled
def plot_trained_regions(rows, *, title: str = "linear regions against depth: trained vs built"):
    """Regions against depth D (log scale), one panel per target: the construction's
    capacity ``(2T−1)^{d(D−1)}``, the trained transformer (hardmax reading), the trained
    ReLU MLP of the same parameter count, both at initialisation, and the target's own
    count; markers are the mean over seeds, error bars ± one standard deviation over seeds.

    ``rows``: one record per (target, kind, depth, seed) with keys ``target``, ``dim``,
    ``kind``, ``depth``, ``seed``, ``regions``, ``regions_init``, ``capacity``,
    ``target_regions``.
    """
    targets = list(dict.fromkeys(r["target"] for r in rows))
    fig, axes = new_figure(3.4, 1, max(len(targets), 1))
    axes = list(axes) if len(targets) > 1 else [axes]
    styles = {
        ("transformer", "regions"): ("C0", "o", "-", "trained transformer (hardmax)"),
        ("mlp", "regions"): ("C1", "s", "-", "trained ReLU MLP, same #params"),
        ("transformer", "regions_init"): ("C0", "o", ":", "transformer at init"),
        ("mlp", "regions_init"): ("C1", "s", ":", "ReLU MLP at init"),
    }
    for ax, target in zip(axes, targets):
        rt = [r for r in rows if r["target"] == target]
        depths = sorted({r["depth"] for r in rt})
        cap = [next(r["capacity"] for r in rt if r["depth"] == D) for D in depths]
        ax.semilogy(
            depths,
            cap,
            "k--",
            lw=1,
            marker="o" if len(depths) < 2 else None,  # one depth: a point, not a line
            mfc="none",
            label=r"construction realizes $(2T-1)^{d(D-1)}$",
        )
        for (kind, key), (col, mk, ls, lab) in styles.items():
            means, stds, ds = [], [], []
            for D in depths:
                cell = [r for r in rt if r["kind"] == kind and r["depth"] == D]
                if cell:
                    m, s = _mean_std(cell, key)
                    means.append(m)
                    stds.append(s)
                    ds.append(D)
            if ds:
                ax.errorbar(
                    ds,
                    means,
                    yerr=stds,
                    color=col,
                    marker=mk,
                    ls=ls,
                    capsize=2,
                    mfc="none" if ls == ":" else col,
                    label=lab,
                )
        tr = rt[0].get("target_regions")
        if tr:
            threshold_line(
                ax,
                "target_regions",
                tr,
                label=f"target ({tr} regions)",
                color="0.5",
                lw=0.8,
                ls="-.",
            )
        ax.set_yscale("log")
        ax.set_title(f"{target} ($d = {rt[0]['dim']}$)")
        ax.set_xlabel("depth $D$")
        ax.set_ylabel("certified linear regions on $[0, 1]^d$")
        integer_axis(ax.xaxis)
        ax.grid(True, which="both")
        if len(depths) < 3:
            smoke_note(ax, f"smoke size: depths {', '.join(map(str, depths))} only")
    n_seeds = len({r["seed"] for r in rows})
    handles, labels = [], []
    for ax in axes:  # the union of the panels' entries (the target line differs per panel)
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(
        handles,
        labels,
        loc="outside lower center",
        ncol=3,
        title=f"markers: mean over {n_seeds} seeds; error bars: ± std over seeds; "
        "depth D = blocks (transformer) or hidden layers (MLP)",
    )
    if title:
        fig.suptitle(title)
    return fig


@styled
def plot_trained_partition(model, target, *, model_title: str, target_title: str):
    """Two panels: the exact partition of a trained model's box into linear regions
    (``model``: a 2-D :class:`transflow.expressivity.RegionCount` with polygons) beside its
    target's (``target``, the same); region edges drawn, colours per linear region."""
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.collections import PolyCollection

    fig, axes = new_figure(3.8, 1, 2)
    for ax, r, ttl in zip(axes, (model, target), (model_title, target_title)):
        if r is None or r.polygons is None:
            ax.set_title(ttl)
            smoke_note(ax, "no 2-D partition", empty=True)
            continue
        rng = np.random.default_rng(1)
        colours = plt.get_cmap("tab20")(rng.permutation(max(r.linear, 1)) % 20)
        ax.add_collection(
            PolyCollection(
                r.polygons, facecolors=colours[r.labels], edgecolors="k", linewidths=0.25
            )
        )
        allv = np.concatenate(r.polygons)
        ax.set_xlim(allv[:, 0].min(), allv[:, 0].max())
        ax.set_ylim(allv[:, 1].min(), allv[:, 1].max())
        ax.set_aspect("equal")
        cert = "certified" if r.certified else "NOT certified"
        ax.set_title(f"{ttl}\n{r.linear} linear / {r.activation} activation regions ({cert})")
        ax.set_xlabel("$x_1$")
        ax.set_ylabel("$x_2$")
    fig.suptitle("exact partition of $[0, 1]^2$ into linear regions (edges: region boundaries)")
    return fig
