"""The numerical analysis of the schemes (transflow.schemes._analysis, issue 48): measured
orders on a smooth float64 problem, the stability-function identity, a layer's confirmed
stable Δt, the IMEX solve, the finite-time Lyapunov exponent (transflow.analysis), and
their refusals (a missing capability, a bad argument: one line naming it)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from _ssprk3 import SSPRK3Scheme
from transflow import (
    SCHEME_NAMES,
    LayerControls,
    SaveAt,
    SplitTransformer,
    evolve,
    make_scheme,
    stack_controls,
)
from transflow.analysis import lyapunov_exponent
from transflow.schemes import (
    AbstractLinearStability,
    MissingCapability,
    OrderProblem,
    empirical_order,
    has,
    imex_step_check,
    implicit_solve_check,
    layer_stable_dt,
    measure_order,
    measure_orders,
    order_table,
    stability_function_error,
    stability_survey,
    stable_dt_table,
)

#: |measured − declared| allowed on the windows below (the study's claim uses 0.15)
ORDER_MARGIN = 0.1
WINDOWS = {1: [64, 128, 256], 2: [16, 32, 64]}


@pytest.fixture(scope="module")
def problem():
    return OrderProblem.legendre(4, 3, path_size=2, path_seed=3, state_seed=1)


@pytest.mark.parametrize(
    "name, declared", [("prenorm", 1), ("macaron", 1), ("strang", 2), ("heun", 2)]
)
def test_measured_order_is_the_declared_one(problem, name, declared):
    """Lie splitting (pre-norm, Euler sub-flows) and Macaron measure order 1, Strang with
    Heun sub-flows and Heun order 2, on the window of their order class, in float64."""
    m = measure_order(make_scheme(name), problem, window=WINDOWS[declared], grid=[8])
    assert m.declared == declared
    assert abs(m.observed - declared) <= ORDER_MARGIN, m
    assert m.n_steps == sorted({8, *WINDOWS[declared]})
    assert len(m.local_slopes) == len(m.n_steps) - 1
    assert m.errors[0] > m.errors[-1] > 0  # the error falls with N


def test_post_norm_strang_measures_order_one_not_two(problem):
    """The post-norm projections cap the Strang layer at order 1 (its declared order): the
    measurement tells 1 from 2 (the same sub-flows as `strang`, which measures 2)."""
    m = measure_order(make_scheme("strang_post"), problem, window=WINDOWS[1])
    assert m.declared == 1
    assert abs(m.observed - 1) <= ORDER_MARGIN and abs(m.observed - 2) > 0.5, m
    assert m.holds(ORDER_MARGIN) and not m.holds(abs(m.observed - 1) / 2)


def test_untied_macaron_takes_both_ffns_and_tied_schemes_the_first(problem):
    """The problem's path holds two FFNs: the untied Macaron layer runs both, a tied one
    the first; a scheme taking more FFNs than the path holds is refused."""
    untied = make_scheme("macaron_untied")
    assert problem.path_for(untied) is problem.path
    one = problem.path_for(make_scheme("macaron"))
    assert one.coeffs.ffn.num_substeps * 2 == problem.path.coeffs.ffn.num_substeps
    m = measure_order(untied, problem, window=WINDOWS[1])
    assert abs(m.observed - 1) <= ORDER_MARGIN, m
    single = OrderProblem.legendre(4, 3, path_size=2, ffn_copies=1)
    with pytest.raises(ValueError, match="takes 2 FFNs.*holds 1"):
        single.path_for(untied)


def test_shared_reference_matches_the_schemes_own_and_a_wrong_one_is_refused(problem):
    """Heun and RK4 have the pre-norm field a + g: sharing its reference solve gives the
    errors of each scheme's own reference (to the solve's tolerance); mapping a scheme to
    another continuous limit (IMEX's) is refused, naming ``reference_fields``."""
    pre = make_scheme("prenorm")
    schemes = {"heun": make_scheme("heun"), "prenorm": pre}
    shared = measure_orders(schemes, problem, windows=WINDOWS, reference_fields={"heun": pre})
    own = measure_orders(schemes, problem, windows=WINDOWS)
    assert list(shared) == ["heun", "prenorm"]
    for name in schemes:
        assert shared[name].declared == own[name].declared
        assert abs(shared[name].observed - own[name].observed) <= 1e-3
    with pytest.raises(ValueError, match=r"`reference_fields\['heun'\]`.*another continuous"):
        measure_orders(
            schemes, problem, windows=WINDOWS, reference_fields={"heun": make_scheme("imex")}
        )
    with pytest.raises(ValueError, match="`windows` has no window for order 2"):
        measure_orders(schemes, problem, windows={1: WINDOWS[1]})


def test_orders_need_an_ode_scheme(problem):
    with pytest.raises(
        MissingCapability, match="measure_order: LieScheme lacks .*AbstractODEScheme"
    ):
        measure_order(make_scheme("lie"), problem, window=WINDOWS[1])


def test_empirical_order_is_the_log_log_slope():
    ns = [10, 20, 40, 80]
    assert empirical_order(ns, [3.0 * n**-3 for n in ns]) == pytest.approx(3.0, abs=1e-12)
    with pytest.raises(ValueError, match="`errors` must hold one finite error > 0"):
        empirical_order(ns, [1e-3, 0.0, 1e-5, 1e-6])
    with pytest.raises(ValueError, match="`n_steps` must hold at least 2 distinct"):
        empirical_order([64, 64], [1e-3, 1e-3])


def test_every_scheme_with_a_stability_function_has_it_measured_to_round_off():
    names = [n for n in SCHEME_NAMES if has(make_scheme(n), AbstractLinearStability)]
    assert {"prenorm", "strang", "rk4", "imex_dissipative"} <= set(names)
    for name in names:
        assert stability_function_error(make_scheme(name)) <= 1e-12, name


def test_a_wrong_stability_function_is_caught(monkeypatch):
    """The identity can fail: a scheme declaring Heun's polynomial for its SSPRK3 step."""
    s = SSPRK3Scheme()
    assert stability_function_error(s) <= 1e-12
    monkeypatch.setattr(
        SSPRK3Scheme, "stability_function", lambda self, a, g: 1 + (a + g) + (a + g) ** 2 / 2
    )
    assert stability_function_error(s) > 1e-3
    with pytest.raises(ValueError, match="`rates` must be a finite"):
        stability_function_error(s, rates=[[1.0, np.nan]])


@pytest.fixture(scope="module")
def layer():
    with jax.enable_x64(True):
        th = LayerControls.random(
            8, n_heads=2, activation="gelu", dtype=jnp.float64, key=jax.random.key(0)
        )
        u0 = jax.random.normal(jax.random.key(1), (4, 8), jnp.float64)
    return th, u0


def _trajectory(th, u0, scheme):
    with jax.enable_x64(True):
        _, traj = evolve(u0, stack_controls([th] * 3), scheme, dt=0.25, saveat=SaveAt(steps=True))
        return jnp.concatenate([u0[None], traj])


@pytest.mark.parametrize(
    "name, form",
    [
        pytest.param(
            "imex_dissipative",
            "imex",
            marks=pytest.mark.slow(
                reason="confirms an IMEX Δt* by an ~8000-step run: ~25 s on 2 cores (the "
                "fast tier has the post-norm case; tests/test_layer_schemes.py the IMEX one)"
            ),
        ),
        ("strang_post", "postnorm"),
    ],
)
def test_layer_stable_dt_is_confirmed_in_the_declared_form(layer, name, form):
    """Δt* of the layer as trained, in the form the scheme declares (IMEX: W_j implicit;
    the post-norm Strang layer: its post-norm sub-fields), bounded at 0.95 Δt* and growing
    at 1.05 Δt*."""
    th, u0 = layer
    s = make_scheme(name)
    assert s.stability_form == form
    with jax.enable_x64(True):
        r = layer_stable_dt(s, th, _trajectory(th, u0, s))
    assert 0 < r["dt_star"] < np.inf
    assert (form in r["layer"]) or ("W_j implicit" in r["layer"])
    assert r["growth_below"] < 1.0 < 10.0 < r["growth_above"], r
    if form == "imex":
        assert r["max_re_implicit"] <= 1e-12  # W_eff = W − Wᵀ − W Wᵀ
    table = stable_dt_table({name: r})
    assert f"| {name} |" in table and "nan" not in table


@pytest.mark.parametrize(
    "name",
    [
        "rk4",
        pytest.param(
            "strang_post",
            marks=pytest.mark.slow(reason="a second Δt* confirmation (10 s CPU); rk4's stays fast"),
        ),
    ],
)
def test_stability_survey_is_each_schemes_identity_and_stable_dt_on_its_layer(layer, name):
    """stability_survey's layer is the fixture's (d = 8, keys 0 and 1) and its trajectory
    that of evolve: the scheme's own steps in post-norm form, the pre-norm layer's for a
    pre-norm-form scheme (rk4); every registered scheme with a linear stability function
    has its identity error, only the named ones a Δt*."""
    th, u0 = layer
    errors, stable = stability_survey([name])
    assert list(errors) == [n for n in SCHEME_NAMES if has(make_scheme(n), AbstractLinearStability)]
    assert errors[name] == stability_function_error(make_scheme(name))
    assert list(stable) == [name]
    s = make_scheme(name)
    own = s if s.stability_form != "prenorm" else make_scheme("prenorm")
    with jax.enable_x64(True):
        expected = layer_stable_dt(s, th, _trajectory(th, u0, own))
    assert stable[name] == expected
    with pytest.raises(ValueError, match=r"stability_survey: `stable_dt` names \['rk5'\]"):
        stability_survey(["rk5"])
    # lie has no linear stability function, so no Δt*: refused, not passed over
    with pytest.raises(ValueError, match=r"names \['lie'\], which have no linear stability"):
        stability_survey([name, "lie"])


def test_layer_stable_dt_needs_a_linear_stability_function(layer):
    th, u0 = layer
    with pytest.raises(
        MissingCapability, match="layer_stable_dt: LieScheme lacks .*AbstractLinearStability"
    ):
        layer_stable_dt(make_scheme("lie"), th, u0[None])


def test_the_imex_step_solves_and_an_explicit_one_is_refused():
    th = LayerControls.random(16, n_heads=2, key=jax.random.key(0))
    u = jax.random.normal(jax.random.key(1), (8, 16))
    r = implicit_solve_check(make_scheme("imex_dissipative"), th, u, 0.5)
    assert r["uses_lu"] == 1 and r["residual"] <= 1e-12
    with pytest.raises(MissingCapability, match="PreNormScheme lacks .*AbstractImplicitFFN"):
        implicit_solve_check(make_scheme("prenorm"), th, u)


def test_imex_step_check_is_the_solve_check_and_the_step_costs_of_its_layer():
    """imex_step_check draws its float32 layer from keys 0 and 1: the solve check is
    implicit_solve_check's on that layer; the cost ratio is the two steps' µs."""
    r = imex_step_check(make_scheme("imex_dissipative"), d=16, n_tokens=8, reps=3)
    th = LayerControls.random(16, n_heads=2, dtype=jnp.float32, key=jax.random.key(0))
    u = jax.random.normal(jax.random.key(1), (8, 16), jnp.float32)
    solve = implicit_solve_check(make_scheme("imex_dissipative"), th, u, 0.5)
    assert {k: r[k] for k in solve} == solve and solve["uses_lu"] == 1
    assert r["imex_step_us"] > 0 and r["explicit_step_us"] > 0
    assert r["cost_ratio"] == pytest.approx(r["imex_step_us"] / r["explicit_step_us"])
    with pytest.raises(MissingCapability, match="imex_step_check: PreNormScheme lacks"):
        imex_step_check(make_scheme("prenorm"), d=8, n_tokens=4, reps=1)


def test_order_table_marks_a_failed_order(problem):
    m = measure_order(make_scheme("prenorm"), problem, window=WINDOWS[1])
    ok = order_table({"prenorm": m}, tol=0.15)
    assert "| prenorm | 1 | 64–256 |" in ok and "FAILED" not in ok
    assert "(FAILED)" in order_table({"prenorm": m}, tol=abs(m.observed - 1) / 2)


def test_lyapunov_exponent_is_log_of_the_largest_singular_value_over_t():
    """The FTLE of a model's flow against an independent one: the SVD of the Jacobian of
    evolve (jacfwd), log σ_max / T averaged over the inputs."""
    with jax.enable_x64(True):
        th = stack_controls(
            [LayerControls.random(4, dtype=jnp.float64, key=jax.random.key(i)) for i in range(3)]
        )
        model = SplitTransformer(th, dt=0.5)
        xs = jax.random.normal(jax.random.key(9), (2, 3, 4), jnp.float64)
        got = lyapunov_exponent(model, xs, key=jax.random.key(0), n_iter=60)
        want = []
        for x in xs:
            jac = jax.jacfwd(
                lambda v: evolve(v.reshape(3, 4), th, model.scheme, dt=0.5).reshape(-1)
            )(x.reshape(-1))
            want.append(np.log(np.linalg.svd(np.asarray(jac), compute_uv=False)[0]) / 1.5)
    assert got == pytest.approx(float(np.mean(want)), rel=1e-6, abs=1e-9)
    with pytest.raises(ValueError, match="`inputs` must hold at least one"):
        lyapunov_exponent(model, xs[:0], key=jax.random.key(0))


def test_bad_problem_sizes_are_refused_in_one_line_naming_them():
    for kw, arg in (
        (dict(d=0), "d"),
        (dict(path_size=1.5), "path_size"),
        (dict(scale=np.inf), "scale"),
    ):
        args = {"d": 4, "n_tokens": 3, **kw}
        with pytest.raises((TypeError, ValueError), match=f"`{arg}`") as info:
            OrderProblem.legendre(args.pop("d"), args.pop("n_tokens"), **args)
        assert "\n" not in str(info.value)
