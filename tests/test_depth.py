"""Continuous depth (issue 26): control paths θ(t), evaluation at any depth, adaptive solves,
the relaxed post-LN reading, random-depth training and the continuous adjoint.

Fast tier: float64 verification on tiny models (d = 4 … 8). The digits training runs that
measure accuracy against depth are in tests/test_depth_slow.py (``slow``).
"""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transflow import Adaptive, LayerControls, LieScheme, PreNormScheme, stack_controls
from transflow.analysis import control_path, fit_order, increment_scaling, refine_controls
from transflow.continuous import (
    PATH_KINDS,
    BasisExpansion,
    ControlPath,
    PiecewiseConstant,
    PiecewiseLinear,
    RelaxedLieScheme,
    SmoothPath,
    TimeEmbeddingNet,
    compare_adjoints,
    evolve_path,
    init_path,
    solve_adaptive,
    vector_field,
)
from transflow.control import (
    DEPTH_DIGITS,
    DepthDigitsConfig,
    at_depth,
    depth_accuracy,
    depth_loss,
    make_vit,
)


def _draw(d=4):
    return lambda key: LayerControls.random(d, key=key)


def _u0(n=3, d=4, seed=1):
    return jax.random.normal(jax.random.key(seed), (n, d))


def _flat(tree):
    return jnp.concatenate([jnp.ravel(x) for x in jax.tree.leaves(tree)])


# ----------------------------------------------------------------------------- paths
@pytest.mark.parametrize("kind", PATH_KINDS)
def test_every_kind_is_a_control_path_with_a_smooth_init(kind):
    p = init_path(kind, _draw(), 3, key=jax.random.key(0), t1=2.0)
    assert isinstance(p, ControlPath) and p.interval == (0.0, 2.0)
    s = p.sample(5)
    assert jax.tree.structure(s) == jax.tree.structure(stack_controls([_draw()(jax.random.key(0))]))
    assert s.attn.wq.shape == (5, 4, 4)
    # smooth init: constant in t, zero smoothness energy
    assert float(jnp.max(jnp.abs(s.attn.wq - s.attn.wq[0]))) <= 1e-15  # a(1-w) + aw
    assert float(p.smoothness()) == 0.0
    rough = init_path(kind, _draw(), 3, key=jax.random.key(0), t1=2.0, smooth=False)
    assert float(rough.smoothness()) > 0.0


def test_bad_names_and_k_raise_naming_the_option():
    with pytest.raises(ValueError, match="`path` must be one of"):
        init_path("spline", _draw(), 3, key=jax.random.key(0))
    for k in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="K must be an integer >= 1"):
            init_path("legendre", _draw(), k, key=jax.random.key(0))
    with pytest.raises(ValueError, match="`basis` must be"):
        BasisExpansion(jnp.zeros((2, 3)), basis="hermite")
    with pytest.raises(ValueError, match="`t0` < `t1`"):
        PiecewiseLinear(jnp.zeros((2, 3)), t0=1.0, t1=1.0)
    with pytest.raises(ValueError, match="`n_steps` must be an integer >= 1"):
        PiecewiseLinear(jnp.zeros((2, 3))).sample(0)
    with pytest.raises(ValueError, match="FlowModel: a ControlPath needs `n_steps`"):
        m = make_vit(d=8, n_steps=2, n_heads=1, path="linear", key=jax.random.key(0))
        type(m)(m.embed, m.controls, m.head_w, m.head_b)


