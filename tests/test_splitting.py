"""The paper's Lie scheme: sub-steps, Δt-reparametrization invariance, evolve, errors."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transflow import (
    AttentionParams,
    ConstantSteps,
    FFNParams,
    Grid,
    LayerControls,
    LieScheme,
    NormParams,
    PreNormScheme,
    Remat,
    SaveAt,
    SplitTransformer,
    evolve,
    project_s1,
    stack_controls,
    unstack_controls,
)


def _paper_controls(d, key, s1=0.0, s2=1.0, J=2):
    ks = jax.random.split(key, 3 + 2 * J)
    n = lambda k: jax.random.normal(k, (d, d)) / np.sqrt(d)
    attn = AttentionParams.paper(n(ks[0]), n(ks[1]), n(ks[2]))
    ffn = FFNParams.paper(
        [n(ks[3 + j]) for j in range(J)],
        [0.1 * jax.random.normal(ks[3 + J + j], (d,)) for j in range(J)],
    )
    norm = NormParams.scalar(s1, s2)
    return LayerControls(attn, norm, ffn, norm)


def _numpy_reference_step(U, c):
    """An independent NumPy transcription of docs/spec/continuous-model.md §3.8 (Lean `splitStep`)
    at Δt = 1."""
    U = np.asarray(U)
    wq, wk, wv = (np.asarray(x) for x in (c.attn.wq, c.attn.wk, c.attn.wv))
    d = U.shape[-1]
    S = (U @ wq) @ (U @ wk).T / np.sqrt(d)
    P = np.exp(S - S.max(-1, keepdims=True))
    P /= P.sum(-1, keepdims=True)
    U1 = U + P @ (U @ wv)
    s1, s2 = float(c.norm1.bias), float(c.norm1.gain)
    ln = lambda V: s2 * (V - V.mean(-1, keepdims=True)) / V.std(-1, keepdims=True) + s1
    U2 = ln(U1)
    W1, W2 = (np.asarray(w) for w in c.ffn.weights)
    b1, b2 = (np.asarray(b) for b in c.ffn.biases)
    U3 = np.maximum(U2 + U2 @ W1 + b1, 0)
    U4 = U3 + U3 @ W2 + b2
    U5 = 0.5 * (U4 + U2)
    return [U1, U2, U3, U4, U5, ln(U5)]


def test_lie_step_matches_independent_numpy_reference(getkey):
    c = _paper_controls(12, getkey(), s1=0.2, s2=1.5)
    u = jax.random.normal(getkey(), (9, 12))
    out, states = LieScheme().step(u, c, 1.0, return_substeps=True)
    assert tuple(states) == ("attention", "ln1", "ffn1", "ffn2", "relax", "ln2")  # M = 4 + J
    for ours, ref in zip(states.values(), _numpy_reference_step(u, c)):
        np.testing.assert_allclose(ours, ref, atol=1e-12)
    np.testing.assert_array_equal(out, states["ln2"])


@pytest.mark.parametrize("J", [1, 3])
def test_substep_count_is_4_plus_J(getkey, J):
    c = _paper_controls(6, getkey(), J=J)
    _, states = LieScheme().step(jax.random.normal(getkey(), (4, 6)), c, return_substeps=True)
    assert len(states) == 4 + J


@pytest.mark.parametrize("dt", [0.1, 0.5, 3.0])
def test_dt_reparametrization_invariance(getkey, dt):
    """split_step(Δt; W_V, W_j, b_j) == split_step(1; ΔtW_V, ΔtW_j, Δtb_j)
    (docs/spec/continuous-model.md §8.9)."""
    c = _paper_controls(10, getkey(), s1=0.1, s2=0.9)
    u = jax.random.normal(getkey(), (7, 10))
    scaled = LayerControls(
        AttentionParams.paper(c.attn.wq, c.attn.wk, dt * c.attn.wv),
        c.norm1,
        FFNParams.paper([dt * w for w in c.ffn.weights], [dt * b for b in c.ffn.biases]),
        c.norm2,
    )
    a = LieScheme().step(u, c, dt)
    b = LieScheme().step(u, scaled, 1.0)
    np.testing.assert_allclose(a, b, atol=1e-12)


def test_ffn_branch_2dt_option_doubles_ffn_step(getkey):
    c = _paper_controls(8, getkey())
    u = jax.random.normal(getkey(), (5, 8))
    doubled = LayerControls(
        c.attn,
        c.norm1,
        FFNParams.paper([2 * w for w in c.ffn.weights], [2 * b for b in c.ffn.biases]),
        c.norm2,
    )
    np.testing.assert_allclose(
        LieScheme(ffn_branch_dt="2dt").step(u, c, 1.0),
        LieScheme().step(u, doubled, 1.0),
        atol=1e-12,
    )
    with pytest.raises(ValueError, match="ffn_branch_dt"):
        LieScheme(ffn_branch_dt="3dt")


def test_evolve_equals_python_loop_and_saves_trajectory(getkey):
    layers = [_paper_controls(8, getkey()) for _ in range(5)]
    theta = stack_controls(layers)
    u0 = jax.random.normal(getkey(), (6, 8))
    uT, traj = evolve(u0, theta, saveat=SaveAt(steps=True), dt=0.7)
    u = u0
    for n, c in enumerate(layers):
        u = LieScheme().step(u, c, 0.7)
        np.testing.assert_allclose(traj[n], u, atol=1e-12)
    np.testing.assert_allclose(uT, u, atol=1e-12)
    assert len(unstack_controls(theta)) == 5


def test_remat_gives_identical_gradients(getkey):
    theta = stack_controls([_paper_controls(8, getkey()) for _ in range(4)])
    u0 = jax.random.normal(getkey(), (5, 8))
    loss = lambda th, remat: jnp.sum(evolve(u0, th, remat=remat) ** 3)
    g1 = jax.grad(loss)(theta, Remat())
    g2 = jax.grad(loss)(theta, Remat("step"))
    for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize(
    "n_steps,chunk",
    # N = 5, k = ⌈√5⌉ = 3: one chunk + a remainder of 2; N = 10, k = 3: 3 chunks + 1
    [(5, None), pytest.param(10, 3, marks=pytest.mark.slow)],
)
def test_nested_remat_equals_plain_evolve(getkey, n_steps, chunk):
    """Remat("nested") (√N_t two-level checkpointing): same value, gradient, trajectory."""
    theta = stack_controls(
        [LayerControls.random(8, n_heads=2, key=getkey()) for _ in range(n_steps)]
    )
    u0 = jax.random.normal(getkey(), (5, 8))
    w = jax.random.normal(getkey(), (5, 8))

    def loss(t, **opts):
        uT, traj = evolve(u0, t, saveat=SaveAt(steps=True), **opts)
        return jnp.sum(w * uT), traj

    f_ref = jax.jit(jax.value_and_grad(loss, has_aux=True))
    f = jax.jit(
        jax.value_and_grad(lambda t: loss(t, remat=Remat("nested", chunk=chunk)), has_aux=True)
    )
    (v_ref, traj_ref), g_ref = f_ref(theta)
    (v, traj), g = f(theta)
    assert float(v) == pytest.approx(float(v_ref), rel=1e-13)
    for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(g_ref)):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-13)
    assert traj.shape == (n_steps, 5, 8)
    np.testing.assert_allclose(traj, traj_ref, rtol=0, atol=1e-13)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"remat": "nested"}, r"`remat` must be a transflow.Remat or None, got 'nested'"),
        ({"remat": True}, r"`remat` must be a transflow.Remat .*remat=Remat\('step'\)"),
        ({"saveat": True}, r"`saveat` must be a transflow.SaveAt or None, got True"),
    ],
)
def test_evolve_bad_option_types_name_the_argument(getkey, kwargs, match):
    theta = stack_controls([LayerControls.random(8, key=getkey())])
    with pytest.raises(TypeError, match=match):
        evolve(jnp.ones((3, 8)) * jnp.arange(8.0), theta, **kwargs)


@pytest.mark.parametrize("legacy", ["save_trajectory", "remat_chunk", "unroll"])
def test_evolve_legacy_keywords_are_gone(getkey, legacy):
    theta = stack_controls([LayerControls.random(8, key=getkey())])
    with pytest.raises(TypeError, match=f"unexpected keyword argument '{legacy}'"):
        evolve(jnp.ones((3, 8)), theta, **{legacy: 2})


def test_evolve_program_size_is_independent_of_depth(getkey):
    """lax.scan: the traced program does not grow with N_t (compile time ∝ one step)."""
    u0 = jax.random.normal(getkey(), (4, 8))

    def n_eqns(n):
        theta = stack_controls([_paper_controls(8, jax.random.key(i)) for i in range(n)])
        return len(jax.make_jaxpr(lambda u, th: evolve(u, th))(u0, theta).jaxpr.eqns)

    assert n_eqns(1) == n_eqns(48)


def test_pre_norm_scheme_is_additive_euler(getkey):
    c = LayerControls.random(8, n_heads=2, d_ff=16, activation="gelu", key=getkey())
    u = jax.random.normal(getkey(), (5, 8))
    out, states = PreNormScheme().step(u, c, 1.0, return_substeps=True)
    from transflow import attention, ffn_branch

    u1 = u + attention(project_s1(u, c.norm1.bias, c.norm1.gain), c.attn)
    u2 = u1 + ffn_branch(project_s1(u1, c.norm2.bias, c.norm2.gain), c.ffn)
    np.testing.assert_allclose(out, u2, atol=1e-12)
    assert list(states)[0] == "ln1" and list(states)[-1] == "residual"


def test_grid_sampled_kernels_converge_to_integral():
    """Midpoint quadrature of ∫ W(ξ,y) u(ξ) dξ on [0,1]: error O(h²)."""
    W = lambda xi, y: jnp.cos(xi + 2 * y)
    u = lambda xi: jnp.exp(xi)

    # exact: ∫_0^1 cos(ξ + 2y) e^ξ dξ
    def exact(y):
        f = lambda xi: np.exp(xi) * (np.cos(xi + 2 * y) + np.sin(xi + 2 * y)) / 2
        return f(1.0) - f(0.0)

    errs = []
    for n in (8, 16, 32, 64):
        g = Grid.interval(2, n)
        approx = u(g.y_nodes) @ g.sample_kernel(W)
        errs.append(np.abs(np.asarray(approx) - exact(np.asarray(g.y_nodes))).max())
    slope = np.polyfit(np.log([8, 16, 32, 64]), np.log(errs), 1)[0]
    assert abs(slope + 2) < 0.1, slope


# ------------------------------------------------------------------------- bad input
@pytest.fixture
def model():
    return SplitTransformer(stack_controls([LayerControls.random(8, key=jax.random.key(0))]))


def test_bad_input_rank_shape_dtype_nonfinite(model):
    with pytest.raises(ValueError, match=r"`u` must have rank 2.*vmap"):
        model(jnp.ones((2, 3, 8)))
    with pytest.raises(ValueError, match=r"expected size 8 on axis 1"):
        model(jnp.ones((3, 7)))
    with pytest.raises(TypeError, match="floating dtype"):
        model(jnp.ones((3, 8), dtype=jnp.int32))
    with pytest.raises(TypeError, match="must be an array"):
        model([[1.0] * 8])
    bad = jnp.ones((3, 8)).at[1, 2].set(jnp.nan)
    with pytest.raises(Exception, match="NaN or Inf"):
        model(bad)
    with pytest.raises(Exception, match="NaN or Inf"):
        eqx.filter_jit(model)(bad)


def test_bad_controls_shapes_name_the_argument():
    with pytest.raises(ValueError, match="wk"):
        AttentionParams(
            jnp.ones((4, 4)),
            jnp.ones((4, 3)),
            jnp.ones((4, 4)),
            jnp.ones((4, 4)),
            jnp.zeros(4),
            jnp.zeros(4),
            jnp.zeros(4),
            jnp.zeros(4),
            1,
        )
    with pytest.raises(ValueError, match="square"):
        FFNParams((jnp.ones((4, 6)), jnp.ones((6, 4))), (jnp.zeros(6), jnp.zeros(4)), (True, False))
    with pytest.raises(ValueError, match="unsupported activation"):
        FFNParams((jnp.ones((4, 4)),), (jnp.zeros(4),), (True,), "swish")
    with pytest.raises(ValueError, match="not stacked"):
        SplitTransformer(LayerControls.random(4, key=jax.random.key(0)))
    a = LayerControls.random(4, key=jax.random.key(0))
    b = LayerControls.random(4, d_ff=8, key=jax.random.key(1))
    with pytest.raises(ValueError, match="different structure"):
        stack_controls([a, b])


def test_grid_validation():
    with pytest.raises(ValueError, match="n_tokens"):
        Grid.index(0, 4)
    with pytest.raises(ValueError, match="rule"):
        Grid.interval(4, 4, x_rule="simpson")
    with pytest.raises(ValueError, match="positive quadrature weights"):
        Grid(jnp.arange(3.0), jnp.array([1.0, -1.0, 1.0]), jnp.arange(2.0), jnp.ones(2))
    g = Grid.image(3, 5, 8)
    assert g.n_tokens == 15 and g.x_nodes.shape == (15, 2)


@pytest.mark.parametrize(
    "remat, unroll", [("none", True), pytest.param("nested", 3, marks=pytest.mark.slow)]
)
def test_unroll_changes_nothing_but_speed(remat, unroll):
    """ConstantSteps(unroll=...) gives the values and gradients of the rolled loop (float64)."""
    keys = jax.random.split(jax.random.key(3), 4)
    theta = stack_controls([LayerControls.random(8, n_heads=2, key=k) for k in keys])
    u0 = jax.random.normal(jax.random.key(4), (6, 8))

    def loss(th, unroll):
        steps = ConstantSteps(unroll=unroll)
        return jnp.sum(evolve(u0, th, remat=Remat(remat), stepsize_controller=steps) ** 2)

    vg = jax.jit(jax.value_and_grad(loss), static_argnums=1)
    ref, g_ref = vg(theta, 1)
    val, g = vg(theta, unroll)
    assert abs(float(val - ref)) <= 1e-12 * abs(float(ref))
    for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(g_ref)):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("bad", [0, -1, 1.5, "all"])
def test_unroll_rejects_bad_values(bad):
    theta = stack_controls([LayerControls.random(8, key=jax.random.key(0))])
    with pytest.raises(ValueError, match="unroll"):
        evolve(jnp.ones((3, 8)), theta, stepsize_controller=ConstantSteps(unroll=bad))


def test_wmul_is_the_matrix_product():
    from transflow._operators import wmul

    u = jax.random.normal(jax.random.key(0), (2, 5, 7))
    w = jax.random.normal(jax.random.key(1), (7, 3))
    np.testing.assert_allclose(wmul(u, w), u @ w, rtol=1e-13, atol=1e-13)
    g1 = jax.grad(lambda w: jnp.sum(jnp.sin(wmul(u, w))))(w)
    g2 = jax.grad(lambda w: jnp.sum(jnp.sin(u @ w)))(w)
    np.testing.assert_allclose(g1, g2, rtol=1e-12, atol=1e-13)


def test_a_family_writes_only_advance():
    """The step signature is written once (AbstractScheme.step): a family that defines
    ``advance``, ``substep_names`` and ``nodes`` gets named sub-steps and evolve, and
    masks when it declares AbstractMaskable (without it, masks are refused in one line)."""
    from transflow import AbstractScheme
    from transflow.schemes import AbstractMaskable, MissingCapability

    class Damped(AbstractMaskable):
        nodes = (0.5,)

        def substep_names(self, controls):
            return ("half", "out")

        def advance(self, u, controls, dt, *, ops):
            half = u - 0.5 * dt * u
            return half - 0.5 * dt * half, (half, half - 0.5 * dt * half)

    theta = stack_controls([LayerControls.random(4, key=jax.random.key(i)) for i in range(3)])
    u0 = jnp.ones((2, 4))
    one = jax.tree.map(lambda x: x[0], theta)
    out, states = Damped().step(u0, one, 0.5, return_substeps=True)
    assert list(states) == ["half", "out"] and jnp.array_equal(states["out"], out)
    pad = jnp.array([False, True])
    u_T = evolve(u0, theta, Damped(), dt=0.5, key_padding_mask=pad)  # masks accepted
    np.testing.assert_allclose(u_T, 0.75**6 * u0, rtol=1e-12)

    class Unmasked(AbstractScheme):
        nodes = (0.5,)

        def substep_names(self, controls):
            return ("out",)

        def advance(self, u, controls, dt, *, ops):
            return u, (u,)

    np.testing.assert_array_equal(evolve(u0, theta, Unmasked()), u0)
    with pytest.raises(MissingCapability, match="Unmasked lacks the capability AbstractMaskable"):
        evolve(u0, theta, Unmasked(), key_padding_mask=pad)
