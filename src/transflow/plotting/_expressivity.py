"""Figures of the expressivity studies (F7 softmax error, F8 regions vs depth, F9 2-D
partitions, F13 a plane slice of a network on R^d); the records come from
:mod:`transflow.expressivity` (``softmax_rows``, ``region_rows``, ``partition_2d``,
``slice_study``)."""

from __future__ import annotations

from ._style import new_figure, smoke_note, styled

__all__ = ["plot_softmax", "plot_regions", "plot_partition", "plot_slice"]


@styled
def plot_softmax(rows, *, title: str = r"softmax max-unit: error $\times\,\lambda \to c_T$"):
    """F7: sup |max − softmax attention| · λ against λ per T, with c_T = W((T−1)/e).

    ``rows``: the records of :func:`transflow.expressivity.softmax_rows`.
    """
    fig, ax = new_figure(3.0)
    tokens = sorted({r["T"] for r in rows})
    for i, T in enumerate(tokens):
        rr = [r for r in rows if r["T"] == T]
        col = f"C{i}"
        lam = [r["lambda"] for r in rr]
        ax.semilogx(
            lam,
            [r["err_lambda_grid"] for r in rr],
            "o-",
            color=col,
            label=f"$T = {T}$: dense gap grid",
        )
        ax.semilogx(
            lam,
            [r["err_lambda_random"] for r in rr],
            "x:",
            color=col,
            alpha=0.7,
            label=f"$T = {T}$: {rr[0]['n_random']} random points",
        )
        ax.axhline(
            rr[0]["c_T"],
            color=col,
            lw=0.8,
            ls="--",
            label=f"$c_{{{T}}} = W({T - 1}/e) = {rr[0]['c_T']:.4f}$",
        )
    ax.set_xlabel(r"softmax scale $\lambda$")
    ax.set_ylabel(r"$\lambda \cdot \sup\,|\max - \mathrm{softmax\ attention}|$")
    ax.set_title(title)
    ax.legend(loc="center left", bbox_to_anchor=(1.02, 0.5))
    ax.grid(True, which="both")
    if len({r["lambda"] for r in rows}) < 3:
        smoke_note(ax, f"smoke size: {len({r['lambda'] for r in rows})} values of λ")
    return fig


_FORMULA = {
    "A": r"RC exact $(2T-1)^{d(D-1)}$",
    "B": r"RC exact $(2T-3)^{dD/3}$",
}


@styled
def plot_regions(rows, *, title: str = "linear regions of the zigzag transformers vs depth"):
    """F8: certified region counts against depth D, Variants A and B, beside the
    formulas and the candidate lower bounds.

    ``rows``: the records of :func:`transflow.expressivity.region_rows`. A variant with
    no rows is a panel saying so; one with a single depth says "smoke size".
    """
    import matplotlib.ticker as mticker
    from matplotlib.lines import Line2D

    fig, axes = new_figure(3.9, 1, 2)
    for ax, variant in zip(axes, ("A", "B")):
        rr = [r for r in rows if r["variant"] == variant]
        ax.set_title(
            f"Variant {variant}"
            + (" (1 block/layer)" if variant == "A" else " (3 blocks/layer, reserved token)")
        )
        if not rr:
            smoke_note(ax, f"Variant {variant}: not run", empty=True)
            continue
        handles = []
        for i, T in enumerate(sorted({r["T"] for r in rr})):
            s = sorted((r for r in rr if r["T"] == T), key=lambda r: r["D"])
            D = [r["D"] for r in s]
            col = f"C{i}"
            ax.semilogy(D, [r["regions"] for r in s], "o", color=col, ms=6)
            ax.semilogy(D, [r["rc_exact"] for r in s], "-", color=col, lw=1)
            ax.semilogy(D, [r["montufar"] for r in s], "--", color=col, lw=0.8)
            if variant == "B":  # the summary's formula counts 3 blocks per layer (B layout)
                ax.semilogy(D, [max(r["summary_qd"], 1) for r in s], ":", color=col, lw=1.2)
            handles.append(Line2D([], [], color=col, lw=4, label=f"$T = {T}$"))
        ax.set_xlabel("depth $D$ (blocks)")
        ax.set_ylabel("linear regions on [0, 1] ($d = 1$)")
        ax.xaxis.set_major_locator(mticker.MaxNLocator(integer=True))
        ax.grid(True, which="both")
        styles = [
            Line2D([], [], color="k", marker="o", ls="", label="counted (exact, certified)"),
            Line2D([], [], color="k", lw=1, label=_FORMULA[variant]),
            Line2D([], [], color="k", ls="--", lw=0.8, label=r"Montúfar $k^{L-1}k^d$"),
        ]
        if variant == "B":
            summary = r"$(T-1)^d\,(T-1)^{q(\lfloor D/3\rfloor-1)}$"
            styles.append(Line2D([], [], color="k", ls=":", lw=1.2, label=summary))
        ax.legend(
            handles=styles + handles,
            loc="upper center",
            bbox_to_anchor=(0.5, -0.2),
            ncol=2,
            fontsize=6.5,
        )
        depths = sorted({r["D"] for r in rr})
        if len(depths) < 3:
            smoke_note(ax, f"smoke size: depths {', '.join(map(str, depths))} only")
    if title:
        fig.suptitle(title)
    return fig


