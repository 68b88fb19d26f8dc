"""A scheme defined outside transflow (issue 47): the three-stage strong-stability-preserving
Runge–Kutta method of Shu and Osher on the pre-norm field f = a + g, written against the
public contract only (no edit under src/). Registered with one line."""

import jax.numpy as jnp

from transflow import register_scheme
from transflow.schemes import AbstractExplicitScheme, linear_sub_fields


class SSPRK3Scheme(AbstractExplicitScheme):
    """u¹ = u + Δt f(u); u² = ¾u + ¼(u¹ + Δt f(u¹)); u³ = ⅓u + ⅔(u² + Δt f(u²)).

    Order 3 for frozen controls (θ at the step midpoint, ``nodes = (0.5,)``); stability
    polynomial 1 + z + z²/2 + z³/6."""

    @property
    def order(self) -> int:
        return 3

    @property
    def nodes(self) -> tuple[float, ...]:
        return (0.5,)

    def substep_names(self, controls):
        return ("stage1", "stage2", "stage3")

    def _compose(self, u, dt, sub):
        f = lambda v: sub.attn(v) + sub.ffn(v)  # noqa: E731
        u1 = u + dt * f(u)
        u2 = 0.75 * u + 0.25 * (u1 + dt * f(u1))
        u3 = u / 3 + (2 / 3) * (u2 + dt * f(u2))
        return u3, (u1, u2, u3)

    def advance(self, u, controls, dt, *, ops):
        return self._compose(u, dt, self.sub_fields(controls, ops, "prenorm"))

    def stability_function(self, z_attention, z_ffn):
        z = z_attention + z_ffn
        return 1 + z + z * z / 2 + z**3 / 6

    def linear_step_matrix(self, j_attention, j_ffn, dt):
        eye = jnp.eye(j_attention.shape[0], dtype=j_attention.dtype)
        return self._compose(eye, dt, linear_sub_fields(j_attention, j_ffn))[0]


register_scheme("ssprk3", SSPRK3Scheme)
