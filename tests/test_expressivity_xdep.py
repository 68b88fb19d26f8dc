"""Input-dependent hardmax attention (issue #14, point 2): HardmaxTransformer, whose
queries and keys depend on x, and its exact 1-D region count over exact roots of
quadratics (exact_regions_1d, via count_linear_regions)."""

import math
from decimal import Decimal, getcontext
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transflow import AttentionParams, FFNParams
from transflow.expressivity import (
    HardmaxTransformer,
    MaxoutNetwork,
    QuadraticRoot,
    count_linear_regions,
    exact_regions_1d,
    maxout_to_transformer,
    restrict,
    zigzag_maxout,
)

N_DENSE = 200_000


def _np_forward(f, xs):
    """An independent numpy float64 forward pass of a HardmaxTransformer on a batch
    ``xs (N, d)``: outputs ``(N, d_out)`` and flat patterns ``(N, P)`` (argmax per head and
    query token, ReLU sign per FFN unit and token)."""
    a64 = lambda v: np.asarray(v, np.float64)
    N, T = xs.shape[0], f.n_tokens
    X = np.einsum("nd,tdm->ntm", xs, a64(f.embedding)) + a64(f.positional)
    pats = []
    for a, ffn in f.blocks:
        if a is not None:
            H = a.n_heads
            q = (X @ a64(a.wq) + a64(a.bq)).reshape(N, T, H, -1)
            k = (X @ a64(a.wk) + a64(a.bk)).reshape(N, T, H, -1)
            v = (X @ a64(a.wv) + a64(a.bv)).reshape(N, T, H, -1).transpose(0, 2, 1, 3)
            w = np.einsum("nihc,njhc->nhij", q, k).argmax(-1)  # (N, H, T)
            pats.append(w.reshape(N, -1))
            o = np.take_along_axis(v, w[..., None], axis=2)  # (N, H, T, dv)
            X = X + o.transpose(0, 2, 1, 3).reshape(N, T, -1) @ a64(a.wo) + a64(a.bo)
        if ffn is not None:
            Z = X
            for j, (W, b) in enumerate(zip(ffn.weights, ffn.biases)):
                Z = Z @ a64(W) + a64(b)
                if j < len(ffn.weights) - 1:
                    pats.append((Z > 0).reshape(N, -1).astype(np.int64))
                    Z = np.maximum(Z, 0.0)
            X = X + Z
    y = X[:, f.readout_token] @ a64(f.readout_weight).T + a64(f.readout_bias)
    return y, np.concatenate(pats, axis=1)


def _dense_counts(f, origin, direction, lo, hi, n=N_DENSE):
    """Independent float count on the line ``origin + t·direction``, n + 1 points of
    [lo, hi]: 1 + changes of consecutive patterns; 1 + changes of the affine map, fitted
    through the two extreme samples of every run of one pattern."""
    ts = np.linspace(lo, hi, n + 1)
    y, pats = _np_forward(f, origin[None, :] + ts[:, None] * direction[None, :])
    change = np.nonzero(np.any(pats[1:] != pats[:-1], axis=1))[0]
    starts = np.concatenate([[0], change + 1])
    ends = np.concatenate([change, [n]])
    J = (y[ends] - y[starts]) / (ts[ends] - ts[starts])[:, None]
    c = y[starts] - J * ts[starts][:, None]
    scale = np.abs(J).max() * (hi - lo) + np.abs(c).max()
    differ = np.abs(J[1:] - J[:-1]).max(1) * (hi - lo) + np.abs(c[1:] - c[:-1]).max(1)
    return 1 + change.size, 1 + int(np.sum(differ > 1e-8 * scale)), (J, c)


def _check_against_dense(g, f, origin, direction, lo, hi):
    r = count_linear_regions(g, lo, hi)
    assert r.certified and r.certificate["method"] == (
        "exact rational / quadratic-irrational arithmetic"
    )
    act, lin, (J, c) = _dense_counts(f, origin, direction, lo, hi)
    step = (hi - lo) / N_DENSE
    # the sampling resolves every region: the narrowest exact region spans many steps
    assert r.certificate["min_region_width"] > 50 * step
    assert (r.activation, r.linear) == (act, lin)
    assert r.activation > 5  # a non-trivial case
    # the exact affine maps agree with the float model's on every region
    np.testing.assert_allclose(r.slopes[:, :, 0], J, rtol=1e-7, atol=1e-7)
    np.testing.assert_allclose(r.intercepts, c, rtol=1e-7, atol=1e-7)
    # exact breakpoints are strictly increasing inside (lo, hi)
    bps = r.certificate["exact_breakpoints"]
    assert all(a < b for a, b in zip(bps[:-1], bps[1:]))
    assert len(bps) == r.activation - 1 and (len(bps) == 0 or lo < float(bps[0]))
    return r


