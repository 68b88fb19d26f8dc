"""The continuous-time limit: schemes as data, orders of convergence, grid refinement,
the paper's Lie scheme at Δt = 1, and the expected negative (spec Q9).

Tolerances: order tests fit the log–log slope over Δt = 1/4 … 1/64 in float64 and accept
the declared order ± 0.2 (as diffrax's ``test_ode_order``); the diffrax reference must be
1000× more accurate than the smallest error measured. Exactness checks: ≤ 1e-10 (float64),
≤ 1e-5 relative (float32).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from _reference import require
from transflow import (
    AttentionParams,
    Grid,
    LayerControls,
    LieScheme,
    attention,
    evolve,
    stack_controls,
    unstack_controls,
)
from transflow.continuous import (
    PiecewiseConstant,
    SmoothPath,
    SplittingScheme,
    Stage,
    clustering_trajectory,
    convergence_study,
    default_submodel,
    dt_convergence,
    fit_slope,
    full_model_flows,
    full_model_refinement,
    grid_convergence,
    hybrid,
    integrate,
    lie,
    linear_flow_exact,
    paper_lie,
    parallel,
    reference_solve,
    scheme_for,
    strang,
)

N_STEPS = (4, 8, 16, 32, 64)


# --------------------------------------------------------------------------- schemes
def test_schemes_declare_orders_and_operators():
    assert lie(["a", "b"]).order == 1
    assert strang(["a", "b", "c"]).order == 2
    assert parallel(["a", "b"]).order == 1
    assert hybrid(["a", ["b", None]]).order == 1
    s = strang(["a", "b", "c"])
    assert s.operators == ("a", "b", "c")
    # symmetric: the interval pattern reads the same forwards and backwards
    pattern = [(st.branches[0][0], st.end - st.start) for st in s.stages]
    assert pattern == pattern[::-1]
    assert paper_lie(3).operators == ("attention", "ln1", "ffn1", "relu", "ffn2", "ffn3", "ln2")


def test_scheme_errors_name_the_argument():
    with pytest.raises(ValueError, match="start < end"):
        Stage((("a",),), 0.5, 0.5)
    with pytest.raises(ValueError, match="distinct"):
        lie(["a", "a"])
    with pytest.raises(ValueError, match="ffn_branch_dt"):
        hybrid(["a"], ffn_branch_dt="3dt")
    with pytest.raises(KeyError, match=r"needs flows for \['b'\]"):
        lie(["a", "b"]).step({"a": lambda t0, t1, u, s: u}, 0.0, 0.1, jnp.ones((1, 1)))
    with pytest.raises(ValueError, match="n_steps"):
        integrate(lie(["a"]), {"a": lambda t0, t1, u, s: u}, jnp.ones((1, 1)), n_steps=0)
    with pytest.raises(ValueError, match="order"):
        SplittingScheme("x", 0, (Stage((("a",),)),))


def test_linear_problem_orders_exact_flows():
    """diffrax test_ode_order pattern: u' = u(A + B) with exact sub-flows (expm)."""
    rng = np.random.default_rng(0)
    a, b = (jnp.asarray(rng.standard_normal((3, 3))) for _ in range(2))
    u0 = jnp.asarray(rng.standard_normal((2, 3)))
    exact = u0 @ jax.scipy.linalg.expm(a + b)
    flows = {"a": linear_flow_exact(a), "b": linear_flow_exact(b)}
    for scheme in (lie(["a", "b"]), strang(["a", "b"]), parallel(["a", "b"])):
        run = jax.jit(lambda n, s=scheme: integrate(s, flows, u0, n_steps=n))
        errs = [float(jnp.max(jnp.abs(run(n) - exact))) for n in (16, 32, 64, 128, 256)]
        slope = fit_slope([1 / n for n in (16, 32, 64, 128, 256)], errs)
        assert abs(slope - scheme.order) < 0.2, (scheme.name, slope, errs)


