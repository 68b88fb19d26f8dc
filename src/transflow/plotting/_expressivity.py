"""Figures of the expressivity studies (F7 softmax error, F8 regions vs depth, F9 2-D
partitions, F13 a plane slice of a network on R^d); the records come from
:mod:`transflow.expressivity` (``softmax_rows``, ``region_rows``, ``partition_2d``,
``slice_study``)."""

from __future__ import annotations

__all__ = ["plot_softmax", "plot_regions", "plot_partition", "plot_slice"]


def plot_softmax(rows):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.2, 4.2))
    tokens = sorted({r["T"] for r in rows})
    for i, T in enumerate(tokens):
        rr = [r for r in rows if r["T"] == T]
        col = f"C{i}"
        lam = [r["lambda"] for r in rr]
        ax.semilogx(
            lam, [r["err_lambda_grid"] for r in rr], "o-", color=col, label=f"T={T}: dense gap grid"
        )
        ax.semilogx(
            lam,
            [r["err_lambda_random"] for r in rr],
            "x:",
            color=col,
            alpha=0.7,
            label=f"T={T}: {rr[0]['n_random']} random points",
        )
        ax.axhline(rr[0]["c_T"], color=col, lw=0.8, ls="--")
        ax.text(
            lam[-1],
            rr[0]["c_T"],
            f" W({T - 1}/e)={rr[0]['c_T']:.4f}",
            va="bottom",
            fontsize=7,
            color=col,
            ha="right",
        )
    ax.set_xlabel("softmax scale λ")
    ax.set_ylabel("sup |max − softmax-attention| · λ")
    ax.set_title("F7: softmax max-unit error × λ → c_T = W((T−1)/e)")
    ax.legend(fontsize=6.5, ncol=2)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    return fig


def plot_regions(rows):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), sharey=True)
    for ax, variant in zip(axes, ("A", "B")):
        rr = [r for r in rows if r["variant"] == variant]
        for i, T in enumerate(sorted({r["T"] for r in rr})):
            s = [r for r in rr if r["T"] == T]
            D = [r["D"] for r in s]
            col = f"C{i}"
            ax.semilogy(
                D, [r["regions"] for r in s], "o", color=col, ms=7, label=f"T={T}: counted (exact)"
            )
            form = "(2T−1)^{d(D−1)}" if variant == "A" else "(2T−3)^{dD/3}"
            ax.semilogy(
                D, [r["rc_exact"] for r in s], "-", color=col, lw=1, label=f"T={T}: RC exact {form}"
            )
            ax.semilogy(
                D,
                [r["montufar"] for r in s],
                "--",
                color=col,
                lw=0.8,
                label=f"T={T}: Montúfar k^(L−1)k^d",
            )
            if variant == "A":  # the summary's formula counts 3 blocks per layer (B layout)
                continue
            ax.semilogy(
                D,
                [max(r["summary_qd"], 1) for r in s],
                ":",
                color=col,
                lw=1.2,
                label=f"T={T}: (T−1)^d (T−1)^(q(⌊D/3⌋−1)), q∈{{1,d}}",
            )
        ax.set_xlabel("depth D (blocks)")
        ax.set_title(
            f"Variant {variant}"
            + (" (1 block/layer)" if variant == "A" else " (3 blocks/layer, reserved token)")
        )
        ax.grid(True, which="both", alpha=0.3)
        if rr:
            ax.legend(fontsize=6)
        else:
            ax.text(0.5, 0.5, "not run", transform=ax.transAxes, ha="center")
    axes[0].set_ylabel("linear regions on [0, 1] (d = 1)")
    fig.suptitle("F8: linear regions of the zigzag transformers vs depth")
    fig.tight_layout()
    return fig


def plot_partition(parts, T=3, D=3):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.collections import PolyCollection

    fig, axes = plt.subplots(1, 2, figsize=(10, 4.9))
    titles = {
        "zigzag": f"zigzag transformer, Variant A, T={T}, D={D}",
        "relu": "transformer of a random ReLU net 2→6→5→1",
    }
    for ax, (name, r) in zip(axes, parts.items()):
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
            f"{titles[name]}\n{r.linear} linear / {r.activation} activation regions\n"
            f"{_cert_label(r)}",
            fontsize=9,
        )
        ax.set_xlabel("x₁")
        ax.set_ylabel("x₂")
    fig.suptitle("F9: exact partition of the input box into linear regions (hardmax)")
    fig.tight_layout()
    return fig


def _cert_label(r) -> str:
    """How a 2-D count was established, from its certificate."""
    method = (r.certificate or {}).get("method", "")
    if r.certified and method.startswith("exact integer arithmetic"):
        return "certified (exact integer arithmetic)"
    if r.certified:
        return "certified"
    return "NOT certified (float64 polygon clipping)"


def plot_slice(study):
    """F13: the certified partition of the plane through three points of R^d (the
    ``slice_study`` record): regions coloured, the three points and the triangle marked,
    and the segment through the first two points (its count beside the dense count)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.collections import PolyCollection

    r = study["plane_count"]
    fig, ax = plt.subplots(figsize=(5.6, 5.4))
    rng = np.random.default_rng(1)
    colours = plt.get_cmap("tab20")(rng.permutation(max(r.linear, 1)) % 20)
    ax.add_collection(
        PolyCollection(r.polygons, facecolors=colours[r.labels], edgecolors="k", linewidths=0.2)
    )
    ax.plot([0, 1, 0, 0], [0, 0, 1, 0], "w-", lw=1.2)
    ax.plot([0, 1], [0, 0], "k-", lw=2.0)
    offsets = [(4, 4), (-16, 4), (4, -12)]
    for (tx, ty), name, off in zip([(0, 0), (1, 0), (0, 1)], ["p0", "p1", "p2"], offsets):
        ax.plot(tx, ty, "ko", ms=5, clip_on=False)
        ax.annotate(name, (tx, ty), textcoords="offset points", xytext=off, fontsize=9)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_aspect("equal")
    ax.set_xlabel("t₁ (direction p1 − p0)")
    ax.set_ylabel("t₂ (direction p2 − p0)")
    line = study["line"]
    ax.set_title(
        f"F13: ReLU net R^{study['d_in']}→R ({study['depth']}×{study['width']}), plane "
        f"p0 + t₁(p1−p0) + t₂(p2−p0)\n{r.linear} linear regions, {_cert_label(r)}; "
        f"segment p0→p1: {line['linear']}, "
        f"certified {line['certified']} "
        f"(dense sampling: {line['dense_activation']})",
        fontsize=8.5,
        pad=10,
    )
    fig.tight_layout()
    return fig
