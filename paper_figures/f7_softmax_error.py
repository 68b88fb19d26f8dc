"""F7: softmax attention as an approximate max — error × λ against λ converges to
``c_T = W((T−1)/e)``.

One rank-T maxout unit (pieces x, 0, …, 0 on [−1, 1]) is realized by the Variant-A
transformer with softmax attention at scale λ (transflow's own attention operator,
``temperature=λ``). For T = 2, 3, 4, 8 the sup of |max − transformer| · λ over a dense grid
of gaps ≈ 1/λ equals ``W((T−1)/e)`` = 0.27846, 0.46306, 0.60355, 0.97314 for every λ
(docs/spec/maxout-expressivity.md §3.6, check C5); the max over 2000 random points
underestimates it at large λ. Library call, same code as ``experiment=expressivity``.
"""

from __future__ import annotations

import pathlib

FIGURE = {
    "id": "F7",
    "title": "Softmax max-unit: sup error × λ vs λ, with the sharp constant W((T−1)/e)",
    "command": "make figures  (python paper_figures/make_all.py F7)",
    "config": "library call (transflow.expressivity.softmax_rows); "
    "also written by experiment=expressivity",
}


def make(out_dir: pathlib.Path) -> dict:
    import jax
    from transflow.experiments.tasks.expressivity import Config

    from transflow.expressivity import softmax_rows
    from transflow.plotting import figure_smoke, plot_softmax, save_figure

    jax.config.update("jax_enable_x64", True)
    cfg = Config()
    smoke = figure_smoke()
    tokens = [2, 3] if smoke else cfg.softmax_tokens
    lambdas = [10.0, 1e3] if smoke else cfg.lambdas
    rows = softmax_rows(tokens, lambdas, n_grid=2001 if smoke else 20001)
    save_figure(plot_softmax(rows), out_dir, FIGURE["id"], {"rows": rows})
    dev = max(abs(r["err_lambda_grid"] - r["c_T"]) / r["c_T"] for r in rows)
    return {
        "max_rel_dev_err_lambda_vs_cT": dev,
        "c_T": {str(r["T"]): r["c_T"] for r in rows},
    }
