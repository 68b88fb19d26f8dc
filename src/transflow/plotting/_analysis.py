"""Figures of :mod:`transflow.analysis`: trajectories, clustering, budgets, smoothness,
refinement. Each takes the dict returned by :func:`transflow.analysis.analyze` (or a part
of it) and returns a matplotlib ``Figure``."""

from __future__ import annotations

from typing import Any

import numpy as np

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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _trajectories(ax, proj: np.ndarray, title: str) -> None:
    proj = np.asarray(proj)
    n_states, n_tokens, _ = proj.shape
    colors = _plt().cm.viridis(np.linspace(0, 1, n_states))
    for i in range(n_tokens):
        ax.plot(proj[:, i, 0], proj[:, i, 1], lw=0.6, alpha=0.5, c="0.5")
    for k in range(n_states):
        ax.scatter(proj[k, :, 0], proj[k, :, 1], s=10, color=colors[k], zorder=3)
    ax.scatter(
        proj[0, :, 0],
        proj[0, :, 1],
        s=22,
        facecolors="none",
        edgecolors="k",
        zorder=4,
        label="u⁰ (input)",
    )
    ax.scatter(
        proj[-1, :, 0], proj[-1, :, 1], marker="*", s=60, c="r", zorder=5, label="u^{N_t} (output)"
    )
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("PC 1")
    ax.set_ylabel("PC 2")
    ax.legend(fontsize=7)


def plot_token_trajectories(res: dict[str, Any], *, title: str = "token trajectories"):
    """The tokens after every step, projected on two common principal components."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5, 4.5))
    _trajectories(ax, res["projection"], f"{title} (colour: step)")
    fig.tight_layout()
    return fig


def plot_cosine_matrices(res: dict[str, Any], *, max_panels: int = 8):
    """The pairwise cosine-similarity matrix of the tokens at (up to ``max_panels``) steps."""
    plt = _plt()
    cos = np.asarray(res["diagnostics"]["cosine"])
    n = cos.shape[0]
    steps = np.unique(np.linspace(0, n - 1, min(n, max_panels)).round().astype(int))
    fig, axes = plt.subplots(1, len(steps), figsize=(2.2 * len(steps), 2.5), squeeze=False)
    im = None
    for ax, k in zip(axes[0], steps):
        im = ax.imshow(cos[k], vmin=-1, vmax=1, cmap="RdBu_r")
        ax.set_title(f"step {k}", fontsize=8)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.colorbar(im, ax=list(axes[0]), shrink=0.8, label="cos(u_i, u_j)")
    fig.suptitle("pairwise cosine similarity of the tokens", fontsize=9)
    return fig


def _geometry(axes, diag: dict[str, Any]) -> None:
    steps = np.asarray(diag["step"])
    ax, bx = axes
    ax.plot(steps, diag["mean_cosine"], "o-", label="mean cos")
    ax.plot(steps, diag["min_cosine"], "s-", label="min cos")
    ax.set_xlabel("step n")
    ax.set_ylabel("cosine")
    ax.set_ylim(-1.05, 1.05)
    ax.grid(True, alpha=0.3)
    ax2 = ax.twinx()
    ax2.plot(steps, diag["n_clusters"], "k^--", ms=4, label=f"clusters (cos ≥ {diag['threshold']})")
    ax2.set_ylabel("clusters")
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], fontsize=7, loc="lower left")
    ax.set_title("clustering", fontsize=9)
    bx.plot(steps, diag["effective_rank"], "o-", label="effective rank")
    bx.set_xlabel("step n")
    bx.set_ylabel("effective rank")
    bx.grid(True, alpha=0.3)
    bx2 = bx.twinx()
    bx2.plot(steps, diag["distance_s1"], "r.--", label="distance to S1")
    bx2.set_ylabel("RMS distance to S1 (per |Ω_y|)", color="r")
    bx.set_title("effective rank and distance to S1", fontsize=9)


def plot_token_geometry(res: dict[str, Any]):
    """Mean/min cosine, clusters, effective rank and distance to S1 against the step."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    _geometry(axes, res["diagnostics"])
    fig.tight_layout()
    return fig


