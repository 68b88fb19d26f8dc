"""Sub-flows: how one operator of a splitting is solved over a sub-interval.

A flow has the signature ``flow(t0, t1, u, speed) -> u`` and approximates the solution at
``t1`` of ``v_t = speed · f(t, v)``, ``v(t0) = u`` (docs/spec/continuous-model.md §3.7: explicit,
implicit/closed form, or exact).

- :func:`euler_flow`: one explicit Euler step (the paper's attention and FFN sub-steps);
  first order, so a scheme built from it is at most first order.
- :func:`rk4_flow`: ``n_sub`` classical Runge–Kutta steps (order 4): accurate enough
  for Strang's order 2.
- :func:`linear_flow_exact`: ``u ↦ u · expm(speed (t1 − t0) A)`` for a constant matrix.
- :func:`projection_flow`: the flow of a normal-cone operator N_S for any positive time
  is the projection onto S (its resolvent, docs/spec/continuous-model.md §3.3 / §8.3);
  ``project(t1, u)``.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from .._errors import check_callable, check_number, check_values
from ._schemes import Flow

__all__ = ["euler_flow", "rk4_flow", "linear_flow_exact", "projection_flow", "make_flow"]

VectorField = Callable[[Array, Float[Array, "n d"]], Float[Array, "n d"]]


def euler_flow(f: VectorField) -> Flow:
    """Explicit Euler: ``u + speed (t1 − t0) f(t0, u)``.

    Example:
        >>> import jax.numpy as jnp
        >>> from transflow.continuous import euler_flow
        >>> flow = euler_flow(lambda t, u: -u)
        >>> float(flow(0.0, 0.5, jnp.ones(()), 1.0))
        0.5
    """
    check_callable("f", f, "euler_flow", "lambda t, u: -u")

    def flow(t0, t1, u, speed=1.0):
        return u + speed * (t1 - t0) * f(t0, u)

    return flow


def rk4_flow(f: VectorField, n_sub: int = 1) -> Flow:
    """``n_sub`` steps of the classical fourth-order Runge–Kutta method on [t0, t1]."""
    if not isinstance(n_sub, int) or n_sub < 1:
        raise ValueError(f"`n_sub` must be a positive int, got {n_sub!r}.")

    def flow(t0, t1, u, speed=1.0):
        h = (t1 - t0) / n_sub

        def g(t, v):
            return speed * f(t, v)

        def one(i, v):
            t = t0 + i * h
            k1 = g(t, v)
            k2 = g(t + h / 2, v + h / 2 * k1)
            k3 = g(t + h / 2, v + h / 2 * k2)
            k4 = g(t + h, v + h * k3)
            return v + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)

        if n_sub == 1:
            return one(0, u)
        return jax.lax.fori_loop(0, n_sub, one, u)

    return flow


def linear_flow_exact(a: Float[Array, "d d"], b: Float[Array, " d"] | None = None) -> Flow:
    """Exact flow of ``u_t = u A`` (row-vector convention): ``u · expm(speed (t1−t0) A)``.

    With a bias ``b`` the flow of ``u_t = u A + b`` is computed exactly through the
    augmented matrix ``[[A, 0], [b, 0]]``.
    """
    a = check_values("a", a, "linear_flow_exact", ndim=2, square=True)
    d = a.shape[0]
    if b is not None:
        b = check_values("b", b, "linear_flow_exact", shape=(d,))
        aug = jnp.zeros((d + 1, d + 1), a.dtype).at[:d, :d].set(a).at[d, :d].set(b)
    else:
        aug = a

    def flow(t0, t1, u, speed=1.0):
        e = jax.scipy.linalg.expm(speed * (t1 - t0) * aug)
        if b is None:
            return u @ e
        return u @ e[:d, :d] + e[d, :d]

    return flow


def projection_flow(project: Callable[[Array, Float[Array, "n d"]], Float[Array, "n d"]]) -> Flow:
    """Flow of a normal-cone operator: ``project(t1, u)`` for every duration and speed."""
    check_callable("project", project, "projection_flow", "lambda t, u: u")

    def flow(t0, t1, u, speed=1.0):
        del t0, speed
        return project(t1, u)

    return flow


def make_flow(f: VectorField, solver: str = "rk4", n_sub: int = 1) -> Flow:
    """``solver="euler"`` (:func:`euler_flow`) or ``"rk4"`` (:func:`rk4_flow`)."""
    check_number("n_sub", n_sub, "make_flow", lower=0, integer=True, example="1")
    if solver == "euler":
        return euler_flow(f)
    if solver == "rk4":
        return rk4_flow(f, n_sub)
    raise ValueError(f"`solver` must be 'euler' or 'rk4', got {solver!r}.")
