"""F12: depth refinement of a trained model: the digits ViT of ``experiment=train_digits``
run with Δt/k and k·N_t steps (:func:`transflow.analysis.refine`, controls piecewise
constant or linear in t), k = 1 … 16: the relative change of the final state on the test
split and the test accuracy against k. Same model source as F11 (the train_digits
checkpoint, else a 300-step library training run).
"""

from __future__ import annotations

import importlib.util
import pathlib

FIGURE = {
    "id": "F12",
    "title": "Depth refinement of a trained model: output change and accuracy vs Δt/k",
    "command": "make figures  (python paper_figures/make_all.py F12)",
    "config": "experiment=analyze (task.source=digits, factors 1..16, both interpolations)",
}

HERE = pathlib.Path(__file__).resolve().parent


def _f11():
    spec = importlib.util.spec_from_file_location(
        "paper_figures_f11", HERE / "f11_flow_clustering.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make(out_dir: pathlib.Path) -> dict:
    import jax
    import numpy as np
    from transflow.experiments.figures import figure_smoke, save_figure

    from transflow.analysis import refinement_study
    from transflow.control import evaluate
    from transflow.plotting import plot_refinement

    jax.config.update("jax_enable_x64", True)
    smoke = figure_smoke()
    model, source, xte, yte = _f11().trained_digits_model(smoke)
    factors = (1, 2) if smoke else (1, 2, 4, 8, 16)
    xs = xte[:64] if smoke else xte
    ys = yte[:64] if smoke else yte

    def acc(m):
        return evaluate(m, np.asarray(xs), ys)

    studies = {
        interp: refinement_study(model, xs, factors, interpolation=interp, evaluate=acc)
        for interp in ("constant", "linear")
    }
    fig = plot_refinement(studies, title="trained digits ViT (Lie scheme, 4 steps), refined k×")
    save_figure(fig, out_dir, FIGURE["id"], {"source": source, "studies": studies})
    return {
        "source": source,
        **{
            f"accuracy_{i}": [round(e["accuracy"], 4) for e in st["evaluate"]]
            for i, st in studies.items()
        },
        **{f"order_{i}": st["order"] for i, st in studies.items()},
    }
