"""Task ``clustering`` (F5): token trajectories in the particle view over a long time
horizon. Attention with W_Q = W_K = W_V = I and the projection onto S1(0, 1) (tokens on a
sphere), split by the Lie scheme: the tokens of one sequence cluster (Geshkovski,
Letrouit, Polyanskiy, Rigollet, "A mathematical perspective on Transformers", 2023).

The study is :func:`transflow.continuous.clustering_trajectory`. Logs the smallest
pairwise cosine between tokens over time (→ 1 when all tokens have merged into one
cluster) and plots the trajectories projected on their first principal components.

Claims (``summary.json``): the tokens start spread out (min cosine < 0), end in one
cluster (min cosine > 0.99; not enforced at smoke size, configs/sizes/smoke/clustering.yaml)
and stay on S1(0, 1)
(mean and standard deviation within 1e-10 of 0 and 1 at every step).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..context import format_number
from ..validate import Constraint

__all__ = ["CONSTRAINTS", "Config", "run"]

#: Checked before any work (the ranges of each option: experiments/validate.py).
CONSTRAINTS = (Constraint(("task.dt", "task.t1"), lambda dt, t1: dt <= t1, "task.dt <= task.t1"),)


@dataclass
class Config:
    """Parameters of the clustering run (``task.<field>=...``)."""

    n_tokens: int = 32
    d: int = 4
    t1: float = 20.0
    dt: float = 0.1
    temperature: float = 1.0


def run(cfg, ctx) -> dict:
    """Run the ``clustering`` experiment (the module docstring says what it does)."""
    from transflow.continuous import clustering_trajectory
    from transflow.plotting import plot_clustering

    t1 = cfg.t1
    res = clustering_trajectory(
        n_tokens=cfg.n_tokens, d=cfg.d, t1=t1, dt=cfg.dt, temperature=cfg.temperature, seed=ctx.seed
    )
    stride = max(1, len(res["times"]) // 50)
    for t, c in zip(res["times"][::stride], res["min_cosine"][::stride]):
        ctx.log({"t": float(t), "min_cosine": float(c)})
    ctx.save_arrays(
        "trajectory", times=res["times"], trajectory=res["trajectory"], min_cosine=res["min_cosine"]
    )
    ctx.save_figure(plot_clustering(res), "F5_clustering")
    initial, final = float(res["min_cosine"][0]), float(res["min_cosine"][-1])
    ctx.claim("min pairwise cosine at t = 0", initial, 0.0, op="<")
    ctx.claim("min pairwise cosine at t = T", final, 0.99, op=">")
    ctx.claim("max deviation from S1(0, 1) over the trajectory", res["sphere_error"], 1e-10)
    t_cluster = res["t_cluster"]
    reached = (
        f"> 0.99 from t = {format_number(float(t_cluster))}"
        if t_cluster is not None and t_cluster == t_cluster
        else "never > 0.99"
    )
    ctx.report(
        f"## Results\n\nmin pairwise cosine: {initial:.3f} at t = 0 → {final:.5f} at "
        f"t = {format_number(float(t1))}; {reached}."
    )
    return {
        "min_cosine_initial": initial,
        "min_cosine_final": final,
        "t_cluster": res["t_cluster"],
        "sphere_error": res["sphere_error"],
    }
