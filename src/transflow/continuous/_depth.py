"""Continuous depth: any number of steps, adaptive solves and the relaxed post-LN reading.

- :func:`evolve_path`: a :class:`~transflow.continuous.ControlPath` run with N uniform
  steps of a splitting scheme (θ sampled at the step midpoints).
- :class:`RelaxedLieScheme`: the paper's post-LN Lie scheme with every projection P
  (LayerNorm onto S1, ReLU onto S2) replaced by the relaxed sub-step
  ``u ← u + (Δt/τ)(P(u) − u)`` (an explicit Euler step of the penalty flow
  ``u' = −(u − P(u))/τ``, the gradient flow of ``dist(u, S)²/2τ``, a Moreau–Yosida
  regularisation of the normal cone N_S).
- :func:`vector_field`: the continuous right-hand side f(t, u) of a *consistent* scheme,
  ``f(t, u) = ∂/∂Δt step(u, θ(t), Δt) at Δt = 0`` (forward-mode AD in Δt).
- :func:`solve_adaptive`: ``u' = f(t, u)`` with diffrax (Tsit5, Dopri5 or Dopri8, a PID
  step-size controller), returning the number of vector-field evaluations.
- :func:`compare_adjoints`: the continuous adjoint (``BacksolveAdjoint``) against
  backpropagation through the adaptive solver's steps (``RecursiveCheckpointAdjoint``).

Which reading has which limit (docs/depth.md):

- the paper's :class:`~transflow.LieScheme`: P does not depend on Δt, so the scheme is not
  consistent with any ODE; as Δt → 0 each step still moves the state by O(1);
- :class:`RelaxedLieScheme` with τ fixed, Δt → 0: first-order convergence to the penalised
  ODE ``u' = 𝒜(u) + (P_{S1}(u) − u)/τ + ½ c [Σ_j (u W_j + b_j) + m (act(u) − u)/τ]
  + (P_{S1}'(u) − u)/τ`` (c = 1 or 2 the FFN branch step, m the number of activations);
- τ → 0 (at fixed Δt ≤ τ… with Δt/τ → 1 it *is* the paper's scheme: Δt = τ gives the exact
  projections); τ → 0 in the ODE: the penalty forces u onto S, the formal limit being the
  projected (normal-cone) dynamics of the paper's inclusion, where it exists;
- :class:`~transflow.PreNormScheme`: consistent (explicit Euler on 𝒜∘P_{S1} + ℱ∘P_{S1'}).
"""

from __future__ import annotations

from typing import Any, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from .._errors import check_choice
from .._execution import Adaptive
from .._grid import Grid
from .._operators import activation_fn
from .._splitting import AbstractScheme, LieScheme, PreNormScheme, _ffn_substep, evolve
from ._paths import ControlPath

__all__ = [
    "RelaxedLieScheme",
    "evolve_path",
    "vector_field",
    "solve_adaptive",
    "AdaptiveResult",
    "SOLVERS",
    "compare_adjoints",
]

#: Adaptive diffrax solvers of :func:`solve_adaptive` and their new vector-field
#: evaluations per step (all FSAL: the tableau's stages minus the shared first one;
#: one more evaluation at the start). Tsit5/Dopri5: order 5 (7 stages), Dopri8: order 8
#: (14 stages).
SOLVERS = {"tsit5": 6, "dopri5": 6, "dopri8": 13}


def _diffrax_solver(name: str):
    import diffrax

    if name not in SOLVERS:
        raise ValueError(f"`solver` must be one of {sorted(SOLVERS)}, got {name!r}.")
    return {"tsit5": diffrax.Tsit5, "dopri5": diffrax.Dopri5, "dopri8": diffrax.Dopri8}[name]()