def test_basis_values_and_exact_smoothness():
    # Legendre P0..P3 and Chebyshev T0..T3 at x = 2t - 1
    t = jnp.array([0.0, 0.3, 1.0])
    x = 2 * t - 1
    leg = BasisExpansion(jnp.eye(4), "legendre")
    want = jnp.stack([jnp.ones_like(x), x, (3 * x**2 - 1) / 2, (5 * x**3 - 3 * x) / 2], -1)
    assert jnp.allclose(jax.vmap(leg)(t), want, atol=1e-14)
    cheb = BasisExpansion(jnp.eye(4), "chebyshev")
    want = jnp.stack([jnp.ones_like(x), x, 2 * x**2 - 1, 4 * x**3 - 3 * x], -1)
    assert jnp.allclose(jax.vmap(cheb)(t), want, atol=1e-14)
    # θ(t) = c P1(2t/T - 1) on [0, T]: θ' = 2c/T, ∫ |θ'|² = 4 c² / T
    p = BasisExpansion(jnp.array([[0.0], [3.0]]), "legendre", 0.0, 2.0)
    assert abs(float(p.smoothness()) - 4 * 9 / 2) < 1e-12
    # fourier sin(2πt): ∫_0^1 (2π cos 2πt)² dt = 2π²
    f = BasisExpansion(jnp.array([[0.0], [1.0]]), "fourier")
    assert abs(float(f.smoothness(32)) - 2 * np.pi**2) < 1e-10
    # piecewise linear: exact Σ |Δθ|²/h; piecewise constant: the same for the interpolant
    lin = PiecewiseLinear(jnp.array([0.0, 1.0, 3.0]), t1=2.0)
    assert abs(float(lin.smoothness()) - (1.0 + 4.0)) < 1e-14
    pc = PiecewiseConstant(jnp.array([0.0, 1.0, 3.0]), tau=0.5)
    assert abs(float(pc.smoothness()) - (1.0 + 4.0) / 0.5) < 1e-14


def test_generic_smoothness_matches_the_closed_form():
    """The quadrature of ControlPath.smoothness on a TimeEmbeddingNet against a fine
    trapezoid rule of finite differences of θ(t)."""
    base = LayerControls.random(4, key=jax.random.key(0))
    p = TimeEmbeddingNet.init(base, n_freq=2, hidden=3, smooth=False, key=jax.random.key(2))
    ts = np.linspace(0, 1, 4001)
    th = jax.vmap(lambda t: _flat(p(t)))(jnp.asarray(ts))
    d = np.diff(np.asarray(th), axis=0) / np.diff(ts)[:, None]
    fd = float(np.sum(np.sum(d**2, 1) * np.diff(ts)))
    assert abs(float(p.smoothness(64)) - fd) / fd < 1e-5


def test_refine_is_the_piecewise_path_sampled():
    c = stack_controls([LayerControls.random(4, key=jax.random.key(i)) for i in range(3)])
    for interp in ("constant", "linear"):
        path = control_path(c, 1.0, interp)
        assert isinstance(path, PiecewiseConstant if interp == "constant" else PiecewiseLinear)
        for a, b in zip(
            jax.tree.leaves(refine_controls(c, 4, interp)), jax.tree.leaves(path.sample(12))
        ):
            assert jnp.array_equal(a, b)
    # path(t) at arbitrary (traced) times agrees with sample's NumPy indexing
    lin = control_path(c, 1.0, "linear")
    ts = lin.times(12)
    for a, b in zip(
        jax.tree.leaves(jax.vmap(lin)(jnp.asarray(ts))), jax.tree.leaves(lin.sample(12))
    ):
        assert jnp.allclose(a, b, atol=1e-14)


def test_smooth_path_is_a_control_path():
    p = SmoothPath(jnp.zeros(2), jnp.ones(2), omega=jnp.pi / 2)
    assert isinstance(p, ControlPath) and p.interval == (0.0, 1.0)
    assert jnp.allclose(p.sample(2), jnp.sin(jnp.pi / 2 * jnp.array([0.25, 0.75]))[:, None])


def test_path_increments_scale_like_a_smooth_control():
    """increment_scaling of a smooth path sampled at 64 steps gives β ≈ 1; the per-layer
    (piecewise-constant) reading of independent layers gives β ≈ 0."""
    from transflow import SplitTransformer

    smooth = init_path("legendre", _draw(), 4, key=jax.random.key(0), smooth=False)
    beta = increment_scaling(SplitTransformer(smooth.sample(64)), [1, 2, 4])["beta"]
    assert beta >= 0.9, beta
    rough = init_path("per_layer", _draw(), 4, key=jax.random.key(0), smooth=False)
    beta = increment_scaling(SplitTransformer(rough.sample(64)), [1, 2, 4, 8])["beta"]
    assert abs(beta) < 0.1, beta


# ----------------------------------------------------------------------------- depth
@pytest.mark.slow  # ~30 s under load
def test_at_depth_of_a_per_layer_model_is_refine():
    from transflow.analysis import refine

    m = make_vit(d=8, n_steps=2, n_heads=1, dtype=jnp.float64, key=jax.random.key(0))
    x = jax.random.uniform(jax.random.key(1), (8, 8), jnp.float64)
    assert jnp.allclose(at_depth(m, 2)(x), m(x), atol=1e-13)
    assert jnp.allclose(at_depth(m, 8)(x), refine(m, 4)(x), atol=1e-13)
    p = make_vit(d=8, n_steps=2, n_heads=1, path="linear", dtype=jnp.float64, key=jax.random.key(0))
    assert refine(p, 4).n_steps == 8 and jnp.allclose(refine(p, 4)(x), at_depth(p, 8)(x))


