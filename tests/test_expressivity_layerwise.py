"""The layerwise certified 1-D counter (issue #14 benchmark path): agreement with the point
walk of ``_certify`` on random networks, patterns and maps of every region, the exact
fallback for holes, and the walk for models without ``interval_forward``."""

import jax
import numpy as np
import pytest

from _wrappers import only
from transflow.expressivity import (
    AbstractAffineLogits,
    AbstractBoundedEval,
    AbstractExactEval,
    MaxoutNetwork,
    count_linear_regions,
    maxout_to_transformer,
    restrict,
    zigzag_maxout,
)
from transflow.expressivity._batch import hash_coeffs
from transflow.expressivity._certify import count_1d_certified
from transflow.expressivity._layerwise import IntervalContext, count_1d_layerwise


def _walk(f, lo, hi):
    n_pat = jax.eval_shape(f.pattern, np.zeros((f.in_dim,))).shape[0]
    coeffs = jax.numpy.asarray(hash_coeffs(n_pat))
    return count_1d_certified(f, lo, hi, n_seed=256, dtype=np.float64, coeffs=coeffs, strict=True)


def _random_maxout(seed, widths=(8, 8, 6), rank=3):
    rng = np.random.default_rng(seed)
    ws, bs, n = [], [], 1
    for w in widths:
        ws.append(rng.normal(size=(w, rank, n)))
        bs.append(rng.normal(size=(w, rank)))
        n = w
    return MaxoutNetwork(ws, bs, rng.normal(size=(2, n)))


@pytest.mark.parametrize("seed", [0, 2])
def test_layerwise_agrees_with_the_point_walk(seed):
    """Random maxout nets: the same switches (to 1e-12), the same map changes, and maps
    equal to the model's own forward-mode derivative at every region's midpoint."""
    net = _random_maxout(seed)
    lw = count_1d_layerwise(net, -5.0, 5.0)
    wk = _walk(net, -5.0, 5.0)
    assert lw["certified"] and wk["certified"]
    assert lw["breakpoints"].size == wk["breakpoints"].size > 10
    np.testing.assert_allclose(lw["breakpoints"], wk["breakpoints"], atol=1e-12)
    np.testing.assert_array_equal(lw["differ"], wk["differ"])
    edges = np.concatenate([[-5.0], lw["breakpoints"], [5.0]])
    mid = 0.5 * (edges[:-1] + edges[1:])
    J = np.asarray(jax.vmap(jax.jacfwd(net))(mid[:, None]))
    np.testing.assert_allclose(lw["slopes"], J, rtol=1e-9, atol=1e-9)
    y = np.asarray(jax.vmap(net)(mid[:, None]))
    np.testing.assert_allclose(
        lw["intercepts"] + lw["slopes"][:, :, 0] * mid[:, None], y, rtol=1e-9, atol=1e-9
    )


def test_recorded_patterns_are_the_models_patterns():
    """The winners recorded per interval are f.pattern at the interval's clean midpoint."""
    tf = maxout_to_transformer(zigzag_maxout(3, 2), 0.0, 1.0, variant="B")
    ctx = IntervalContext(0.0, 1.0)
    tf.interval_forward(ctx, ctx.input())
    assert ctx.n == 25 and not ctx.holes
    mid = 0.5 * (ctx.ca + ctx.cb)
    pats = np.asarray(jax.vmap(tf.pattern)(mid[:, None]))
    for i in range(ctx.n):
        np.testing.assert_array_equal(ctx.pattern(i), pats[i])


def test_slice_of_a_relu_net_and_a_hole_recomputed_exactly():
    """A line through R^3 for a ReLU net with two units switching at the same point: the
    interval holding both is a hole, recomputed by the exact walk; the count equals the
    point walk's."""
    Ws = [np.array([[1.0, 0.0, 0.0], [3.0, 0.0, 0.0], [1.0, 1.0, 0.0]]), np.ones((1, 3))]
    bs = [np.zeros(3), np.array([0.5]), np.zeros(1)][:1] + [np.zeros(1)]
    net = MaxoutNetwork.from_relu(Ws, bs)
    g = restrict(net, np.array([-1.0, 0.25, 0.0]), np.array([2.0, 0.0, 0.0]))
    lw = count_1d_layerwise(g, 0.0, 1.0)
    wk = _walk(g, 0.0, 1.0)
    assert lw["certificate"]["holes"] >= 1 and lw["certificate"]["junctions_exact"] >= 1
    np.testing.assert_allclose(lw["breakpoints"], wk["breakpoints"], atol=1e-12)
    r = count_linear_regions(g, 0.0, 1.0)
    assert r.certified and r.activation == lw["breakpoints"].size + 1 == 3


def test_models_without_interval_forward_use_the_walk():
    f = only(zigzag_maxout(2, 3), AbstractAffineLogits, AbstractBoundedEval, AbstractExactEval)
    r = count_linear_regions(f, 0.0, 1.0)
    assert (r.linear, r.certified) == (27, True)
    assert "walk_rounds" in r.certificate and "layerwise" not in r.certificate["method"]


def test_carry_is_required_after_a_decision():
    ctx = IntervalContext(0.0, 1.0)
    x = ctx.input()
    z = ctx.lin(x, np.array([[1.0, -1.0]])).map(lambda a: a[:, None, :])
    ctx.decide(z)
    with pytest.raises(RuntimeError, match="carry"):
        ctx.lin(x, np.ones((1, 1)))
    assert ctx.carry(x).gen == ctx.gen


@pytest.mark.slow
@pytest.mark.parametrize("case", ["B", "maxout13"])
def test_large_counts_certified_without_exact_fallback(case):
    """Issue #14 benchmark sizes: Variant B rank 4 depth 6 (117649) and the rank-2 depth-13
    maxout net (3^13 = 1594323) are certified by the layerwise counter alone."""
    if case == "B":
        f, expected = maxout_to_transformer(zigzag_maxout(4, 6), 0.0, 1.0, variant="B"), 7**6
    else:
        f, expected = zigzag_maxout(2, 13), 3**13
    r = count_linear_regions(f, 0.0, 1.0)
    assert (r.linear, r.activation, r.certified) == (expected, expected, True)
    assert "layerwise" in r.certificate["method"]
    assert r.certificate["holes"] == 0 and r.certificate["max_continuity_defect"] <= 0
