"""Certified region counting (issue #14): certificates, the exact rational fallback,
slices of any input dimension, users' torch networks, the LP cross-check, bad input, and
a wrong count failing ``experiment=expressivity``."""

import json

import jax
import numpy as np
import pytest

from _wrappers import only
from transflow.expressivity import (
    AbstractAffineLogits,
    AbstractBoundedEval,
    AbstractIntervalForward,
    CertificationError,
    MaxoutNetwork,
    count_linear_regions,
    lp_region_count,
    maxout_to_transformer,
    restrict,
    zigzag_maxout,
)
from transflow.expressivity._exact_walk import _Exact


# ---------------------------------------------------------------- certificate
def test_simultaneous_switches_use_the_exact_fallback():
    """Two ReLUs switching at the same point: float64 cannot single out one binding
    decision, the exact rational walk certifies the single switch."""
    Ws = [np.array([[1.0], [3.0]]), np.array([[1.0, 2.0]])]
    bs = [np.array([0.0, 0.0]), np.zeros(1)]
    r = count_linear_regions(MaxoutNetwork.from_relu(Ws, bs), -1.0, 1.0, n_seed=4)
    assert (r.activation, r.linear, r.certified) == (2, 2, True)
    assert r.certificate["junctions_exact"] >= 1
    np.testing.assert_allclose(r.breakpoints, [0.0], atol=1e-15)


def test_equal_maps_are_decided_exactly():
    """A unit with zero out-weight switches the pattern, not the map: 3 activation regions,
    2 linear regions; equality of the maps needs exact arithmetic."""
    Ws = [np.array([[1.0], [1.0]]), np.array([[1.0, 0.0]])]
    bs = [np.array([0.0, -0.5]), np.zeros(1)]
    r = count_linear_regions(MaxoutNetwork.from_relu(Ws, bs), -1.0, 1.0, n_seed=8)
    assert (r.activation, r.linear, r.certified) == (3, 2, True)


def test_exact_walk_finds_regions_thinner_than_round_off():
    """The exact rational walk resolves two switches 1e-30 apart (far below float64)."""
    from fractions import Fraction

    Ws = [np.array([[1.0], [1.0]]), np.array([[1.0, 1.0]])]
    bs = [np.array([0.0, -(2.0**-100)]), np.zeros(1)]
    ex = _Exact(MaxoutNetwork.from_relu(Ws, bs))
    switches = ex.walk(Fraction(-1), Fraction(1))
    assert [s[0] for s in switches] == [Fraction(0), Fraction(1, 2**100)]
    assert all(s[1] for s in switches)  # the slope changes at both


def test_strict_raises_when_certification_is_impossible():
    """No exact evaluation available and a junction float64 cannot prove: raise (strict) or
    return certified=False — never a silent count. (The network behind its float
    capabilities only: no AbstractExactEval, so neither the layerwise counter nor any
    exact path applies.)"""
    net = MaxoutNetwork.from_relu(
        [np.array([[1.0], [3.0]]), np.array([[1.0, 2.0]])], [np.zeros(2), np.zeros(1)]
    )
    f = only(net, AbstractAffineLogits, AbstractBoundedEval, AbstractIntervalForward)
    with pytest.raises(CertificationError, match="no exact evaluation"):
        count_linear_regions(f, -1.0, 1.0, n_seed=4)
    r = count_linear_regions(f, -1.0, 1.0, n_seed=4, strict=False)
    assert r.certified is False and "no exact evaluation" in r.certificate["failure"]
    assert "AbstractExactEval" in r.certificate["failure"]


def test_bounded_evaluation_covers_the_error():
    """The running round-off bound of the transformer covers |transformer − maxout net|,
    and the exact rational evaluation agrees with float64 to that bound (C10)."""
    from fractions import Fraction

    import equinox as eqx

    net = zigzag_maxout(3, 3)
    tf = maxout_to_transformer(net, 0.0, 1.0)
    x = np.linspace(0.0, 1.0, 257)[:, None]
    y, ey = eqx.filter_jit(lambda f, x: jax.vmap(lambda v: f.eval_bounded(v)[:2])(x))(tf, x)
    y, ey = np.asarray(y)[:, 0], np.asarray(ey)[:, 0]
    ref = np.asarray(jax.vmap(net)(x))[:, 0]
    assert np.all(np.abs(y - ref) <= ey + 1e-15)
    params = tf.exact_params()
    for i in (0, 100, 256):
        exact = tf.exact_eval(params, np.array([Fraction(float(x[i, 0]))], dtype=object))[0]
        assert abs(float(exact[0]) - y[i]) <= ey[i]


# ---------------------------------------------------------------- slices, torch
def test_line_through_two_points_equals_dense_sampling():
    """A random torch ReLU net on R^5: the certified count on the segment through two
    random points equals the distinct consecutive torch patterns on 2·10^5 points; the
    plane through three points is verified."""
    from transflow.expressivity import slice_study

    st = slice_study(3, width=8, depth=2, n_dense=200_001)
    line = st["line"]
    assert line["certified"] and line["activation"] == line["dense_activation"] > 3
    assert line["min_region_width"] > 2 / 200_000  # the grid can resolve every region
    assert st["plane"]["certified"] and st["plane"]["linear"] > line["linear"]


