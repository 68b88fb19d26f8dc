"""Property fuzz (issue #24): every production region counter against the independent exact
reference counter of ``tests/_exact_regions.py`` on random small maxout networks with
dyadic weights (exact as float64, so the stored model *is* the rational network).

The strategies build in the edge cases: a kink exactly at an end of the domain, coincident
kinks (a duplicated or scaled unit), dead units (all pieces equal), ties (a duplicated
piece), a zero read-out. A count with ``certified=False`` is allowed; a certified count
must equal the reference (activation and linear regions, and in 1-D the breakpoints).

Fast tier: 62 networks in all (about 20 s, most of it one JAX compilation). Slow tier
(``-m slow``): 500 in 1-D, 100 in 2-D.
"""

from __future__ import annotations

from fractions import Fraction as Fr

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from _exact_regions import ExactNet, reference_1d, reference_2d
from transflow.expressivity import (
    MaxoutNetwork,
    count_linear_regions,
    exact_regions_1d,
    maxout_to_transformer,
    restrict,
)
from transflow.expressivity._certify import count_1d_certified
from transflow.expressivity._regions import _Evaluator

# dyadic values in [-2, 2]: exact in float64, small denominators (crossings of pieces land
# on dyadic and non-dyadic rationals alike)
_DY = [Fr(k, 4) for k in range(-8, 9)]
_ENDS = [Fr(-1), Fr(-1, 2), Fr(0), Fr(1, 4)]
_WIDTHS = [Fr(1, 2), Fr(1), Fr(2)]
# fixed shapes (widths, ranks): one compilation per shape for the jitted paths
_SHAPES_1D = [((2,), (2,)), ((3, 2), (2, 2)), ((2, 2), (3, 2)), ((2, 2, 1), (2, 3, 2))]
_SHAPES_2D = [((2,), (2,)), ((2, 2), (2, 2)), ((2, 1), (3, 2))]


@st.composite
def networks(draw, d: int):
    """(ExactNet, lo, hi, tags): a random network with edge cases by construction."""
    widths, ranks = draw(st.sampled_from(_SHAPES_1D if d == 1 else _SHAPES_2D))
    w = lambda: draw(st.sampled_from(_DY))
    Ws, bs, prev = [], [], d
    for n, k in zip(widths, ranks):
        Ws.append([[[w() for _ in range(prev)] for _ in range(k)] for _ in range(n)])
        bs.append([[w() for _ in range(k)] for _ in range(n)])
        prev = n
    A = [[w() for _ in range(prev)]]
    c = [w()]
    lo = draw(st.sampled_from(_ENDS))
    hi = lo + draw(st.sampled_from(_WIDTHS))
    tags = []
    # a kink of a first-layer unit exactly at an end of the domain (1-D), or on a box edge
    if draw(st.booleans()):
        tags.append("kink_at_end")
        end = draw(st.sampled_from([lo, hi]))
        u = Ws[0][0]
        if u[0][0] == u[1][0]:
            u[1][0] = u[0][0] + 1
        bs[0][0][1] = (
            bs[0][0][0]
            + (u[0][0] - u[1][0]) * end
            + sum((u[0][i] - u[1][i]) * end for i in range(1, d))
        )
        # and the rest of the unit below the two tied pieces there
        for j in range(2, len(u)):
            bs[0][0][j] = bs[0][0][0] - 8 - sum(abs(x) * 4 for x in u[j])
    layer = draw(st.integers(0, len(Ws) - 1))
    if len(Ws[layer]) >= 2 and draw(st.booleans()):  # coincident kinks
        tags.append("coincident")
        s = draw(st.sampled_from([Fr(1), Fr(2), Fr(1, 2)]))
        Ws[layer][1] = [[s * x for x in p] for p in Ws[layer][0]]
        bs[layer][1] = [s * x for x in bs[layer][0]]
    if draw(st.booleans()):  # a dead unit: every piece the same constant
        tags.append("dead")
        layer = draw(st.integers(0, len(Ws) - 1))
        i = draw(st.integers(0, len(Ws[layer]) - 1))
        cst = w()
        Ws[layer][i] = [[Fr(0)] * len(p) for p in Ws[layer][i]]
        bs[layer][i] = [cst] * len(bs[layer][i])
    if draw(st.booleans()):  # a tie: a duplicated piece
        tags.append("tie")
        layer = draw(st.integers(0, len(Ws) - 1))
        i = draw(st.integers(0, len(Ws[layer]) - 1))
        Ws[layer][i][1] = list(Ws[layer][i][0])
        bs[layer][i][1] = bs[layer][i][0]
    if draw(st.integers(0, 9)) == 0:
        tags.append("zero_readout")
        A = [[Fr(0)] * prev]
    return ExactNet(Ws, bs, A, c), lo, hi, tags


