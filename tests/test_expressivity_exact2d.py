"""Issue #14, point 1 in 2-D: exact (certified) region counts in integer arithmetic."""

from fractions import Fraction

import jax
import numpy as np
import pytest

from _wrappers import only
from transflow.expressivity import (
    AbstractAffineLogits,
    AbstractExactEval,
    CertificationError,
    MaxoutNetwork,
    count_linear_regions,
    lp_region_count,
    maxout_to_transformer,
    random_maxout,
    restrict,
)
from transflow.expressivity._exact2d import _Aff

jax.config.update("jax_enable_x64", True)

BOX = ([-2.0, -2.0], [2.0, 2.0])


def _relu_net(rng, widths=(5, 4)):
    sizes = (2, *widths, 1)
    Ws = [rng.normal(size=(o, i)) for i, o in zip(sizes[:-1], sizes[1:])]
    bs = [rng.normal(size=o) for o in sizes[1:]]
    return MaxoutNetwork.from_relu(Ws, bs)


def _maps(r):
    return np.concatenate([r.slopes[:, 0, :], r.intercepts], axis=1)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("kind", ["relu", "maxout"])
def test_exact_2d_agrees_with_lp_and_float(kind, seed):
    """Random maxout and ReLU nets in 2-D: the exact count equals the independent LP
    enumerator (activation, linear, maps) and the float polygon count."""
    rng = np.random.default_rng(100 + seed)
    net = _relu_net(rng) if kind == "relu" else random_maxout(rng, 2, (3, 2), (3, 3))
    r = count_linear_regions(net, *BOX)
    assert r.certified and r.certificate["method"].startswith("exact integer arithmetic")
    assert r.certificate["area_sum_equals_box"] and r.certificate["one_polygon_per_pattern"]
    lp = lp_region_count(net, *BOX)
    assert lp["activation"] == r.activation > 5
    assert lp["linear"] == r.linear
    lpm = lp["maps"][:, 0, :]
    for row in _maps(r):
        assert np.min(np.abs(lpm - row).max(axis=1)) < 1e-9
    fl = count_linear_regions(net, *BOX, certify=False)
    assert (fl.activation, fl.linear) == (r.activation, r.linear) and not fl.certified


def _at(Z: _Aff, x):
    s = Fraction(2) ** Z.e
    M = Z.M.reshape(-1, 3)
    vals = [(Fraction(m[0]) + m[1] * x[0] + m[2] * x[1]) * s for m in M]
    return np.array(vals, dtype=object).reshape(Z.M.shape[:-1])


def _models():
    rng = np.random.default_rng(7)
    net = random_maxout(rng, 2, (3, 2), (3, 2), d_out=2)
    net5 = random_maxout(rng, 5, (4, 3), (2, 3))
    tf5 = maxout_to_transformer(net5, -3.0, 3.0, variant="B")
    o, D = rng.normal(size=5), rng.normal(size=(2, 5))
    return {
        "maxout": net,
        "transformer_A": maxout_to_transformer(net, -2.0, 2.0),
        "transformer_B": maxout_to_transformer(net, -2.0, 2.0, variant="B"),
        "plane_of_net": restrict(net5, o, D),
        "plane_of_transformer": restrict(tf5, 0.2 * o, 0.3 * D),
    }


@pytest.mark.parametrize("name", list(_models()))
def test_exact_programs_equal_exact_eval(name):
    """The integer affine program of every model gives, at random points, exactly the
    logits and output of the model's rational reference evaluation (exact_eval)."""
    f = _models()[name]
    params = f.exact_params()
    prog = f.exact_program()
    rng = np.random.default_rng(3)
    for _ in range(3):
        x = np.array([Fraction(float(v)) for v in rng.uniform(-1, 1, 2)], dtype=object)
        y, logits, pat = f.exact_eval(params, x)
        state = prog.start(_Aff(np.array([[0, 1, 0], [0, 0, 1]], dtype=object), 0))
        off = 0
        for layer in range(prog.n_layers):
            Z, cache = prog.logits(state, layer)
            assert (_at(Z, x) == np.asarray(logits[layer], dtype=object)).all()
            G = Z.M.shape[0]
            state = prog.advance(state, cache, layer, pat[off : off + G])
            off += G
        assert off == len(pat)
        assert (_at(prog.output(state), x) == np.asarray(y, dtype=object)).all()


def test_thin_sliver_counted_exactly():
    """Two parallel ReLU lines 2^-40 apart: a sliver of area ~2^-39 that the float
    clipping (area tolerance 1e-12 of the box) and the LP (ball radius 1e-9) drop."""
    eps = 2.0**-40
    W = np.array([[1.0, -1.0], [1.0, -1.0]])
    net = MaxoutNetwork.from_relu([W, np.array([[1.0, 1.0]])], [np.array([0.0, eps]), np.zeros(1)])
    lo, hi = [-1.0, -1.0], [1.0, 1.0]
    r = count_linear_regions(net, lo, hi)
    assert r.certified and (r.activation, r.linear) == (3, 3)
    # the sliver's pattern exists: at x1 - x2 = -eps/2 only the second unit is active
    x = np.array([Fraction(0), Fraction(eps) / 2], dtype=object)
    assert list(net.exact_eval(net.exact_params(), x)[2]) == [0, 1]
    # float clipping loses it (why the exact path exists)
    assert count_linear_regions(net, lo, hi, certify=False).activation == 2
    assert lp_region_count(net, lo, hi)["activation"] == 2


