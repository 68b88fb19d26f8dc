"""F2: agreement of transflow with torch.nn.TransformerEncoderLayer across configurations.

The configurations of ``experiment=equivalence`` (norm_first × activation × nhead ×
dim_feedforward × bias × layer_norm_eps; random seeded torch weights) are loaded with
``transflow.interop.from_torch``; the heat maps show log10 of the max absolute difference
in float64 (expected ≲ 1e-15, tolerance 1e-10) and of the max relative difference in
float32 (expected ~1e-7, tolerance 1e-5). ``make_all.py --smoke`` uses the smoke subset.
"""

from __future__ import annotations

import pathlib

FIGURE = {
    "id": "F2",
    "title": "Agreement transflow vs torch across layer configurations, fp64 and fp32",
    "command": "make figures  (python paper_figures/make_all.py F2)",
    "config": "experiment=equivalence (model=torch_layer, grid=index, seed=0)",
}


def make(out_dir: pathlib.Path) -> dict:
    import math

    import jax
    from omegaconf import OmegaConf
    from transflow.experiments.run import compose

    from transflow.interop import agreement_rows, fast_eager
    from transflow.plotting import figure_smoke, plot_agreement, save_figure

    jax.config.update("jax_enable_x64", True)
    cfg, _ = compose(["experiment=equivalence"])
    task = OmegaConf.to_object(cfg.task)
    smoke = figure_smoke()
    with fast_eager():
        rows = agreement_rows(
            task, cfg.model, int(cfg.grid.n_tokens), seed=int(cfg.seed), smoke=smoke
        )
    fig = plot_agreement(
        rows,
        tol_fp64=task.tol_fp64,
        tol_fp32=task.tol_fp32,
        title="transflow vs torch.nn.TransformerEncoderLayer",
    )
    save_figure(
        fig,
        out_dir,
        FIGURE["id"],
        {"smoke": smoke, "tol_fp64": task.tol_fp64, "tol_fp32": task.tol_fp32, "rows": rows},
    )
    fp64 = [r["max_abs_fp64"] for r in rows if not math.isnan(r["max_abs_fp64"])]
    fp32 = [r["max_rel_fp32"] for r in rows if not math.isnan(r["max_rel_fp32"])]
    return {
        "n_configs": len(rows),
        "n_pass": sum(r["pass"] for r in rows),
        "max_abs_fp64": max(fp64),
        "max_rel_fp32": max(fp32),
    }