def plot_substep_budgets(res: dict[str, Any]):
    """‖increment‖ of every sub-step against the step (how far each operator moves u)."""
    plt = _plt()
    diag = res["diagnostics"]
    fig, ax = plt.subplots(figsize=(6, 3.8))
    steps = np.arange(1, len(diag["step"]))
    for name in diag["substep_names"]:
        vals = np.asarray(diag["increments"][name])
        if np.all(~np.isfinite(vals)):
            continue
        ax.semilogy(steps, np.where(vals > 0, vals, np.nan), "o-", ms=3, label=name)
    ax.set_xlabel("step n")
    ax.set_ylabel("‖sub-step increment‖_F")
    ax.set_title("operator budgets per step (lifting sub-steps omitted)", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig


def plot_control_smoothness(res: dict[str, Any], *, max_blocks: int = 12):
    """Relative increments ‖θⁿ⁺¹ − θⁿ‖/‖θⁿ‖ per block, and the stride scaling δ(s) ∝ s^β."""
    plt = _plt()
    incs = res["increments"]
    scaling = res.get("scaling")
    fig, axes = plt.subplots(
        1, 2 if scaling else 1, figsize=(10 if scaling else 5.5, 3.8), squeeze=False
    )
    ax = axes[0][0]
    names = [k for k in incs if k != "all"]
    names = sorted(names, key=lambda k: -float(np.nanmax(incs[k])) if len(incs[k]) else 0)
    for k in names[:max_blocks]:
        v = np.asarray(incs[k])
        ax.semilogy(np.arange(len(v)) + 0.5, np.where(v > 0, v, np.nan), ".-", lw=0.8, label=k)
    v = np.asarray(incs["all"])
    ax.semilogy(np.arange(len(v)) + 0.5, np.where(v > 0, v, np.nan), "k-", lw=2, label="all θ")
    ax.set_xlabel("n + ½ (between steps n and n + 1)")
    ax.set_ylabel("‖θⁿ⁺¹ − θⁿ‖ / ‖θⁿ‖")
    ax.set_title("control increments across depth", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=6, ncol=2)
    if scaling:
        bx = axes[0][1]
        s = np.asarray(scaling["strides"], float)
        d = np.asarray(scaling["max_increment"], float)
        bx.loglog(s, d, "o-", label=f"max_n, fitted β = {scaling['beta']:.2f}")
        bx.loglog(s, d[0] * s, "k--", lw=0.8, label="β = 1 (smooth θ(t))")
        bx.loglog(s, d[0] * s**0.5, "k:", lw=0.8, label="β = ½ (random walk)")
        bx.loglog(s, d[0] * s**0, "k-.", lw=0.8, label="β = 0 (independent)")
        bx.set_xlabel("stride s (θ sampled every s steps)")
        bx.set_ylabel("δ(s) = max ‖θ^{n+s} − θⁿ‖ / rms‖θ‖")
        bx.set_title("Sander–Ablin–Peyré scaling, by subsampling depth", fontsize=9)
        bx.grid(True, which="both", alpha=0.3)
        bx.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_refinement(studies: dict[str, dict[str, Any]], *, title: str = "depth refinement"):
    """Output change and successive differences against the factor k (one line per
    study, e.g. per interpolation); accuracy against k when the studies have it."""
    plt = _plt()
    has_acc = any(s.get("evaluate") and "accuracy" in s["evaluate"][0] for s in studies.values())
    fig, axes = plt.subplots(
        1, 2 if has_acc else 1, figsize=(10 if has_acc else 5.5, 3.8), squeeze=False
    )
    ax = axes[0][0]
    for label, s in studies.items():
        k = np.asarray(s["factors"], float)
        ax.loglog(k[1:], np.asarray(s["change"][1:]), "o-", label=f"{label}: ‖out_k − out_1‖")
        ax.loglog(
            k[:-1],
            np.asarray(s["successive"]),
            "s--",
            label=f"{label}: ‖out_next − out_k‖ (order {s['order']:.2f})",
        )
    ax.set_xlabel("refinement factor k (Δt/k, k·N_t steps)")
    ax.set_ylabel("relative difference of the final state")
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    if has_acc:
        bx = axes[0][1]
        for label, s in studies.items():
            if s.get("evaluate"):
                acc = [e["accuracy"] for e in s["evaluate"]]
                bx.semilogx(s["factors"], acc, "o-", label=label)
        bx.set_xlabel("refinement factor k")
        bx.set_ylabel("test accuracy")
        bx.set_title("accuracy of the refined classifier", fontsize=9)
        bx.grid(True, which="both", alpha=0.3)
        bx.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_flow_clustering(res: dict[str, Any], *, title: str = "token trajectories"):
    """F11: trajectories (PCA), cosine matrices at the first and last step, geometry."""
    plt = _plt()
    fig = plt.figure(figsize=(15, 3.9))
    gs = fig.add_gridspec(1, 5, width_ratios=[1.2, 0.9, 0.9, 1.1, 1.1], wspace=0.7)
    ax = fig.add_subplot(gs[0])
    _trajectories(ax, res["projection"], title)
    cos = np.asarray(res["diagnostics"]["cosine"])
    for j, k in enumerate((0, cos.shape[0] - 1)):
        cx = fig.add_subplot(gs[1 + j])
        im = cx.imshow(cos[k], vmin=-1, vmax=1, cmap="RdBu_r")
        cx.set_title(f"cos(u_i, u_j), step {k}", fontsize=8)
        cx.set_xticks([])
        cx.set_yticks([])
    fig.colorbar(im, cax=cx.inset_axes([1.05, 0.0, 0.06, 1.0]))
    _geometry((fig.add_subplot(gs[3]), fig.add_subplot(gs[4])), res["diagnostics"])
    fig.subplots_adjust(left=0.04, right=0.96, bottom=0.14, top=0.9)
    return fig