def test_random_1d_matches_dense_sampling():
    f = HardmaxTransformer.random(jax.random.PRNGKey(0), in_dim=1, n_tokens=3, ffn_width=4)
    assert not f.affine_logits
    r = _check_against_dense(f, f, np.zeros(1), np.ones(1), -1.5, 1.5)
    # quadratic scores: irrational breakpoints occur, and the model jumps at some switches
    assert r.certificate["irrational_breakpoints"] > 0
    assert r.certificate["discontinuities"] > 0


def test_random_3d_on_a_segment_matches_dense_sampling():
    key = jax.random.PRNGKey(7)
    f = HardmaxTransformer.random(key, in_dim=3, n_tokens=3, ffn_width=4)
    p0, p1 = np.asarray(jax.random.normal(jax.random.PRNGKey(8), (2, 3)))
    g = restrict(f, p0, p1 - p0)
    assert g.in_dim == 1 and not g.affine_logits
    _check_against_dense(g, f, p0, p1 - p0, 0.0, 1.0)


# ---------------------------------------------------------------- hand-built cases
def _two_head_model(second: str, value_b: float = 2.0):
    """x ∈ [1, 2] on 3 tokens, slots (x on token 0, 1, [t = 1], [t = 2], out, [t = 0]).

    Head A: query [x, 1], keys token0 [x, 0], token1 [0, 2]: scores (x², 2, 0), so query 0
    switches from token 1 to token 0 at x = √2; value x (token 0) -> out.
    Head B: ``second="quadratic"``: scores (x², 0, 2 + 2⁻⁴²) (switch at √(2 + 2⁻⁴²),
    8e-14 above √2); ``"linear"``: scores (x, 0, r) with r = float64(√2) (1e-16 above √2);
    ``"same"``: the scores of head A (the same switch at √2). Head B's value is
    ``value_b``·x -> out; y = out of token 0: 0, then x, then 3x. ``"none"``: head B off."""
    m = 6
    E = np.zeros((3, 1, m))
    E[0, 0, 0] = 1.0
    P = np.zeros((3, m))
    P[:, 1] = 1.0
    P[1, 2] = 1.0
    P[2, 3] = 1.0
    P[0, 5] = 1.0
    wq, wk = np.zeros((m, 4)), np.zeros((m, 4))
    wq[0, 0] = wq[1, 1] = wq[0, 2] = wq[1, 3] = 1.0
    wk[0, 0] = 1.0
    wk[2, 1] = 2.0
    if second == "quadratic":
        wk[0, 2] = 1.0
        wk[3, 3] = 2.0 + 2.0**-42
    elif second == "same":
        wk[0, 2] = 1.0
        wk[3, 3] = 2.0
    elif second == "linear":
        wk[5, 2] = 1.0  # key [1, 0] on token 0 only -> score x
        wk[3, 3] = math.sqrt(2.0)
    wv = np.zeros((m, 2))
    wv[0, 0], wv[0, 1] = 1.0, (0.0 if second == "none" else value_b)
    wo = np.zeros((2, m))
    wo[0, 4] = wo[1, 4] = 1.0
    z = lambda n: np.zeros(n)
    attn = AttentionParams(*map(jnp.asarray, (wq, wk, wv, wo, z(4), z(4), z(2), z(m))), 2)
    A = np.zeros((1, m))
    A[0, 4] = 1.0
    return HardmaxTransformer.from_params([(attn, None)], E, P, A, dtype=jnp.float64)


def test_irrational_breakpoint_sqrt2_is_exact():
    f = _two_head_model("none")  # scores x² vs 2 cross at √2
    r = count_linear_regions(f, 1.0, 2.0)
    assert (r.activation, r.linear, r.certified) == (2, 2, True)
    (b,) = r.certificate["exact_breakpoints"]
    sqrt2 = QuadraticRoot.irrational(Fraction(0), Fraction(-2), +1)
    assert not b.is_rational and b == sqrt2
    assert (b.B, b.C, b.branch) == (0, -2, 1)
    assert r.breakpoints[0] == math.sqrt(2.0)
    # y = 0 left of √2, y = x right of it: a jump of √2 at the switch
    assert r.certificate["discontinuities"] == 1
    (s0, c0), (s1, c1) = r.certificate["exact_maps"]
    assert [list(s0), list(c0), list(s1), list(c1)] == [[0], [0], [1], [0]]


