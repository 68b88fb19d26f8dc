"""Task ``clustering`` (F5): token trajectories in the particle view over a long time
horizon. Attention with W_Q = W_K = W_V = I and the projection onto S1(0, 1) (tokens on a
sphere), split by the Lie scheme: the tokens of one sequence cluster (Geshkovski,
Letrouit, Polyanskiy, Rigollet, "A mathematical perspective on Transformers", 2023).

Logs the smallest pairwise cosine between tokens over time (→ 1 when all tokens have
merged into one cluster) and plots the trajectories projected on their first principal
components.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Config", "run", "plot_clustering"]


@dataclass
class Config:
    """Parameters of the clustering run (``task.<field>=...``)."""

    n_tokens: int = 32
    d: int = 4
    t1: float = 20.0
    dt: float = 0.1
    temperature: float = 1.0


def plot_clustering(res: dict):
    """PCA(2) trajectories (start: circles, end: stars) and the min pairwise cosine."""
    import matplotlib

    matplotlib.use("Agg")
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


def run(cfg, ctx) -> dict:
    import numpy as np

    from transflow.continuous import clustering_trajectory

    n, t1 = (8, 4.0) if ctx.smoke else (cfg.n_tokens, cfg.t1)
    res = clustering_trajectory(
        n_tokens=n, d=cfg.d, t1=t1, dt=cfg.dt, temperature=cfg.temperature, seed=ctx.seed
    )
    stride = max(1, len(res["times"]) // 50)
    for t, c in zip(res["times"][::stride], res["min_cosine"][::stride]):
        ctx.log({"t": float(t), "min_cosine": float(c)})
    ctx.save_arrays(
        "trajectory", times=res["times"], trajectory=res["trajectory"], min_cosine=res["min_cosine"]
    )
    ctx.save_figure(plot_clustering(res), "F5_clustering")
    final = float(res["min_cosine"][-1])
    t_cluster = res["times"][np.argmax(res["min_cosine"] > 0.99)] if final > 0.99 else None
    ctx.report(
        f"min pairwise cosine: {res['min_cosine'][0]:.3f} at t = 0 → {final:.5f} at "
        f"t = {t1}; > 0.99 from t = {t_cluster}."
    )
    return {
        "min_cosine_initial": float(res["min_cosine"][0]),
        "min_cosine_final": final,
        "t_cluster": t_cluster,
    }
