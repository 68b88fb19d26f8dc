"""Layers designed by numerical analysis (issue 27): Strang (Macaron), Runge–Kutta (ODE
Transformer) and IMEX schemes as layers; their options, orders, reference forms and
linear stability."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transflow import (
    SCHEME_NAMES,
    IMEXScheme,
    LayerControls,
    RungeKuttaScheme,
    StrangScheme,
    declared_order,
    evolve,
    make_scheme,
    stack_controls,
)

D = 8


def _theta(n=3, d=D, dtype=jnp.float64, **kw):
    keys = jax.random.split(jax.random.key(0), n)
    layers = [
        LayerControls.random(d, n_heads=2, activation="gelu", dtype=dtype, key=k, **kw)
        for k in keys
    ]
    return jax.tree.map(lambda x: x.astype(dtype), stack_controls(layers))


# ----------------------------------------------------------------------- step 1: the layers
@pytest.mark.parametrize("name", SCHEME_NAMES)
def test_every_scheme_runs_with_evolve_and_masks(name):
    s = make_scheme(name)
    theta = _theta(2)
    u0 = jax.random.normal(jax.random.key(1), (5, D))
    pad = jnp.array([False, False, False, True, True])
    out = evolve(u0, theta, s, dt=0.3)
    assert out.shape == (5, D) and bool(jnp.all(jnp.isfinite(out)))
    # padded tokens never influence the kept ones
    masked = evolve(u0, theta, s, dt=0.3, key_padding_mask=pad)
    np.testing.assert_allclose(masked[:3], evolve(u0[:3], theta, s, dt=0.3), atol=1e-13)


@pytest.mark.parametrize("name", ["strang_post", "rk4", "imex"])
def test_the_chunked_operator_is_supported(name):
    """Every scheme takes the chunked (online-softmax) attention: the same operator up to
    round-off (no scheme needs to refuse it; the implicit part is in the FFN)."""
    s = make_scheme(name)
    theta = _theta(2)
    u0 = jax.random.normal(jax.random.key(1), (5, D))
    chunked = evolve(u0, theta, s, dt=0.3, attention_implementation="chunked")
    np.testing.assert_allclose(chunked, evolve(u0, theta, s, dt=0.3), atol=1e-12)


@pytest.mark.parametrize("name", ["strang", "strang_post", "rk4", "ode_rk2", "imex"])
def test_float32_agrees_with_float64(name):
    s = make_scheme(name)
    u0 = jax.random.normal(jax.random.key(1), (5, D))
    ref = evolve(u0, _theta(), s, dt=0.3)
    th32 = jax.tree.map(lambda x: x.astype(jnp.float32), _theta())
    out = evolve(u0.astype(jnp.float32), th32, s, dt=0.3)
    assert out.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(out, np.float64), ref, atol=2e-5, rtol=2e-5)


def test_declared_orders():
    want = {
        "lie": None,
        "prenorm": 1,
        "relaxed": 1,
        "macaron": 1,
        "strang": 2,
        "macaron_post": 1,
        "strang_post": 2,
        "heun": 2,
        "midpoint": 2,
        "rk4": 4,
        "ode_rk2": 1,
        "imex": 1,
    }
    assert set(want) == set(SCHEME_NAMES)
    assert {n: declared_order(make_scheme(n)) for n in SCHEME_NAMES} == want


def test_bad_names_and_incompatible_options_name_the_option():
    with pytest.raises(ValueError, match="`scheme` must be one of"):
        make_scheme("rk5")
    with pytest.raises(ValueError, match="method"):
        RungeKuttaScheme("rk3")
    with pytest.raises(ValueError, match="field"):
        RungeKuttaScheme("heun", field="serial")
    with pytest.raises(ValueError, match="substep"):
        StrangScheme(substep="rk4")
    with pytest.raises(ValueError, match="form"):
        StrangScheme(form="sandwich")
    with pytest.raises(ValueError, match="implementation"):
        StrangScheme(implementation="flash")
    with pytest.raises(ValueError, match="tau"):
        IMEXScheme(tau=0.0)
    with pytest.raises(TypeError, match="'heun'"):
        make_scheme("heun", tau=1.0)
    # the implicit FFN step needs square residual sub-steps: a lifted FFN (d_ff) is refused
    lifted = LayerControls.random(D, d_ff=16, key=jax.random.key(0))
    with pytest.raises(ValueError, match="d_ff"):
        IMEXScheme().step(jnp.ones((3, D)), lifted, 0.1)
    # staged controls of the wrong number of nodes
    staged = stack_controls([lifted, lifted])
    with pytest.raises(ValueError, match="node"):
        RungeKuttaScheme("rk4").step(jnp.ones((3, D)), staged, 0.1)
    with pytest.raises(ValueError, match="stage axis"):
        StrangScheme().step(jnp.ones((3, D)), staged, 0.1)


def test_all_pre_norm_schemes_share_one_vector_field():
    """Every explicit pre-norm scheme is consistent with u' = 𝒜(P₁u) + ℱ(P₂u); the IMEX
    scheme with the relaxed post-LN reading's field."""
    from transflow.continuous import PiecewiseConstant, stack_leading, vector_field

    th = jax.tree.map(lambda x: x[0], _theta(1))
    path = PiecewiseConstant(stack_leading([th]))
    u = jax.random.normal(jax.random.key(1), (5, D))
    ref = vector_field(make_scheme("prenorm"), path)(0.5, u)
    for name in ["macaron", "strang", "heun", "midpoint", "rk4", "ode_rk2"]:
        f = vector_field(make_scheme(name), path)(0.5, u)
        np.testing.assert_allclose(f, ref, atol=1e-13, err_msg=name)
    relaxed = vector_field(make_scheme("relaxed"), path)(0.5, u)
    np.testing.assert_allclose(vector_field(IMEXScheme(), path)(0.5, u), relaxed, atol=1e-13)


def test_imex_takes_a_real_linear_solve_per_step():
    """The implicit FFN sub-step is a solve of (I − sW)ᵀxᵀ = (z + sb)ᵀ, traced as an LU
    factorisation inside the step (not an inverse formed once), and satisfies its equation."""
    th = jax.tree.map(lambda x: x[0], _theta(1))
    u = jax.random.normal(jax.random.key(2), (5, D))
    jaxpr = str(jax.make_jaxpr(lambda v: IMEXScheme().step(v, th, 0.5))(u))
    assert "lu" in jaxpr and "triangular_solve" in jaxpr
    w, b = th.ffn.weights[0], th.ffn.biases[0]
    x = IMEXScheme.implicit_substep(u, w, b, 0.5)
    np.testing.assert_allclose(x - 0.5 * (x @ w + b), u, atol=1e-13)  # x = u + s(xW + b)
