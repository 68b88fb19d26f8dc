"""Region certificates: the last edges (issue #38).

- float32 mode (x64 off): the certificate covers the box as given (float64), not the box
  rounded to float32;
- ``time_budget`` is a budget: at most 2× plus one step that cannot be interrupted, also
  when the float64 count (the fallback) or the exact walks would run on;
- a wide 1-D net whose kinks coincide is counted by exact affine propagation, not by the
  exact rational walk over the whole interval;
- bad boxes, weights and budgets raise naming the argument.

Counts are checked against an independent exact count in :class:`fractions.Fraction`
(the kinks of a one-hidden-layer rank-2 network are rational roots of its pieces).
"""

import math
import time
from fractions import Fraction

import numpy as np
import pytest

from _wrappers import only
from transflow.expressivity import (
    AbstractAffineLogits,
    AbstractBoundedEval,
    AbstractExactEval,
    AbstractExactProgram,
    AbstractIntervalForward,
    MaxoutNetwork,
    count_linear_regions,
    exact_regions_1d,
    maxout_to_transformer,
    restrict,
    zigzag_maxout,
)
from transflow.expressivity._exact2d import exact_segments_1d
from transflow.expressivity._exact_walk import _Exact


@pytest.fixture
def slack():
    """The slack of a budget: one step that cannot be interrupted (one numpy pass over a
    layer, one exact evaluation; JIT compilations are warmed up before timing), relative
    to this machine's speed now (measured again for every test: the load of a shared
    machine changes within a module): 25× a reference count (the median of three counts of
    zigzag_maxout(2, 8), 6561 regions, ~0.06 s on one idle core), at least 1.5 s."""
    count_linear_regions(zigzag_maxout(2, 2), 0.0, 1.0)
    ts = []
    for _ in range(3):
        t = time.perf_counter()
        count_linear_regions(zigzag_maxout(2, 8), 0.0, 1.0)
        ts.append(time.perf_counter() - t)
    return max(1.5, 25 * sorted(ts)[1])


@pytest.fixture(params=["layerwise", "point walk"])
def path(request):
    """Count with the layerwise counter (default) or the point walk of models without
    ``interval_forward`` (see :func:`_model`)."""
    return request.param


def _model(net, path):
    """The network, or (``path == "point walk"``) the same network without
    AbstractIntervalForward: the counters then take the point walk."""
    if path == "point walk":
        return only(net, AbstractAffineLogits, AbstractBoundedEval, AbstractExactProgram)
    return net


def exact_count(net, lo, hi):
    """(linear, activation) of a one-hidden-layer rank-2 network on [lo, hi], exactly:
    unit i switches where its two pieces meet, the output's slope jumps there by
    ``A[:, i] |w1 − w0|`` (summed over the units switching at the same point)."""
    W = np.asarray(net.weights[0], np.float64)
    B = np.asarray(net.biases[0], np.float64)
    A = np.asarray(net.readout_weight, np.float64)
    assert W.shape[1:] == (2, 1) and len(net.weights) == 1
    q = lambda v: Fraction(float(v))
    lo, hi = q(lo), q(hi)
    jumps: dict = {}
    for i in range(W.shape[0]):
        w0, w1 = q(W[i, 0, 0]), q(W[i, 1, 0])
        b0, b1 = q(B[i, 0]), q(B[i, 1])
        if w0 == w1:  # parallel (or identical) pieces never switch
            continue
        t = (b0 - b1) / (w1 - w0)
        if lo < t < hi:
            old = jumps.get(t, [Fraction(0)] * A.shape[0])
            jumps[t] = [j + q(a) * abs(w1 - w0) for j, a in zip(old, A[:, i])]
    return 1 + sum(any(v != 0 for v in j) for j in jumps.values()), 1 + len(jumps)


def _timed(*args, **kw):
    t = time.perf_counter()
    r = count_linear_regions(*args, **kw)
    return r, time.perf_counter() - t