def test_from_torch_matches_torch_and_leaky_relu():
    import torch

    torch.manual_seed(1)
    m = torch.nn.Sequential(
        torch.nn.Linear(3, 5),
        torch.nn.LeakyReLU(0.1),
        torch.nn.Identity(),
        torch.nn.Linear(5, 4),
        torch.nn.ReLU(),
        torch.nn.Linear(4, 2),
    ).double()
    net = MaxoutNetwork.from_torch(m)
    x = torch.randn(50, 3, dtype=torch.float64)
    np.testing.assert_allclose(
        np.asarray(jax.vmap(net)(x.numpy())), m(x).detach().numpy(), rtol=1e-12, atol=1e-12
    )
    assert net.ranks == (2, 2) and net.widths == (5, 4)


@pytest.mark.parametrize(
    ("module", "match"),
    [
        ("tanh", "unsupported module Tanh"),
        ("conv", "must be a torch.nn.Sequential"),
        ("affine", "affine"),
    ],
)
def test_from_torch_rejects_unsupported(module, match):
    import torch

    mods = {
        "tanh": torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Tanh(), torch.nn.Linear(3, 1)),
        "conv": torch.nn.Conv1d(1, 1, 3),
        "affine": torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Linear(3, 1)),
    }
    with pytest.raises(TypeError, match=match):
        MaxoutNetwork.from_torch(mods[module])


def test_restrict_and_bad_input():
    net5 = MaxoutNetwork([np.ones((2, 2, 5))], [np.zeros((2, 2))])
    with pytest.raises(ValueError, match="restrict"):
        count_linear_regions(net5, 0.0, 1.0)  # d = 5 without a slice: says what to do
    with pytest.raises(ValueError, match="directions"):
        restrict(net5, np.zeros(5), np.ones((3, 5)))
    with pytest.raises(ValueError, match="origin"):
        restrict(net5, np.zeros(4), np.ones(5))
    with pytest.raises(TypeError, match="restrict"):
        restrict(lambda x: x, np.zeros(5), np.ones(5))
    g = restrict(net5, np.zeros(5), np.stack([np.eye(5)[0], np.eye(5)[1]]))
    assert g.in_dim == 2
    np.testing.assert_allclose(g(np.array([0.5, -2.0])), net5(np.array([0.5, -2.0, 0, 0, 0])))
    soft = maxout_to_transformer(zigzag_maxout(2, 1), 0.0, 1.0, attention=5.0)
    with pytest.raises(ValueError, match="not piecewise linear"):
        count_linear_regions(soft, 0.0, 1.0)
    with pytest.raises(ValueError, match="not piecewise linear"):
        count_linear_regions(restrict(soft, np.zeros(1), np.ones(1)), 0.0, 1.0)


# ---------------------------------------------------------------- LP cross-check
@pytest.mark.parametrize("kind", ["relu", "maxout"])
def test_lp_enumerator_agrees_with_polygon_counter(kind):
    rng = np.random.default_rng(5)
    if kind == "relu":
        Ws = [rng.normal(size=(5, 2)), rng.normal(size=(4, 5)), rng.normal(size=(1, 4))]
        bs = [rng.normal(size=5), rng.normal(size=4), rng.normal(size=1)]
        net = MaxoutNetwork.from_relu(Ws, bs)
    else:
        net = MaxoutNetwork(
            [rng.normal(size=(3, 3, 2)), rng.normal(size=(2, 3, 3))],
            [rng.normal(size=(3, 3)), rng.normal(size=(2, 3))],
            rng.normal(size=(1, 2)),
        )
    lp = lp_region_count(net, [-2.0, -2.0], [2.0, 2.0])
    r = count_linear_regions(net, [-2.0, -2.0], [2.0, 2.0])
    assert r.certified
    assert lp["activation"] == r.activation > 5
    assert lp["linear"] == r.linear
    # the same affine maps (up to order)
    poly = np.concatenate([r.slopes[:, 0, :], r.intercepts], axis=1)
    lpm = lp["maps"][:, 0, :]
    for row in poly:
        assert np.min(np.abs(lpm - row).max(axis=1)) < 1e-9


# ---------------------------------------------------------------- experiment
def test_wrong_count_fails_the_experiment(tmp_path, monkeypatch):
    """A counter that over-counts by one: the C6/C7 claims fail, the run is FAILED."""
    from transflow.experiments.context import ClaimsFailed
    from transflow.experiments.run import run_in_process

    import transflow.expressivity._studies as studies

    original = studies.count_linear_regions

    def wrong(*args, **kw):
        r = original(*args, **kw)
        r.linear += 1
        return r

    monkeypatch.setattr(studies, "count_linear_regions", wrong)
    with pytest.raises(ClaimsFailed, match="C6/C7"):
        run_in_process(["experiment=expressivity", "debug=smoke", "task.only=[regions]"], tmp_path)
    assert json.loads((tmp_path / "status.json").read_text())["status"] == "FAILED"
    assert not (tmp_path / "DONE").exists()
    claims = json.loads((tmp_path / "summary.json").read_text())["claims"]
    failed = {c["name"] for c in claims if not c["pass"] and c["enforced"]}
    assert any(name.startswith("C6/C7 counts different") for name in failed)
