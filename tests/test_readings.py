"""How a grid of N steps reads θ(t) where it jumps: right / left limits and step averages.

The depth study evaluates per-layer models at depths below their layer count, where step
midpoints fall on layer boundaries; each reading is checked here against a hand-built
stack of the layers it must run (float64, exact equality or <= 1e-13)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transflow import LayerControls, stack_controls
from transflow.continuous import READINGS, PiecewiseConstant, PiecewiseLinear, init_path
from transflow.control import at_depth, depth_accuracy, make_vit

jax.config.update("jax_enable_x64", True)


def test_piecewise_constant_readings_pick_the_layers():
    p = PiecewiseConstant(jnp.arange(8.0), tau=0.5)  # 8 layers on [0, 4]
    assert p.read(4, "right").tolist() == [1.0, 3.0, 5.0, 7.0]  # the layer after
    assert p.read(4, "left").tolist() == [0.0, 2.0, 4.0, 6.0]  # the layer before
    assert p.read(4, "average").tolist() == [0.5, 2.5, 4.5, 6.5]  # the covered pair
    assert p.read(2, "average").tolist() == [1.5, 5.5]
    for r in READINGS:  # at N = L, and at N = 2L (midpoints inside layers), all agree
        assert p.read(8, r).tolist() == list(np.arange(8.0))
        assert p.read(16, r).tolist() == list(np.repeat(np.arange(8.0), 2))


def test_average_reading_is_the_exact_cell_mean():
    """The generic quadrature (cut at the pieces) equals the exact overlap weights, and a
    piecewise-linear path's step mean is the integral of its interpolant."""
    p = PiecewiseConstant(jnp.asarray(np.random.default_rng(0).normal(size=5)), tau=0.3)
    for n in (1, 2, 3, 7):
        generic = super(PiecewiseConstant, p)._averages(n)
        np.testing.assert_allclose(generic, p.read(n, "average"), rtol=0, atol=1e-13)
    q = PiecewiseLinear(jnp.array([0.0, 2.0, 2.0, -1.0]), t1=3.0)  # knots 0, 1, 2, 3
    # step [0, 1.5]: ∫ = 1 (0→2 on [0,1]) + 1 (2 on [1,1.5]) = 2, mean 4/3;
    # step [1.5, 3]: 2·0.5 + ∫_2^3 (2 − 3(t−2)) = 1 + 0.5 = 1.5, mean 1
    np.testing.assert_allclose(q.read(2, "average"), [4 / 3, 1.0], rtol=0, atol=1e-13)
    np.testing.assert_allclose(q.read(2, "left"), q.read(2, "right"), rtol=0, atol=0)


def test_smooth_path_right_equals_left():
    def draw(k):
        return LayerControls.random(8, n_heads=1, dtype=jnp.float64, key=k)

    path = init_path("legendre", draw, 4, t1=1.0, key=jax.random.key(1))
    for a, b in zip(jax.tree.leaves(path.read(4, "right")), jax.tree.leaves(path.read(4, "left"))):
        assert np.array_equal(np.asarray(a), np.asarray(b))


def _per_layer_model():
    m = make_vit(d=8, n_steps=4, n_heads=1, dtype=jnp.float64, key=jax.random.key(0))
    layers = [
        LayerControls.random(8, n_heads=1, dtype=jnp.float64, key=jax.random.key(i))
        for i in range(4)
    ]
    import dataclasses

    return dataclasses.replace(m, controls=stack_controls(layers)), layers


@pytest.mark.parametrize("reading,expect", [("right", [1, 3]), ("left", [0, 2])])
def test_at_depth_runs_the_read_layers(reading, expect):
    import dataclasses

    m, layers = _per_layer_model()
    x = jax.random.normal(jax.random.key(5), (8, 8), jnp.float64)
    got = at_depth(m, 2, reading)(x)
    hand = dataclasses.replace(m, controls=stack_controls([layers[i] for i in expect]), dt=2 * m.dt)
    np.testing.assert_allclose(got, hand(x), rtol=0, atol=1e-13)