# ---------------------------------------------------------------- float32 mode
def test_float32_certificate_covers_the_float64_box(x64_off, path):
    """The reproducer of issue #38: the kink of the stored (float32) model lies just right
    of hi = 0.15714285896748914, but left of hi rounded to float32; the count on [0, hi]
    was 2, certified. The exact count on the box as given is 1."""
    net = MaxoutNetwork.from_relu(
        [np.array([[0.7]]), np.ones((1, 1))], [np.array([-0.11]), np.zeros(1)]
    )
    assert net.weights[0].dtype == np.float32
    hi = 0.15714285896748914
    kink = Fraction(float(np.float32(0.11))) / Fraction(float(np.float32(0.7)))
    assert Fraction(hi) < kink < Fraction(float(np.float32(hi)))  # the trap
    assert exact_count(net, 0.0, hi) == (1, 1)
    r = count_linear_regions(_model(net, path), 0.0, hi)
    assert (r.linear, r.activation) == (1, 1) or not r.certified
    assert r.certified  # and it is certified (the slivers are counted exactly)
    # one float64 number right of the kink: 2 regions
    hi2 = math.nextafter(float(kink), math.inf)
    assert exact_count(net, 0.0, hi2) == (2, 2)
    r2 = count_linear_regions(_model(net, path), 0.0, hi2)
    assert (r2.linear, r2.activation, r2.certified) == (2, 2, True)


def test_float32_counts_match_exact_counts_near_kinks(x64_off, path):
    """Random float32 ReLU nets, boxes whose ends are float64 numbers a few ulps either
    side of kinks (never float32 numbers): certified counts equal the exact counts."""
    rng = np.random.default_rng(38)
    checked = 0
    n_nets = 6 if path == "layerwise" else 3  # the point walk: fewer (a second compile)
    for _ in range(n_nets):
        w1, b1 = rng.normal(size=(4, 1)), rng.normal(size=4)
        net = MaxoutNetwork.from_relu([w1, rng.normal(size=(1, 4))], [b1, np.zeros(1)])
        W = np.asarray(net.weights[0], np.float64)[:, 1, 0]
        B = np.asarray(net.biases[0], np.float64)[:, 1]
        kinks = sorted(float(-Fraction(float(b)) / Fraction(float(w))) for w, b in zip(W, B))
        for k in range(len(kinks) - 1):
            for da, db in ((-2, 2), (3, -3), (1, 1)):
                lo = kinks[k] + da * math.ulp(kinks[k])
                hi = kinks[k + 1] + db * math.ulp(kinks[k + 1])
                if not lo < hi:
                    continue
                r = count_linear_regions(_model(net, path), lo, hi, n_seed=16)
                assert r.certified
                assert (r.linear, r.activation) == exact_count(net, lo, hi), (lo, hi)
                checked += 1
    assert checked >= 5 * n_nets


# ---------------------------------------------------------------- time budget
def _check_budgeted(r, budget, elapsed, truth, slack):
    assert elapsed <= 2 * budget + slack, (elapsed, budget, slack, r.certificate)
    if r.certified:
        assert (r.linear, r.activation) == truth
        return
    cert = r.certificate
    assert cert["failure"].startswith(f"time budget of {budget:g} s exceeded")
    assert cert["counts"] in ("uncertified float64", "lower bounds")
    if cert["counts"] == "lower bounds":  # of the float64 count: no maps
        assert r.linear == 1 and r.activation >= 1 and r.slopes.shape[0] == 0


def test_time_budget_2d_exact_and_float_fallback(slack):
    """zigzag_maxout(3, 3, dim=2) (15625 regions): the exact 2-D partition takes seconds
    and its float64 fallback took 79 s with time_budget=1e-6 (no limit)."""
    f = zigzag_maxout(3, 3, dim=2)
    count_linear_regions(zigzag_maxout(3, 1, dim=2), 0.0, 1.0, certify=False)  # compile
    r, el = _timed(f, 0.0, 1.0, time_budget=1e-6)
    assert not r.certified and r.certificate["counts"] == "lower bounds"
    _check_budgeted(r, 1e-6, el, (15625, 15625), slack)
    r, el = _timed(f, 0.0, 1.0, time_budget=0.4)
    _check_budgeted(r, 0.4, el, (15625, 15625), slack)