def _rough_path(kind="legendre", k=3, d=4, t1=1.0):
    return init_path(kind, _draw(d), k, key=jax.random.key(3), t1=t1, smooth=False)


@pytest.mark.parametrize("scheme", [PreNormScheme(), RelaxedLieScheme(tau=0.5)])
def test_fixed_steps_converge_to_the_adaptive_solve_at_first_order(scheme):
    path, u0 = _rough_path(), _u0()
    ref = solve_adaptive(u0, path, scheme, Adaptive(rtol=1e-11, atol=1e-11, max_steps=20000)).u
    ns = [8, 16, 32, 64]
    errs = [float(jnp.linalg.norm(evolve_path(u0, path, scheme, n) - ref)) for n in ns]
    order = fit_order(ns, errs)
    print(type(scheme).__name__, errs, order)
    assert abs(order - 1.0) <= 0.2, (errs, order)


def test_adaptive_solve_counts_and_tolerances():
    path, u0 = _rough_path(), _u0()
    loose = solve_adaptive(u0, path, PreNormScheme(), Adaptive(rtol=1e-3, atol=1e-3))
    tight = solve_adaptive(
        u0, path, PreNormScheme(), Adaptive(rtol=1e-8, atol=1e-8, solver="dopri5")
    )
    assert int(loose.nfev) == 1 + 6 * int(loose.num_steps)
    assert int(tight.num_steps) > int(loose.num_steps)
    assert int(tight.num_steps) == int(tight.num_accepted_steps) + int(tight.num_rejected_steps)
    for name, bad in (("rtol", 0.0), ("atol", -1e-6), ("rtol", True)):
        with pytest.raises(ValueError, match=f"`{name}` must be a positive number"):
            Adaptive(**{name: bad})
    with pytest.raises(TypeError, match="not consistent"):
        solve_adaptive(u0, path, LieScheme())
    # the options travel as one object: the old keywords are refused, so is a bare value
    with pytest.raises(TypeError, match="unexpected keyword argument 'rtol'"):
        solve_adaptive(u0, path, PreNormScheme(), rtol=1e-3)
    with pytest.raises(TypeError, match="`stepsize_controller` must be a transflow.Adaptive"):
        solve_adaptive(u0, path, PreNormScheme(), 1e-3)


def test_split_solve_steps_piece_by_piece_between_the_jumps_of_theta():
    """``pieces()`` cuts a per-layer path at its layer boundaries (each piece keeps its
    layer at its right end, where the path itself already jumps) and a piecewise-linear
    one at its knots; ``split=True`` is the composition of one solve per piece, with the
    counts summed; a smooth path is one piece and the same solve."""
    theta = stack_controls([LayerControls.random(4, key=jax.random.key(i)) for i in range(3)])
    pc = PiecewiseConstant(theta, tau=0.5)
    pieces = pc.pieces()
    assert [(a, b) for a, b, _ in pieces] == [(0.0, 0.5), (0.5, 1.0), (1.0, 1.5)]
    for n, (a, b, piece) in enumerate(pieces):
        for t in (a, b):  # the right end too: pc(b) is already layer n + 1
            assert bool((piece(t).attn.wq == theta.attn.wq[n]).all())
    assert bool((pc(0.5).attn.wq == theta.attn.wq[1]).all())
    knots = PiecewiseLinear(jnp.array([0.0, 2.0, 2.0]), knots=(0.25, 0.5, 1.0), t1=1.5)
    assert [(a, b) for a, b, _ in knots.pieces()] == [
        (0.0, 0.25),
        (0.25, 0.5),
        (0.5, 1.0),
        (1.0, 1.5),
    ]
    u0, opts = _u0(), Adaptive(rtol=1e-9, atol=1e-9, solver="dopri5")
    split = solve_adaptive(u0, pc, PreNormScheme(), opts, split=True)
    u, nfev = u0, 0
    for _, _, piece in pieces:
        r = solve_adaptive(u, piece, PreNormScheme(), opts)
        u, nfev = r.u, nfev + int(r.nfev)
    assert float(jnp.max(jnp.abs(split.u - u))) == 0.0 and int(split.nfev) == nfev
    whole = solve_adaptive(u0, pc, PreNormScheme(), opts)
    assert float(jnp.max(jnp.abs(whole.u - split.u))) < 1e-5  # the same limit
    smooth = _rough_path()
    a = solve_adaptive(u0, smooth, PreNormScheme(), opts, split=True)
    b = solve_adaptive(u0, smooth, PreNormScheme(), opts)
    assert len(smooth.pieces()) == 1 and bool((a.u == b.u).all()) and int(a.nfev) == int(b.nfev)


