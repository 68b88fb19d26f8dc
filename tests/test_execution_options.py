"""evolve's execution options as objects (SaveAt, Remat, ConstantSteps, Adaptive; issue 26).

The objects select one program each: the same jaxpr as the ``lax.scan`` written out by
hand (final state, trajectory, gradients; ``Remat("nested")`` against the plain scan is
tests/test_splitting.py's; the legacy keywords they replaced are gone, CHANGELOG.md), bad
options are errors that name the option, and the adaptive route is ``solve_adaptive``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import transflow
from transflow import (
    Adaptive,
    ConstantSteps,
    LayerControls,
    LieScheme,
    NormParams,
    PreNormScheme,
    Remat,
    SaveAt,
    evolve,
    project_s1,
    stack_controls,
)
from transflow.continuous import PiecewiseConstant, evolve_path, init_path, solve_adaptive

D, N_TOKENS, N_STEPS = 4, 3, 5


def _theta(n=N_STEPS, **kw):
    keys = jax.random.split(jax.random.key(0), n)
    return stack_controls([LayerControls.random(D, n_heads=1, key=k, **kw) for k in keys])


def _u0():
    return jax.random.normal(jax.random.key(1), (N_TOKENS, D))


def _same(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        assert jnp.array_equal(x, y), float(jnp.max(jnp.abs(x - y)))


def test_objects_are_exported():
    for name in ("SaveAt", "Remat", "ConstantSteps", "Adaptive"):
        assert getattr(transflow, name) is globals()[name]


def _jaxpr(fn, *args):
    return str(jax.make_jaxpr(fn)(*args))


def _plain_scan(u0, theta, *, steps, checkpoint=False, unroll=True, dt=1.0, norm=None):
    """evolve written out by hand: one lax.scan of LieScheme().step after the input check."""
    from transflow._errors import check_finite

    u0 = check_finite("u0", u0)

    def body(u, th):
        v = LieScheme().step(u, th, dt)
        return v, (v if steps else None)

    u, traj = jax.lax.scan(jax.checkpoint(body) if checkpoint else body, u0, theta, unroll=unroll)
    if norm is not None:
        u = project_s1(u, norm.bias, norm.gain, eps=norm.eps)
        traj = traj.at[-1].set(u) if steps else None
    return (u, traj) if steps else u


@pytest.mark.parametrize("steps", [False, True])
def test_saveat_traces_to_the_plain_scan(steps):
    """SaveAt selects the returned trajectory of one lax.scan: the same jaxpr as the scan
    written out (so the same bits), with a closing norm on the last saved state."""
    theta, u0 = _theta(), _u0()
    norm = NormParams.scalar(0.0, 1.0)
    opts = {"final_norm": norm, "dt": 0.5}
    new = _jaxpr(lambda u: evolve(u, theta, saveat=SaveAt(steps=steps), **opts), u0)
    ref = _jaxpr(lambda u: _plain_scan(u, theta, steps=steps, dt=0.5, norm=norm), u0)
    assert new == ref


def _loss_and_grad():
    w = jax.random.normal(jax.random.key(2), (N_TOKENS, D))

    def loss(args, run):
        uT, traj = run(args[1], args[0])
        return jnp.sum(w * uT) + jnp.sum(traj**2), traj

    return jax.value_and_grad(loss, has_aux=True)


@pytest.mark.parametrize("remat, checkpoint", [(Remat(), False), (Remat("step"), True)])
def test_remat_traces_to_the_plain_scan(remat, checkpoint):
    """Value, trajectory and gradient (w.r.t. controls and u0): Remat() is the plain scan,
    Remat("step") the scan of jax.checkpoint(step) (tracing only, no compilation)."""
    args = (_theta(), _u0())
    grad = _loss_and_grad()
    run_new = lambda u, th: evolve(u, th, saveat=SaveAt(steps=True), remat=remat)
    run_ref = lambda u, th: _plain_scan(u, th, steps=True, checkpoint=checkpoint)
    new = jax.make_jaxpr(lambda a: grad(a, run_new))(args)
    assert str(new) == str(jax.make_jaxpr(lambda a: grad(a, run_ref))(args))


@pytest.mark.parametrize("unroll, scan_unroll", [("auto", True), (False, False), (2, 2)])
def test_constant_steps_traces_to_the_unroll_program(unroll, scan_unroll):
    """ConstantSteps(unroll) is lax.scan's unroll ("auto": unrolled at N_t = 5 ≤ 8)."""
    theta, u0 = _theta(), _u0()
    new = _jaxpr(lambda u: evolve(u, theta, stepsize_controller=ConstantSteps(unroll=unroll)), u0)
    ref = _jaxpr(lambda u: _plain_scan(u, theta, steps=False, unroll=scan_unroll), u0)
    assert new == ref
    if unroll == "auto":  # the default controller is the default call
        assert new == _jaxpr(lambda u: evolve(u, theta), u0)


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda: Remat("sqrt"), r"Remat: `mode` must be one of .*got 'sqrt'"),
        (lambda: Remat("nested", chunk=0), r"Remat: `chunk` must be a positive int.*got 0"),
        (lambda: Remat("nested", chunk=True), r"Remat: `chunk` must be a positive int"),
        (lambda: Remat("step", chunk=2), r"mode='nested'.*got chunk=2 with mode='step'"),
        (lambda: Remat(chunk=3), r"got chunk=3 with mode='none'.*Remat\('nested', chunk=3\)"),
        (lambda: SaveAt(steps=1), r"SaveAt: `steps` must be True .* got 1"),
        (lambda: ConstantSteps(unroll=0), r"ConstantSteps: `unroll` must be .*got 0"),
        (lambda: Adaptive(rtol=0.0), r"`rtol` must be a positive number"),
        (lambda: Adaptive(solver="rk4"), r"Adaptive: `solver` must be one of .*'rk4'"),
        (lambda: Adaptive(max_steps=0), r"Adaptive: `max_steps` must be a positive int"),
        (lambda: Adaptive(dt0=-1.0), r"Adaptive: `dt0` must be a positive number"),
        (lambda: Adaptive(adjoint="magic"), r"`adjoint` must be 'recursive'"),
    ],
)
def test_bad_options_name_the_option(build, match):
    with pytest.raises(ValueError, match=match):
        build()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"n_steps": 4}, r"`n_steps` is for a ControlPath.*N_t = 5"),
        ({"stepsize_controller": Adaptive(), "saveat": SaveAt(steps=True)}, r"SaveAt\(steps"),
        ({"stepsize_controller": Adaptive(), "remat": Remat("step")}, r"`remat=Remat\(.*'step'"),
        ({"stepsize_controller": Adaptive(), "remat": Remat("nested")}, r"mode='nested'"),
        ({"stepsize_controller": Adaptive(), "causal": True}, r"`causal=True` is not supp"),
        ({"stepsize_controller": Adaptive(), "n_steps": 4}, r"`n_steps=4` is not supported"),
    ],
)
def test_conflicting_or_unsupported_options_are_value_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        evolve(_u0(), _theta(), PreNormScheme(), **kwargs)


