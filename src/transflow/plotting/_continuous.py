"""Figures of the continuous-limit studies (:mod:`transflow.continuous`): error vs Δt
(F3), error vs grid size (F4), token clustering (F5) and the non-convergence of the full
model (F6). Each takes the records the study returns and returns a matplotlib ``Figure``
in the style of :mod:`transflow.plotting` (:func:`transflow.plotting.figure_style`).
"""

from __future__ import annotations

from ._style import new_figure, smoke_note, styled, threshold_line

__all__ = ["plot_convergence", "plot_grid", "plot_nonconvergence", "plot_clustering"]

_ORDER_LABEL = {1: r"$O(\Delta t)$", 2: r"$O(\Delta t^2)$"}


def _math_names(text: str) -> str:
    """``sigma1=0 (S1∩S2=∅)`` → ``$\\sigma_1$=0 ($S_1$∩$S_2$=∅)`` (the study's case names)."""
    import re

    text = re.sub(r"\bsigma(\d)", r"$\\sigma_\1$", text)
    return re.sub(r"\bS(\d)\b", r"$S_\1$", text)


_SCHEME_STYLE = (  # colour, marker, filled, line style: coinciding curves stay visible
    ("C0", "o", True, "-"),
    ("C1", "s", False, "--"),
    ("C2", "^", False, ":"),
    ("C4", "D", False, "-."),
    ("C3", "v", True, "-"),
    ("C5", "P", False, "--"),
)


@styled
def plot_convergence(records: list[dict], *, title: str = ""):
    """Log–log error vs Δt, one panel per sub-model, with reference slopes 1 and 2.

    ``records``: :meth:`transflow.continuous.ConvergenceResult.record` dicts; ``title``:
    an optional figure title. Each scheme has one colour, marker and line style in every
    panel (filled and open markers, so curves that coincide both show); the fitted slopes
    are in the key below the panels, per sub-model (a box inside would cover curves);
    the reference slopes are drawn a factor 4 below all the data; one key below the
    panels.

    Example:
        >>> from transflow.plotting import plot_convergence
        >>> rec = {"submodel": "a", "scheme": "lie", "dts": [0.5, 0.25],
        ...        "errors": [1e-2, 5e-3], "slope": 1.0}
        >>> len(plot_convergence([rec]).axes)
        1
    """
    import numpy as np
    from matplotlib.lines import Line2D

    def name(r):
        return r["scheme"] + (f" ({r['b_splitting']} F)" if r.get("b_splitting") else "")

    subs = list(dict.fromkeys(r["submodel"] for r in records))
    names = list(dict.fromkeys(name(r) for r in records))
    style = {n: _SCHEME_STYLE[i % len(_SCHEME_STYLE)] for i, n in enumerate(names)}
    fig, axes = new_figure(3.4, 1, len(subs), squeeze=False)
    for ax, sub in zip(axes[0], subs):
        mine = [r for r in records if r["submodel"] == sub]
        for r in mine:
            col, mk, filled, ls = style[name(r)]
            ax.loglog(
                r["dts"],
                r["errors"],
                marker=mk,
                ls=ls,
                color=col,
                mfc=col if filled else "none",
                ms=6 if filled else 4,
                zorder=3,
            )
        dts = np.asarray(mine[0]["dts"], float)
        for p, ls in ((1, (0, (1, 1.5))), (2, (0, (5, 2)))):
            # the guide's constant: a factor 4 below every data point
            c = min(
                float(np.nanmin(np.asarray(r["errors"], float) / np.asarray(r["dts"], float) ** p))
                for r in mine
            )
            ax.loglog(dts, c / 4 * dts**p, color="0.35", ls=ls, lw=1)
        frac = next((r.get("active_fraction") for r in mine), None)
        ttl = f"sub-model ({sub})"
        if frac is not None:
            ttl += f", $S_2$ active {100 * frac:.0f}% of $[0, T]$"
        ax.set_title(ttl)
        if len(dts) < 3:
            smoke_note(ax, f"smoke size: {len(dts)} time steps")
        ax.set_xlabel(r"time step $\Delta t$")
        ax.set_ylabel(r"$\max\,|u(T) - u_{\mathrm{ref}}(T)|$")
        ax.grid(True, which="both")
    handles = []
    for n in names:
        col, mk, filled, ls = style[n]
        mine = [r for r in records if name(r) == n]
        slopes = ", ".join(
            f"{r['slope']:.2f}" + (f" ({r['submodel']})" if len(subs) > 1 else "") for r in mine
        )
        handles.append(
            Line2D(
                [],
                [],
                color=col,
                marker=mk,
                ls=ls,
                mfc=col if filled else "none",
                label=f"{n}: slope {slopes}",
            )
        )
    for p, ls in ((1, (0, (1, 1.5))), (2, (0, (5, 2)))):
        handles.append(Line2D([], [], color="0.35", ls=ls, lw=1, label=_ORDER_LABEL[p]))
    fig.legend(
        handles=handles,
        loc="outside lower center",
        ncol=min(len(handles), 4),
        title="fitted slopes per sub-model (panel)" if len(subs) > 1 else "fitted slope",
    )
    if title:
        fig.suptitle(title)
    return fig


