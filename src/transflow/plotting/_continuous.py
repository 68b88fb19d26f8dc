"""Figures of the continuous-limit studies (:mod:`transflow.continuous`): error vs Δt
(F3), error vs grid size (F4), token clustering (F5) and the non-convergence of the full
model (F6). Each takes the records the study returns and returns a matplotlib ``Figure``.
"""

from __future__ import annotations

__all__ = ["plot_convergence", "plot_grid", "plot_nonconvergence", "plot_clustering"]


def plot_convergence(records: list[dict]):
    """Log–log error vs Δt, one panel per sub-model, with reference slopes 1 and 2.

    ``records``: :meth:`transflow.continuous.ConvergenceResult.record` dicts.

    Example:
        >>> from transflow.plotting import plot_convergence
        >>> rec = {"submodel": "a", "scheme": "lie", "dts": [0.5, 0.25],
        ...        "errors": [1e-2, 5e-3], "slope": 1.0}
        >>> len(plot_convergence([rec]).axes)
        1
    """
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    import numpy as np

    subs = list(dict.fromkeys(r["submodel"] for r in records))
    fig, axes = plt.subplots(1, len(subs), figsize=(4.2 * len(subs), 3.8), squeeze=False)
    for ax, sub in zip(axes[0], subs):
        for r in (r for r in records if r["submodel"] == sub):
            name = r["scheme"] + (f" ({r['b_splitting']} F)" if r.get("b_splitting") else "")
            ax.loglog(r["dts"], r["errors"], "o-", label=f"{name}: slope {r['slope']:.2f}")
        dts = np.asarray(records[0]["dts"])
        e0 = min(r["errors"][0] for r in records if r["submodel"] == sub)
        for p, ls in ((1, ":"), (2, "--")):
            ax.loglog(dts, e0 * (dts / dts[0]) ** p, "k" + ls, lw=0.8, label=f"O(Δt^{p})")
        frac = next((r.get("active_fraction") for r in records if r["submodel"] == sub), None)
        title = f"sub-model ({sub})"
        if frac is not None:
            title += f", S2 active {100 * frac:.0f}% of the time"
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("Δt")
        ax.set_ylabel("max |u(T) − u_ref(T)|")
        ax.legend(fontsize=7)
        ax.grid(True, which="both", alpha=0.3)
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    fig.tight_layout()
    return fig


def plot_grid(records: list[dict]):
    """Log–log error vs N with the O(N^-2) reference line.

    ``records``: the output of :func:`transflow.continuous.grid_refinement_study`.

    Example:
        >>> from transflow.plotting import plot_grid
        >>> rec = {"quantity": "attention", "sizes": [4, 12], "errors": [1e-2, 1e-3],
        ...        "slope": 2.1}
        >>> len(plot_grid([rec]).axes)
        1
    """
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(4.8, 3.8))
    for r in records:
        ax.loglog(r["sizes"], r["errors"], "o-", label=f"{r['quantity']} (slope {r['slope']:.2f})")
    n = np.asarray(records[0]["sizes"], float)
    e0 = max(r["errors"][0] for r in records)
    ax.loglog(n, e0 * (n / n[0]) ** -2.0, "k--", lw=0.8, label="O(N^-2)")
    ax.set_xlabel("N = N_x = N_y")
    ax.set_ylabel("max error at coarse nodes")
    ax.set_title("grid refinement, midpoint rule")
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    return fig


def plot_nonconvergence(results: dict):
    """Successive differences and control sensitivity vs Δt, both cases.

    ``results``: the output of :func:`transflow.continuous.nonconvergence_study`.

    Example:
        >>> from transflow.plotting import plot_nonconvergence
        >>> r = {"dts": [1.0, 0.5, 0.25], "diffs": [0.3, 0.1], "sensitivity": [1.0, 0.5, 0.2]}
        >>> len(plot_nonconvergence({"case": r}).axes)
        2
    """
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(9, 3.8))
    for name, r in results.items():
        ax.loglog(r["dts"][1:], r["diffs"], "o-", label=name)
        bx.loglog(r["dts"], r["sensitivity"], "s-", label=name)
    ax.set_xlabel("Δt")
    ax.set_ylabel("max |u_{Δt/2}(T) − u_{Δt}(T)|")
    ax.set_title("successive refinements")
    bx.set_xlabel("Δt")
    bx.set_ylabel("max |u_T(θ) − u_T(θ')|")
    bx.set_title("sensitivity to the last layer's controls")
    for a in (ax, bx):
        a.grid(True, which="both", alpha=0.3)
        a.legend(fontsize=7)
        a.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    fig.tight_layout()
    return fig


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
    import matplotlib.pyplot as plt
    import numpy as np

    traj = np.asarray(res["trajectory"])  # (steps+1, n, d)
    flat = traj.reshape(-1, traj.shape[-1])
    _, _, vt = np.linalg.svd(flat - flat.mean(0), full_matrices=False)
    proj = (traj - flat.mean(0)) @ vt[:2].T
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(9, 4))
    for i in range(proj.shape[1]):
        ax.plot(proj[:, i, 0], proj[:, i, 1], lw=0.7, alpha=0.8)
    ax.scatter(proj[0, :, 0], proj[0, :, 1], s=12, facecolors="none", edgecolors="k", label="t = 0")
    ax.scatter(proj[-1, :, 0], proj[-1, :, 1], marker="*", s=80, c="r", label="t = T")
    ax.set_title("tokens on S1(0, 1), first two principal components")
    ax.legend(fontsize=7)
    ax.set_aspect("equal")
    bx.plot(res["times"], res["min_cosine"])
    bx.set_xlabel("t")
    bx.set_ylabel("min pairwise cosine")
    bx.set_title("clustering: min cos → 1")
    bx.grid(True, alpha=0.3)
    fig.tight_layout()
    return fig
