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
        "strang_post": 1,  # the projections' curvature limits it (test_post_norm_order)
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


# ----------------------------------------------------------------------- step 2: orders
def _smooth_path(d=4, scale=0.5, seed=3):
    """A Legendre path θ(t) on [0, 1] (K = 3, random coefficients, smooth GELU FFN) whose
    constraint sets S1 are fixed in t (the norms' higher coefficients zero), so that a
    post-norm projection onto them is a projection onto one manifold."""
    from transflow.continuous import BasisExpansion, init_path

    def draw(k):
        return LayerControls.random(
            d, n_heads=2, activation="gelu", scale=scale, dtype=jnp.float64, key=k
        )

    c = init_path("legendre", draw, 3, key=jax.random.key(seed), smooth=False).coeffs

    def fixed(n):
        return type(n)(n.gain.at[1:].set(0.0), n.bias.at[1:].set(0.0), n.eps)

    return BasisExpansion(type(c)(c.attn, fixed(c.norm1), c.ffn, fixed(c.norm2)), "legendre")


def _observed_order(name, path, u0, ref, ns):
    from transflow import stage_controls
    from transflow.continuous import fit_slope

    s = make_scheme(name)
    errs = []
    for n in ns:
        out = evolve(u0, stage_controls(path, s, n), s, dt=path.step_size(n))
        errs.append(float(jnp.max(jnp.abs(out - ref))))
    return fit_slope([1.0 / n for n in ns], errs), errs


#: Step counts per scheme: in the asymptotic range of the path of _smooth_path, above
#: round-off of the Dopri8 reference (rtol = atol = 1e-12).
_GRIDS = {1: (16, 32, 64), 2: (8, 16, 32), 4: (8, 16, 32)}


@pytest.fixture(scope="module")
def prenorm_reference():
    from transflow import reference_solution

    path = _smooth_path()
    u0 = jax.random.normal(jax.random.key(1), (3, 4), jnp.float64)
    return path, u0, reference_solution(u0, path, make_scheme("prenorm"))


@pytest.mark.parametrize("name", ["prenorm", "macaron", "strang", "heun", "midpoint", "rk4"])
def test_order_against_a_dopri8_reference(name, prenorm_reference):
    """Fitted log-log slope of the error at T = 1 against a diffrax Dopri8 solve (rtol =
    atol = 1e-12, float64) of the shared pre-norm field: within 0.2 of the declared order
    (Euler/Lie 1, Macaron with Euler sub-flows 1, Strang with Heun sub-flows 2, RK2 2,
    RK4 with θ at its three nodes 4)."""
    path, u0, ref = prenorm_reference
    p = declared_order(make_scheme(name))
    slope, errs = _observed_order(name, path, u0, ref, _GRIDS[p])
    assert abs(slope - p) <= 0.2, (name, slope, errs)


def test_the_ode_transformer_block_is_first_order(prenorm_reference):
    """Li et al.'s RK2 block applies Heun to the whole pre-LN block's increment
    F_Δt = a + g(· + Δt a) = f + O(Δt), so its order is 1, not 2."""
    path, u0, ref = prenorm_reference
    slope, errs = _observed_order("ode_rk2", path, u0, ref, (32, 64, 128))
    assert abs(slope - 1.0) <= 0.2, (slope, errs)


def test_rk4_with_theta_frozen_at_the_midpoint_drops_to_second_order(prenorm_reference):
    """Why RK4 takes θ at its nodes: with one θ per step (the midpoint sample) a
    time-dependent control limits every scheme to order 2."""
    from transflow.continuous import fit_slope

    path, u0, ref = prenorm_reference
    s = make_scheme("rk4")
    ns = (8, 16, 32)
    errs = [
        float(jnp.max(jnp.abs(evolve(u0, path.sample(n), s, dt=path.step_size(n)) - ref)))
        for n in ns
    ]
    assert abs(fit_slope([1.0 / n for n in ns], errs) - 2.0) <= 0.2, errs


@pytest.mark.slow
@pytest.mark.parametrize("name", ["strang_post", "macaron_post"])
def test_post_norm_order_is_limited_to_one_by_the_projections(name):
    """The post-norm (projection) Strang layer on S1: consistent with the projected field
    (the reference solves u' = f(t, u) of the scheme, from a state on S1), but a projection
    acts after every sub-flow, P(u + hv) = u + hΠv + O(h²), and its curvature term is a
    local O(h²) error: the observed order is 1 with Heun sub-flows too (the declared order
    says 1)."""
    from transflow import reference_solution
    from transflow._splitting import _project

    path = _smooth_path()
    u0 = jax.random.normal(jax.random.key(1), (3, 4), jnp.float64)
    u0 = _project(u0, path(0.0).norm1, None)
    ref = reference_solution(u0, path, make_scheme(name))
    slope, errs = _observed_order(name, path, u0, ref, (8, 16, 32, 64))
    assert declared_order(make_scheme(name)) == 1
    assert abs(slope - 1.0) <= 0.2, (slope, errs)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["imex", "relaxed"])
def test_imex_and_relaxed_lie_orders(name):
    """IMEX (implicit linear FFN sub-steps) and the explicit relaxed post-LN Lie scheme
    converge at first order to the same penalised ODE (τ = 1)."""
    from transflow import reference_solution

    path = _smooth_path()
    u0 = jax.random.normal(jax.random.key(1), (3, 4), jnp.float64)
    ref = reference_solution(u0, path, make_scheme(name))
    slope, errs = _observed_order(name, path, u0, ref, _GRIDS[1])
    assert abs(slope - 1.0) <= 0.2, (slope, errs)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["strang", "heun", "rk4"])
def test_orders_on_a_sinusoidal_smooth_path(name):
    """The same orders on θ(t) = θ₀ + sin(ωt) θ₁ (SmoothPath), another smooth control."""
    from transflow import reference_solution
    from transflow.continuous import SmoothPath

    def draw(k):
        return LayerControls.random(
            4, n_heads=2, activation="gelu", scale=0.5, dtype=jnp.float64, key=k
        )

    k0, k1 = jax.random.split(jax.random.key(7))
    path = SmoothPath(draw(k0), jax.tree.map(lambda x: 0.3 * x, draw(k1)), omega=3.0)
    u0 = jax.random.normal(jax.random.key(1), (3, 4), jnp.float64)
    ref = reference_solution(u0, path, make_scheme("prenorm"))
    p = declared_order(make_scheme(name))
    slope, errs = _observed_order(name, path, u0, ref, _GRIDS[p])
    assert abs(slope - p) <= 0.2, (name, slope, errs)
