"""The depth study's evaluation options of issue 50 (float64, small models, no training):
the adaptive solve split at the jumps of θ (``task.adaptive_split``), the local order per
doubling and the fraction of Heun steps whose stages straddle a ReLU kink."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from transflow import Adaptive, LayerControls, PreNormScheme, stack_controls
from transflow.control import depth_accuracy, make_vit
from transflow.experiments.tasks import depth


def _per_layer_model(d=8, n_layers=4, seed=0):
    m = make_vit(
        d=d,
        n_steps=n_layers,
        n_heads=1,
        scheme=PreNormScheme(),
        dtype=jnp.float64,
        key=jax.random.key(seed),
    )
    layers = [
        LayerControls.random(d, n_heads=1, dtype=jnp.float64, key=jax.random.key(seed + 1 + i))
        for i in range(n_layers)
    ]
    # T = 0.2 as the study's headline (dt = T / L)
    return dataclasses.replace(m, controls=stack_controls(layers), dt=0.2 / n_layers)


def _rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def test_adaptive_split_solves_a_per_layer_model_piece_by_piece():
    """With ``task.adaptive_split`` the study's adaptive solve of a per-layer model (θ
    jumps at its 3 inner layer boundaries) is the split solve, at the same tolerance: its
    evaluation count and its logits differ from the solve straight across the jumps (kept
    beside it as ``adaptive.unsplit``), and it agrees with a split reference 1e5 times
    tighter; without the option only the unsplit solve runs."""
    with jax.enable_x64(True):
        m = _per_layer_model()
        x = np.asarray(jax.random.normal(jax.random.key(9), (6, 8, 8), jnp.float64))
        ref = depth_accuracy(
            m, x, np.zeros(6, int), [], adaptive=Adaptive(rtol=1e-10, atol=1e-10), split=True
        )
        z_ref = ref["adaptive_outputs"]
        y = np.argmax(z_ref, -1)
        cfg = depth.Config(rtol=1e-5, adaptive_split=True)
        got = depth._adaptive_solves(cfg, m, x, y)
        old = depth._adaptive_solves(dataclasses.replace(cfg, adaptive_split=False), m, x, y)
    assert set(got) == {"adaptive", "adaptive.unsplit"} and set(old) == {"adaptive"}
    split, unsplit = got["adaptive"], got["adaptive.unsplit"]
    # the unsplit solve is the one every run before the option made
    np.testing.assert_array_equal(unsplit["adaptive_outputs"], old["adaptive"]["adaptive_outputs"])
    assert unsplit["adaptive_nfev_mean"] == old["adaptive"]["adaptive_nfev_mean"]
    # the split solve is another solve: other counts, other logits
    assert split["adaptive_nfev_mean"] != unsplit["adaptive_nfev_mean"], (split, unsplit)
    assert _rel(split["adaptive_outputs"], unsplit["adaptive_outputs"]) > 0
    # ... of the same limit: the split solve within 10 tolerances of the reference, and
    # closer to it than the solve across the jumps (whose error control does not see them;
    # on this model 3.2e-5 against 1.9e-3, 62 against 442 evaluations per image)
    d_split = _rel(split["adaptive_outputs"], z_ref)
    d_unsplit = _rel(unsplit["adaptive_outputs"], z_ref)
    assert d_split < 10 * cfg.rtol and d_split < d_unsplit, (d_split, d_unsplit)
    assert split["adaptive_accuracy"] == 1.0
    # the step-size controller no longer finds the jumps by rejected steps
    assert split["adaptive_nfev_mean"] < unsplit["adaptive_nfev_mean"]


def test_adaptive_split_leaves_a_smooth_path_alone():
    """A Legendre path has no jump: split and unsplit are the same solve, bit for bit."""
    with jax.enable_x64(True):
        m = make_vit(
            d=8,
            n_steps=4,
            n_heads=1,
            path="legendre",
            scheme=PreNormScheme(),
            dtype=jnp.float64,
            key=jax.random.key(3),
        )
        x = np.asarray(jax.random.normal(jax.random.key(4), (3, 8, 8), jnp.float64))
        got = depth._adaptive_solves(depth.Config(adaptive_split=True), m, x, np.zeros(3, int))
    a, b = got["adaptive"], got["adaptive.unsplit"]
    np.testing.assert_array_equal(a["adaptive_outputs"], b["adaptive_outputs"])
    assert a["adaptive_nfev_mean"] == b["adaptive_nfev_mean"]


def test_adaptive_split_enters_the_record_key_only_when_on():
    from transflow.control import ReferenceTolerances
    from transflow.experiments.study.protocol import StudyConfig

    study = StudyConfig(eval_grid=[1, 2, 4], fit_windows={"prenorm": [2, 4]})
    ref = ReferenceTolerances("dopri5", 1e-8, 1e-7, 1e-6)
    task = depth.Config()
    key = depth.record_key(task, study, ref, False)
    assert (
        depth.record_key(dataclasses.replace(task, adaptive_split=False), study, ref, False) == key
    )
    assert (
        depth.record_key(dataclasses.replace(task, adaptive_split=True), study, ref, False) != key
    )