def test_vector_field_counts_match_a_python_counter():
    """nfev = 1 + 6·num_steps is what the solver really evaluates (counted on the host)."""
    path, u0 = _rough_path(), _u0()
    count = []
    f = vector_field(PreNormScheme(), path)
    import diffrax

    def rhs(t, u, args):
        jax.debug.callback(lambda: count.append(1))
        return f(t, u)

    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(rhs),
        diffrax.Tsit5(),
        0.0,
        1.0,
        0.25,
        u0,
        stepsize_controller=diffrax.PIDController(rtol=1e-4, atol=1e-4),
    )
    jax.effects_barrier()
    res = solve_adaptive(u0, path, PreNormScheme(), Adaptive(rtol=1e-4, atol=1e-4))
    assert int(sol.stats["num_steps"]) == int(res.num_steps)
    assert len(count) == int(res.nfev), (len(count), int(res.nfev))


# ----------------------------------------------------------------------------- relaxed
def test_relaxed_scheme_with_tau_equal_dt_is_the_paper_layer():
    theta = LayerControls.random(4, key=jax.random.key(0))
    u = _u0()
    for dt, fb in ((1.0, "dt"), (0.25, "dt"), (0.5, "2dt")):
        a = RelaxedLieScheme(tau=dt, ffn_branch_dt=fb).step(u, theta, dt)
        b = LieScheme(ffn_branch_dt=fb).step(u, theta, dt)
        assert float(jnp.max(jnp.abs(a - b))) <= 1e-13


def test_relaxed_tau_validation():
    for bad in (0.0, -1.0, True, "1"):
        with pytest.raises(ValueError, match="`tau`"):
            RelaxedLieScheme(tau=bad)
    lifted = LayerControls.random(4, d_ff=8, key=jax.random.key(0))
    with pytest.raises(ValueError, match="residual FFN sub-steps"):
        RelaxedLieScheme(tau=1.0).step(_u0(), lifted, 0.5)


def test_relaxed_reading_converges_under_refinement_and_the_paper_is_inconsistent():
    """Δt → 0 at fixed τ: the relaxed post-LN scheme's outputs converge at first order
    and one step moves the state by O(Δt). The paper's scheme (exact projections) is not
    consistent: one step still moves the state by O(1) as Δt → 0."""
    path, u0 = _rough_path(), _u0()
    ns = [8, 16, 32, 64, 128]
    outs = [evolve_path(u0, path, RelaxedLieScheme(tau=0.5), n) for n in ns]
    succ = [float(jnp.linalg.norm(b - a)) for a, b in zip(outs, outs[1:])]
    order = fit_order(ns[:-1], succ)
    print("relaxed", succ, order)
    assert abs(order - 1.0) <= 0.2, (succ, order)
    theta = path(0.5)
    u = LieScheme().step(u0, theta, 0.1)  # a state on S1
    for scheme, consistent in ((RelaxedLieScheme(tau=0.5), True), (LieScheme(), False)):
        moves = [float(jnp.linalg.norm(scheme.step(u, theta, dt) - u)) for dt in (1e-1, 1e-3)]
        print(type(scheme).__name__, moves)
        if consistent:
            assert 50 <= moves[0] / moves[1] <= 200, moves  # O(Δt)
        else:
            assert moves[1] > 0.3 * moves[0] and moves[1] > 0.1, moves  # O(1)


