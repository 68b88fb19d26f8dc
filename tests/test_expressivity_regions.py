"""Exact linear-region counting: checks C6–C8 of docs/spec/maxout-expressivity.md §7 and the
agreement of the exact counters with brute-force grid pattern hashing (float64)."""

import jax
import numpy as np
import pytest

from transflow.expressivity import (
    MaxoutNetwork,
    count_linear_regions,
    grid_region_count,
    maxout_to_transformer,
    zigzag_maxout,
)


def _rank_of_tokens(T, variant):
    return T if variant == "A" else T - 1


def _zigzag_tf(T, D, variant, dim=1):
    k = _rank_of_tokens(T, variant)
    L = D - 1 if variant == "A" else D // 3
    net = zigzag_maxout(k, L, dim)
    return net, maxout_to_transformer(net, 0.0, 1.0, variant=variant)


# ---------------------------------------------------------------- C6 / C7, 1-D
@pytest.mark.parametrize(
    ("T", "D", "variant"),
    [(3, 7, "A"), (2, 4, "A"), (3, 9, "B")],
)
def test_zigzag_transformer_regions_1d(T, D, variant):
    net, tf = _zigzag_tf(T, D, variant)
    assert (tf.n_tokens, tf.depth) == (T, D)
    r = count_linear_regions(tf, 0.0, 1.0)
    expected = (2 * T - 1) ** (D - 1) if variant == "A" else (2 * T - 3) ** (D // 3)
    assert r.linear == expected
    assert r.activation == expected  # zigzag: every activation region is a linear region
    # the certificate: every junction proved in float64 or recomputed exactly
    cert = r.certificate
    assert r.certified
    assert cert["junctions_certified_float"] + cert["junctions_exact"] == cert["junctions"]
    assert cert["max_continuity_defect"] <= 0
    np.testing.assert_allclose(r.breakpoints, np.arange(1, expected) / expected, atol=1e-12)
    # adjacent pieces have slopes ±m^L
    slopes = r.slopes[:, 0, 0]
    m_L = float((2 * _rank_of_tokens(T, variant) - 1) ** net.depth)
    np.testing.assert_allclose(np.abs(slopes), m_L, rtol=1e-9)
    assert np.all(np.sign(slopes[1:]) == -np.sign(slopes[:-1]))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("T", "D", "variant"),
    [(2, D, "A") for D in range(2, 7)]
    + [(3, D, "A") for D in range(2, 6)]
    + [(4, 3, "A"), (4, 6, "B"), (3, 6, "B"), (3, 12, "B")],
)
def test_zigzag_transformer_regions_1d_sweep(T, D, variant):
    _, tf = _zigzag_tf(T, D, variant)
    expected = (2 * T - 1) ** (D - 1) if variant == "A" else (2 * T - 3) ** (D // 3)
    assert count_linear_regions(tf, 0.0, 1.0).linear == expected


@pytest.mark.parametrize(("k", "L"), [(2, 6), (3, 4), (4, 3)])
def test_zigzag_maxout_regions_1d(k, L):
    r = count_linear_regions(zigzag_maxout(k, L), 0.0, 1.0)
    assert r.linear == (2 * k - 1) ** L
    # the breakpoints are the points i / m^L
    m_L = (2 * k - 1) ** L
    np.testing.assert_allclose(r.breakpoints, np.arange(1, m_L) / m_L, atol=1e-10)


def test_split_rules_agree():
    net = zigzag_maxout(3, 3)
    a = count_linear_regions(net, 0.0, 1.0, split="affine", certify=False)
    b = count_linear_regions(net, 0.0, 1.0, split="midpoint", n_seed=64, certify=False)
    assert a.linear == b.linear == 125
    np.testing.assert_allclose(a.breakpoints, b.breakpoints, atol=1e-10)
    assert a.evaluations < b.evaluations


# ---------------------------------------------------------------- C6, 2-D
def _areas(polys):
    return [
        0.5 * abs(np.dot(P[:, 0], np.roll(P[:, 1], -1)) - np.dot(P[:, 1], np.roll(P[:, 0], -1)))
        for P in polys
    ]


def test_zigzag_transformer_regions_2d():
    """d = 2, Variant A, T = 2, D = 3: (2T−1)^{2(D−1)} = 81 exact polygons; grid agrees."""
    net, tf = _zigzag_tf(2, 3, "A", dim=2)
    r = count_linear_regions(tf, [0.0, 0.0], [1.0, 1.0])
    assert r.linear == r.activation == 81
    np.testing.assert_allclose(sum(_areas(r.polygons)), 1.0, rtol=1e-9)  # tiles the box
    g = grid_region_count(net, [0.0, 0.0], [1.0, 1.0], 300)
    assert g["patterns"] == g["linear"] == 81


@pytest.mark.slow
@pytest.mark.parametrize(("T", "D"), [(3, 3), (2, 4)])
def test_zigzag_transformer_regions_2d_larger(T, D):
    """Spec C6: 625 and 729 regions on [0,1]^2, exact polygons and a 600² grid."""
    net, tf = _zigzag_tf(T, D, "A", dim=2)
    expected = (2 * T - 1) ** (2 * (D - 1))
    r = count_linear_regions(tf, [0.0, 0.0], [1.0, 1.0])
    assert r.linear == r.activation == expected
    np.testing.assert_allclose(sum(_areas(r.polygons)), 1.0, rtol=1e-9)
    g = grid_region_count(tf, [0.0, 0.0], [1.0, 1.0], 600)
    assert g["patterns"] == g["linear"] == expected


# ---------------------------------------------------------------- C8: RC vs maxout net
@pytest.fixture(scope="module")
def c8_net():
    """Random 1-6-6-6-1 maxout net of rank 3 on [−3, 3] (docs/spec/maxout-expressivity.md C8)."""
    rng = np.random.default_rng(11)
    Ws = [rng.normal(size=(6, 3, 1)), rng.normal(size=(6, 3, 6)), rng.normal(size=(6, 3, 6))]
    bs = [rng.normal(size=(6, 3)) for _ in range(3)]
    return MaxoutNetwork(Ws, bs, rng.normal(size=(1, 6)), np.zeros(1))


def test_transformer_regions_equal_maxout_regions_c8(c8_net):
    net = c8_net
    tf = maxout_to_transformer(net, -3.0, 3.0)
    r_net = count_linear_regions(net, -3.0, 3.0)
    r_tf = count_linear_regions(tf, -3.0, 3.0)
    assert r_net.activation == r_tf.activation
    assert r_net.linear == r_tf.linear
    np.testing.assert_allclose(r_net.breakpoints, r_tf.breakpoints, atol=1e-9)
    # the maps of the regions agree, and f is continuous across every breakpoint
    np.testing.assert_allclose(r_tf.slopes, r_net.slopes, rtol=1e-9, atol=1e-9)
    bp = r_net.breakpoints
    J, c = r_net.slopes[:, 0, 0], r_net.intercepts[:, 0]
    np.testing.assert_allclose(J[:-1] * bp + c[:-1], J[1:] * bp + c[1:], atol=1e-9)


def test_1d_counter_agrees_with_grid_hashing(c8_net):
    """Brute force: distinct patterns on 2·10^5 grid points equal the exact count."""
    r = count_linear_regions(c8_net, -3.0, 3.0)
    g = grid_region_count(c8_net, -3.0, 3.0, 200_000)
    assert g["patterns"] == g["activation"] == r.activation
    assert g["linear"] == r.linear


def test_merging_of_equal_maps_1d():
    """A ReLU unit with zero out-weight switches the pattern but not the map."""
    Ws = [np.array([[1.0], [1.0]]), np.array([[1.0, 0.0]])]
    bs = [np.array([0.0, -0.5]), np.zeros(1)]
    r = count_linear_regions(MaxoutNetwork.from_relu(Ws, bs), -1.0, 1.0)
    assert (r.activation, r.linear) == (3, 2)
    np.testing.assert_allclose(np.sort(r.breakpoints), [0.0, 0.5], atol=1e-10)


# ---------------------------------------------------------------- random nets in 2-D
def _min_width(P):
    """Minimal width of a convex polygon (over its edge directions)."""
    widths = []
    for i in range(len(P)):
        e = P[(i + 1) % len(P)] - P[i]
        n = np.array([-e[1], e[0]]) / np.hypot(*e)
        widths.append(np.ptp((P - P[i]) @ n))
    return min(widths)


@pytest.mark.parametrize("seed", [0, 1])
def test_2d_counter_agrees_with_grid_hashing(seed):
    rng = np.random.default_rng(seed)
    Ws = [rng.normal(size=(5, 2)), rng.normal(size=(4, 5)), rng.normal(size=(1, 4))]
    bs = [rng.normal(size=5), rng.normal(size=4), rng.normal(size=1)]
    net = MaxoutNetwork.from_relu(Ws, bs)
    lo, hi, n = [-2.0, -2.0], [2.0, 2.0], 800
    r = count_linear_regions(net, lo, hi)
    g = grid_region_count(net, lo, hi, n)
    pat = jax.jit(jax.vmap(net.pattern))
    exact = [tuple(p) for p in np.asarray(pat(np.array([P.mean(0) for P in r.polygons])))]
    assert len(set(exact)) == r.activation  # one polygon per pattern
    xs = (np.arange(n) + 0.5) * 4.0 / n - 2.0
    grid = np.stack(np.meshgrid(xs, xs, indexing="ij"), -1).reshape(-1, 2)
    seen = {tuple(p) for p in np.asarray(pat(grid))}
    # the grid sees only exact patterns, and misses only polygons thinner than a cell
    assert seen <= set(exact)
    assert g["patterns"] == len(seen) <= r.activation
    cell = 4.0 / n
    for P, p in zip(r.polygons, exact):
        if p not in seen:
            assert _min_width(P) < 2 * np.sqrt(2) * cell
    assert r.activation - g["patterns"] <= 2


def test_2d_merging_of_equal_maps():
    """Two ReLU units whose sum is affine across a line: activation 4, linear 3."""
    Ws = [np.array([[1.0, 0.0], [0.0, 1.0]]), np.array([[1.0, 0.0]])]
    bs = [np.zeros(2), np.zeros(1)]
    r = count_linear_regions(MaxoutNetwork.from_relu(Ws, bs), [-1.0, -1.0], [1.0, 1.0])
    # relu(x1) only: the x2-unit splits without changing the map
    assert (r.activation, r.linear) == (4, 2)


# ---------------------------------------------------------------- bad input
@pytest.mark.slow
def test_117649_region_transformer_certified():
    """Issue #14: Variant A, rank 4, depth 6 (T = 4, D = 7): exactly 7^6 regions, certified
    (the earlier float64 counter returned 119788-119790 without a warning)."""
    tf = maxout_to_transformer(zigzag_maxout(4, 6), 0.0, 1.0)
    r = count_linear_regions(tf, 0.0, 1.0, n_seed=1 << 14)
    assert (r.linear, r.activation, r.certified) == (117649, 117649, True)


def test_counter_rejects_bad_input():
    net3 = MaxoutNetwork([np.ones((1, 2, 3))], [np.zeros((1, 2))])
    with pytest.raises(ValueError, match="dimension 1 or 2"):
        count_linear_regions(net3, 0.0, 1.0)
    net = zigzag_maxout(2, 1)
    with pytest.raises(ValueError, match="lo"):
        count_linear_regions(net, 1.0, 0.0)
    with pytest.raises(ValueError, match="split"):
        count_linear_regions(net, 0.0, 1.0, split="golden")
    with pytest.raises(TypeError, match="AbstractPiecewiseLinear"):
        count_linear_regions(lambda x: x, 0.0, 1.0)
    soft = maxout_to_transformer(net, 0.0, 1.0, attention=5.0)
    with pytest.raises(ValueError, match="hardmax"):
        count_linear_regions(soft, 0.0, 1.0)