def test_tiny_triangle_and_large_gating_constant():
    """Three ReLU lines x1 = 0, x2 = 0, x1 + x2 = 2^-45 bound a triangle of area 2^-91:
    7 regions (the float count drops the triangle). Its transformer with the gating
    constant B = 2^40 stores fl(−2^-45 − B) = −B, so the transformer's exact function has
    the third line through the origin: 6 regions — exactly those of that net; the float
    count of the transformer is far off."""
    d = 2.0**-45
    Wo = np.array([[1.0, 2.0, 4.0]])
    W = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    lo, hi = [-1.0, -1.0], [1.0, 1.0]
    net = MaxoutNetwork.from_relu([W, Wo], [np.array([0.0, 0.0, -d]), np.zeros(1)])
    r = count_linear_regions(net, lo, hi)
    assert r.certified and (r.activation, r.linear) == (7, 7)
    assert count_linear_regions(net, lo, hi, certify=False).activation == 6
    tf = maxout_to_transformer(net, -1.0, 1.0, bounds=(2.0**40,))
    rt = count_linear_regions(tf, lo, hi)
    rounded = MaxoutNetwork.from_relu([W, Wo], [np.zeros(3), np.zeros(1)])
    assert rt.certified and rt.linear == count_linear_regions(rounded, lo, hi).linear == 6
    assert count_linear_regions(tf, lo, hi, certify=False).linear != 6


def test_plane_slice_of_torch_net_certified():
    """Issue #14: slice_study's plane through three random points of R^5 of a random
    torch ReLU net gives a certified count, by exact integer arithmetic, equal to the
    float polygon count of the same plane."""
    from transflow.expressivity import slice_study
    from transflow.expressivity._studies import _torch_relu_net

    st = slice_study(2, width=8, depth=2, n_dense=2001)
    r = st["plane_count"]
    assert st["plane"]["certified"] and r.certified
    assert st["plane"]["method"].startswith("exact integer arithmetic")
    assert r.certificate["program"] == "Restricted"
    net = MaxoutNetwork.from_torch(_torch_relu_net(2, 5, 8, 2))
    p0, p1, p2 = (np.asarray(p) for p in st["points"])
    plane = restrict(net, p0, np.stack([p1 - p0, p2 - p0]))
    fl = count_linear_regions(plane, [0.0, 0.0], [1.0, 1.0], certify=False)
    assert (fl.activation, fl.linear) == (r.activation, r.linear) > (5, 5)


def test_generic_model_and_strict_semantics():
    """A model with only exact_eval is counted exactly by the generic program; one without
    it raises (strict) or returns the float count with certified=False."""
    net = _relu_net(np.random.default_rng(9), (4, 3))
    r = count_linear_regions(net, *BOX)
    # a user's model: the network behind the generic interface and exact evaluation
    g = count_linear_regions(only(net, AbstractAffineLogits, AbstractExactEval), *BOX)
    assert g.certified and g.certificate["program"] == "Generic"
    assert (g.activation, g.linear) == (r.activation, r.linear)
    bare = only(net, AbstractAffineLogits)  # the same without exact evaluation
    with pytest.raises(
        CertificationError, match="Only does not inherit AbstractExactEval.*strict=False"
    ):
        count_linear_regions(bare, *BOX)
    u = count_linear_regions(bare, *BOX, strict=False)
    assert not u.certified and "failure" in u.certificate
    assert u.activation == r.activation


def test_duplicate_pieces_and_concurrent_lines():
    """Identical competitors (the lower index wins) and three lines through one point are
    decided exactly; the LP enumerator agrees."""
    W = np.array([[[1.0, 0.0], [1.0, 0.0], [-1.0, 0.0]], [[0.0, 1.0], [0.0, -1.0], [1.0, 1.0]]])
    net = MaxoutNetwork([W], [np.zeros((2, 3))], np.array([[1.0, 3.0]]))
    r = count_linear_regions(net, [-1.0, -1.0], [1.0, 1.0])
    lp = lp_region_count(net, [-1.0, -1.0], [1.0, 1.0])
    assert r.certified and (r.activation, r.linear) == (lp["activation"], lp["linear"])
    # max(x2, −x2, x1 + x2): three sectors bounded by rays of x1 = 0, x2 = 0, x1 = −2 x2
    # (all through the origin); |x1| (pieces 0 and 1 identical) splits only the sector
    # x1 ≤ −2 x2, x2 ≤ 0, which holds both signs of x1: 4 regions
    assert r.activation == 4 and r.linear == 4


@pytest.mark.parametrize(
    ("T", "D", "variant"),
    [(4, 3, "A"), (3, 6, "B"), pytest.param(3, 4, "A", marks=pytest.mark.slow)],
)
def test_zigzag_transformer_2d_exact_equals_formula(T, D, variant):
    """C6/C7 in 2-D, certified: (2k−1)^{2L} regions on [0,1]² (2401, 81; 15625 with -m
    slow)."""
    from transflow.expressivity import zigzag_maxout

    k, L = (T, D - 1) if variant == "A" else (T - 1, D // 3)
    tf = maxout_to_transformer(zigzag_maxout(k, L, 2), 0.0, 1.0, variant=variant)
    r = count_linear_regions(tf, [0.0, 0.0], [1.0, 1.0])
    assert r.certified and r.certificate["program"] == "Transformer"
    assert r.linear == r.activation == (2 * k - 1) ** (2 * L)