def test_relaxed_vector_field_is_the_penalised_ode():
    """The relaxed reading's continuous limit is u' = a(u) + b(u)/τ: the Δt-sub-steps give
    a, the relaxed projections the penalty (P(u) − u)/τ, exactly affine in 1/τ; as τ → 0 the
    penalty dominates. At τ = Δt (τ → 0 with Δt) the scheme is the paper's (tested above)."""
    path, u = _rough_path(), _u0()
    f = {tau: vector_field(RelaxedLieScheme(tau=tau), path)(0.3, u) for tau in (1.0, 0.5, 0.25)}
    assert jnp.allclose(f[0.25] - f[0.5], 2 * (f[0.5] - f[1.0]), atol=1e-12)
    b = f[0.5] - f[1.0]  # the penalty part at τ = 1
    theta = path(0.3)
    from transflow import project_s1

    def p(v, norm, eps_scale=1.0):
        return project_s1(v, norm.bias, norm.gain, eps=norm.eps * eps_scale)

    # first order in Δt, the penalties are evaluated at u: P_S1 (norm1), ½ · (ReLU(u) − u)
    # per activation (FFN branch Δt, J = 2: one activation), P_S1 (norm2, closing ε/4)
    want = (p(u, theta.norm1) - u) + 0.5 * (jnp.maximum(u, 0) - u) + (p(u, theta.norm2, 0.25) - u)
    assert jnp.allclose(b, want, atol=1e-12)


# ----------------------------------------------------------------------------- training
def test_depth_loss_draws_each_depth_and_penalises_roughness():
    m = make_vit(
        d=4,
        n_steps=2,
        n_heads=1,
        path="linear",
        path_size=3,
        scheme=PreNormScheme(),
        smooth_init=False,
        dtype=jnp.float64,
        key=jax.random.key(0),
    )
    x = jax.random.uniform(jax.random.key(1), (2, 8, 8), jnp.float64)
    y = jnp.arange(2, dtype=jnp.int32)
    from transflow.control import cross_entropy_loss

    want = {n: float(cross_entropy_loss(at_depth(m, n), x, y)[0]) for n in (1, 3)}
    loss = eqx.filter_jit(depth_loss([1, 3]))  # one program: a lax.switch over the depths
    keys = jax.random.split(jax.random.key(0), 12)
    got = {float(loss(m, x, y, k)[0]) for k in keys}
    assert all(any(abs(g - w) < 1e-12 for g in got) for w in want.values()), (got, want)
    lam = 0.3
    pen = float(depth_loss([1], smoothness=lam)(m, x, y)[0]) - want[1]
    assert abs(pen - lam * float(m.controls.smoothness())) < 1e-10
    with pytest.raises(ValueError, match="`depths`"):
        depth_loss([])
    g = eqx.filter_jit(eqx.filter_grad(lambda mm, k: loss(mm, x, y, k)[0]))(m, keys[0])
    assert float(jnp.linalg.norm(_flat(eqx.filter(g.controls, eqx.is_inexact_array)))) > 0


@pytest.mark.slow  # trains a model: ~50 s under load
def test_depth_accuracy_and_the_smoke_task(tmp_path):
    summary, result = __import__("transflow.control", fromlist=["run_training"]).run_training(
        DEPTH_DIGITS,
        DepthDigitsConfig(path="linear", path_size=2, train_depths=[2, 4], checkpoint_dir="none"),
        run_dir=tmp_path,
        smoke=True,
        progress=None,
    )
    assert summary["path"] == "linear" and summary["steps"] == 40
    m = result.model
    x = np.random.default_rng(0).uniform(size=(5, 8, 8)).astype(np.float32)
    r = depth_accuracy(m, x, np.zeros(5, np.int32), (2, 4), adaptive=Adaptive(rtol=1e-3, atol=1e-3))
    assert r["depths"] == [2, 4] and 0 <= r["adaptive_accuracy"] <= 1
    assert r["adaptive_nfev_max"] >= 7
    with pytest.raises(ValueError, match=r"`path` must be one of \('none'"):
        DEPTH_DIGITS.setup(DepthDigitsConfig(path="spline"), 0, jax.random.key(0))


# ----------------------------------------------------------------------------- gradients
def _flow_model():
    return make_vit(
        d=4,
        n_steps=3,
        n_heads=1,
        path="linear",
        path_size=2,
        scheme=PreNormScheme(),
        smooth_init=False,
        dt=0.2,
        dtype=jnp.float64,
        key=jax.random.key(0),
    )


