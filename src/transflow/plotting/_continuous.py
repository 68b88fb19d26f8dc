"""Figures of the continuous-limit studies (:mod:`transflow.continuous`): error vs Δt
(F3), error vs grid size (F4), token clustering (F5) and the non-convergence of the full
model (F6). Each takes the records the study returns and returns a matplotlib ``Figure``
in the style of :mod:`transflow.plotting` (:func:`transflow.plotting.figure_style`).
"""

from __future__ import annotations

from ._style import new_figure, smoke_note, styled

__all__ = ["plot_convergence", "plot_grid", "plot_nonconvergence", "plot_clustering"]

_ORDER_LABEL = {1: r"$O(\Delta t)$", 2: r"$O(\Delta t^2)$"}


def _math_names(text: str) -> str:
    """``sigma1=0 (S1∩S2=∅)`` → ``$\\sigma_1$=0 ($S_1$∩$S_2$=∅)`` (the study's case names)."""
    import re

    text = re.sub(r"\bsigma(\d)", r"$\\sigma_\1$", text)
    return re.sub(r"\bS(\d)\b", r"$S_\1$", text)


@styled
def plot_convergence(records: list[dict], *, title: str = ""):
    """Log–log error vs Δt, one panel per sub-model, with reference slopes 1 and 2.

    ``records``: :meth:`transflow.continuous.ConvergenceResult.record` dicts; ``title``:
    an optional figure title.

    Example:
        >>> from transflow.plotting import plot_convergence
        >>> rec = {"submodel": "a", "scheme": "lie", "dts": [0.5, 0.25],
        ...        "errors": [1e-2, 5e-3], "slope": 1.0}
        >>> len(plot_convergence([rec]).axes)
        1
    """
    import numpy as np

    subs = list(dict.fromkeys(r["submodel"] for r in records))
    n_legend = max(sum(r["submodel"] == s for r in records) for s in subs) + 2
    fig, axes = new_figure(2.6 + 0.13 * n_legend, 1, len(subs), squeeze=False)
    for ax, sub in zip(axes[0], subs):
        mine = [r for r in records if r["submodel"] == sub]
        for r in mine:
            name = r["scheme"] + (f" ({r['b_splitting']} F)" if r.get("b_splitting") else "")
            ax.loglog(r["dts"], r["errors"], "o-", label=f"{name}: slope {r['slope']:.2f}")
        dts = np.asarray(mine[0]["dts"], float)
        e0 = min(r["errors"][0] for r in mine)
        for p, ls in ((1, ":"), (2, "--")):
            ax.loglog(dts, e0 * (dts / dts[0]) ** p, "k" + ls, lw=0.8, label=_ORDER_LABEL[p])
        frac = next((r.get("active_fraction") for r in mine), None)
        ttl = f"sub-model ({sub})"
        if frac is not None:
            ttl += f", $S_2$ active {100 * frac:.0f}% of $[0, T]$"
        ax.set_title(ttl)
        ax.set_xlabel(r"time step $\Delta t$")
        ax.set_ylabel(r"$\max\,|u(T) - u_{\mathrm{ref}}(T)|$")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), fontsize=6.5)
        ax.grid(True, which="both")
        if len(dts) < 3:
            smoke_note(ax, f"smoke size: {len(dts)} time steps")
    if title:
        fig.suptitle(title)
    return fig


@styled
def plot_grid(records: list[dict], *, title: str = "grid refinement, midpoint rule"):
    """Log–log error vs N with the O(N⁻²) reference line.

    ``records``: the output of :func:`transflow.continuous.grid_refinement_study`.

    Example:
        >>> from transflow.plotting import plot_grid
        >>> rec = {"quantity": "attention", "sizes": [4, 12], "errors": [1e-2, 1e-3],
        ...        "slope": 2.1}
        >>> len(plot_grid([rec]).axes)
        1
    """
    import numpy as np

    fig, ax = new_figure(3.0)
    for r in records:
        ax.loglog(r["sizes"], r["errors"], "o-", label=f"{r['quantity']} (slope {r['slope']:.2f})")
    n = np.asarray(records[0]["sizes"], float)
    e0 = max(r["errors"][0] for r in records)
    ax.loglog(n, e0 * (n / n[0]) ** -2.0, "k--", lw=0.8, label=r"$O(N^{-2})$")
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
    """PCA(2) trajectories (start: circles, end: stars) and the min pairwise cosine.

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
    fig, (ax, bx) = new_figure(3.2, 1, 2, width_ratios=[1.0, 1.15])
    for i in range(proj.shape[1]):
        ax.plot(proj[:, i, 0], proj[:, i, 1], lw=0.7, alpha=0.8)
    ax.scatter(
        proj[0, :, 0], proj[0, :, 1], s=12, facecolors="none", edgecolors="k", label="$t = 0$"
    )
    ax.scatter(proj[-1, :, 0], proj[-1, :, 1], marker="*", s=70, c="r", label="$t = T$")
    ax.set_title(r"tokens on $S_1(0, 1)$, two principal components")
    ax.set_xlabel("principal component 1")
    ax.set_ylabel("principal component 2")
    ax.legend(loc="best")
    ax.set_aspect("equal", adjustable="datalim")
    bx.plot(res["times"], res["min_cosine"])
    bx.set_xlabel("time $t$")
    bx.set_ylabel("min pairwise cosine")
    bx.set_title(r"clustering: min cos $\to$ 1")
    bx.grid(True)
    return fig
