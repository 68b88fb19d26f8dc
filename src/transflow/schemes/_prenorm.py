"""The pre-norm family: explicit Euler on the composite operators (ViT, GPT-2, ``norm_first``).

:class:`PreNormScheme` and :func:`pre_ln_step`, the pre-LN step every pre-norm scheme
shares (the CvT scheme passes its convolutional attention).
"""

from __future__ import annotations

import jax.numpy as jnp

from .._controls import LayerControls
from .._errors import check_array, check_callable, check_flag, check_kind, check_number
from .._grid import Grid
from ._base import (
    AbstractLinearStability,
    AbstractMaskable,
    AbstractODEScheme,
    AbstractShardable,
    AttentionOptions,
    DenseOperators,
    _exact,
    _ffn_branch,
)

__all__ = ["PreNormScheme", "pre_ln_step"]


class PreNormScheme(
    AttentionOptions,
    AbstractODEScheme,
    AbstractLinearStability,
    AbstractShardable,
    AbstractMaskable,
):
    """Pre-LN layers (ViT, GPT-2, ``norm_first=True``): an extension, not paper-exact.

    Explicit Euler on the composite operators (docs/spec/continuous-model.md §4.2):

        u¹ = u⁰ + Δt 𝒜(P_{S1}(u⁰)),     u^{n+1} = u¹ + Δt ℱ(P_{S1'}(u¹)),

    where ℱ is the FFN map (its sub-steps at unit step, additive recombination) and the
    projections use each layer's ``norm1``/``norm2``. There is no closing projection.
    Order 1; stability function (1 + z_a)(1 + z_g).

    Sub-step names: ``ln1``, ``attention``, ``ln2``, ``ffn1`` … ``ffnJ``, ``residual``.
    ``implementation`` selects the attention evaluation as in :class:`LieScheme`.
    """

    order = 1
    nodes = (0.5,)

    def substep_names(self, controls: LayerControls) -> tuple[str, ...]:
        return pre_ln_substep_names(controls)

    def advance(self, u, controls, dt, *, ops):
        def attention_op(p1):
            return ops.attention(self, p1, controls.attn)

        return _pre_ln(attention_op, u, controls, dt, ops)

    def stability_function(self, z_attention, z_ffn):
        return (1 + z_attention) * (1 + z_ffn)

    def linear_step_matrix(self, j_attention, j_ffn, dt):
        # the Lie composition of pre_ln_step on the linear sub-fields
        eye = jnp.eye(j_attention.shape[0], dtype=j_attention.dtype)
        u1 = eye + dt * (eye @ j_attention)
        return u1 + dt * (u1 @ j_ffn)


def pre_ln_substep_names(controls) -> tuple[str, ...]:
    """The sub-step names of the pre-LN step (:class:`PreNormScheme`, the CvT scheme)."""
    J = controls.ffn.num_substeps
    return ("ln1", "attention", "ln2", *(f"ffn{j + 1}" for j in range(J)), "residual")


def pre_ln_step(scheme, attend, u, controls, dt, *, grid: Grid | None, record: bool):
    """The pre-LN step of :class:`PreNormScheme` with the attention operator ``attend``.

    ``u¹ = u + Δt attend(P_{S1}(u))``, ``u^{n+1} = u¹ + Δt ℱ(P_{S1'}(u¹))`` with the
    projections weighted by ``grid.y_weights``. Shared by every pre-LN scheme (the CvT
    scheme passes its convolutional attention); ``record=True`` also returns the sub-step
    states named by ``scheme.substep_names``.
    """
    # a step of the loop: types, shapes and options only (free at trace time)
    check_callable("attend", attend, "pre_ln_step", "lambda p: attention(p, controls.attn)")
    check_array("u", u, ndim=2)
    check_number("dt", dt, "pre_ln_step", lower=0, example="1.0", traced_ok=True)
    if grid is not None:
        check_kind("grid", grid, Grid, "pre_ln_step", "pass e.g. Grid.index(n, d) or None")
    check_flag("record", record, "pre_ln_step")
    u2, states = _pre_ln(attend, u, controls, dt, DenseOperators(grid))
    if not record:
        return u2
    return u2, dict(zip(scheme.substep_names(controls), states))


def _pre_ln(attend, u, c, dt, ops):
    """:func:`pre_ln_step`'s state and its sub-step states, in the operators ``ops``."""
    p1 = ops.project(u, c.norm1)
    u1 = u + dt * attend(p1)
    p2 = ops.project(u1, c.norm2)
    z, states = _ffn_branch(p2, c.ffn, 1.0, _exact, True, ops.linear)
    u2 = u1 + dt * z
    return u2, (p1, u1, p2, *states, u2)
