"""F6: the expected negative (docs/spec/continuous-model.md Q9). The full model's Lie scheme with σ1
= 0 (S1 ∩ S2 = ∅) under Δt refinement: successive differences are erratic, then the state
collapses onto a fixed point of g(u) = P_S1(½(u + ReLU u)) and its sensitivity to the
last layer's controls vanishes like Δt: the "limit" forgets the dynamics. Contrast:
σ1 = 1, σ2 = 0.3 (S1 ∩ S2 ≠ ∅) converges at first order with O(1) sensitivity.
"""

from __future__ import annotations

import pathlib

FIGURE = {
    "id": "F6",
    "title": "Non-convergence of the full model with σ1 = 0 under Δt refinement",
    "command": "make figures  (python paper_figures/make_all.py F6)",
    "config": "experiment=nonconvergence (precision=fp64)",
}


def make(out_dir: pathlib.Path) -> dict:
    import jax
    from omegaconf import OmegaConf
    from transflow.experiments.run import compose

    from transflow.continuous import nonconvergence_study
    from transflow.plotting import figure_smoke, plot_nonconvergence, save_figure

    jax.config.update("jax_enable_x64", True)
    cfg, _ = compose(["experiment=nonconvergence"])
    task = OmegaConf.to_object(cfg.task)
    refs = [1, 2, 4, 8] if figure_smoke() else list(task.refinements)
    results = nonconvergence_study(
        refs,
        n_layers=task.n_layers,
        n_tokens=task.n_tokens,
        d=task.d,
        ffn_branch_dt=task.ffn_branch_dt,
        seed=int(cfg.seed),
    )
    fig = plot_nonconvergence(results)
    save_figure(fig, out_dir, FIGURE["id"], results)
    r0, r1 = results.values()
    return {
        "sigma1_0_sensitivity_dt_min": r0["sensitivity"][-1],
        "sigma1_0_sensitivity_dt_1": r0["sensitivity"][0],
        "sigma1_0_fixed_point_residual": r0["fixed_point_residual"][-1],
        "sigma1_1_sensitivity_dt_min": r1["sensitivity"][-1],
        "sigma1_1_last_ratio": r1["ratios"][-1] if r1["ratios"] else None,
    }
