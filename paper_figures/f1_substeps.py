"""F1: the sub-step diagram of one Lie step beside the PyTorch layer's intermediates.

One random post-LN ``torch.nn.TransformerEncoderLayer`` (the ``model`` group of
``experiment=equivalence``, float64) is loaded with ``transflow.interop.from_torch``; the
M = 4 + J sub-step states of one step of the paper's Lie scheme (attention, projection
onto S1, J FFN sub-steps, relaxation ½(u + z), projection onto S1) are compared with the
torch layer's own intermediates: Frobenius norm, per-token mean and standard deviation,
and max |transflow − torch| per sub-step (expected ~1e-15: the sub-steps are the layer).
"""

from __future__ import annotations

import pathlib

FIGURE = {
    "id": "F1",
    "title": "Sub-steps of one Lie splitting step vs the torch layer's intermediates",
    "command": "make figures  (python paper_figures/make_all.py F1)",
    "config": "experiment=equivalence (model=torch_layer, grid=index, seed=0)",
}


def make(out_dir: pathlib.Path) -> dict:
    import jax
    from transflow.experiments.run import compose

    from transflow.interop import fast_eager, substep_rows
    from transflow.plotting import plot_substeps, save_figure

    jax.config.update("jax_enable_x64", True)
    cfg, _ = compose(["experiment=equivalence"])
    with fast_eager():
        rows = substep_rows(cfg.model, int(cfg.grid.n_tokens), seed=int(cfg.seed), dtype="float64")
    fig = plot_substeps(
        rows,
        title="one Lie step (post-LN layer, float64): transflow sub-steps vs torch intermediates",
    )
    errs = [r["max_abs"] for r in rows if r["max_abs"] == r["max_abs"]]
    save_figure(fig, out_dir, FIGURE["id"], {"dtype": "float64", "substeps": rows})
    return {"n_substeps": len(rows), "substep_max_abs_fp64": max(errs)}
