"""Figures of :mod:`transflow.analysis`: trajectories, clustering, budgets, smoothness,
refinement. Each takes the dict returned by :func:`transflow.analysis.analyze` (or a part
of it) and returns a matplotlib ``Figure``."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._style import FIGURE_WIDTH, integer_axis, new_figure, smoke_note, styled

__all__ = [
    "plot_token_trajectories",
    "plot_cosine_matrices",
    "plot_token_geometry",
    "plot_substep_budgets",
    "plot_control_smoothness",
    "plot_refinement",
    "plot_flow_clustering",
]


def _plt():
    from ._style import _pyplot

    return _pyplot()


def _trajectories(ax, proj: np.ndarray, title: str, container=None) -> None:
    """Token paths (grey), the tokens after every step coloured by the step (a colour
    bar keys it), input circles and output stars; the key to the right of the axes."""
    import matplotlib as mpl

    proj = np.asarray(proj)
    n_states, n_tokens, _ = proj.shape
    cmap = _plt().get_cmap("viridis")
    colors = cmap(np.linspace(0, 1, n_states))
    for i in range(n_tokens):
        ax.plot(
            proj[:, i, 0],
            proj[:, i, 1],
            lw=0.6,
            c="0.6",
            label="token path" if i == 0 else None,
        )
    for k in range(n_states):
        ax.scatter(proj[k, :, 0], proj[k, :, 1], s=10, color=colors[k], zorder=3)
    ax.scatter(
        proj[0, :, 0],
        proj[0, :, 1],
        s=22,
        facecolors="none",
        edgecolors="k",
        zorder=4,
        label="$u^0$ (input)",
    )
    ax.scatter(
        proj[-1, :, 0],
        proj[-1, :, 1],
        marker="*",
        s=60,
        c="r",
        zorder=5,
        label="$u^{N_t}$ (output)",
    )
    ax.set_title(title)
    ax.set_xlabel("principal component 1")
    ax.set_ylabel("principal component 2")
    sm = mpl.cm.ScalarMappable(mpl.colors.Normalize(0, max(n_states - 1, 1)), cmap)
    cb = (container or ax.figure).colorbar(sm, ax=ax, shrink=0.8, label="step $n$ (marker colour)")
    integer_axis(cb.ax.yaxis)  # steps are integers: no tick at 0.5
    ax.legend(loc="upper left", bbox_to_anchor=(0.0, -0.2), ncol=3, fontsize=6.5)


@styled
def plot_token_trajectories(res: dict[str, Any], *, title: str = "token trajectories"):
    """The tokens after every step, projected on two common principal components."""
    fig, ax = new_figure(3.6)
    _trajectories(ax, res["projection"], title)
    ax.set_aspect("equal", adjustable="datalim")
    return fig


@styled
def plot_cosine_matrices(res: dict[str, Any], *, max_panels: int = 8):
    """The pairwise cosine-similarity matrix of the tokens at (up to ``max_panels``) steps."""
    cos = np.asarray(res["diagnostics"]["cosine"])
    n = cos.shape[0]
    steps = np.unique(np.linspace(0, n - 1, min(n, max_panels)).round().astype(int))
    side = min((FIGURE_WIDTH - 1.2) / len(steps), 2.2)
    fig, axes = new_figure(side + 1.0, 1, len(steps), squeeze=False, sharex=True, sharey=True)
    im = None
    for ax, k in zip(axes[0], steps):
        im = _cosine_panel(ax, cos[k], f"step {k}")
    for ax in axes[0][1:]:
        ax.set_ylabel("")
    fig.colorbar(im, ax=list(axes[0]), shrink=0.9, label=r"$\cos(u_i, u_j)$")
    fig.suptitle("pairwise cosine similarity of the tokens")
    return fig


def _cosine_panel(ax, c: np.ndarray, title: str):
    import matplotlib.ticker as mticker

    im = ax.imshow(c, vmin=-1, vmax=1, cmap="RdBu_r")
    ax.set_title(title)
    ax.set_xlabel("token $j$")
    ax.set_ylabel("token $i$")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(mticker.MaxNLocator(3, integer=True))
    return im


def _geometry(axes, diag: dict[str, Any], container=None) -> None:
    import matplotlib.ticker as mticker

    steps = np.asarray(diag["step"])
    ax, bx = axes
    ax.plot(steps, diag["mean_cosine"], "o-", label="mean cos")
    ax.plot(steps, diag["min_cosine"], "s-", label="min cos")
    ax.set_xlabel("step $n$")
    ax.set_ylabel("cosine")
    ax.set_ylim(-1.05, 1.05)
    ax.grid(True)
    ax2 = ax.twinx()
    ax2.plot(steps, diag["n_clusters"], "k^--", ms=4, label=f"clusters (cos ≥ {diag['threshold']})")
    ax2.set_ylabel("clusters")
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax.set_title("clustering")
    ax2.yaxis.set_major_locator(mticker.MaxNLocator(integer=True))
    bx.plot(steps, diag["effective_rank"], "o-", color="C2", label="effective rank")
    bx.set_xlabel("step $n$")
    bx.set_ylabel("effective rank")
    bx.grid(True)
    bx2 = bx.twinx()
    bx2.plot(steps, diag["distance_s1"], "r.--", label=r"distance to $S_1$")
    bx2.set_ylabel(r"RMS distance to $S_1$ (per $|\Omega_y|$)", color="r")
    bx.set_title(r"effective rank and distance to $S_1$")
    h_b = bx.get_legend_handles_labels()
    h_b2 = bx2.get_legend_handles_labels()
    (container or ax.figure).legend(
        lines[0] + lines2[0] + h_b[0] + h_b2[0],
        lines[1] + lines2[1] + h_b[1] + h_b2[1],
        loc="outside lower center",
        ncol=5,
    )
    for a in (ax, bx):
        a.xaxis.set_major_locator(mticker.MaxNLocator(integer=True))


@styled
def plot_token_geometry(res: dict[str, Any]):
    """Mean/min cosine, clusters, effective rank and distance to S1 against the step."""
    fig, axes = new_figure(3.0, 1, 2)
    _geometry(axes, res["diagnostics"])
    return fig


@styled
def plot_substep_budgets(res: dict[str, Any]):
    """‖increment‖ of every sub-step against the step (how far each operator moves u)."""

    diag = res["diagnostics"]
    fig, ax = new_figure(3.0)
    steps = np.arange(1, len(diag["step"]))
    for name in diag["substep_names"]:
        vals = np.asarray(diag["increments"][name])
        if np.all(~np.isfinite(vals)):
            continue
        ax.semilogy(steps, np.where(vals > 0, vals, np.nan), "o-", ms=3, label=name)
    ax.set_xlabel("step $n$")
    ax.set_ylabel(r"$\|$sub-step increment$\|_F$")
    ax.set_title("operator budgets per step (lifting sub-steps omitted)")
    ax.grid(True, which="both")
    ax.legend(loc="center left", bbox_to_anchor=(1.02, 0.5))
    integer_axis(ax.xaxis)
    if len(steps) < 2:
        smoke_note(ax, f"smoke size: {len(steps)} step")
    return fig


@styled
def plot_control_smoothness(res: dict[str, Any], *, max_blocks: int = 12):
    """Relative increments ‖θⁿ⁺¹ − θⁿ‖/‖θⁿ‖ per block, and the stride scaling δ(s) ∝ s^β."""
    incs = res["increments"]
    scaling = res.get("scaling")
    fig, axes = new_figure(3.0, 1, 2 if scaling else 1, squeeze=False)
    ax = axes[0][0]
    names = [k for k in incs if k != "all"]
    names = sorted(names, key=lambda k: -float(np.nanmax(incs[k])) if len(incs[k]) else 0)
    for k in names[:max_blocks]:
        v = np.asarray(incs[k])
        ax.semilogy(np.arange(len(v)) + 0.5, np.where(v > 0, v, np.nan), ".-", lw=0.8, label=k)
    v = np.asarray(incs["all"])
    ax.semilogy(
        np.arange(len(v)) + 0.5,
        np.where(v > 0, v, np.nan),
        "k-",
        marker="o" if len(v) < 2 else None,  # one increment: a point, not a line
        lw=2,
        label="all θ",
    )
    ax.set_xlabel(r"$n + 1/2$ (between steps $n$ and $n + 1$)")
    ax.set_ylabel(r"$\|\theta^{n+1} - \theta^n\| / \|\theta^n\|$")
    ax.set_title("control increments across depth")
    ax.grid(True, which="both")
    # up to max_blocks + 1 entries: beside the panel, where they cover no increment (below
    # it, a fixed offset overlapped the x label at some heights; the layout engine sizes
    # the panel around a legend beside it)
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=6)
    if len(v) < 2:
        smoke_note(ax, f"smoke size: {len(v)} increment")
    if scaling:
        bx = axes[0][1]
        s = np.asarray(scaling["strides"], float)
        d = np.asarray(scaling["max_increment"], float)
        bx.loglog(s, d, "o-", label=rf"$\max_n$, fitted $\beta$ = {scaling['beta']:.2f}")
        bx.loglog(s, d[0] * s, "k--", lw=0.8, label=r"$\beta = 1$ (smooth $\theta(t)$)")
        bx.loglog(s, d[0] * s**0.5, "k:", lw=0.8, label=r"$\beta = 1/2$ (random walk)")
        bx.loglog(s, d[0] * s**0, "k-.", lw=0.8, label=r"$\beta = 0$ (independent)")
        bx.set_xlabel(r"stride $s$ ($\theta$ sampled every $s$ steps)")
        bx.set_ylabel(r"$\delta(s) = \max_n\|\theta^{n+s} - \theta^n\| / \mathrm{rms}\|\theta\|$")
        bx.set_title("Sander–Ablin–Peyré scaling, by subsampling depth")
        bx.grid(True, which="both")
        bx.legend(loc="best")
    return fig


def _order_text(study: dict[str, Any]) -> str:
    # a fitted order needs two successive differences (three factors): else say so
    order = study.get("order")
    if order is None or not np.isfinite(order):
        n = len(study.get("successive", []))
        return f"order n/a: {n} difference{'s' if n != 1 else ''}, 2 needed"
    return f"order {order:.2f}"


@styled
def plot_refinement(studies: dict[str, dict[str, Any]], *, title: str = "depth refinement"):
    """Output change and successive differences against the factor k (one colour per
    study, e.g. per interpolation, in both panels; solid: change from k = 1, dashed: the
    successive differences); accuracy against k when the studies have it."""
    has_acc = any(s.get("evaluate") and "accuracy" in s["evaluate"][0] for s in studies.values())
    fig, axes = new_figure(3.0, 1, 2 if has_acc else 1, squeeze=False)
    ax = axes[0][0]
    colour = {label: f"C{i}" for i, label in enumerate(studies)}  # one per study, both panels
    for label, s in studies.items():
        k = np.asarray(s["factors"], float)
        ax.loglog(
            k[1:],
            np.asarray(s["change"][1:]),
            "o-",
            color=colour[label],
            label=rf"{label}: $\|\mathrm{{out}}_k - \mathrm{{out}}_1\|$",
        )
        ax.loglog(
            k[:-1],
            np.asarray(s["successive"]),
            "s--",
            color=colour[label],
            mfc="none",
            label=rf"{label}: $\|\mathrm{{out}}_{{2k}} - \mathrm{{out}}_k\|$ "
            f"({_order_text(s)})",
        )
    ax.set_xlabel(r"refinement factor $k$ ($\Delta t/k$, $k N_t$ steps)")
    ax.set_ylabel("relative difference of the final state")
    ax.set_title(title)
    ax.grid(True, which="both")
    nk = max(len(s["factors"]) for s in studies.values())
    # below 3 factors the labels say why there is no order: one column keeps them narrow
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2 if nk >= 3 else 1,
              fontsize=6.5)  # fmt: skip
    if nk < 3:
        smoke_note(ax, f"smoke size: {nk} factors")
    if has_acc:
        bx = axes[0][1]
        for label, s in studies.items():
            if s.get("evaluate"):
                acc = [e["accuracy"] for e in s["evaluate"]]
                bx.semilogx(s["factors"], acc, "o-", color=colour[label], label=label)
        bx.set_xlabel("refinement factor $k$")
        bx.set_ylabel("test accuracy")
        bx.set_title("accuracy of the refined classifier")
        bx.grid(True, which="both")
        bx.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2, fontsize=6.5)
    factors = sorted({int(k) for s in studies.values() for k in s["factors"]})
    for a in axes[0]:
        a.set_xticks(factors, [str(k) for k in factors])
    return fig


@styled
def plot_flow_clustering(res: dict[str, Any], *, title: str = "token trajectories"):
    """F11: trajectories (PCA), cosine matrices at the first and last step, geometry."""
    fig = _plt().figure(figsize=(FIGURE_WIDTH, 5.6), layout="constrained")
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.1, 1.0])
    axes = top.subplots(1, 3, width_ratios=[1.25, 1.0, 1.0])
    _trajectories(axes[0], res["projection"], title, top)
    cos = np.asarray(res["diagnostics"]["cosine"])
    im = None
    for cx, k in zip(axes[1:], (0, cos.shape[0] - 1)):
        im = _cosine_panel(cx, cos[k], rf"$\cos(u_i, u_j)$, step {k}")
    top.colorbar(im, ax=list(axes[1:]), shrink=0.9, label=r"$\cos(u_i, u_j)$")
    _geometry(bottom.subplots(1, 2), res["diagnostics"], bottom)
    return fig