class RelaxedLieScheme(LieScheme):
    """The post-LN Lie scheme with relaxed projections ``u + (Δt/τ)(P(u) − u)``.

    Every projection of :class:`~transflow.LieScheme` (the two LayerNorms and the S2
    activations between FFN sub-steps) becomes a relaxation towards the set at rate 1/τ;
    the attention and FFN sub-steps and the ½-relaxation are unchanged. With Δt = τ it is
    the paper's scheme (``u + (P(u) − u) = P(u)``); for fixed τ the scheme is consistent
    and refines at first order to the penalised ODE of :func:`vector_field`. Δt/τ > 1
    over-relaxes (past the set), so evaluate with Δt ≤ τ. FFN sub-steps must be residual
    (lifting maps ``Z W + b`` have no Δt).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow import LayerControls, LieScheme
        >>> from transflow.continuous import RelaxedLieScheme
        >>> theta = LayerControls.random(4, key=jax.random.key(0))
        >>> u = jax.random.normal(jax.random.key(1), (3, 4))
        >>> a = RelaxedLieScheme(tau=1.0).step(u, theta, 1.0)  # Δt = τ: the paper's layer
        >>> bool(jnp.allclose(a, LieScheme().step(u, theta, 1.0), atol=1e-5))
        True
    """

    tau: float = eqx.field(static=True, default=1.0)

    def __check_init__(self):
        if isinstance(self.tau, bool) or not isinstance(self.tau, int | float) or not self.tau > 0:
            raise ValueError(
                f"RelaxedLieScheme: `tau` (the relaxation time of the projections) must be a "
                f"number > 0, got {self.tau!r}; tau = dt reproduces the paper's projections."
            )
        check_choice("ffn_branch_dt", self.ffn_branch_dt, ("dt", "2dt"))
        check_choice("implementation", self.implementation, ("auto", "dense", "chunked"))

    def step(
        self,
        u,
        controls,
        dt=1.0,
        *,
        grid=None,
        causal=False,
        return_substeps=False,
        key_padding_mask=None,
        attention_mask=None,
    ):
        c = controls
        ffn = c.ffn
        if not all(ffn.residual):
            raise ValueError(
                "RelaxedLieScheme needs residual FFN sub-steps (square W_j: Ω_y → Ω_y); "
                "lifting sub-steps (d_ff set) have no Δt, so no consistent relaxed reading."
            )
        r = dt / self.tau
        masks = {}
        if key_padding_mask is not None:
            masks["key_padding_mask"] = key_padding_mask
        if attention_mask is not None:
            masks["attention_mask"] = attention_mask
        u1 = self.attention_substep(u, c.attn, dt, grid=grid, causal=causal, **masks)
        u2 = u1 + r * (self.norm_substep(u1, c.norm1, grid=grid) - u1)
        ffn_dt = dt if self.ffn_branch_dt == "dt" else 2 * dt
        act = activation_fn(ffn.activation)
        z, states = u2, []
        J = ffn.num_substeps
        for j in range(J):
            z = _ffn_substep(z, ffn, j, ffn_dt)
            if j < J - 1 or ffn.activation_on_last:
                z = z + r * (act(z) - z)
            states.append(z)
        u5 = 0.5 * (z + u2)
        u6 = u5 + r * (self.norm_substep(u5, c.norm2, grid=grid, closing=True) - u5)
        if not return_substeps:
            return u6
        return u6, dict(zip(self.substep_names(c), (u1, u2, *states, u5, u6)))


def _check_consistent(scheme) -> None:
    from .._causal import CausalScheme

    while isinstance(scheme, CausalScheme):  # causal attention: the same consistency
        scheme = scheme.inner
    if isinstance(scheme, RelaxedLieScheme | PreNormScheme):
        return
    if isinstance(scheme, LieScheme):
        raise TypeError(
            "the paper's LieScheme is not consistent with an ODE (its projections do not "
            "depend on Δt), so it has no vector field; use RelaxedLieScheme(tau=...) (the "
            "relaxed post-LN reading) or PreNormScheme."
        )
    if not isinstance(scheme, AbstractScheme):
        raise TypeError(f"`scheme` must be an AbstractScheme, got {type(scheme).__name__}.")