def test_linear_flow_exact_with_bias():
    a = jnp.array([[-1.0, 0.5], [0.0, -2.0]])
    b = jnp.array([0.3, -0.1])
    u0 = jnp.array([[1.0, 2.0]])
    got = linear_flow_exact(a, b)(0.0, 0.7, u0, 1.0)
    e = jax.scipy.linalg.expm(0.7 * a)  # u(t) = u0 e^{tA} + b A^{-1}(e^{tA} − I)
    ref = u0 @ e + b @ jnp.linalg.solve(a, e - jnp.eye(2))
    assert float(jnp.max(jnp.abs(got - ref))) < 1e-12


# --------------------------------------------------------------------------- orders
@pytest.mark.parametrize("kind", ["a", "b", "c"])
def test_submodel_orders_against_diffrax(kind):
    """Lie slope 1 ± 0.2 and Strang slope 2 ± 0.2 on each well-posed sub-model."""
    results = convergence_study((kind,), ("lie", "strang"), n_steps=N_STEPS)
    for r in results:
        assert abs(r.slope - r.declared_order) < 0.2, (r.submodel, r.scheme, r.slope, r.errors)
        assert r.reference_error < 1e-3 * min(r.errors), (r.reference_error, min(r.errors))
        assert all(e2 < e1 for e1, e2 in zip(r.errors, r.errors[1:])), r.errors


def test_submodel_b_field_is_tangent_and_iterates_stay_on_s1():
    """The projected-ODE field keeps S1(σ1(t), σ2(t)): d/dt mean = σ1', d/dt var = 2σ2σ2'
    (exact algebra, 1e-12); the Strang iterate ends every step on S1 (projection, 1e-12)."""
    model, u0 = default_submodel("b")
    for t in (0.0, 0.4, 0.9):
        s1, s2, d1, d2 = model.sigma(t)
        u = model.project_s1(t, u0 + t)
        f = model.vector_field(t, u)
        assert float(jnp.max(jnp.abs(f.mean(-1) - d1))) < 1e-12
        assert float(jnp.max(jnp.abs(((u - s1) * f).mean(-1) - s2 * d2))) < 1e-12
    s1, s2, _, _ = model.sigma(1.0)
    u = integrate(*scheme_for("strang", model), u0, n_steps=16)
    assert float(jnp.max(jnp.abs(u.mean(-1) - s1))) < 1e-12
    assert float(jnp.max(jnp.abs(u.std(-1) - s2))) < 1e-12


def test_submodel_c_stays_feasible():
    model, u0 = default_submodel("c")
    u = reference_solve(model.vector_field, u0)
    assert float(u.min()) > 0.0  # S2 is forward invariant for these controls


def test_paper_literal_ffn_branch_is_inconsistent():
    """Spec Q10: the hybrid step with the FFN branch at Δt ('dt') converges to the model
    with ½ of the linear terms, so its error against u' = 𝒜u + 𝒲u + b stalls; the
    consistent '2dt' branch converges at order 1."""
    model, u0 = default_submodel("a")
    ref = (reference_solve(model.vector_field, u0), 0.0)
    ok = dt_convergence(model, u0, "hybrid-2dt", n_steps=N_STEPS, reference=ref)
    bad = dt_convergence(model, u0, "hybrid-dt", n_steps=N_STEPS, reference=ref)
    assert abs(ok.slope - 1) < 0.2
    assert min(bad.errors) > 0.5 * max(bad.errors)  # no decrease beyond a factor 2


# --------------------------------------------------------------------------- grid
def test_grid_refinement_midpoint_order():
    res = grid_convergence((4, 12, 36), n_ref=324, quantity="attention")
    assert abs(res["slope"] - 2) < 0.2, res


@pytest.mark.slow
@pytest.mark.parametrize("quantity", ["linear", "evolution"])
def test_grid_refinement_midpoint_order_slow(quantity):
    res = grid_convergence((4, 12, 36), n_ref=324, quantity=quantity)
    assert abs(res["slope"] - 2) < 0.2, res


@pytest.mark.parametrize("dx", [1.0, 0.37, 1e-3])
def test_dx_cancels_in_softmax(getkey, dx):
    """On a uniform token grid the quadrature weight Δx cancels in γ (spec §3.4)."""
    p = AttentionParams.random(6, n_heads=2, key=getkey())
    u = jax.random.normal(getkey(), (7, 6))
    grid = Grid.uniform(7, 6, dx=dx, dy=1.0)
    diff = jnp.max(jnp.abs(attention(u, p, grid=grid) - attention(u, p)))
    assert float(diff) <= 1e-14


