"""F4: error vs grid size N_x = N_y = N (log–log) of the discrete attention operator, the
linear integral operator and the evolution of sub-model (a), for smooth kernels on
Ω_x = Ω_y = [0, 1] with the midpoint rule; nested grids N = 4, 12, 36 against N = 324.
Expected: slope 2 (the quadrature order).
"""

from __future__ import annotations

import pathlib

FIGURE = {
    "id": "F4",
    "title": "Error vs grid size for smooth kernels (midpoint rule, order 2)",
    "command": "make figures  (python paper_figures/make_all.py F4)",
    "config": "experiment=grid_refinement (precision=fp64)",
}


def make(out_dir: pathlib.Path) -> dict:
    import jax
    from omegaconf import OmegaConf
    from transflow.experiments.run import compose

    from transflow.continuous import grid_refinement_study
    from transflow.plotting import figure_smoke, plot_grid, save_figure

    jax.config.update("jax_enable_x64", True)
    cfg, _ = compose(["experiment=grid_refinement"])
    task = OmegaConf.to_object(cfg.task)
    quantities, sizes, n_ref = list(task.quantities), list(task.sizes), int(task.n_ref)
    if figure_smoke():
        quantities, sizes, n_ref = ["attention"], [4, 12], 36
    records = grid_refinement_study(
        quantities, sizes, n_ref=n_ref, t1=task.t1, n_time_steps=task.n_time_steps
    )
    fig = plot_grid(records)
    save_figure(fig, out_dir, FIGURE["id"], {"records": records})
    return {f"slope_{r['quantity']}": round(r["slope"], 3) for r in records}