def test_flow_logits_runs_the_model_and_validates_its_options():
    """The model's steps inside diffrax give the model's logits."""
    from transflow.control import flow_logits

    m = _flow_model()
    x = jax.random.uniform(jax.random.key(1), (2, 8, 8), jnp.float64)
    assert jnp.allclose(flow_logits(m, x, gradient="checkpointed"), jax.vmap(m)(x), atol=1e-13)
    with pytest.raises(ValueError, match="`gradient` must be one of"):
        flow_logits(m, x, gradient="magic")
    with pytest.raises(ValueError, match="`checkpoints`"):
        depth_loss([2], gradient="checkpointed", checkpoints=0)
    with pytest.raises(ValueError, match="`adjoint_solver` must be one of"):
        flow_logits(m, x, gradient="adjoint", adjoint_solver="rk4")


@pytest.mark.slow  # three gradients through diffrax: ~1 min of compile on 2 loaded cores
def test_checkpointing_is_the_exact_gradient_and_the_adjoint_approximates_it():
    """The checkpointed gradient is the exact gradient of the model's steps (= backprop,
    1e-12); the continuous adjoint (same forward, adjoint ODE backwards with Euler)
    approximates it (O(Δt)); the adjoint's forward is the model's too."""
    from transflow.control import flow_logits

    m = _flow_model()
    x = jax.random.uniform(jax.random.key(1), (2, 8, 8), jnp.float64)
    y = jnp.array([0, 3], jnp.int32)
    assert jnp.allclose(flow_logits(m, x, gradient="adjoint"), jax.vmap(m)(x), atol=1e-13)

    def grad(g):
        loss = depth_loss([3], gradient=g, checkpoints=1)
        return _flat(
            eqx.filter(eqx.filter_grad(lambda mm: loss(mm, x, y)[0])(m), eqx.is_inexact_array)
        )

    bp, ck, adj = grad("backprop"), grad("checkpointed"), grad("adjoint")
    assert float(jnp.linalg.norm(ck - bp) / jnp.linalg.norm(bp)) <= 1e-12
    assert float(jnp.linalg.norm(adj - bp) / jnp.linalg.norm(bp)) <= 0.2


@pytest.mark.slow  # four fresh processes, each compiling and running one gradient (~2 min)
@pytest.mark.parametrize("gradient", ["adjoint", "checkpointed"])
def test_gradient_memory_does_not_grow_with_the_depth(gradient):
    """Peak RSS of one gradient (fresh process each) at N_t = 256 is at most 2x that at
    N_t = 16 (batch 512, d = 32: backprop stores a state per step and grows 1.56x here,
    the contrast is measured by experiment=depth); the gradients agree with each other."""
    from transflow.control import gradient_peak_rss

    r16, r256 = (gradient_peak_rss(n, gradient=gradient, batch_size=512) for n in (16, 256))
    print(gradient, r16, r256)
    assert r256["peak_rss_bytes"] <= 2 * r16["peak_rss_bytes"]
    assert np.isfinite(r256["grad_norm"]) and r256["grad_norm"] > 0
    with pytest.raises(ValueError, match="gradient_peak_rss: `n_steps` must be an integer > 0"):
        gradient_peak_rss(0)


# ----------------------------------------------------------------------------- adjoint
@pytest.mark.slow  # two float64 adaptive gradients: ~20 s of compile on 2 cores
def test_continuous_adjoint_matches_backprop_through_the_solver():
    """float64, rtol = atol = 1e-10: the gradient of a loss of the adaptive solve with
    respect to every path coefficient and u0, by BacksolveAdjoint (the adjoint ODE solved
    backwards) and by RecursiveCheckpointAdjoint (backpropagation through the solver's
    steps), agree to <= 1e-6 relative (measured 1.1e-10) when the vector field is C¹ (a
    tanh FFN). With the paper's ReLU the field has kinks that the step-size controller
    does not see and the two differ by 1.6e-6 even at 1e-12 (docs/depth.md)."""
    draw = lambda k: LayerControls.random(4, activation="tanh", key=k)  # noqa: E731
    path = init_path("legendre", draw, 2, key=jax.random.key(3), smooth=False)
    r = compare_adjoints(_u0(), path, PreNormScheme())  # default: rtol = atol = 1e-10
    print("adjoint relative difference", r["relative_difference"], r["num_steps"])
    assert r["relative_difference"] <= 1e-6, r["relative_difference"]
    assert r["recursive"].shape == r["backsolve"].shape and r["num_steps"] > 8