# --------------------------------------------------------------------------- Δt = 1
def test_piecewise_constant_controls(getkey):
    theta = stack_controls([LayerControls.random(4, key=getkey()) for _ in range(3)])
    path = PiecewiseConstant(theta)
    layers = unstack_controls(theta)
    for t, i in ((0.0, 0), (0.999, 0), (1.0, 1), (2.0 - 1e-12, 2), (2.5, 2), (7.0, 2)):
        assert bool(jnp.all(path(t).attn.wq == layers[i].attn.wq)), t
    with pytest.raises(ValueError, match="tau"):
        PiecewiseConstant(theta, tau=0.0)


def test_smooth_path_structure_error(getkey):
    p = AttentionParams.random(4, key=getkey())
    with pytest.raises(ValueError, match="same pytree structure"):
        SmoothPath(p, jnp.zeros(3))


@pytest.mark.parametrize(("ffn_branch_dt", "dt"), [("dt", 1.0), ("2dt", 0.25)])
def test_paper_lie_data_matches_core_scheme(getkey, ffn_branch_dt, dt):
    """The data form of the paper's scheme equals the core LieScheme (float64, ≤1e-12)."""
    theta = stack_controls([LayerControls.random(6, key=getkey()) for _ in range(3)])
    u0 = jax.random.normal(getkey(), (5, 6))
    n = round(3 / dt)
    core = evolve(
        u0,
        stack_controls([layer for layer in unstack_controls(theta) for _ in range(round(1 / dt))]),
        LieScheme(ffn_branch_dt=ffn_branch_dt),
        dt=dt,
    )
    flows = full_model_flows(PiecewiseConstant(theta))
    ours = integrate(paper_lie(2, ffn_branch_dt=ffn_branch_dt), flows, u0, t1=3.0, n_steps=n)
    assert float(jnp.max(jnp.abs(ours - core))) <= 1e-12


def test_paper_lie_reproduces_torch_stack_at_dt_1():
    """No regression: at Δt = 1 with piecewise-constant controls the data form of the Lie
    scheme reproduces torch.nn.TransformerEncoder (post-LN, ReLU, ε = 0, d_ff = d)."""
    torch = require("torch", reason="torch is needed for the reference check")
    from transflow.interop import from_torch

    d, n_layers = 8, 3
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(
        d, 2, d, dropout=0.0, batch_first=True, layer_norm_eps=0.0, dtype=torch.float64
    )
    enc = torch.nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
    with torch.no_grad():
        for p in enc.parameters():
            p.add_(0.05 * torch.randn_like(p))
    enc.eval()
    x = np.random.default_rng(0).standard_normal((1, 6, d))
    prev = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with torch.no_grad():
            y = enc(torch.from_numpy(x)).numpy()[0]
    finally:
        torch.backends.mha.set_fastpath_enabled(prev)
    model = from_torch(enc, ffn_form="paper")
    flows = full_model_flows(PiecewiseConstant(model.controls))
    ours = integrate(paper_lie(2), flows, jnp.asarray(x[0]), t1=float(n_layers), n_steps=n_layers)
    assert float(np.max(np.abs(np.asarray(ours) - y))) <= 1e-10


def test_float32_strang_matches_float64():
    """float32 runs of a sub-model agree with float64 to 1e-5 (relative)."""
    m64, u64 = default_submodel("a")
    to32 = lambda x: x.astype(jnp.float32) if eqx.is_inexact_array(x) else x
    m32, u32 = jax.tree.map(to32, (m64, u64))
    assert u32.dtype == jnp.float32
    out32 = integrate(strang(m32.operators), m32.flows(), u32, n_steps=16)
    out64 = integrate(strang(m64.operators), m64.flows(), u64, n_steps=16)
    assert out32.dtype == jnp.float32
    rel = float(jnp.max(jnp.abs(out32.astype(jnp.float64) - out64)) / jnp.max(jnp.abs(out64)))
    assert rel <= 1e-5


