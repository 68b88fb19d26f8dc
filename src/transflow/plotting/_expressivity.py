"""Figures of the expressivity studies (F7 softmax error, F8 regions vs depth, F9 2-D
partitions, F13 a plane slice of a network on R^d); the records come from
:mod:`transflow.expressivity` (``softmax_rows``, ``region_rows``, ``partition_2d``,
``slice_study``)."""

from __future__ import annotations

from ._style import integer_axis, new_figure, smoke_note, styled

__all__ = ["plot_softmax", "plot_regions", "plot_partition", "plot_slice"]


@styled
def plot_softmax(rows, *, title: str = r"softmax max-unit: error $\times\,\lambda \to c_T$"):
    """F7: sup |max − softmax attention| · λ against λ per T, with c_T = W((T−1)/e).

    ``rows``: the records of :func:`transflow.expressivity.softmax_rows`. One colour per
    T (first key), one line style per estimate (second key): the dense grid of gaps, the
    uniform random points, and c_T. Where λ exceeds half the number of random points
    their spacing (≈ 2/n) is wider than the gap ≈ 1/λ at which the error peaks, so the
    random estimate falls: that range is shaded and the key says so.
    """
    import matplotlib.patches as mpatches
    from matplotlib.lines import Line2D

    fig, ax = new_figure(3.2)
    tokens = sorted({r["T"] for r in rows})
    by_t = []
    for i, T in enumerate(tokens):
        rr = sorted((r for r in rows if r["T"] == T), key=lambda r: r["lambda"])
        col = f"C{i}"
        lam = [r["lambda"] for r in rr]
        ax.semilogx(lam, [r["err_lambda_grid"] for r in rr], "o-", color=col)
        ax.semilogx(lam, [r["err_lambda_random"] for r in rr], "x:", color=col, alpha=0.8)
        ax.axhline(rr[0]["c_T"], color=col, lw=0.8, ls="--")
        by_t.append(
            Line2D([], [], color=col, lw=2, label=f"$T = {T}$, $c_{{{T}}} = {rr[0]['c_T']:.4f}$")
        )
    n_random = rows[0]["n_random"]
    lam_max = max(r["lambda"] for r in rows)
    styles = [
        Line2D([], [], color="0.3", marker="o", ls="-", label="dense grid of gaps"),
        Line2D([], [], color="0.3", marker="x", ls=":", label=f"{n_random} random points"),
        Line2D([], [], color="0.3", ls="--", lw=0.8, label=r"$c_T = W((T-1)/e)$"),
    ]
    if lam_max > n_random / 2:
        ax.axvspan(n_random / 2, lam_max * 1.5, color="0.9", zorder=0)
        styles.append(
            mpatches.Patch(
                color="0.9",
                label=f"$\\lambda > n/2$: {n_random} random points\n"
                "too sparse to hit the peak\n(gap ≈ 1/λ): sampling artefact",
            )
        )
    ax.set_xlabel(r"softmax scale $\lambda$")
    ax.set_ylabel(r"$\lambda \cdot \sup\,|\max - \mathrm{softmax\ attention}|$")
    ax.set_title(title)
    first = ax.legend(
        handles=by_t, loc="upper left", bbox_to_anchor=(1.02, 1.0), title="tokens $T$ (colour)"
    )
    ax.add_artist(first)
    ax.legend(handles=styles, loc="lower left", bbox_to_anchor=(1.02, 0.0), title="estimate")
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
    no rows is a panel saying so; one with a single depth says "smoke size". A value of
    T has one colour in both panels; the bounds differ in dash pattern and marker.
    """
    from matplotlib.lines import Line2D

    fig, axes = new_figure(3.9, 1, 2)
    # one colour per T in both panels (T = 3 is the same colour in Variants A and B)
    colour_of = {T: f"C{i}" for i, T in enumerate(sorted({r["T"] for r in rows}))}
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
        lines = False  # a bound is a line through two depths or more; one depth: points only
        for T in sorted({r["T"] for r in rr}):
            s = sorted((r for r in rr if r["T"] == T), key=lambda r: r["D"])
            D = [r["D"] for r in s]
            lines = lines or len(D) >= 2
            col = colour_of[T]
            ax.semilogy(D, [r["regions"] for r in s], "o", color=col, ms=6)
            ax.semilogy(D, [r["rc_exact"] for r in s], "-", color=col, lw=1)
            ax.semilogy(D, [r["montufar"] for r in s], ls=(0, (5, 2)), color=col, lw=1)
            if variant == "B":  # the summary's formula counts 3 blocks per layer (B layout)
                ax.semilogy(
                    D,
                    [max(r["summary_qd"], 1) for r in s],
                    ls=(0, (1, 1.5)),
                    marker="v",
                    ms=3,
                    color=col,
                    lw=1.2,
                )
            handles.append(Line2D([], [], color=col, marker="o", ls="", ms=6, label=f"$T = {T}$"))
        ax.set_xlabel("depth $D$ (blocks)")
        ax.set_ylabel("linear regions on [0, 1] ($d = 1$)")
        integer_axis(ax.xaxis)
        integer_axis(ax.yaxis)  # region counts
        ax.grid(True, which="both")
        styles = [Line2D([], [], color="k", marker="o", ls="", label="counted (exact, certified)")]
        if lines:
            styles += [
                Line2D([], [], color="k", lw=1, label=_FORMULA[variant]),
                Line2D([], [], color="k", ls=(0, (5, 2)), lw=1, label=r"Montúfar $k^{L-1}k^d$"),
            ]
        if variant == "B":
            summary = r"$(T-1)^d\,(T-1)^{q(\lfloor D/3\rfloor-1)}$"
            ls = (0, (1, 1.5)) if lines else ""
            styles.append(Line2D([], [], color="k", ls=ls, marker="v", ms=3, lw=1.2, label=summary))
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


def _neighbour_colours(polygons, labels, n_colours: int = 10):
    """Colour indices per region such that regions touching each other (sharing a boundary
    point, T-junctions included) get different colours: greedy colouring of the touch
    graph, fewest colours first. ``labels[i]`` is the region of ``polygons[i]``."""
    import numpy as np

    labels = np.asarray(labels)
    polys = [np.asarray(p, float) for p in polygons]
    lo = np.array([p.min(0) for p in polys])
    hi = np.array([p.max(0) for p in polys])
    scale = float(np.max(hi) - np.min(lo)) or 1.0
    eps = 1e-9 * scale

    def touch(a, b) -> bool:
        for pts, ring in ((a, b), (b, a)):
            s0, s1 = ring, np.roll(ring, -1, axis=0)
            d = s1 - s0
            L = np.maximum((d**2).sum(1), 1e-300)
            t = np.clip(((pts[:, None, :] - s0[None]) * d[None]).sum(2) / L, 0.0, 1.0)
            near = s0[None] + t[..., None] * d[None] - pts[:, None, :]
            if (np.sqrt((near**2).sum(2)) <= eps).any():
                return True
        return False

    n_regions = int(labels.max()) + 1 if len(labels) else 0
    adjacent: list[set] = [set() for _ in range(n_regions)]
    close = np.all((lo[:, None] <= hi[None] + eps) & (lo[None] <= hi[:, None] + eps), axis=2)
    for i, j in zip(*np.nonzero(np.triu(close, 1))):
        a, b = labels[i], labels[j]
        if a != b and b not in adjacent[a] and touch(polys[i], polys[j]):
            adjacent[a].add(b)
            adjacent[b].add(a)
    colour = np.full(n_regions, -1)
    for r in sorted(range(n_regions), key=lambda r: -len(adjacent[r])):
        used = {colour[q] for q in adjacent[r]}
        colour[r] = next(c for c in range(n_regions + 1) if c not in used)
    return colour % n_colours


@styled
def plot_partition(parts, T=3, D=3):
    """F9: the exact partition of a 2-D box into linear regions, one panel per part.

    Touching regions never share a colour (greedy colouring of the touch graph, at most
    10 colours) and are separated by thin white edges, so neighbours do not merge.

    ``parts``: :func:`transflow.expressivity.partition_2d` (``"zigzag"`` and, unless
    ``relu=False`` as at smoke size, ``"relu"``); a missing part is a panel saying so.
    """
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.collections import PolyCollection

    fig, axes = new_figure(3.6, 1, 2)
    titles = {
        "zigzag": f"zigzag transformer,\nVariant A, $T = {T}$, $D = {D}$",
        "relu": "transformer of a random\n" + r"ReLU net 2$\to$6$\to$5$\to$1",
    }
    for ax, name in zip(axes, ("zigzag", "relu")):
        r = parts.get(name)
        if r is None:
            ax.set_title(titles[name])
            smoke_note(ax, "not computed at smoke size\n(partition_2d(relu=False))", empty=True)
            continue
        palette = plt.get_cmap("tab10")(np.arange(10))
        colours = palette[_neighbour_colours(r.polygons, r.labels)]
        pc = PolyCollection(
            r.polygons, facecolors=colours[r.labels], edgecolors="white", linewidths=0.3
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
    ``slice_study`` record): regions coloured (touching regions differ), the three points
    and the triangle marked, and the segment through the first two points as a thick
    black line inside a margin (not on the spine), its count beside the dense count."""
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.collections import PolyCollection

    r = study["plane_count"]
    fig, ax = new_figure(3.6)
    palette = plt.get_cmap("tab10")(np.arange(10))
    colours = palette[_neighbour_colours(r.polygons, r.labels)]
    ax.add_collection(
        PolyCollection(r.polygons, facecolors=colours[r.labels], edgecolors="white", linewidths=0.3)
    )
    ax.plot([0, 1, 0, 0], [0, 0, 1, 0], color="0.15", ls=(0, (4, 2)), lw=1, label="triangle")
    ax.plot([0, 1], [0, 0], "k-", lw=2.0, label=r"segment $p_0 \to p_1$", zorder=4)
    ax.plot([0, 1, 0], [0, 0, 1], "ko", ms=5, ls="", label="$p_0, p_1, p_2$", zorder=5)
    offsets = [(-14, -12), (4, -12), (-14, 4)]
    for (tx, ty), name, off in zip([(0, 0), (1, 0), (0, 1)], ["p_0", "p_1", "p_2"], offsets):
        ax.annotate(f"${name}$", (tx, ty), textcoords="offset points", xytext=off)
    # a margin around the unit square: the segment p0 -> p1 (y = 0) is not on the spine
    ax.set_xlim(-0.08, 1.08)
    ax.set_ylim(-0.08, 1.08)
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
        f"segment $p_0 \\to p_1$ (thick black line):\n{line['linear']} linear regions, "
        f"{'certified' if line['certified'] else 'NOT certified'};\n"
        f"dense sampling: {line['dense_activation']}",
        transform=ax.transAxes,
        va="top",
        ha="left",
    )
    ax.legend(loc="lower left", bbox_to_anchor=(1.04, 0.0))
    return fig