def test_compare_adjoints_validates_its_options():
    path = _rough_path(k=1)
    with pytest.raises(TypeError, match="`stepsize_controller` must be a transflow.Adaptive"):
        compare_adjoints(_u0(), path, PreNormScheme(), {"rtol": 1e-6})
    with pytest.raises(TypeError, match="unexpected keyword argument 'solver'"):
        compare_adjoints(_u0(), path, PreNormScheme(), solver="rk4")
    with pytest.raises(TypeError, match="not consistent"):
        compare_adjoints(_u0(), path, LieScheme())


# ----------------------------------------------------------------------------- text
def test_text_task_splits_by_position_and_matches_parameter_counts():
    """pydoc_data.topics: the validation text is the last tenth; batches are windows of
    the training text with next-character targets; a Legendre path with K = N_t has as
    many parameters as the per-layer model; bad options raise naming them."""
    from transflow.control import DEPTH_TEXT, DepthTextConfig, load_text_split

    split = load_text_split(0.1)
    assert abs(len(split.val) / (len(split.train) + len(split.val)) - 0.1) < 1e-4
    cfg = DepthTextConfig(d=8, n_heads=1, n_steps=2, context=8, n_val=4, batch_size=3)
    probs = {
        p: DEPTH_TEXT.setup(dataclasses.replace(cfg, path=p, path_size=2), 0, jax.random.key(0))
        for p in ("legendre", "none")
    }
    assert probs["legendre"].extra["n_params"] == probs["none"].extra["n_params"]
    x, y = probs["legendre"].batch(5)
    assert x.shape == y.shape == (3, 8) and (x[:, 1:] == y[:, :-1]).all()
    assert np.array_equal(probs["legendre"].batch(5)[0], x)  # a pure function of the step
    with pytest.raises(ValueError, match="`val_fraction` must be in"):
        load_text_split(1.0)
    with pytest.raises(ValueError, match=r"`path` must be one of \('none'"):
        DEPTH_TEXT.setup(dataclasses.replace(cfg, path="spline"), 0, jax.random.key(0))


def test_depth_evaluation_names_every_metric_and_matches_depth_accuracy():
    """transflow.analysis.depth_evaluation (the evaluation of experiment=depth): its
    accuracies are depth_accuracy's at each depth and reading, its distances are relative
    to the reference solve's outputs, the reference check gives its error ratio, and a
    scheme without a fit window is refused before any work."""
    from transflow import ReferenceTolerances
    from transflow.analysis import depth_evaluation

    m, init = _flow_model(), make_vit(d=4, n_steps=3, n_heads=1, path="linear", path_size=2,
                                      scheme=PreNormScheme(), dt=0.2, dtype=jnp.float64,
                                      key=jax.random.key(1))  # fmt: skip
    x = np.random.default_rng(0).uniform(size=(4, 8, 8))
    y = np.array([0, 1, 2, 3], np.int32)
    ref = ReferenceTolerances("tsit5", 1e-8, 1e-6, 1e-5)
    kw = dict(schemes=["prenorm", "heun"], own="prenorm", grid=[2, 4, 8], reference=ref,
              windows={"prenorm": [2, 8], "heun": [2, 8]}, readings=["right", "left"],
              adaptive=Adaptive(rtol=1e-5, atol=1e-5), beta_depth=16,
              check_reference=True)  # fmt: skip
    rec = depth_evaluation(m, init, x, y, **kw)
    direct = depth_accuracy(m, x, y, [2, 4, 8], adaptive=None, reading="left")
    assert [rec[f"acc.prenorm.{n}@left"] for n in (2, 4, 8)] == direct["accuracy"]
    for at in ("", "@left"):
        assert all(rec[f"dist.heun.{n}{at}"] >= 0 for n in (2, 4, 8))
        assert np.isfinite(rec[f"order.prenorm{at}"])
    assert rec["dist.adaptive"] < rec["dist.prenorm.2"]  # the adaptive solve is nearer
    assert rec["ref_error_ratio"] == pytest.approx(
        rec["ref_error_est"]
        / min(rec[f"dist.{s}.{n}"] for s in ("prenorm", "heun") for n in (2, 8))
    )
    assert {"beta.trained", "beta.init", "beta.update", "update_rel"} <= set(rec)
    with pytest.raises(ValueError, match="`windows` has no fit window for scheme 'heun'"):
        depth_evaluation(m, init, x, y, **{**kw, "windows": {"prenorm": [2, 8]}})
