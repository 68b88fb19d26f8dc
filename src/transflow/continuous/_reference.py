"""Continuous-time reference solves with diffrax.

The reference of a convergence study is the sub-model's vector field
(:meth:`SubModel.vector_field`) solved by a high-order adaptive Runge–Kutta method
(Dopri8 by default) at tolerances far below the splitting errors being measured.
:func:`reference_error_estimate` compares two tolerances to bound the reference's own error.
"""

from __future__ import annotations

from collections.abc import Callable

import diffrax
import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float

from .._errors import check_number, check_times, check_values

__all__ = ["reference_solve", "reference_error_estimate"]

_SOLVERS = {"dopri8": diffrax.Dopri8, "tsit5": diffrax.Tsit5, "dopri5": diffrax.Dopri5}


def reference_solve(
    vector_field: Callable[[Array, Float[Array, "n d"]], Float[Array, "n d"]],
    u0: Float[Array, "n d"],
    *,
    t0: float = 0.0,
    t1: float = 1.0,
    rtol: float = 1e-12,
    atol: float = 1e-12,
    solver: str = "dopri8",
    ts: Float[Array, " k"] | None = None,
    max_steps: int = 100_000,
) -> Float[Array, "..."]:
    """Solve ``u_t = vector_field(t, u)`` on ``[t0, t1]`` with diffrax.

    Args:
        vector_field: ``(t, u) -> u_t``.
        u0: the initial state.
        rtol, atol: tolerances of the PID step-size controller (float64 recommended).
        solver: ``"dopri8"`` (order 8), ``"tsit5"`` or ``"dopri5"`` (order 5).
        ts: optional save times; default: only ``t1``.

    Returns:
        ``u(t1)`` (shape of ``u0``), or the states at ``ts`` (leading axis).

    Example:
        >>> import jax.numpy as jnp
        >>> from transflow.continuous import reference_solve
        >>> u = reference_solve(lambda t, u: -u, jnp.ones((1, 1)), rtol=1e-6, atol=1e-6)
        >>> abs(float(u[0, 0]) - float(jnp.exp(-1.0))) < 1e-5
        True

    Use float64 (``jax.config.update("jax_enable_x64", True)``) for tolerances below
    ~1e-6; the convergence studies use 1e-12.
    """
    if solver not in _SOLVERS:
        raise ValueError(f"`solver` must be one of {sorted(_SOLVERS)}, got {solver!r}.")
    for name, tol in (("rtol", rtol), ("atol", atol)):
        check_number(name, tol, "reference_solve", lower=0, example="1e-12")
    check_times(t0, t1, "reference_solve")
    u0 = check_values("u0", u0, "reference_solve")
    tol = jnp.asarray([rtol, atol], u0.dtype)
    ts = None if ts is None else jnp.asarray(ts, u0.dtype)
    return _solve(vector_field, u0, t0, t1, tol, solver, ts, max_steps)


@eqx.filter_jit
def _solve(vector_field, u0, t0, t1, tol, solver, ts, max_steps):
    # Tolerances are traced arrays: one compilation serves every tolerance.
    term = diffrax.ODETerm(lambda t, y, args: vector_field(t, y))
    saveat = diffrax.SaveAt(t1=True) if ts is None else diffrax.SaveAt(ts=ts)
    sol = diffrax.diffeqsolve(
        term,
        _SOLVERS[solver](),
        t0=t0,
        t1=t1,
        dt0=None,
        y0=u0,
        stepsize_controller=diffrax.PIDController(rtol=tol[0], atol=tol[1]),
        saveat=saveat,
        max_steps=max_steps,
    )
    return sol.ys[0] if ts is None else sol.ys


def reference_error_estimate(
    vector_field: Callable[[Array, Float[Array, "n d"]], Float[Array, "n d"]],
    u0: Float[Array, "n d"],
    *,
    t0: float = 0.0,
    t1: float = 1.0,
    tol: float = 1e-12,
    solver: str = "dopri8",
) -> tuple[Float[Array, "n d"], float]:
    """The reference at ``tol`` and an estimate of its error: the max-abs difference to a
    solve at ``tol/100``. Returns ``(u(t1), error_estimate)``."""
    check_number("tol", tol, "reference_error_estimate", lower=0, example="1e-12")
    kw = dict(t0=t0, t1=t1, solver=solver)
    u = reference_solve(vector_field, u0, rtol=tol, atol=tol, **kw)
    u_fine = reference_solve(vector_field, u0, rtol=tol / 100, atol=tol / 100, **kw)
    return u_fine, float(jnp.max(jnp.abs(u - u_fine)))
