"""Slow checks of issue 26 on the trained digits models (minutes of CPU each).

The path-controlled model (Legendre K = 4, pre-LN, trained with N_t drawn from {4, 8, 16}
per batch) keeps its test accuracy when evaluated at other depths; the per-layer model
trained the same way (the paper's post-LN scheme) does not. The numbers are those of
``transflow-run experiment=depth`` (docs/depth.md).
"""

from __future__ import annotations

import dataclasses

import pytest

pytestmark = pytest.mark.slow


def _train(**over):
    from transflow.control import DEPTH_DIGITS, DepthDigitsConfig, run_training

    experiment = __import__("transflow.experiments.tasks.depth", fromlist=["Config"]).Config()
    cfg = dataclasses.replace(
        DepthDigitsConfig(),
        d=experiment.d,
        n_steps=experiment.n_steps,
        steps=experiment.steps,
        checkpoint_dir="none",
        **over,
    )
    summary, result = run_training(DEPTH_DIGITS, cfg, run_dir="unused", progress=None)
    return summary, result.model


def test_path_model_keeps_its_accuracy_at_every_depth():
    from transflow.analysis import increment_scaling
    from transflow.control import at_depth, depth_accuracy, load_digits_split

    experiment = __import__("transflow.experiments.tasks.depth", fromlist=["Config"]).Config()
    summary, model = _train(
        path=experiment.path,
        path_size=experiment.path_size,
        train_depths=list(experiment.train_depths),
        dt=experiment.path_dt,
    )
    _, _, xte, yte = load_digits_split(0.2, seed=0)
    r = depth_accuracy(model, xte, yte, experiment.depths, rtol=experiment.rtol)
    print(r["accuracy"], r["adaptive_accuracy"], r["adaptive_nfev_mean"])
    a0 = r["accuracy"][0]
    assert a0 >= experiment.min_accuracy
    drops = [abs(a - a0) for a in r["accuracy"]] + [abs(r["adaptive_accuracy"] - a0)]
    assert max(drops) <= experiment.max_drop, drops
    assert increment_scaling(at_depth(model, 64), [1, 2, 4])["beta"] >= 0.9


def test_per_layer_post_ln_model_collapses_under_refinement():
    from transflow.control import depth_accuracy, load_digits_split

    summary, model = _train(path="none", scheme="lie")
    _, _, xte, yte = load_digits_split(0.2, seed=0)
    r = depth_accuracy(model, xte, yte, (4, 16, 64), rtol=None)
    print(r["accuracy"])
    assert r["accuracy"][0] >= 0.95
    assert r["accuracy"][-1] <= r["accuracy"][0] - 0.3
