"""F3: error vs Δt (log–log) of the Lie and Strang splittings on the well-posed sub-models
(a) attention + linear, (b) + S1 (tangent-space projected ODE; the tangent and the full-F
splitting), (c) + S2 with the constraint active on most of the horizon, against diffrax
Dopri8 references (tol 1e-12), with fitted slopes (``experiment=convergence``).
Expected: Lie ≈ 1 everywhere; Strang ≈ 2 on (a) and on (b) with the tangent splitting,
≈ 1 on (b) with the full F and on (c) (active constraint).
"""

from __future__ import annotations

import pathlib

FIGURE = {
    "id": "F3",
    "title": "Error vs Δt of Lie and Strang splitting against diffrax references",
    "command": "make figures  (python paper_figures/make_all.py F3)",
    "config": "experiment=convergence (precision=fp64)",
}


def make(out_dir: pathlib.Path) -> dict:
    import jax
    from omegaconf import OmegaConf
    from transflow.experiments.run import compose

    from transflow.continuous import convergence_study
    from transflow.plotting import figure_smoke, plot_convergence, save_figure

    jax.config.update("jax_enable_x64", True)
    cfg, _ = compose(["experiment=convergence"])
    task = OmegaConf.to_object(cfg.task)
    subs, schemes, n_steps = list(task.submodels), list(task.schemes), list(task.n_steps)
    if figure_smoke():
        subs, schemes, n_steps = subs[:1], schemes[:2], [4, 8]
    records = [
        r.record()
        for r in convergence_study(
            subs,
            schemes,
            n_steps=n_steps,
            t1=task.t1,
            seed=int(cfg.seed),
            n_tokens=task.n_tokens,
            n_features=task.n_features,
            b_splitting=["tangent", "full"] if task.b_splitting == "both" else task.b_splitting,
        )
    ]
    fig = plot_convergence(records, title="splitting error vs Δt against diffrax (float64)")
    save_figure(fig, out_dir, FIGURE["id"], {"records": records})
    out = {}
    for r in records:
        sub = r["submodel"] + (f"-{r['b_splitting']}" if r["b_splitting"] else "")
        out[f"slope_{sub}_{r['scheme']}"] = round(r["slope"], 3)
    return out
