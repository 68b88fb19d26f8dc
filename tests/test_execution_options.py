"""evolve's execution options as objects (SaveAt, Remat, ConstantSteps, Adaptive; issue 26).

The new objects give bit-identical results to the legacy keywords (final state,
trajectory, gradients for each remat mode), conflicting spellings and bad options are
errors that name the option, and the adaptive route is ``solve_adaptive`` itself.
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


@pytest.mark.parametrize("steps", [False, True])
def test_saveat_traces_to_the_save_trajectory_program(steps):
    """The same jaxpr, so the same bits (final state and trajectory)."""
    theta, u0 = _theta(), _u0()
    norm = NormParams.scalar(0.0, 1.0)
    opts = {"final_norm": norm, "dt": 0.5}
    new = _jaxpr(lambda u: evolve(u, theta, saveat=SaveAt(steps=steps), **opts), u0)
    old = _jaxpr(lambda u: evolve(u, theta, save_trajectory=steps, **opts), u0)
    assert new == old


REMAT_PAIRS = [
    ({"remat": False}, Remat()),
    ({"remat": True}, Remat("step")),
    ({"remat": "step"}, Remat("step")),
    ({"remat": "nested"}, Remat("nested")),
    ({"remat": "nested", "remat_chunk": 2}, Remat("nested", chunk=2)),  # 2 chunks + 1
]


def _loss_and_grad():
    w = jax.random.normal(jax.random.key(2), (N_TOKENS, D))

    def loss(args, **opts):
        uT, traj = evolve(args[1], args[0], **opts)
        return jnp.sum(w * uT) + jnp.sum(traj**2), traj

    return jax.value_and_grad(loss, has_aux=True)


@pytest.mark.parametrize("legacy, remat", REMAT_PAIRS)
def test_remat_object_traces_to_the_legacy_program(legacy, remat):
    """Value, trajectory and gradient (w.r.t. controls and u0): the same jaxpr, so the
    same bits (tracing only, no compilation)."""
    args = (_theta(), _u0())
    grad = _loss_and_grad()
    new = jax.make_jaxpr(lambda a: grad(a, saveat=SaveAt(steps=True), remat=remat))(args)
    old = jax.make_jaxpr(lambda a: grad(a, save_trajectory=True, **legacy))(args)
    assert str(new) == str(old)


def test_new_objects_equal_legacy_keywords_bitwise():
    """Evaluated (the tests above compare jaxprs): nested remat with a remainder chunk,
    the final state and the trajectory, bit for bit."""
    theta, u0 = _theta(3), _u0()
    new = evolve(u0, theta, saveat=SaveAt(steps=True), remat=Remat("nested", chunk=2))
    _same(new, evolve(u0, theta, save_trajectory=True, remat="nested", remat_chunk=2))


@pytest.mark.slow
@pytest.mark.parametrize("legacy, remat", REMAT_PAIRS)
def test_new_objects_equal_legacy_gradients_bitwise(legacy, remat):
    """Evaluated gradients for every remat mode (slow tier: one compilation each)."""
    args = (_theta(3), _u0())
    grad = _loss_and_grad()
    new = jax.jit(lambda a: grad(a, saveat=SaveAt(steps=True), remat=remat))
    old = jax.jit(lambda a: grad(a, save_trajectory=True, **legacy))
    _same(new(args), old(args))


@pytest.mark.parametrize("unroll", ["auto", False, 2])
def test_constant_steps_traces_to_the_unroll_program(unroll):
    theta, u0 = _theta(), _u0()
    new = _jaxpr(lambda u: evolve(u, theta, stepsize_controller=ConstantSteps(unroll=unroll)), u0)
    assert new == _jaxpr(lambda u: evolve(u, theta, unroll=unroll), u0)
    if unroll == "auto":  # the default controller is today's default call
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
        ({"save_trajectory": True, "saveat": SaveAt()}, r"`save_trajectory=True` and `saveat="),
        ({"save_trajectory": False, "saveat": SaveAt(steps=True)}, r"save_trajectory.*saveat"),
        ({"remat": Remat("nested"), "remat_chunk": 2}, r"`remat_chunk=2` and `remat=Remat"),
        ({"unroll": 2, "stepsize_controller": ConstantSteps()}, r"`unroll=2` and `stepsize_"),
        ({"n_steps": 4}, r"`n_steps` is for a ControlPath.*N_t = 5"),
        ({"stepsize_controller": Adaptive(), "saveat": SaveAt(steps=True)}, r"SaveAt\(steps"),
        ({"stepsize_controller": Adaptive(), "remat": "step"}, r"`remat='step'` is not"),
        ({"stepsize_controller": Adaptive(), "remat": Remat("nested")}, r"remat='nested'"),
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
    old = evolve_path(u0, path, PreNormScheme(), 6, save_trajectory=True)
    _same(new, old)
    with pytest.raises(ValueError, match="`n_steps` is required when `controls` is a Control"):
        evolve(u0, path, PreNormScheme())
    with pytest.raises(ValueError, match=r"`dt` must be None when `controls` is a ControlPath"):
        evolve(u0, path, PreNormScheme(), n_steps=6, dt=0.25)
    with pytest.raises(ValueError, match="evolve_path runs n_steps uniform steps"):
        evolve_path(u0, path, PreNormScheme(), 6, stepsize_controller=Adaptive())


def test_adaptive_route_on_a_path_is_solve_adaptive():
    """solve_adaptive over the path's interval: the same computation, the same bits."""
    u0, opts = _u0(), {"rtol": 1e-4, "atol": 1e-4}
    path = _path()
    got = evolve(u0, path, PreNormScheme(), stepsize_controller=Adaptive(**opts))
    _same(got, solve_adaptive(u0, path, PreNormScheme(), **opts).u)


def test_adaptive_route_on_stacked_controls_is_the_piecewise_constant_path():
    """Stacked controls: solve_adaptive over [0, N_t Δt] of PiecewiseConstant(θ, Δt)."""
    u0, opts, theta = _u0(), {"rtol": 1e-4, "atol": 1e-4}, _theta(2)
    got = evolve(u0, theta, PreNormScheme(), dt=0.5, stepsize_controller=Adaptive(**opts))
    ref = solve_adaptive(u0, PiecewiseConstant(theta, tau=0.5), PreNormScheme(), **opts).u
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