@pytest.mark.parametrize("second", ["quadratic", "linear"])
def test_nearly_equal_roots_are_separated_exactly(second):
    f = _two_head_model(second)
    r = count_linear_regions(f, 1.0, 2.0)
    assert (r.activation, r.linear, r.certified) == (3, 3, True)
    b0, b1 = r.certificate["exact_breakpoints"]
    sqrt2 = QuadraticRoot.irrational(Fraction(0), Fraction(-2), +1)
    assert b0 == sqrt2 and b0 < b1
    if second == "quadratic":
        want = QuadraticRoot.irrational(Fraction(0), -(2 + Fraction(2) ** -42), +1)
        assert b1 == want and not b1.is_rational
    else:
        assert b1.is_rational and b1 == Fraction(math.sqrt(2.0))
        # no float64 lies strictly between the two breakpoints: the middle region is
        # invisible to any float evaluation
        below = Fraction(float(np.nextafter(math.sqrt(2.0), 0.0)))
        assert below < b0
    gap = float(b1) - float(b0)
    assert 0 <= gap < 1e-12
    # the three pieces 0, x, 3x in order
    slopes = [int(s[0]) for s, _ in r.certificate["exact_maps"]]
    assert slopes == [0, 1, 3]
    # a dense float sampling sees only two regions here
    assert _dense_counts(f, np.zeros(1), np.ones(1), 1.0, 2.0)[0] == 2


def test_simultaneous_switches_and_equal_maps_are_exact():
    # two heads switch at the same irrational point √2: one breakpoint
    r = count_linear_regions(_two_head_model("same"), 1.0, 2.0)
    assert (r.activation, r.linear) == (2, 2)
    assert r.certificate["exact_breakpoints"][0] == QuadraticRoot.irrational(0, -2, +1)
    # head B switches (8e-14 after √2) but its value is 0: 3 activation regions, 2 maps
    r = count_linear_regions(_two_head_model("quadratic", value_b=0.0), 1.0, 2.0)
    assert (r.activation, r.linear) == (3, 2)
    np.testing.assert_array_equal(r.labels, [0, 1, 1])


def test_isolated_tie_point_is_not_a_region():
    """Scores (0, x²): key 1 wins for x ≠ 0; at x = 0 the tie goes to key 0 (lowest index)
    at that single point only. The double root touches zero: one region."""
    E = np.zeros((2, 1, 4))
    E[0, 0, 0] = E[1, 0, 2] = 1.0  # x in slot 0 on token 0, in slot 2 on token 1
    P = np.zeros((2, 4))
    P[1, 1] = 1.0  # slot 1: [t = 1]
    wq, wk, wv, wo = np.zeros((4, 1)), np.zeros((4, 1)), np.zeros((4, 1)), np.zeros((1, 4))
    wq[0, 0] = wk[2, 0] = wv[1, 0] = wo[0, 3] = 1.0
    z = lambda n: jnp.zeros(n)
    attn = AttentionParams(*map(jnp.asarray, (wq, wk, wv, wo)), z(1), z(1), z(1), z(4), 1)
    A = np.zeros((1, 4))
    A[0, 3] = 1.0
    f = HardmaxTransformer.from_params([(attn, None)], E, P, A, dtype=jnp.float64)
    y, _ = _np_forward(f, np.array([[0.0], [0.5], [-0.5]]))
    np.testing.assert_array_equal(y[:, 0], [0.0, 1.0, 1.0])
    r = count_linear_regions(f, -1.0, 1.0)
    assert (r.activation, r.linear, r.breakpoints.size) == (1, 1, 0)
    # starting exactly at the tie point: the pattern right of 0 is used
    r = count_linear_regions(f, 0.0, 1.0)
    assert (r.activation, r.linear) == (1, 1)
    np.testing.assert_array_equal(r.slopes[:, 0, 0], [0.0])
    np.testing.assert_array_equal(r.intercepts[:, 0], [1.0])