def test_average_reading_runs_the_layer_means():
    import dataclasses

    m, layers = _per_layer_model()
    x = jax.random.normal(jax.random.key(5), (8, 8), jnp.float64)
    mean = [
        jax.tree.map(lambda a, b: (a + b) / 2 if eqx_inexact(a) else a, layers[i], layers[i + 1])
        for i in (0, 2)
    ]
    hand = dataclasses.replace(m, controls=stack_controls(mean), dt=2 * m.dt)
    np.testing.assert_allclose(at_depth(m, 2, "average")(x), hand(x), rtol=0, atol=1e-13)
    # at the training depth every reading is the model itself
    for r in READINGS:
        np.testing.assert_allclose(at_depth(m, 4, r)(x), m(x), rtol=0, atol=1e-13)


def eqx_inexact(a):
    import equinox as eqx

    return eqx.is_inexact_array(a)


def test_unknown_reading_is_refused_before_work():
    m, _ = _per_layer_model()
    with pytest.raises(ValueError, match="`reading` must be one of"):
        at_depth(m, 2, "middle")
    with pytest.raises(ValueError, match="`reading` must be one of"):
        depth_accuracy(
            m, np.zeros((1, 8, 8)), np.zeros(1, int), (2,), adaptive=None, reading="middle"
        )


def test_readings_give_different_accuracies_below_the_layer_count():
    """A per-layer model of L = 4 layers read at N = L/2 = 2: labelled by its own "right"
    reading, it scores 100 % under "right" and less under "left" and "average" (which run
    other controls); at N = L and 2L the three readings give the same accuracy."""
    m, _ = _per_layer_model()
    x = np.asarray(jax.random.normal(jax.random.key(7), (64, 8, 8), jnp.float64))
    y = np.argmax(np.asarray(jax.vmap(at_depth(m, 2, "right"))(jnp.asarray(x))), -1)
    acc = {
        r: depth_accuracy(m, x, y, (2, 4, 8), adaptive=None, reading=r)["accuracy"]
        for r in READINGS
    }
    assert acc["right"][0] == 1.0
    assert acc["left"][0] < 1.0 and acc["average"][0] < 1.0, acc
    for r in READINGS:
        assert acc[r][1:] == acc["right"][1:], acc


def test_activation_option_builds_the_same_draws_with_another_ffn():
    """DepthDigitsConfig.activation (the depth study's task.digits.activation): "gelu"
    gives the model of the same seed with every weight equal and the FFN's activation
    changed; a name outside DEPTH_ACTIVATIONS is refused naming `activation`."""
    import equinox as eqx

    from transflow.control import DEPTH_ACTIVATIONS, DEPTH_DIGITS, DepthDigitsConfig

    assert DepthDigitsConfig().activation == "relu" and "gelu" in DEPTH_ACTIVATIONS
    for path in ("none", "legendre"):
        cfg = DepthDigitsConfig(d=8, n_heads=1, n_steps=2, path=path)
        relu = DEPTH_DIGITS.setup(cfg, 0, jax.random.key(0)).model
        gelu = DEPTH_DIGITS.setup(
            dataclasses.replace(cfg, activation="gelu"), 0, jax.random.key(0)
        ).model
        assert at_depth(relu, 2).layer_controls()[0].ffn.activation == "relu"
        assert at_depth(gelu, 2).layer_controls()[0].ffn.activation == "gelu"
        a, b = (jax.tree.leaves(eqx.filter(m, eqx.is_array)) for m in (relu, gelu))
        assert all(np.array_equal(u, v) for u, v in zip(a, b))
        x = jnp.asarray(np.random.default_rng(0).normal(size=(8, 8)), jnp.float32)
        assert not np.allclose(relu(x), gelu(x))
    with pytest.raises(ValueError, match="`activation` must be one of"):
        DEPTH_DIGITS.setup(DepthDigitsConfig(d=8, activation="swish"), 0, jax.random.key(0))