@styled
def plot_grid(records: list[dict], *, title: str = "grid refinement, midpoint rule"):
    """Log–log error vs N with the O(N⁻²) reference line; the x ticks are the grid
    sizes computed.

    ``records``: the output of :func:`transflow.continuous.grid_refinement_study`.

    Example:
        >>> from transflow.plotting import plot_grid
        >>> rec = {"quantity": "attention", "sizes": [4, 12], "errors": [1e-2, 1e-3],
        ...        "slope": 2.1}
        >>> len(plot_grid([rec]).axes)
        1
    """
    import matplotlib.ticker as mticker
    import numpy as np

    fig, ax = new_figure(3.0)
    for r in records:
        ax.loglog(r["sizes"], r["errors"], "o-", label=f"{r['quantity']} (slope {r['slope']:.2f})")
    n = np.asarray(records[0]["sizes"], float)
    e0 = max(r["errors"][0] for r in records)
    ax.loglog(n, e0 * (n / n[0]) ** -2.0, "k--", lw=0.8, label=r"$O(N^{-2})$")
    sizes = sorted({int(v) for r in records for v in r["sizes"]})
    ax.set_xticks(sizes, [str(v) for v in sizes])  # the grid sizes run, not 5, 10, 20
    ax.xaxis.set_minor_formatter(mticker.NullFormatter())
    ax.set_xlabel(r"grid size $N = N_x = N_y$")
    ax.set_ylabel("max error at the coarse nodes")
    ax.set_title(title)
    ax.legend(loc="center left", bbox_to_anchor=(1.02, 0.5))
    ax.grid(True, which="both")
    if len(n) < 3:
        smoke_note(ax, f"smoke size: {len(n)} grid sizes")
    return fig


@styled
def plot_nonconvergence(results: dict):
    """Successive differences and control sensitivity vs Δt, both cases.

    ``results``: the output of :func:`transflow.continuous.nonconvergence_study`.

    Example:
        >>> from transflow.plotting import plot_nonconvergence
        >>> r = {"dts": [1.0, 0.5, 0.25], "diffs": [0.3, 0.1], "sensitivity": [1.0, 0.5, 0.2]}
        >>> len(plot_nonconvergence({"case": r}).axes)
        2
    """
    fig, (ax, bx) = new_figure(3.0, 1, 2)
    for name, r in results.items():
        ax.loglog(r["dts"][1:], r["diffs"], "o-", label=_math_names(name))
        bx.loglog(r["dts"], r["sensitivity"], "s-", label=_math_names(name))
    ax.set_xlabel(r"time step $\Delta t$")
    ax.set_ylabel(r"$\max\,|u_{\Delta t/2}(T) - u_{\Delta t}(T)|$")
    ax.set_title("successive refinements")
    bx.set_xlabel(r"time step $\Delta t$")
    bx.set_ylabel(r"$\max\,|u_T(\theta) - u_T(\theta')|$")
    bx.set_title("sensitivity to the last layer's controls")
    for a in (ax, bx):
        a.grid(True, which="both")
        a.legend(loc="best")
    return fig


@styled
def plot_clustering(res: dict):
    """PCA(2) trajectories (start: circles, end: stars; equal aspect) and the min pairwise
    cosine over time; its title says whether the tokens clustered (final min cos > 0.99).

    ``res``: the output of :func:`transflow.continuous.clustering_trajectory`.

    Example:
        >>> import numpy as np
        >>> from transflow.plotting import plot_clustering
        >>> res = {"times": np.arange(3.0), "min_cosine": np.array([-0.5, 0.2, 0.9]),
        ...        "trajectory": np.random.default_rng(0).standard_normal((3, 4, 3))}
        >>> len(plot_clustering(res).axes)
        2
    """
    import numpy as np

    traj = np.asarray(res["trajectory"])  # (steps+1, n, d)
    flat = traj.reshape(-1, traj.shape[-1])
    _, _, vt = np.linalg.svd(flat - flat.mean(0), full_matrices=False)
    proj = (traj - flat.mean(0)) @ vt[:2].T
    fig, (ax, bx) = new_figure(3.4, 1, 2, width_ratios=[1.0, 1.15])
    for i in range(proj.shape[1]):
        ax.plot(
            proj[:, i, 0],
            proj[:, i, 1],
            lw=0.7,
            color="0.55",
            label="token paths" if i == 0 else None,
        )
    ax.scatter(
        proj[0, :, 0], proj[0, :, 1], s=14, facecolors="none", edgecolors="k", label="$t = 0$"
    )
    ax.scatter(proj[-1, :, 0], proj[-1, :, 1], marker="*", s=70, c="r", label="$t = T$", zorder=3)
    ax.set_title(r"tokens on $S_1(0, 1)$, two principal components")
    ax.set_xlabel("principal component 1")
    ax.set_ylabel("principal component 2")
    ax.set_aspect("equal", adjustable="box")
    mc = np.asarray(res["min_cosine"], float)
    bx.plot(res["times"], mc, color="C0", label="min over token pairs")
    threshold_line(bx, "cos", 1.0, label="cos = 1 (tokens parallel)", color="0.4", ls=":", lw=1)
    bx.set_xlabel("time $t$")
    bx.set_ylabel("min pairwise cosine")
    verdict = (
        r"clusters: min cos $\to$ 1"
        if mc[-1] > 0.99
        else f"min cos at $T$: {mc[-1]:.2f} (not clustered)"
    )
    bx.set_title(verdict)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = bx.get_legend_handles_labels()
    fig.legend(h1 + h2, l1 + l2, loc="outside lower center", ncol=5)
    bx.grid(True)
    return fig