def test_quadratic_root_order_matches_high_precision():
    rng = np.random.default_rng(3)
    getcontext().prec = 80
    roots, ref = [], []
    for _ in range(40):
        B, C = (Fraction(int(v), 16) for v in rng.integers(-40, 40, size=2))
        if B * B - 4 * C <= 0:
            continue
        for br in (-1, 1):
            r = QuadraticRoot.irrational(B, C, br)
            disc = Decimal(B.numerator) ** 2 / Decimal(B.denominator) ** 2 - 4 * Decimal(
                C.numerator
            ) / Decimal(C.denominator)
            roots.append(r)
            ref.append((-Decimal(B.numerator) / B.denominator + br * disc.sqrt()) / 2)
    assert len(roots) > 20
    order = sorted(range(len(roots)), key=lambda i: roots[i])
    assert [ref[i] for i in order] == sorted(ref)
    for r, d in zip(roots, ref):
        assert abs(float(r) - float(d)) <= 1e-15 * max(1.0, abs(float(d)))
        # a rational just above (below) is above (below)
        lo, hi = r.interval()
        assert lo <= Fraction(str(d)) + Fraction(1, 10**60) and r < hi or r.is_rational


# ---------------------------------------------------------------- refusals
def test_two_d_and_higher_are_refused_with_the_reason():
    f2 = HardmaxTransformer.random(jax.random.PRNGKey(0), in_dim=2)
    with pytest.raises(ValueError, match="curved boundaries.*restrict"):
        count_linear_regions(f2, -1.0, 1.0)
    f3 = HardmaxTransformer.random(jax.random.PRNGKey(0), in_dim=3)
    with pytest.raises(ValueError, match="curved boundaries.*ONE direction"):
        count_linear_regions(f3, -1.0, 1.0)
    plane = restrict(f3, np.zeros(3), np.eye(3)[:2])
    with pytest.raises(ValueError, match="quadratic in x"):
        count_linear_regions(plane, 0.0, 1.0)
    # the line through two points is accepted
    line = restrict(f3, np.zeros(3), np.ones(3))
    assert count_linear_regions(line, 0.0, 0.5).certified


def test_softmax_model_is_refused():
    f = HardmaxTransformer.random(jax.random.PRNGKey(0), in_dim=1, attention=4.0)
    assert not f.hardmax and float(f.temperature) == 4.0
    with pytest.raises(ValueError, match="not piecewise linear"):
        count_linear_regions(f, -1.0, 1.0)
    with pytest.raises(ValueError, match="not piecewise linear"):
        count_linear_regions(restrict(f, np.zeros(1), np.ones(1)), 0.0, 1.0)
    with pytest.raises(ValueError, match="not piecewise linear"):
        f.layer_logits(np.array([0.3]))


def test_from_params_validates():
    f = HardmaxTransformer.random(jax.random.PRNGKey(0), in_dim=1)
    a, ffn = f.blocks[0]
    with pytest.raises(ValueError, match="embedding"):
        HardmaxTransformer.from_params(
            [(a, ffn)], np.zeros((2, 1, 3)), f.positional, f.readout_weight
        )
    bad = FFNParams(ffn.weights, ffn.biases, (False, False), "gelu")
    with pytest.raises(ValueError, match="ReLU FFN"):
        HardmaxTransformer.from_params([(a, bad)], f.embedding, f.positional, f.readout_weight)
    with pytest.raises(ValueError, match="readout_token"):
        HardmaxTransformer.from_params(
            [(a, ffn)], f.embedding, f.positional, f.readout_weight, readout_token=9
        )


