"""Softmax attention at scale λ: check C5 of docs/spec/maxout-expressivity.md §7 (float64).

One max-unit: the sup error over a dense grid of gaps equals ``c_T/λ`` with
``c_T = W((T−1)/e)`` (to 1e-6 relative: grid resolution); multi-layer nets: the error stays
within the propagated bound of §3.6.
"""

import math

import equinox as eqx
import jax
import numpy as np
import pytest

from transflow.expressivity import (
    MaxoutNetwork,
    lambert_w,
    maxout_to_transformer,
    softmax_error_bound,
    softmax_gap_error,
    softmax_max_constant,
)


@eqx.filter_jit
def batched(f, x):
    """vmap(f)(x), compiled once per model structure (f is an argument, not a constant)."""
    return jax.vmap(f)(x)


def test_lambert_w_and_constants():
    for z in (0.0, 1e-3, 0.5, 1.0, math.e, 10.0, 1e3):
        w = lambert_w(z)
        assert abs(w * math.exp(w) - z) <= 1e-14 * max(1.0, z)
    # reference values of docs/spec/maxout-expressivity.md §3.6 / C5
    ref = {2: 0.27846, 3: 0.46306, 4: 0.60355, 8: 0.97314}
    for T, c in ref.items():
        assert abs(softmax_max_constant(T) - c) < 1e-5
    # the sharp constant is the max over gaps of the equal-gap error (times λ)
    u = np.linspace(0, 20, 200_001)
    for T in ref:
        assert abs(softmax_gap_error(u, 1.0, T).max() - softmax_max_constant(T)) < 1e-9
    with pytest.raises(ValueError, match="z"):
        lambert_w(-1.0)


def _one_unit(T):
    """One rank-T unit on [−1, 1]: pieces x, 0, …, 0 (the other T−1 at a common gap x)."""
    w = np.zeros((1, T, 1))
    w[0, 0, 0] = 1.0
    return MaxoutNetwork([w], [np.zeros((1, T))])


@pytest.mark.parametrize("T", [2, 3, 4, 8])
def test_one_unit_error_times_lambda_is_c_T(T):
    net = _one_unit(T)
    c_T = softmax_max_constant(T)
    for lam in (10.0, 1e2, 1e3, 1e4):
        tf = maxout_to_transformer(net, -1.0, 1.0, attention=lam)
        x = np.linspace(0.0, 10.0 / lam, 20_001)[:, None]  # gaps placed at ≈ 1/λ
        err = np.asarray(batched(net, x) - batched(tf, x))[:, 0]
        np.testing.assert_allclose(err, softmax_gap_error(x[:, 0], lam, T), atol=1e-12 / lam)
        assert err.min() >= -1e-13
        assert abs(err.max() * lam - c_T) <= 1e-6 * c_T
        assert tf.softmax_error_bound() == pytest.approx(c_T / lam, rel=1e-12)


def test_random_samples_underestimate_the_sup():
    """Spec C5: random points miss the worst gaps at large λ (use dense grids)."""
    net, lam, T = _one_unit(4), 1e4, 4
    tf = maxout_to_transformer(net, -1.0, 1.0, attention=lam)
    x = np.random.default_rng(0).uniform(-1, 1, size=(2000, 1))
    err = np.asarray(batched(net, x) - batched(tf, x))
    assert np.abs(err).max() * lam < 0.5 * softmax_max_constant(T)


@pytest.mark.parametrize("variant", ["A", "B"])
def test_multilayer_error_within_bound(variant):
    rng = np.random.default_rng(1)
    ws = [rng.normal(size=(3, 3, 2)), rng.normal(size=(3, 2, 3)), rng.normal(size=(2, 3, 3))]
    bs = [rng.normal(size=w.shape[:2]) for w in ws]
    net = MaxoutNetwork(ws, bs, rng.normal(size=(1, 2)), np.zeros(1))
    x = np.concatenate(
        [
            rng.uniform(-1, 1, size=(4000, 2)),
            np.stack(np.meshgrid(*(np.linspace(-1, 1, 60),) * 2), -1).reshape(-1, 2),
        ]
    )
    y = np.asarray(batched(net, x))
    errs = []
    for lam in (1e2, 1e3, 1e4):
        tf = maxout_to_transformer(net, -1.0, 1.0, variant=variant, attention=lam)
        bound = tf.softmax_error_bound()
        assert math.isfinite(bound)  # the margin condition of §3.6 holds
        assert bound == pytest.approx(softmax_error_bound(net, lam, tf.n_tokens))
        err = float(np.abs(np.asarray(batched(tf, x)) - y).max())
        assert err <= bound
        errs.append(err)
    assert errs[2] <= 0.05 * errs[0]  # λ = O(1/ε)
    # a margin that is too small for the perturbation: the bound reports it
    tight = maxout_to_transformer(net, -1.0, 1.0, variant=variant, attention=1.0, margin=0.0)
    assert tight.softmax_error_bound() == math.inf