# --------------------------------------------------------------------------- negatives
def test_full_model_sigma1_zero_has_no_meaningful_limit():
    """Spec Q9 (F6): with σ1 = 0 (S1 ∩ S2 = ∅) each step applies the Δt-independent map
    g(u) = P_S1(½(u + ReLU u)). Criterion: (i) successive refinements are not monotone
    for Δt ≥ 1/32 (some difference grows by > 2×); (ii) at Δt = 1/256 the state is a
    fixed point of g (|g(u) − u| < 0.02): it has collapsed; (iii) its sensitivity to the
    controls of the last layer vanishes (< 2% of that at Δt = 1), so the Δt → 0 "limit"
    does not depend on the dynamics. Contrast σ1 = 1, σ2 = 0.3 (S1 ∩ S2 ≠ ∅): successive
    ratios in (0.3, 0.7) (first order) and the sensitivity stays > 0.3. (In d = 4,
    S1(1, 0.3) ⊂ S2: the ReLU never acts there, the model is well posed.)"""
    refs = (1, 2, 4, 8, 16, 32, 64, 128, 256)
    res0 = full_model_refinement(sigma1=0.0, sigma2=1.0, refinements=refs)
    assert max(res0["ratios"][:5]) > 2.0, res0["ratios"]
    assert res0["fixed_point_residual"][-1] < 0.02, res0["fixed_point_residual"]
    assert res0["sensitivity"][-1] < 0.02 * res0["sensitivity"][0], res0["sensitivity"]

    res1 = full_model_refinement(sigma1=1.0, sigma2=0.3, refinements=refs)
    assert all(0.3 < r < 0.7 for r in res1["ratios"][-4:]), res1["ratios"]
    assert res1["sensitivity"][-1] > 0.3, res1["sensitivity"]


def test_clustering_on_the_sphere():
    """F5: tokens under attention + P_S1 with W_Q = W_K = W_V = I cluster (GLPR)."""
    res = clustering_trajectory(n_tokens=16, d=4, t1=20.0, dt=0.1, temperature=1.0)
    mc = res["min_cosine"]
    assert mc[0] < 0.0  # spread out initially
    assert mc[-1] > 0.99, mc[-1]
    traj = res["trajectory"]
    assert np.max(np.abs(traj.mean(-1))) < 1e-10  # on S1(0, 1) at every step
    assert np.max(np.abs(traj.std(-1) - 1)) < 1e-10


@pytest.mark.slow
def test_active_s2_constraint_limits_strang_to_first_order():
    """Documented finding (docs/continuous.md): when the S2 constraint is active on part of
    the horizon, P_S2 acts with O(Δt) corrections and Strang is only first order."""
    (lie_res, strang_res) = convergence_study(("c_active",), ("lie", "strang"), n_steps=N_STEPS)
    assert abs(lie_res.slope - 1) < 0.2, lie_res.slope
    assert abs(strang_res.slope - 1) < 0.2, strang_res.slope


def test_splitting_solver_in_diffeqsolve():
    """The scheme as a diffrax solver: diffeqsolve with fixed steps and SaveAt equals
    integrate (≤ 1e-12), and the solver reports the declared order."""
    import diffrax

    from transflow.continuous import SplittingSolver

    model, u0 = default_submodel("b")
    scheme, flows = scheme_for("strang", model)
    solver = SplittingSolver(scheme, flows)
    assert solver.order(None) == 2
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(lambda t, u, args: model.vector_field(t, u)),
        solver,
        t0=0.0,
        t1=1.0,
        dt0=1 / 16,
        y0=u0,
        saveat=diffrax.SaveAt(ts=[0.5, 1.0]),
    )
    for i, t in enumerate((0.5, 1.0)):
        ours = integrate(scheme, flows, u0, t1=t, n_steps=round(16 * t))
        assert float(jnp.max(jnp.abs(sol.ys[i] - ours))) <= 1e-12
    with pytest.raises(ValueError, match="lacks"):
        SplittingSolver(scheme, {})