def test_wrong_option_types_are_type_errors():
    theta, u0 = _theta(), _u0()
    with pytest.raises(TypeError, match="`saveat` must be a transflow.SaveAt"):
        evolve(u0, theta, saveat=True)
    with pytest.raises(TypeError, match="`stepsize_controller` must be transflow.Constant"):
        evolve(u0, theta, stepsize_controller="adaptive")


def _path():
    draw = lambda k: LayerControls.random(D, n_heads=1, key=k)
    return init_path("linear", draw, 2, key=jax.random.key(3), t1=1.5)


def test_path_with_constant_steps_equals_evolve_path():
    path, u0 = _path(), _u0()
    new = evolve(u0, path, PreNormScheme(), n_steps=6, saveat=SaveAt(steps=True))
    old = evolve_path(u0, path, PreNormScheme(), 6, saveat=SaveAt(steps=True))
    _same(new, old)
    with pytest.raises(ValueError, match="`n_steps` is required when `controls` is a Control"):
        evolve(u0, path, PreNormScheme())
    with pytest.raises(ValueError, match=r"`dt` must be None when `controls` is a ControlPath"):
        evolve(u0, path, PreNormScheme(), n_steps=6, dt=0.25)
    with pytest.raises(ValueError, match="evolve_path runs n_steps uniform steps"):
        evolve_path(u0, path, PreNormScheme(), 6, stepsize_controller=Adaptive())


def test_adaptive_route_on_a_path_is_solve_adaptive():
    """solve_adaptive over the path's interval: the same computation, the same bits."""
    u0, opts = _u0(), Adaptive(rtol=1e-4, atol=1e-4)
    path = _path()
    got = evolve(u0, path, PreNormScheme(), stepsize_controller=opts)
    _same(got, solve_adaptive(u0, path, PreNormScheme(), opts).u)


def test_adaptive_route_on_stacked_controls_is_the_piecewise_constant_path():
    """Stacked controls: solve_adaptive over [0, N_t Δt] of PiecewiseConstant(θ, Δt)."""
    u0, opts, theta = _u0(), Adaptive(rtol=1e-4, atol=1e-4), _theta(2)
    got = evolve(u0, theta, PreNormScheme(), dt=0.5, stepsize_controller=opts)
    ref = solve_adaptive(u0, PiecewiseConstant(theta, tau=0.5), PreNormScheme(), opts).u
    _same(got, ref)


def test_adaptive_refuses_inconsistent_schemes():
    with pytest.raises(TypeError, match="LieScheme is not consistent"):
        evolve(_u0(), _theta(2), LieScheme(), stepsize_controller=Adaptive())
    with pytest.raises(TypeError, match="LieScheme is not consistent"):
        evolve(_u0(), _theta(2), stepsize_controller=Adaptive())  # the default scheme


def test_adaptive_final_norm_is_applied():
    u0, theta = _u0(), _theta(2)
    norm = NormParams.scalar(0.0, 1.0)
    u = evolve(u0, theta, PreNormScheme(), final_norm=norm, stepsize_controller=Adaptive())
    np.testing.assert_allclose(np.asarray(u).mean(-1), 0.0, atol=1e-6)


def test_consistency_is_declared_by_the_scheme_and_seen_through_causal():
    from transflow import CausalScheme
    from transflow.continuous import RelaxedLieScheme
    from transflow.schemes import check_consistent

    assert not LieScheme().consistent and RelaxedLieScheme().consistent
    assert PreNormScheme().consistent
    assert not CausalScheme(LieScheme()).consistent
    assert CausalScheme(RelaxedLieScheme(tau=0.5)).consistent
    with pytest.raises(TypeError, match="LieScheme is not consistent"):
        check_consistent(CausalScheme(LieScheme()))
    with pytest.raises(TypeError, match="`scheme` must be an AbstractScheme, got str"):
        check_consistent("lie")
