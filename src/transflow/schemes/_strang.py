"""The Strang family: Strang splitting of attention and FFN, the Macaron layer."""

from __future__ import annotations

from typing import Literal

import equinox as eqx
import jax.numpy as jnp

from .._controls import LayerControls
from .._errors import check_choice
from ._subfields import (
    AbstractExplicitScheme,
    Field,
    SubFields,
    _is_staged,
    linear_sub_fields,
    split_substeps,
)

__all__ = ["StrangScheme"]


class StrangScheme(AbstractExplicitScheme):
    """Strang splitting of attention and FFN: the Macaron layer (half FFN, attention, half FFN).

    ``form="prenorm"``: each sub-flow integrates a sub-field behind its projection,

        u¹ = Φ^g_{Δt/2}(u),   u² = Φ^a_Δt(u¹),   u^{n+1} = Φ^g_{Δt/2}(u²),

    with a(u) = 𝒜(P_{S1}(u)) (``norm1``) and g(u) = ℱ(P_{S1'}(u)) (``norm2``).
    ``form="postnorm"`` (the paper's projection form, post-LN Macaron-Net):
    ``u¹ = P_{S1'}(Φ^ℱ_{Δt/2}(u))``, ``u² = P_{S1}(Φ^𝒜_Δt(u¹))``,
    ``u^{n+1} = P_{S1'}(Φ^ℱ_{Δt/2}(u²))``. With ``untied=False`` the two FFN half-steps
    share the FFN's weights (one vector field split in two). ``untied=True`` is
    Macaron-Net's layer as Lu et al. (2019) train it: two FFNs, ℱ₁ in the first half-step
    and ℱ₂ in the last (the same ``norm2`` before/after both), read from the controls' FFN
    whose sub-steps hold ℱ₁'s and then ℱ₂'s (``LayerControls.random(..., ffn_copies=2)``;
    :attr:`ffn_copies` is 2, so the model builders draw them). Its vector field is
    a + ½(g₁ + g₂).

    ``substep="euler"``: Φ^X_h(u) = u + h X(u) (Macaron-Net's layer; global order 1);
    ``"heun"``: Φ^X_h(u) = u + h/2 (X(u) + X(u + h X(u))) (order 2, Strang proper). θ is
    frozen at the step's midpoint (``nodes = (0.5,)``), which keeps order 2.

    The post-norm form is consistent (on S1, with ``norm1`` and ``norm2`` the same fixed
    set) with the projected field u' = Π_{T_u S1}(𝒜(u) + ℱ(u)), but its projections limit
    it to order 1 whatever the sub-flow: P(u + h v) = u + h Π v + O(h²), and the O(h²)
    curvature term of every projection is a local error of the step. ``order`` says so
    (1 for ``form="postnorm"``); ``tests/test_layer_schemes.py`` measures it.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow import LayerControls, StrangScheme, evolve, stack_controls
        >>> theta = stack_controls([LayerControls.random(8, key=jax.random.key(i))
        ...                         for i in range(3)])
        >>> u0 = jax.random.normal(jax.random.key(5), (4, 8))
        >>> s = StrangScheme()
        >>> s.order, evolve(u0, theta, s, dt=0.5).shape
        (2, (4, 8))
        >>> StrangScheme(substep="euler").order  # Macaron-Net's layer
        1
    """

    form: Literal["prenorm", "postnorm"] = eqx.field(static=True, default="prenorm")
    substep: Literal["euler", "heun"] = eqx.field(static=True, default="heun")
    untied: bool = eqx.field(static=True, default=False)

    def __check_init__(self):
        check_choice("form", self.form, ("prenorm", "postnorm"))
        check_choice("substep", self.substep, ("euler", "heun"))
        if not isinstance(self.untied, bool):
            raise TypeError(f"StrangScheme: `untied` must be True or False, got {self.untied!r}.")

    @property
    def ffn_copies(self) -> int:
        return 2 if self.untied else 1

    @property
    def order(self) -> int:
        return 2 if (self.substep == "heun" and self.form == "prenorm") else 1

    @property
    def nodes(self) -> tuple[float, ...]:
        return (0.5,)

    @property
    def stability_form(self) -> str:
        return self.form

    def substep_names(self, controls: LayerControls) -> tuple[str, ...]:
        return ("ffn_half1", "attention", "ffn_half2")

    def _flow(self, field: Field, u, h):
        if self.substep == "euler":
            return u + h * field(u)
        k1 = field(u)
        return u + (0.5 * h) * (k1 + field(u + h * k1))

    def _compose(self, u, dt, ops: SubFields):
        u1 = ops.proj_ffn(self._flow(ops.ffn, u, 0.5 * dt))
        u2 = ops.proj_attn(self._flow(ops.attn, u1, dt))
        last = ops.ffn if ops.ffn2 is None else ops.ffn2
        u3 = ops.proj_ffn(self._flow(last, u2, 0.5 * dt))
        return u3, (u1, u2, u3)

    def advance(self, u, controls, dt, *, ops):
        if _is_staged(controls):
            raise ValueError(
                "StrangScheme: `controls` must be one set per step (θ at the step midpoint, "
                "nodes=(0.5,)), got controls with a stage axis; sample them with "
                "stage_controls(path, StrangScheme(), n) or path.sample(n)."
            )
        parts = None
        if self.untied:  # sub-steps of the controls' FFN, not new FFNParams: sharded weights
            parts = split_substeps(controls.ffn, 2, "StrangScheme(untied=True)")
        return self._compose(u, dt, self.sub_fields(controls, ops, self.form, parts))

    def stability_function(self, z_attention, z_ffn):
        """R_s(z_g/2) R_s(z_a) R_s(z_g/2), R_s(z) = 1 + z (Euler) or 1 + z + z²/2 (Heun)."""
        za, zg = z_attention, z_ffn
        rs = (lambda z: 1 + z) if self.substep == "euler" else (lambda z: 1 + z + z * z / 2)
        return rs(zg / 2) * rs(za) * rs(zg / 2)

    def linear_step_matrix(self, j_attention, j_ffn, dt):
        eye = jnp.eye(j_attention.shape[0], dtype=j_attention.dtype)
        return self._compose(eye, dt, linear_sub_fields(j_attention, j_ffn))[0]