@styled
def plot_partition(parts, T=3, D=3):
    """F9: the exact partition of a 2-D box into linear regions, one panel per part.

    ``parts``: :func:`transflow.expressivity.partition_2d` (``"zigzag"`` and, unless
    ``relu=False`` as at smoke size, ``"relu"``); a missing part is a panel saying so.
    """
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.collections import PolyCollection

    fig, axes = new_figure(3.6, 1, 2)
    titles = {
        "zigzag": f"zigzag transformer, Variant A, $T = {T}$, $D = {D}$",
        "relu": r"transformer of a random ReLU net 2$\to$6$\to$5$\to$1",
    }
    for ax, name in zip(axes, ("zigzag", "relu")):
        r = parts.get(name)
        if r is None:
            ax.set_title(titles[name])
            smoke_note(ax, "not computed at smoke size\n(partition_2d(relu=False))", empty=True)
            continue
        rng = np.random.default_rng(1)
        colours = plt.get_cmap("tab20")(rng.permutation(max(r.linear, 1)) % 20)
        pc = PolyCollection(
            r.polygons, facecolors=colours[r.labels], edgecolors="k", linewidths=0.15
        )
        ax.add_collection(pc)
        allv = np.concatenate(r.polygons)
        ax.set_xlim(allv[:, 0].min(), allv[:, 0].max())
        ax.set_ylim(allv[:, 1].min(), allv[:, 1].max())
        ax.set_aspect("equal")
        ax.set_title(
            f"{titles[name]}\n{r.linear} linear / {r.activation} activation regions,\n"
            f"{_cert_label(r)}"
        )
        ax.set_xlabel("$x_1$")
        ax.set_ylabel("$x_2$")
    fig.suptitle("exact partition of the input box into linear regions (hardmax)")
    return fig


def _cert_label(r) -> str:
    """How a 2-D count was established, from its certificate."""
    method = (r.certificate or {}).get("method", "")
    if r.certified and method.startswith("exact integer arithmetic"):
        return "certified (exact integer arithmetic)"
    if r.certified:
        return "certified"
    return "NOT certified (float64 polygon clipping)"


@styled
def plot_slice(study):
    """F13: the certified partition of the plane through three points of R^d (the
    ``slice_study`` record): regions coloured, the three points and the triangle marked,
    and the segment through the first two points (its count beside the dense count)."""
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.collections import PolyCollection

    r = study["plane_count"]
    fig, ax = new_figure(3.6)
    rng = np.random.default_rng(1)
    colours = plt.get_cmap("tab20")(rng.permutation(max(r.linear, 1)) % 20)
    ax.add_collection(
        PolyCollection(r.polygons, facecolors=colours[r.labels], edgecolors="k", linewidths=0.2)
    )
    ax.plot([0, 1, 0, 0], [0, 0, 1, 0], "w-", lw=1.2)
    ax.plot([0, 1], [0, 0], "k-", lw=2.0)
    offsets = [(4, 4), (-16, 4), (4, -12)]
    for (tx, ty), name, off in zip([(0, 0), (1, 0), (0, 1)], ["p_0", "p_1", "p_2"], offsets):
        ax.plot(tx, ty, "ko", ms=5, clip_on=False)
        ax.annotate(f"${name}$", (tx, ty), textcoords="offset points", xytext=off)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_aspect("equal")
    ax.set_xlabel(r"$t_1$ (direction $p_1 - p_0$)")
    ax.set_ylabel(r"$t_2$ (direction $p_2 - p_0$)")
    line = study["line"]
    ax.set_title(
        f"ReLU net $\\mathbb{{R}}^{{{study['d_in']}}} \\to \\mathbb{{R}}$ "
        f"({study['depth']} × {study['width']}) on a plane"
    )
    ax.text(
        1.06,
        1.0,
        "plane $p_0 + t_1(p_1 - p_0) + t_2(p_2 - p_0)$\n"
        f"{r.linear} linear regions,\n{_cert_label(r)}\n\n"
        f"segment $p_0 \\to p_1$ (black):\n{line['linear']} linear regions, "
        f"{'certified' if line['certified'] else 'NOT certified'};\n"
        f"dense sampling: {line['dense_activation']}",
        transform=ax.transAxes,
        va="top",
        ha="left",
    )
    return fig