def vector_field(scheme: AbstractScheme, path: ControlPath, *, grid: Grid | None = None):
    """The right-hand side ``f(t, u) = ∂_Δt scheme.step(u, θ(t), Δt) |_{Δt=0}``.

    For a consistent one-step scheme, ``step(u, θ, Δt) = u + Δt f(u) + O(Δt²)``; f is
    computed exactly by forward-mode AD in Δt (one JVP of one step). Consistent schemes:
    :class:`~transflow.PreNormScheme` (f = 𝒜(P_{S1} u) + ℱ(P_{S1'} u)) and
    :class:`RelaxedLieScheme`; the paper's :class:`~transflow.LieScheme` is refused.

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
    _check_consistent(scheme)
    if not isinstance(path, ControlPath):
        raise TypeError(f"`path` must be a ControlPath, got {type(path).__name__}.")

    def f(t, u):
        theta = path(t)

        def step(dt):
            return scheme.step(u, theta, dt, grid=grid)

        zero = jnp.zeros((), u.dtype)
        return jax.jvp(step, (zero,), (jnp.ones_like(zero),))[1]

    return f


def evolve_path(
    u0: Float[Array, "n d"],
    path: ControlPath,
    scheme: AbstractScheme | None = None,
    n_steps: int = 1,
    *,
    grid: Grid | None = None,
    where: Literal["midpoint", "left"] = "midpoint",
    **evolve_kwargs,
):
    """``u0`` evolved over the path's interval with ``n_steps`` uniform steps.

    Equivalent to ``evolve(u0, path.sample(n_steps, where), scheme,
    dt=path.step_size(n_steps), grid=grid, **evolve_kwargs)``, and with ``where="midpoint"``
    to ``evolve(u0, path, scheme, n_steps=n_steps, ...)``. ``evolve_kwargs`` take the
    execution options of :func:`transflow.evolve` (``saveat``, ``remat``,
    ``stepsize_controller=ConstantSteps(...)``); for an adaptive solve call
    ``evolve(u0, path, scheme, stepsize_controller=Adaptive(...))`` or
    :func:`solve_adaptive`.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow import LayerControls, PreNormScheme
        >>> from transflow.continuous import evolve_path, init_path
        >>> draw = lambda k: LayerControls.random(4, key=k)
        >>> path = init_path("linear", draw, 3, key=jax.random.key(0), t1=2.0)
        >>> u0 = jax.random.normal(jax.random.key(1), (3, 4))
        >>> [evolve_path(u0, path, PreNormScheme(), n).shape for n in (2, 16)]
        [(3, 4), (3, 4)]
    """
    if not isinstance(path, ControlPath):
        raise TypeError(f"`path` must be a ControlPath, got {type(path).__name__}.")
    if isinstance(evolve_kwargs.get("stepsize_controller"), Adaptive):
        raise ValueError(
            "evolve_path runs n_steps uniform steps, so `stepsize_controller` must be "
            "ConstantSteps(...), got Adaptive(...); for the adaptive solve call "
            "transflow.evolve(u0, path, scheme, stepsize_controller=Adaptive(...))."
        )
    return evolve(
        u0,
        path.sample(n_steps, where),
        scheme,
        dt=path.step_size(n_steps),
        grid=grid,
        **evolve_kwargs,
    )


class AdaptiveResult(eqx.Module):
    """What :func:`solve_adaptive` returns.

    Attributes:
        u: the state at the end of the interval.
        num_steps: the solver's steps (accepted + rejected).
        num_accepted_steps, num_rejected_steps: the split.
        nfev: vector-field evaluations, ``1 + s · num_steps`` (FSAL solvers: s =
            :data:`SOLVERS` new stages per attempted step, 6 for Tsit5/Dopri5 and 13 for
            Dopri8, one evaluation at the start).
    """

    u: Array
    num_steps: Array
    num_accepted_steps: Array
    num_rejected_steps: Array
    nfev: Array


def _check_tol(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(
            f"`{name}` must be a positive number (a tolerance of the adaptive solve), got "
            f"{value!r}; e.g. {name}=1e-5."
        )
    return float(value)


def _adjoint(adjoint):
    import diffrax

    if isinstance(adjoint, diffrax.AbstractAdjoint):
        return adjoint
    table = {
        "recursive": diffrax.RecursiveCheckpointAdjoint,
        "backsolve": diffrax.BacksolveAdjoint,
    }
    if adjoint not in table:
        raise ValueError(
            "`adjoint` must be 'recursive' (backpropagation through the solver's steps), "
            f"'backsolve' (the continuous adjoint, solved backwards) or a diffrax adjoint, "
            f"got {adjoint!r}."
        )
    return table[adjoint]()


def solve_adaptive(
    u0: Float[Array, "n d"],
    path: ControlPath,
    scheme: AbstractScheme,
    *,
    grid: Grid | None = None,
    solver: str = "tsit5",
    rtol: float = 1e-5,
    atol: float = 1e-5,
    dt0: float | None = None,
    max_steps: int = 4096,
    adjoint: Any = "recursive",
) -> AdaptiveResult:
    """``u' = f(t, u)`` (:func:`vector_field`) over the path's interval, adaptively.

    Args:
        u0: the initial state.
        path: the controls θ(t).
        scheme: a consistent scheme (:class:`~transflow.PreNormScheme`,
            :class:`RelaxedLieScheme`) whose continuous limit is solved.
        solver: ``"tsit5"`` or ``"dopri5"`` (diffrax, order 5 with an embedded order-4
            error estimate) or ``"dopri8"`` (order 8), with a
            :class:`diffrax.PIDController` of ``rtol``/``atol``.
        dt0: the first step (default: a quarter of the interval).
        adjoint: ``"recursive"`` (diffrax's ``RecursiveCheckpointAdjoint``:
            backpropagation through the solver), ``"backsolve"`` (``BacksolveAdjoint``:
            the continuous adjoint ODE solved backwards) or a diffrax adjoint object.

    Returns:
        An :class:`AdaptiveResult` (the final state and the evaluation counts).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow import LayerControls, PreNormScheme
        >>> from transflow.continuous import evolve_path, init_path, solve_adaptive
        >>> path = init_path("legendre", lambda k: LayerControls.random(4, key=k), 2,
        ...                  key=jax.random.key(0))
        >>> u0 = jax.random.normal(jax.random.key(1), (3, 4))
        >>> res = solve_adaptive(u0, path, PreNormScheme(), rtol=1e-6, atol=1e-6)
        >>> err = [float(jnp.max(jnp.abs(res.u - evolve_path(u0, path, PreNormScheme(), n))))
        ...        for n in (64, 256)]  # fixed steps converge to it at first order
        >>> round(err[0] / err[1]), int(res.nfev) == 1 + 6 * int(res.num_steps)
        (4, True)
    """
    import diffrax

    rtol, atol = _check_tol("rtol", rtol), _check_tol("atol", atol)
    diffrax_solver = _diffrax_solver(solver)
    _check_consistent(scheme)
    t0, t1 = path.interval
    dtype = jnp.result_type(u0)

    def rhs(t, u, p):
        return vector_field(scheme, p, grid=grid)(t, u)

    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(rhs),
        diffrax_solver,
        t0=jnp.asarray(t0, dtype),
        t1=jnp.asarray(t1, dtype),
        dt0=jnp.asarray((t1 - t0) / 4 if dt0 is None else dt0, dtype),
        y0=u0,
        args=path,
        stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol),
        adjoint=_adjoint(adjoint),
        max_steps=max_steps,
    )
    n = sol.stats["num_steps"]
    return AdaptiveResult(
        sol.ys[-1],
        n,
        sol.stats["num_accepted_steps"],
        sol.stats["num_rejected_steps"],
        1 + SOLVERS[solver] * n,
    )


def compare_adjoints(
    u0: Float[Array, "n d"],
    path: ControlPath,
    scheme: AbstractScheme,
    *,
    target: Float[Array, "n d"] | None = None,
    rtol: float = 1e-10,
    atol: float = 1e-10,
    solver: str = "tsit5",
    max_steps: int = 100_000,
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

    Returns:
        ``{"recursive", "backsolve"}`` (the flat gradients), ``"relative_difference"``
        ``‖g_back − g_rec‖ / ‖g_rec‖``, ``"loss"`` and ``"num_steps"`` of the forward solve.

    Example:
        >>> import jax
        >>> from transflow import LayerControls, PreNormScheme
        >>> from transflow.continuous import compare_adjoints, init_path
        >>> draw = lambda k: LayerControls.random(2, n_heads=1, activation="tanh", key=k)
        >>> path = init_path("linear", draw, 2, key=jax.random.key(0), smooth=False)
        >>> u0 = jax.random.normal(jax.random.key(1), (2, 2))
        >>> r = compare_adjoints(u0, path, PreNormScheme(), rtol=1e-5, atol=1e-5)
        >>> r["relative_difference"] < 1e-3
        True
    """
    rtol, atol = _check_tol("rtol", rtol), _check_tol("atol", atol)
    _diffrax_solver(solver)
    _check_consistent(scheme)
    target = jnp.ones_like(u0) if target is None else target

    def loss(pu, adjoint):
        res = solve_adaptive(
            pu[1],
            pu[0],
            scheme,
            solver=solver,
            rtol=rtol,
            atol=atol,
            adjoint=adjoint,
            max_steps=max_steps,
        )
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