def test_time_budget_1d_layerwise_and_float_fallback(slack):
    """A width-2000 ReLU net: the layerwise count and then the float64 bisection (which
    took 13–25 s after the budget had run out)."""
    rng = np.random.default_rng(0)
    W = 2000
    net = MaxoutNetwork.from_relu(
        [rng.normal(size=(W, 1)), rng.normal(size=(1, W))], [rng.normal(size=W), np.zeros(1)]
    )
    truth = exact_count(net, -3.0, 3.0)
    count_linear_regions(net, -3.0, -2.99, certify=False)  # compile the float kernels
    for budget in (1e-6, 0.3):
        r, el = _timed(net, -3.0, 3.0, time_budget=budget)
        _check_budgeted(r, budget, el, truth, slack)
    # an uncertified count is bounded too
    r, el = _timed(net, -3.0, 3.0, certify=False, time_budget=1e-6)
    assert not r.certified and r.certificate["counts"] == "lower bounds"
    assert el <= 2e-6 + slack


def test_time_budget_bounds_the_exact_rational_walk(slack):
    """Without the exact affine propagation (the net without AbstractExactProgram), the
    coincident kinks of a grid-weight net go to the exact rational walk (72 s at width 500,
    ~3 s at width 150 on an idle core): the budget stops it."""
    net = _grid_net(150)
    f = only(
        net, AbstractAffineLogits, AbstractBoundedEval, AbstractIntervalForward, AbstractExactEval
    )
    truth = exact_count(net, -2.0, 2.0)
    count_linear_regions(f, 5.0, 6.0, certify=False)  # compile the bisection's kernels
    r, el = _timed(f, -2.0, 2.0, time_budget=0.3)
    _check_budgeted(r, 0.3, el, truth, slack)
    if not r.certified:
        assert "(in the exact rational walk)" in r.certificate["failure"]


# ---------------------------------------------------------------- coincident kinks
def _grid_net(width, seed=0):
    """One hidden ReLU layer with weights and biases on a 0.1 grid: many kinks coincide."""
    rng = np.random.default_rng(seed)
    w1 = np.round(rng.uniform(-1, 1, size=(width, 1)) * 10) / 10
    b1 = np.round(rng.uniform(-1, 1, size=width) * 10) / 10
    w2 = np.round(rng.uniform(-1, 1, size=(1, width)) * 10) / 10
    return MaxoutNetwork.from_relu([w1, w2], [b1, np.zeros(1)])


def test_coincident_kinks_width_500_exact_and_fast():
    """Width 500, weights on a 0.1 grid: the float64 enclosures of coinciding kinks
    overlap, so the whole interval is one hole; it took 72 s in the exact rational walk.
    Exact affine propagation counts it within a 2 s budget, certified and exact."""
    net = _grid_net(500)
    truth = exact_count(net, -2.0, 2.0)
    assert truth[1] < 200  # many of the 500 kinks coincide
    r, el = _timed(net, -2.0, 2.0, time_budget=2.0)
    assert r.certified, r.certificate
    assert (r.linear, r.activation) == truth
    assert r.certificate["hole_groups_exact_layers"] >= 1
    assert r.certificate["exact_evaluations"] == 0  # no rational walk


def test_exact_segments_agree_with_the_exact_walk():
    """Two exact methods, independent code: exact affine propagation layer by layer and
    the exact rational walk, on deep grid-weight maxout nets (coinciding switches in
    every layer) and a slice of a 2-D net: the same switches and map changes."""
    rng = np.random.default_rng(5)
    for _ in range(3):
        ws = [np.round(rng.uniform(-1, 1, size=(6, 3, 1)) * 10) / 10]
        ws.append(np.round(rng.uniform(-1, 1, size=(5, 3, 6)) * 10) / 10)
        bs = [np.round(rng.uniform(-1, 1, size=w.shape[:2]) * 10) / 10 for w in ws]
        net = MaxoutNetwork(ws, bs, np.round(rng.uniform(-1, 1, size=(1, 5)) * 10) / 10)
        A, B = Fraction(-3), Fraction(5, 2)
        sw, maps = exact_segments_1d(net, A, B)
        assert sw == _Exact(net).walk(A, B)
        assert len(maps) == len(sw) + 1 and len(sw) > 3
    line = restrict(zigzag_maxout(2, 2, dim=2), np.array([0.0, 0.1]), np.array([[1.0, 0.5]]))
    sw, _ = exact_segments_1d(line, Fraction(0), Fraction(1))
    assert sw == _Exact(line).walk(Fraction(0), Fraction(1)) and len(sw) > 3
    # the transformer program (Variant B: its clearing ReLUs tie exactly)
    tf = maxout_to_transformer(zigzag_maxout(2, 2), 0.0, 1.0, variant="B")
    sw, maps = exact_segments_1d(tf, Fraction(0), Fraction(1))
    assert sw == _Exact(tf).walk(Fraction(0), Fraction(1)) and len(sw) == 8


