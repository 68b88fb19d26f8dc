"""Continuous-time solves: a consistent scheme's limit along a control path, adaptively.

A layer below :func:`transflow.evolve` (whose ``stepsize_controller=Adaptive(...)`` route
is :func:`solve_adaptive`), above the schemes and the control paths (``transflow._paths``);
exported by :mod:`transflow.continuous`. (Training and evaluation at a depth live in
``transflow.control._at_depth``; a trained model's depth behaviour in
``transflow.analysis._across_depth``.)

- :func:`vector_field`: the continuous right-hand side f(t, u) of a *consistent* scheme,
  ``f(t, u) = ∂/∂Δt step(u, θ(t), Δt) at Δt = 0`` (forward-mode AD in Δt,
  :meth:`transflow.AbstractScheme.vector_field`).
- :func:`solve_adaptive`: ``u' = f(t, u)`` with diffrax (Tsit5, Dopri5 or Dopri8, a PID
  step-size controller; the integrator ``transflow._integrate.solve_ode``, with the
  :class:`~transflow.Adaptive` options passed whole), returning the number of
  vector-field evaluations.
- :func:`compare_adjoints`: the continuous adjoint (``BacksolveAdjoint``) against
  backpropagation through the adaptive solver's steps (``RecursiveCheckpointAdjoint``).

The relaxed post-LN reading :class:`~transflow.continuous.RelaxedLieScheme` (every
projection P replaced by ``u ← u + (Δt/τ)(P(u) − u)``, an explicit Euler step of the
penalty flow ``u' = −(u − P(u))/τ``, a Moreau–Yosida regularisation of the normal cone
N_S) lives with the Lie scheme in ``transflow.schemes._lie``; fixed-step runs of a path
(:func:`~transflow.continuous.evolve_path`) with :func:`transflow.evolve`.

Which reading has which limit (docs/depth.md):

- the paper's :class:`~transflow.LieScheme`: P does not depend on Δt, so the scheme is not
  consistent with any ODE; as Δt → 0 each step still moves the state by O(1);
- :class:`~transflow.continuous.RelaxedLieScheme` with τ fixed, Δt → 0: first-order
  convergence to the penalised ODE
  ``u' = 𝒜(u) + (P_{S1}(u) − u)/τ + ½ c [Σ_j (u W_j + b_j) + m (act(u) − u)/τ]
  + (P_{S1}'(u) − u)/τ`` (c = 1 or 2 the FFN branch step, m the number of activations);
- τ → 0 (at fixed Δt ≤ τ… with Δt/τ → 1 it *is* the paper's scheme: Δt = τ gives the exact
  projections); τ → 0 in the ODE: the penalty forces u onto S, the formal limit being the
  projected (normal-cone) dynamics of the paper's inclusion, where it exists;
- :class:`~transflow.PreNormScheme`: consistent (explicit Euler on 𝒜∘P_{S1} + ℱ∘P_{S1'}).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from ._controls import LayerControls
from ._errors import check_kind, check_same_shape, check_values
from ._grid import Grid
from ._integrate import Adaptive, AdaptiveResult, check_option, solve_ode
from ._paths import ControlPath
from .schemes._base import AbstractScheme, check_consistent, ode_field

__all__ = ["vector_field", "solve_adaptive", "compare_adjoints"]

#: The forward solve of :func:`compare_adjoints` unless given: tolerances far below the
#: difference of the two adjoints being measured.
_TIGHT = Adaptive(rtol=1e-10, atol=1e-10, max_steps=100_000)


def vector_field(scheme: AbstractScheme, path: ControlPath, *, grid: Grid | None = None):
    """The right-hand side ``f(t, u) = ∂_Δt scheme.step(u, θ(t), Δt) |_{Δt=0}``.

    For a consistent one-step scheme, ``step(u, θ, Δt) = u + Δt f(u) + O(Δt²)``; f is
    computed exactly by forward-mode AD in Δt (one JVP of one step). Consistent schemes:
    :class:`~transflow.PreNormScheme` (f = 𝒜(P_{S1} u) + ℱ(P_{S1'} u)) and
    :class:`~transflow.continuous.RelaxedLieScheme`; the paper's
    :class:`~transflow.LieScheme` is refused.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow import LayerControls, PreNormScheme
        >>> from transflow.continuous import PiecewiseConstant, stack_leading, vector_field
        >>> theta = LayerControls.random(4, key=jax.random.key(0))
        >>> f = vector_field(PreNormScheme(), PiecewiseConstant(stack_leading([theta])))
        >>> u = jax.random.normal(jax.random.key(1), (3, 4))
        >>> h = 1e-4  # f ≈ (step(u, h) − u)/h
        >>> fd = (PreNormScheme().step(u, theta, h) - u) / h
        >>> bool(jnp.allclose(f(0.5, u), fd, atol=1e-2))
        True
    """
    check_kind("scheme", scheme, AbstractScheme, "vector_field", "pass e.g. PreNormScheme()")
    if grid is not None:
        check_kind("grid", grid, Grid, "vector_field", "pass e.g. Grid.index(n, d) or None")
    field = ode_field(scheme, grid=grid)
    if not isinstance(path, ControlPath):
        raise TypeError(f"`path` must be a ControlPath, got {type(path).__name__}.")
    return lambda t, u: field(t, u, path)


def solve_adaptive(
    u0: Float[Array, "n d"],
    path: ControlPath,
    scheme: AbstractScheme,
    stepsize_controller: Adaptive | None = None,
    *,
    grid: Grid | None = None,
    split: bool = False,
) -> AdaptiveResult:
    """``u' = f(t, u)`` (:func:`vector_field`) over the path's interval, adaptively.

    Args:
        u0: the initial state.
        path: the controls θ(t).
        scheme: a consistent scheme (:class:`~transflow.PreNormScheme`,
            :class:`~transflow.continuous.RelaxedLieScheme`) whose continuous limit is solved.
        stepsize_controller: a :class:`~transflow.Adaptive` (``None``: ``Adaptive()``),
            passed whole to the integrator: the diffrax solver (``"tsit5"``,
            ``"dopri5"``: order 5 with an embedded order-4 error estimate, or
            ``"dopri8"``: order 8), the tolerances of its :class:`diffrax.PIDController`,
            the first step (default: a quarter of the interval), the step limit and the
            adjoint (``"recursive"``: diffrax's ``RecursiveCheckpointAdjoint``,
            backpropagation through the solver; ``"backsolve"``: ``BacksolveAdjoint``,
            the continuous adjoint ODE solved backwards; or a diffrax adjoint object).
        split: solve piece by piece (:meth:`ControlPath.pieces`: at every layer boundary
            of a per-layer path, every knot of a piecewise-linear one), each piece with a
            fresh controller and ``dt0``, so no step crosses a jump of θ or of θ'. Off
            (default): one solve that does not know where θ jumps; its step-size controller
            finds each jump by rejected steps (on a random d = 8 per-layer model at 1e-8:
            32 % more field evaluations for about the same error; docs/depth.md). The
            counts are summed over the pieces.

    Returns:
        An :class:`AdaptiveResult` (the final state and the evaluation counts).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow import Adaptive, LayerControls, PreNormScheme
        >>> from transflow.continuous import evolve_path, init_path, solve_adaptive
        >>> path = init_path("legendre", lambda k: LayerControls.random(4, key=k), 2,
        ...                  key=jax.random.key(0))
        >>> u0 = jax.random.normal(jax.random.key(1), (3, 4))
        >>> res = solve_adaptive(u0, path, PreNormScheme(), Adaptive(rtol=1e-6, atol=1e-6))
        >>> err = [float(jnp.max(jnp.abs(res.u - evolve_path(u0, path, PreNormScheme(), n))))
        ...        for n in (64, 256)]  # fixed steps converge to it at first order
        >>> round(err[0] / err[1]), int(res.nfev) == 1 + 6 * int(res.num_steps)
        (4, True)
    """
    controller = check_option(
        "stepsize_controller", stepsize_controller, Adaptive, "Adaptive(rtol=1e-6, atol=1e-6)"
    )
    rhs = ode_field(scheme, grid=grid)
    u0 = _check_state("u0", u0, path, "solve_adaptive")

    def solve(u, interval, p):
        return solve_ode(rhs, u, interval, p, controller)

    if not split:
        return solve(u0, path.interval, path)
    results = []
    u = u0
    for a, b, piece in path.pieces():
        results.append(solve(u, (a, b), piece))
        u = results[-1].u
    total = lambda name: sum(getattr(r, name) for r in results)  # noqa: E731
    return AdaptiveResult(
        u=u,
        num_steps=total("num_steps"),
        num_accepted_steps=total("num_accepted_steps"),
        num_rejected_steps=total("num_rejected_steps"),
        nfev=total("nfev"),
    )


def _check_state(name: str, u0, path, owner: str):
    """``u0`` as a finite ``(n, d)`` array whose d is the path's (the d of θ(t0), read
    from shapes only: :func:`equinox.filter_eval_shape`, no evaluation)."""
    u0 = check_values(name, u0, owner, ndim=2)
    if isinstance(path, ControlPath):
        theta = eqx.filter_eval_shape(path, path.interval[0])
        if isinstance(theta, LayerControls) and u0.shape[1] != theta.d_model:
            raise ValueError(
                f"{owner}: `{name}` has shape {tuple(u0.shape)}; expected d = {theta.d_model} "
                "features on axis 1 (the d of the path's controls)."
            )
    return u0


def compare_adjoints(
    u0: Float[Array, "n d"],
    path: ControlPath,
    scheme: AbstractScheme,
    stepsize_controller: Adaptive | None = None,
    *,
    target: Float[Array, "n d"] | None = None,
) -> dict[str, Any]:
    """The continuous adjoint against backpropagation through the adaptive solve.

    The gradient of ``ℓ = ½‖u(T) − target‖²`` (``target`` defaults to ones) with respect
    to every inexact array of ``path`` and to ``u0``, where u(T) is
    :func:`solve_adaptive`'s, by ``BacksolveAdjoint`` (the adjoint ODE solved backwards,
    optimise-then-discretise) and by ``RecursiveCheckpointAdjoint`` (the exact derivative
    of the solver's steps, discretise-then-optimise). Both approximate the same gradient
    with an error set by the tolerances, **if the vector field is C¹ in u**: with the
    paper's ReLU activation f is only Lipschitz (a kink where a pre-activation crosses
    0), the adjoint equation has discontinuous coefficients, the step-size controller
    does not see them, and the two gradients differ by ~1e-6 however tight the
    tolerances (docs/depth.md). Use a smooth activation (``tanh``, ``gelu``) to check the
    adjoint itself.

    ``stepsize_controller`` is the forward solve's :class:`~transflow.Adaptive` (``None``:
    ``Adaptive(rtol=1e-10, atol=1e-10, max_steps=100_000)``); its ``adjoint`` is replaced by
    each of the two.

    Returns:
        ``{"recursive", "backsolve"}`` (the flat gradients), ``"relative_difference"``
        ``‖g_back − g_rec‖ / ‖g_rec‖``, ``"loss"`` and ``"num_steps"`` of the forward solve.

    Example:
        >>> import jax
        >>> from transflow import Adaptive, LayerControls, PreNormScheme
        >>> from transflow.continuous import compare_adjoints, init_path
        >>> draw = lambda k: LayerControls.random(2, n_heads=1, activation="tanh", key=k)
        >>> path = init_path("linear", draw, 2, key=jax.random.key(0), smooth=False)
        >>> u0 = jax.random.normal(jax.random.key(1), (2, 2))
        >>> r = compare_adjoints(u0, path, PreNormScheme(), Adaptive(rtol=1e-5, atol=1e-5))
        >>> r["relative_difference"] < 1e-3
        True
    """
    controller = _TIGHT if stepsize_controller is None else stepsize_controller
    controller = check_option(
        "stepsize_controller", controller, Adaptive, "Adaptive(rtol=1e-10, atol=1e-10)"
    )
    owner = "compare_adjoints"
    check_kind("path", path, ControlPath, owner, "pass e.g. PiecewiseConstant(theta)")
    u0 = _check_state("u0", u0, path, owner)
    check_kind("scheme", scheme, AbstractScheme, owner, "pass e.g. PreNormScheme()")
    check_consistent(scheme)
    if target is None:
        target = jnp.ones_like(u0)
    else:
        target = check_values("target", target, owner)
        check_same_shape(("u0", "target"), u0, target, owner)

    def loss(pu, adjoint):
        options = dataclasses.replace(controller, adjoint=adjoint)
        res = solve_adaptive(pu[1], pu[0], scheme, options)
        return 0.5 * jnp.sum((res.u - target) ** 2), res.num_steps

    out: dict[str, Any] = {}
    for adjoint in ("recursive", "backsolve"):
        (value, n), g = eqx.filter_value_and_grad(lambda pu, a=adjoint: loss(pu, a), has_aux=True)(
            (path, u0)
        )
        leaves = jax.tree.leaves(eqx.filter(g, eqx.is_inexact_array))
        out[adjoint] = jnp.concatenate([jnp.ravel(x) for x in leaves])
        out["loss"], out["num_steps"] = float(value), int(n)
    norm = jnp.linalg.norm(out["recursive"])
    out["relative_difference"] = float(jnp.linalg.norm(out["backsolve"] - out["recursive"]) / norm)
    return out
