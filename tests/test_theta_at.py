"""Where a path model's step reads θ(t): at the scheme's stage nodes (``theta_at="nodes"``,
the default) or at the step midpoint for every stage (``"midpoint"``, the depth study's
declared reading). float64 throughout."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transflow import RungeKuttaScheme, stage_controls
from transflow.continuous import PiecewiseConstant
from transflow.control import at_depth, flow_logits, make_vit


def _model(scheme, theta_at="nodes", path="legendre", n_steps=2):
    with jax.enable_x64(True):
        return make_vit(
            d=8,
            n_steps=n_steps,
            n_heads=1,
            path=path,
            path_size=3 if path else None,
            scheme=scheme,
            dt=0.25,
            activation="tanh",  # a C^inf field: the method's order is visible
            smooth_init=False,  # θ varies in t
            theta_at=theta_at,
            dtype=jnp.float64,
            key=jax.random.key(0),
        )


def _x():
    return jax.random.uniform(jax.random.key(1), (2, 8, 8), jnp.float64)


def _orders(model, ns=(2, 4, 8), ref_n=64):
    with jax.enable_x64(True):
        x = _x()
        ref = jax.vmap(at_depth(model, ref_n))(x)
        errs = [float(jnp.max(jnp.abs(jax.vmap(at_depth(model, n))(x) - ref))) for n in ns]
    return [float(np.log2(a / b)) for a, b in zip(errs, errs[1:])]


def test_rk4_keeps_its_order_on_a_smooth_path_only_when_read_at_its_nodes():
    # RK4 with θ frozen at the midpoint is a second-order method on a time-varying θ;
    # read at its nodes it is fourth order (observed orders over N = 2 -> 4 -> 8).
    nodes = _orders(_model(RungeKuttaScheme("rk4"), "nodes"))
    mid = _orders(_model(RungeKuttaScheme("rk4"), "midpoint"))
    assert nodes[-1] > 3.5, nodes
    assert abs(mid[-1] - 2.0) < 0.4, mid


def test_per_layer_heun_model_at_its_own_depth_crosses_no_jump():
    # Heun's nodes are the step ends, which fall on the layer boundaries at N = L: each
    # node reads θ from inside its step, so at_depth(m, L) is the per-layer model itself.
    with jax.enable_x64(True):
        m = _model(RungeKuttaScheme("heun"), "nodes", path=None, n_steps=4)
        x = _x()
        own = jax.vmap(m)(x)
        read = jax.vmap(at_depth(m, 4))(x)
        left = jax.vmap(at_depth(m, 4, reading="left"))(x)
    np.testing.assert_allclose(read, own, rtol=0, atol=1e-13)
    np.testing.assert_allclose(left, own, rtol=0, atol=1e-13)


def test_stage_controls_of_a_step_path_read_inside_each_step():
    p = PiecewiseConstant(jnp.array([0.0, 1.0, 2.0, 3.0]))  # 4 layers on [0, 4]
    heun = stage_controls(p, RungeKuttaScheme("heun"), 4)
    assert heun.tolist() == [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0], [3.0, 3.0]]
    rk4 = RungeKuttaScheme("rk4")  # nodes (0, 1/2, 1): the midpoint of N = 2 is a boundary
    assert stage_controls(p, rk4, 2).tolist() == [[0.0, 1.0, 1.0], [2.0, 3.0, 3.0]]
    assert stage_controls(p, rk4, 2, "left").tolist() == [[0.0, 0.0, 1.0], [2.0, 2.0, 3.0]]
    assert stage_controls(p, rk4, 2, "average").tolist() == [0.5, 2.5]  # one set per step


@pytest.mark.parametrize("theta_at", ["nodes", "midpoint"])
def test_flow_logits_reads_theta_as_the_model_does(theta_at):
    with jax.enable_x64(True):
        m = _model(RungeKuttaScheme("heun"), theta_at, n_steps=3)
        x = _x()
        np.testing.assert_allclose(
            flow_logits(m, x, gradient="checkpointed"), jax.vmap(m)(x), rtol=0, atol=1e-12
        )


def test_the_two_readings_differ_on_a_staged_scheme_and_agree_on_a_one_node_scheme():
    from transflow import PreNormScheme

    with jax.enable_x64(True):
        x = _x()
        heun = [jax.vmap(_model(RungeKuttaScheme("heun"), t))(x) for t in ("nodes", "midpoint")]
        pre = [jax.vmap(_model(PreNormScheme(), t))(x) for t in ("nodes", "midpoint")]
    assert float(jnp.max(jnp.abs(heun[0] - heun[1]))) > 1e-8
    np.testing.assert_array_equal(pre[0], pre[1])


def test_theta_at_is_checked():
    with pytest.raises(ValueError, match="theta_at"):
        _model(RungeKuttaScheme("heun"), "middle")
