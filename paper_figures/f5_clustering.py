"""F5: token trajectories in the particle view: 32 tokens in d = 4 under attention with
W_Q = W_K = W_V = I and the projection onto S1(0, 1) (tokens on a sphere), Lie splitting
with Δt = 0.1 up to T = 20, projected on their first two principal components, and the
smallest pairwise cosine over time (Geshkovski–Letrouit–Polyanskiy–Rigollet clustering).
Expected: the tokens merge into one cluster (min cosine → 1).
"""

from __future__ import annotations

import pathlib

FIGURE = {
    "id": "F5",
    "title": "Clustering of tokens on S1 under attention (particle view, PCA)",
    "command": "make figures  (python paper_figures/make_all.py F5)",
    "config": "experiment=clustering (precision=fp64)",
}


def make(out_dir: pathlib.Path) -> dict:
    import jax
    from omegaconf import OmegaConf
    from transflow.experiments.run import compose

    from transflow.continuous import clustering_trajectory
    from transflow.plotting import figure_smoke, plot_clustering, save_figure

    jax.config.update("jax_enable_x64", True)
    cfg, _ = compose(["experiment=clustering"])
    task = OmegaConf.to_object(cfg.task)
    n, t1 = (8, 4.0) if figure_smoke() else (task.n_tokens, task.t1)
    res = clustering_trajectory(
        n_tokens=n, d=task.d, t1=t1, dt=task.dt, temperature=task.temperature, seed=int(cfg.seed)
    )
    fig = plot_clustering(res)
    stride = max(1, len(res["times"]) // 200)
    save_figure(
        fig,
        out_dir,
        FIGURE["id"],
        {
            "times": res["times"][::stride],
            "min_cosine": res["min_cosine"][::stride],
            "n_tokens": n,
            "d": task.d,
            "dt": task.dt,
            "temperature": task.temperature,
        },
    )
    return {
        "min_cosine_initial": float(res["min_cosine"][0]),
        "min_cosine_final": float(res["min_cosine"][-1]),
    }