# ---------------------------------------------------------------- bad input
RELU = ([np.array([[0.7]]), np.ones((1, 1))], [np.array([-0.11]), np.zeros(1)])


@pytest.mark.parametrize(
    "lo, hi, kw, exc, match",
    [
        (-np.inf, 1.0, {}, ValueError, "`lo` must be finite"),
        (0.0, np.inf, {}, ValueError, "`hi` must be finite"),
        (np.nan, 1.0, {}, ValueError, "`lo` must be finite"),
        (None, 1.0, {}, ValueError, "`lo` must be a finite number.*got None"),
        (0.0, None, {}, ValueError, "`hi` must be a finite number.*got None"),
        (np.zeros(3), 1.0, {}, ValueError, r"`lo` must be .*shape \(1,\).*got shape \(3,\)"),
        (np.zeros((1, 1)), 1.0, {}, ValueError, r"`lo` .*got shape \(1, 1\)"),
        ("a", 1.0, {}, TypeError, "`lo` must be a finite number"),
        (1.0, 0.0, {}, ValueError, "need `lo` < `hi`"),
        (0.0, 1.0, {"time_budget": True}, ValueError, "`time_budget`.*bool"),
        (0.0, 1.0, {"time_budget": 0}, ValueError, "`time_budget`"),
        (0.0, 1.0, {"time_budget": -1.0}, ValueError, "`time_budget`"),
        (0.0, 1.0, {"time_budget": math.nan}, ValueError, "`time_budget`"),
        (0.0, 1.0, {"time_budget": math.inf}, ValueError, "`time_budget`"),
        (0.0, 1.0, {"time_budget": "1"}, TypeError, "`time_budget`"),
    ],
)
def test_bad_box_and_budget_raise_naming_the_argument(lo, hi, kw, exc, match):
    net = MaxoutNetwork.from_relu(*RELU)
    with pytest.raises(exc, match=match):
        count_linear_regions(net, lo, hi, **kw)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("where", ["weight", "readout"])
def test_non_finite_weights_raise_naming_f(bad, where):
    import equinox as eqx

    ws, bs = [w.copy() for w in RELU[0]], [b.copy() for b in RELU[1]]
    (ws[0] if where == "weight" else ws[1])[0, 0] = bad
    with pytest.raises(ValueError, match=r"`weights\[[01]\]` contains NaN or Inf"):
        MaxoutNetwork.from_relu(ws, bs)  # the constructor refuses them (issue 49)
    # a model whose parameters were changed after construction: the counter refuses it
    net = MaxoutNetwork.from_relu(*RELU)
    if where == "weight":
        net = eqx.tree_at(lambda m: m.weights[0], net, net.weights[0].at[0, 1, 0].set(bad))
    else:
        net = eqx.tree_at(lambda m: m.readout_weight, net, net.readout_weight.at[0, 0].set(bad))
    kind = "NaN" if np.isnan(bad) else "infinite"
    with pytest.raises(ValueError, match=f"`f` has {kind} parameters"):
        count_linear_regions(net, 0.0, 1.0)


def test_2d_box_and_exact_1d_refuse_bad_bounds():
    f2 = zigzag_maxout(2, 1, dim=2)
    with pytest.raises(ValueError, match=r"`hi` must be .*shape \(2,\).*got shape \(3,\)"):
        count_linear_regions(f2, 0.0, np.ones(3))
    with pytest.raises(ValueError, match="`lo` must be finite"):
        count_linear_regions(f2, np.array([0.0, -np.inf]), 1.0)
    assert count_linear_regions(f2, np.zeros(2), np.ones(2)).linear == 9
    with pytest.raises(ValueError, match="`hi` must be finite"):
        exact_regions_1d(zigzag_maxout(2, 1), 0.0, np.inf)
