"""F11: a trained model's tokens as particles: the digits ViT of ``experiment=train_digits``
(paper Lie scheme, 4 steps, 16 patch tokens on a 2-D grid) on one test image, its token
trajectories projected on two common principal components, the pairwise cosine matrix at
the first and the last step, and per step the mean/min cosine, the clusters at cos ≥ 0.99,
the effective rank and the distance to S1 (:func:`transflow.analysis.analyze`).

The model is the ``experiment=train_digits`` checkpoint of the default configuration
(``outputs/checkpoints/train_digits-<hash>``) if it exists, else a 300-step library training
run (``--smoke``: 30 steps), so the figure never hides a long training run.
"""

from __future__ import annotations

import pathlib

FIGURE = {
    "id": "F11",
    "title": "A trained model's token trajectories and clustering (digits ViT, analysis)",
    "command": "make figures  (python paper_figures/make_all.py F11)",
    "config": "experiment=analyze (task.source=digits): the train_digits checkpoint, "
    "else a 300-step library call",
}

ROOT = pathlib.Path(__file__).resolve().parent.parent


def trained_digits_model(smoke: bool):
    """``(float64 model, description, test images, test labels)`` of the digits ViT."""
    import tempfile

    import equinox as eqx
    import jax
    import jax.numpy as jnp

    from transflow.control import DigitsConfig, load_digits_split, load_trained, run_training
    from transflow.control._tasks import checkpoint_dir_for

    dcfg = DigitsConfig()
    ckpt = checkpoint_dir_for(
        "train_digits", dcfg, ROOT / "outputs" / "train_digits" / "x", seed=0, smoke=False
    )
    model = None
    if not smoke and ckpt.is_dir():
        try:
            model, info = load_trained("digits", ckpt, dcfg, 0)
            source = f"{ckpt.relative_to(ROOT)} (step {info['train_steps']})"
        except ValueError:
            model = None
    if model is None:
        steps = 30 if smoke else 300
        cfg = DigitsConfig(
            steps=steps, eval_every=steps, checkpoint_dir="none", warmup_steps=max(steps // 20, 1)
        )
        with tempfile.TemporaryDirectory() as tmp:
            _, result = run_training("digits", cfg, run_dir=tmp, progress=lambda it, **kw: it)
        model, source = result.model, f"library call ({steps} steps)"
    _, _, xte, yte = load_digits_split(dcfg.test_fraction, seed=0)
    f64 = lambda a: a.astype(jnp.float64) if eqx.is_inexact_array(a) else a  # noqa: E731
    return jax.tree.map(f64, model), source, jnp.asarray(xte, jnp.float64), yte


def make(out_dir: pathlib.Path) -> dict:
    import jax
    from transflow.experiments.figures import figure_smoke, save_figure

    from transflow.analysis import analyze
    from transflow.plotting import plot_flow_clustering

    jax.config.update("jax_enable_x64", True)
    model, source, xte, _ = trained_digits_model(figure_smoke())
    res = analyze(model, xte[0], factors=())
    diag = res["diagnostics"]
    n_steps = len(diag["step"]) - 1
    fig = plot_flow_clustering(res, title=f"trained digits ViT, test image 0, {n_steps} steps")
    keys = ("mean_cosine", "min_cosine", "n_clusters", "effective_rank", "distance_s1")
    save_figure(
        fig,
        out_dir,
        FIGURE["id"],
        {
            "source": source,
            "threshold": diag["threshold"],
            "projection": res["projection"],
            **{k: diag[k] for k in keys},
            "cosine_first": diag["cosine"][0],
            "cosine_last": diag["cosine"][-1],
        },
    )
    return {
        "source": source,
        "min_cosine_first": float(diag["min_cosine"][0]),
        "min_cosine_last": float(diag["min_cosine"][-1]),
        "clusters_first": int(diag["n_clusters"][0]),
        "clusters_last": int(diag["n_clusters"][-1]),
        "effective_rank_last": float(diag["effective_rank"][-1]),
    }