def test_forward_matches_numpy_reference_and_exact_eval():
    f = HardmaxTransformer.random(jax.random.PRNGKey(2), in_dim=2, n_tokens=4)
    xs = np.random.default_rng(0).normal(size=(64, 2))
    y_ref, pat_ref = _np_forward(f, xs)
    y, logits = jax.vmap(f.output_and_logits)(jnp.asarray(xs))
    pats = np.concatenate([np.asarray(v).argmax(-1) for v in logits], axis=1)
    np.testing.assert_allclose(np.asarray(y), y_ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(pats, pat_ref)
    params = f.exact_params()
    for x, yr, pr in zip(xs[:3], y_ref, pat_ref):
        xq = np.array([Fraction(v) for v in x], dtype=object)
        ye, Le, pe = f.exact_eval(params, xq)  # dyadic x: the scaled-integer path
        np.testing.assert_allclose([float(v) for v in ye], yr, rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(pe, pr)
        # the plain Fraction path gives the same exact values, free and frozen
        for pat in (None, np.roll(pe, 1)):
            y1, L1, p1 = f.exact_eval(params, xq, pat)
            y2, L2, p2 = f._exact_eval_fractions(params[:5], xq, pat)
            assert list(y1) == list(y2) and np.array_equal(p1, p2)
            assert all(np.array_equal(a, b) for a, b in zip(L1, L2))
    # a non-dyadic input uses the Fraction path
    y3, _, _ = f.exact_eval(params, np.array([Fraction(1, 3), Fraction(2, 7)], dtype=object))
    assert isinstance(y3[0], Fraction)


# ---------------------------------------------------------------- consistency
def test_constant_query_transformer_exact_path_matches_known_count():
    """Fast: the zigzag transformer (constant queries) through the exact path has the
    known 3² regions at ≈ i/9, as its maxout network through the same path (a different
    exact_eval); the slow test below compares with the affine certified counter."""
    net = zigzag_maxout(2, 2)
    tf = maxout_to_transformer(net, 0.0, 1.0, dtype=jnp.float64)
    r_tf, r_net = exact_regions_1d(tf, 0.0, 1.0), exact_regions_1d(net, 0.0, 1.0)
    assert (r_tf.activation, r_tf.linear) == (r_net.activation, r_net.linear) == (9, 9)
    np.testing.assert_allclose(r_tf.breakpoints, np.arange(1, 9) / 9, atol=1e-12)
    assert r_tf.certificate["exact_breakpoints"] == r_net.certificate["exact_breakpoints"]


@pytest.mark.slow  # the affine path compiles its kernels for each model structure (seconds)
@pytest.mark.parametrize("case", ["zigzag", "random"])
def test_constant_query_transformer_agrees_with_the_affine_path(case):
    """A MaxoutTransformer (constant queries, affine logits) counted by the new exact path
    agrees with the existing certified affine counter."""
    if case == "zigzag":
        net = zigzag_maxout(2, 2)
        lo, hi = 0.0, 1.0
    else:
        rng = np.random.default_rng(5)
        Ws = [rng.normal(size=(6, 1)), rng.normal(size=(4, 6)), rng.normal(size=(1, 4))]
        bs = [rng.normal(size=6), rng.normal(size=4), rng.normal(size=1)]
        net = MaxoutNetwork.from_relu(Ws, bs)
        lo, hi = -2.0, 2.0
    tf = maxout_to_transformer(net, lo, hi, dtype=jnp.float64)
    old = count_linear_regions(tf, lo, hi, n_seed=64)
    new = exact_regions_1d(tf, lo, hi)
    assert old.certified and new.certified
    assert (new.activation, new.linear) == (old.activation, old.linear)
    assert new.activation > 3
    if case == "zigzag":
        assert new.linear == 3**2
    np.testing.assert_allclose(new.breakpoints, old.breakpoints, atol=1e-9)
    # constant queries: every breakpoint is a root of an affine gap, hence rational
    assert new.certificate["irrational_breakpoints"] == 0


def test_right_limit_pattern_does_not_depend_on_the_guess():
    """The pattern right of an exact breakpoint is decided layer by layer from the exact
    logits: a wrong guess (all zeros) gives the same pattern as the exact pattern at the
    middle of the next region."""
    from transflow.expressivity._exact1d import _ExactModel, _right_pattern

    f = HardmaxTransformer.random(jax.random.PRNGKey(0), in_dim=1, n_tokens=3, ffn_width=4)
    r = count_linear_regions(f, -1.5, 1.5)
    ex = _ExactModel(f)
    bps = r.certificate["exact_breakpoints"]
    edges = [*bps, QuadraticRoot.rational(Fraction(3, 2))]
    checked = 0
    for e, nxt in list(zip(edges[:-1], edges[1:]))[:6]:
        mid = (e.interval()[1] + nxt.interval()[0]) / 2  # inside the next region
        want = ex.eval(mid)[2]
        got = _right_pattern(ex, e, np.zeros_like(want))[0]
        np.testing.assert_array_equal(got, want)
        checked += 1
    assert checked == 6


def test_float_filter_changes_nothing():
    """The rigorous float filters only skip exact work: the same regions, exact
    breakpoints and maps with the filters off (everything exact)."""
    f = HardmaxTransformer.random(jax.random.PRNGKey(3), in_dim=1, n_tokens=3, ffn_width=4)
    a = exact_regions_1d(f, -1.0, 1.0)
    b = exact_regions_1d(f, -1.0, 1.0, float_filter=False)
    assert (a.activation, a.linear) == (b.activation, b.linear) and a.activation > 5
    assert a.certificate["exact_breakpoints"] == b.certificate["exact_breakpoints"]
    for (s1, c1), (s2, c2) in zip(a.certificate["exact_maps"], b.certificate["exact_maps"]):
        assert list(s1) == list(s2) and list(c1) == list(c2)
