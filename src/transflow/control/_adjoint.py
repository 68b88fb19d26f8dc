"""Continuous-time gradients: diffrax adjoints on the attention + linear sub-model.

The attention + linear sub-model (no projections, so it is a well-posed ODE,
docs/spec/continuous-model.md Q9)

    u_t = 𝒜(u; W_Q, W_K, W_V) + u W + b,     u(0) = u0,     ℓ = ½ ‖u(T) − v‖²,

is discretised by the Lie splitting of the paper's scheme (attention explicit Euler, then
linear explicit Euler, Δt = T/N each). The discrete adjoint (backpropagation through the
N steps) converges to the continuous adjoint gradient at first order as Δt → 0. The
continuous gradient is computed with diffrax through the integrator
(:func:`~transflow._integrate.solve_ode`; Dopri5, tight tolerances) and either
``RecursiveCheckpointAdjoint`` (discretise-then-optimise, checkpointed) or
``BacksolveAdjoint`` (optimise-then-discretise: the adjoint ODE solved backwards).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from .._controls import AttentionParams
from .._errors import (
    check_array,
    check_kind,
    check_number,
    check_same_shape,
    check_sequence,
    check_step,
    check_values,
)
from .._integrate import Adaptive, solve_ode
from .._operators import attention

__all__ = ["AttentionLinearControls", "discrete_loss", "continuous_loss", "adjoint_gradients"]


class AttentionLinearControls(eqx.Module):
    """Time-constant controls of the attention + linear sub-model."""

    attn: AttentionParams
    w: Float[Array, "d d"]
    b: Float[Array, " d"]

    def __check_init__(self):
        owner = "AttentionLinearControls"
        check_kind("attn", self.attn, AttentionParams, owner, "AttentionParams.random(...)")
        d = self.attn.wq.shape[-2]
        check_values("w", self.w, owner, shape=(d, d))
        check_values("b", self.b, owner, shape=(d,))

    @classmethod
    def random(
        cls, d: int, *, n_heads: int = 1, scale: float = 0.5, dtype=None, key: PRNGKeyArray
    ) -> AttentionLinearControls:
        dtype = dtype or jnp.result_type(float)
        k1, k2, k3 = jax.random.split(key, 3)
        attn = AttentionParams.random(d, n_heads=n_heads, scale=scale, dtype=dtype, key=k1)
        attn = jax.tree.map(lambda x: x.astype(dtype), attn)
        s = scale / d**0.5
        return cls(
            attn, s * jax.random.normal(k2, (d, d), dtype), 0.1 * jax.random.normal(k3, (d,), dtype)
        )

    def field(self, u: Float[Array, "n d"]) -> Float[Array, "n d"]:
        """The vector field 𝒜(u) + u W + b."""
        return attention(u, self.attn) + u @ self.w + self.b


def _check_loss_args(owner: str, theta, u0, target, t1) -> None:
    """A loss's arguments (differentiated under jit: types, shapes and a Python t1 only)."""
    check_kind("theta", theta, AttentionLinearControls, owner, "AttentionLinearControls.random")
    check_array("u0", u0, ndim=2, shape=(None, theta.w.shape[-1]))
    check_array("target", target)
    check_same_shape(("u0", "target"), u0, target, owner)
    check_number("t1", t1, owner, lower=0, example="1.0", traced_ok=True)


def discrete_loss(theta: AttentionLinearControls, u0, target, *, t1: float, n_steps: int):
    """ℓ(u_N) after N Lie steps (attention Euler, then linear Euler) with Δt = t1/N."""
    _check_loss_args("discrete_loss", theta, u0, target, t1)
    check_number("n_steps", n_steps, "discrete_loss", lower=0, integer=True, example="16")
    dt = t1 / n_steps

    def step(u, _):
        u = u + dt * attention(u, theta.attn)
        u = u + dt * (u @ theta.w + theta.b)
        return u, None

    u, _ = jax.lax.scan(step, u0, None, length=n_steps)
    return 0.5 * jnp.sum((u - target) ** 2)


def continuous_loss(
    theta: AttentionLinearControls,
    u0,
    target,
    *,
    t1: float,
    adjoint: str = "recursive",
    rtol: float = 1e-10,
    atol: float = 1e-10,
):
    """ℓ(u(T)) with u from the integrator's adaptive diffrax solve (Dopri5, first step
    t1/16): :func:`~transflow._integrate.solve_ode` with
    ``Adaptive(rtol, atol, solver="dopri5", dt0=t1/16, adjoint=adjoint)``.

    ``adjoint``: ``"recursive"`` (``RecursiveCheckpointAdjoint``) or ``"backsolve"``
    (``BacksolveAdjoint``).
    """
    _check_loss_args("continuous_loss", theta, u0, target, t1)
    if adjoint not in ("recursive", "backsolve"):
        raise ValueError(f"`adjoint` must be 'recursive' or 'backsolve', got {adjoint!r}.")
    options = Adaptive(rtol=rtol, atol=atol, solver="dopri5", dt0=t1 / 16, adjoint=adjoint)
    res = solve_ode(lambda t, u, th: th.field(u), u0, (0.0, t1), theta, options)
    return 0.5 * jnp.sum((res.u - target) ** 2)


def adjoint_gradients(theta, u0, target, *, t1: float = 1.0, refinements=(4, 8, 16, 32, 64)):
    """Gradients of the discrete scheme for N ∈ ``refinements`` and of both diffrax adjoints.

    Returns a dict: ``dt`` (list), ``errors`` (‖g_N − g_cont‖ / ‖g_cont‖ per N, against
    ``RecursiveCheckpointAdjoint``) and ``backsolve_vs_recursive`` (relative difference of
    the two continuous gradients). Gradients are with respect to every control and u0.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow.control._adjoint import AttentionLinearControls, adjoint_gradients
        >>> th = AttentionLinearControls.random(4, key=jax.random.key(0))
        >>> u0 = jax.random.normal(jax.random.key(1), (3, 4))
        >>> r = adjoint_gradients(th, u0, jnp.zeros((3, 4)), refinements=(8, 16))
        >>> r["errors"][1] < r["errors"][0]
        True
    """

    owner = "adjoint_gradients"
    check_kind("theta", theta, AttentionLinearControls, owner, "AttentionLinearControls.random")
    u0 = check_values("u0", u0, owner, ndim=2, shape=(None, theta.w.shape[-1]))
    target = check_values("target", target, owner)
    check_same_shape(("u0", "target"), u0, target, owner)
    check_step("t1", t1, owner)
    check_sequence("refinements", refinements, owner, example="(4, 8, 16)")

    def flat(g):
        return jnp.concatenate([jnp.ravel(x) for x in jax.tree.leaves(g)])

    def grad(loss, **kw):
        g = eqx.filter_jit(eqx.filter_grad(lambda tu: loss(tu[0], tu[1], target, t1=t1, **kw)))
        return flat(g((theta, u0)))

    g_rec = grad(continuous_loss, adjoint="recursive")
    g_back = grad(continuous_loss, adjoint="backsolve")
    norm = jnp.linalg.norm(g_rec)
    errors = [
        float(jnp.linalg.norm(grad(discrete_loss, n_steps=n) - g_rec) / norm) for n in refinements
    ]
    return {
        "dt": [t1 / n for n in refinements],
        "errors": errors,
        "backsolve_vs_recursive": float(jnp.linalg.norm(g_back - g_rec) / norm),
    }