def _model(net: ExactNet) -> MaxoutNetwork:
    Ws, bs, A, c = net.float_arrays()
    return MaxoutNetwork(Ws, bs, A, c)


def _check_1d(r, ref, span, name):
    """A certified result must be exact; returns whether it was certified."""
    act, lin, bps, cert = r
    if not cert:
        return False
    assert (act, lin) == (ref["activation"], ref["linear"]), name
    want = np.array([float(x) for x in ref["breakpoints"]])
    np.testing.assert_allclose(np.sort(bps), want, atol=1e-12 * float(span), err_msg=name)
    return True


def _paths_1d(f: MaxoutNetwork, lo: float, hi: float, n_seed: int, transformer: bool, walk):
    """(name, (activation, linear, breakpoints, certified)) of every 1-D production path."""
    r = count_linear_regions(f, lo, hi)
    yield "layerwise", (r.activation, r.linear, r.breakpoints, r.certified)
    if walk:
        ev = _Evaluator(f, np.float64)
        w = count_1d_certified(
            f, lo, hi, n_seed=n_seed, dtype=np.float64, coeffs=ev.coeffs, strict=False
        )
        counts = (w["breakpoints"].size + 1, 1 + int(w["differ"].sum()))
        yield f"point walk (n_seed={n_seed})", (*counts, w["breakpoints"], w["certified"])
    e = exact_regions_1d(f, lo, hi)
    yield "exact_regions_1d", (e.activation, e.linear, e.breakpoints, e.certified)
    if transformer:
        tf = maxout_to_transformer(f, lo, hi)
        t = count_linear_regions(tf, lo, hi)
        # the transformer has more decisions (ties of its own); compare the linear regions
        yield "transformer A", (None, t.linear, None, t.certified)


def _run_1d(case, n_seed, transformer, walk_shapes=None):
    """Every path on one case; the point walk (one JAX compilation per network shape, ~3 s)
    only for the shapes in ``walk_shapes`` (None: all)."""
    net, lo, hi, tags = case
    ref = reference_1d(net, lo, hi)
    f = _model(net)
    walk = walk_shapes is None or (f.widths, f.ranks) in walk_shapes
    for name, r in _paths_1d(f, float(lo), float(hi), n_seed, transformer, walk):
        label = f"{name} on {tags} [{lo}, {hi}]: {r[:2]} vs {ref}"
        if r[0] is None:
            if r[3]:
                assert r[1] == ref["linear"], label
            continue
        _check_1d(r, ref, hi - lo, label)


def _run_2d(case, transformer):
    net, lo, hi, tags = case
    ref = reference_2d(net, lo, hi)
    f = _model(net)
    models = [("exact 2-D", f)]
    if transformer:
        models.append(("transformer A 2-D", maxout_to_transformer(f, float(lo), float(hi))))
    for name, g in models:
        r = count_linear_regions(g, float(lo), float(hi), strict=False)
        if r.certified:
            label = f"{name} on {tags} [{lo}, {hi}]²: {r.activation, r.linear} vs {ref}"
            if name == "exact 2-D":
                assert r.activation == ref["activation"], label
            assert r.linear == ref["linear"], label
    # a line of the plane through two corners of the box: the layerwise 1-D counter of a
    # slice against the reference of the restricted network (composed exactly)
    D = np.array([[1.0, 0.5]])
    g = restrict(f, np.zeros(2), D)
    W0 = [[[p[0] * 1 + p[1] * Fr(1, 2)] for p in u] for u in net.Ws[0]]
    line = ExactNet([W0, *net.Ws[1:]], net.bs, net.A, net.c)
    ref1 = reference_1d(line, lo, hi)
    r = count_linear_regions(g, float(lo), float(hi), strict=False)
    _check_1d((r.activation, r.linear, r.breakpoints, r.certified), ref1, hi - lo, "slice")


_FAST = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@_FAST
@given(case=networks(1), n_seed=st.sampled_from([1, 2, 3, 4, 8]))
def test_fuzz_1d_fast(case, n_seed):
    _run_1d(case, n_seed, transformer=False, walk_shapes=[_SHAPES_1D[1]])


@settings(_FAST, max_examples=10)
@given(case=networks(1))
def test_fuzz_1d_transformer_fast(case):
    _run_1d(case, 2, transformer=True, walk_shapes=[_SHAPES_1D[1]])


@settings(_FAST, max_examples=12)
@given(case=networks(2))
def test_fuzz_2d_fast(case):
    _run_2d(case, transformer=False)


@pytest.mark.slow
@settings(_FAST, max_examples=500)
@given(case=networks(1), n_seed=st.sampled_from([1, 2, 3, 4, 8, 64]))
def test_fuzz_1d_slow(case, n_seed):
    _run_1d(case, n_seed, transformer=True)


@pytest.mark.slow
@settings(_FAST, max_examples=100)
@given(case=networks(2))
def test_fuzz_2d_slow(case):
    _run_2d(case, transformer=True)
