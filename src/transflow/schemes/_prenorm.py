"""The pre-norm family: explicit Euler on the composite operators (ViT, GPT-2, ``norm_first``).

:class:`PreNormScheme` and :func:`pre_ln_step`, the pre-LN step every pre-norm scheme
shares (the CvT scheme passes its convolutional attention).
"""

from __future__ import annotations

from .._controls import LayerControls
from .._grid import Grid
from ._base import AttentionOptions, _project, attend, ffn_branch

__all__ = ["PreNormScheme", "pre_ln_step"]


class PreNormScheme(AttentionOptions):
    """Pre-LN layers (ViT, GPT-2, ``norm_first=True``): an extension, not paper-exact.

    Explicit Euler on the composite operators (docs/spec/continuous-model.md §4.2):

        u¹ = u⁰ + Δt 𝒜(P_{S1}(u⁰)),     u^{n+1} = u¹ + Δt ℱ(P_{S1'}(u¹)),

    where ℱ is the FFN map (its sub-steps at unit step, additive recombination) and the
    projections use each layer's ``norm1``/``norm2``. There is no closing projection.

    Sub-step names: ``ln1``, ``attention``, ``ln2``, ``ffn1`` … ``ffnJ``, ``residual``.
    ``implementation`` selects the attention evaluation as in :class:`LieScheme`.
    """

    def substep_names(self, controls: LayerControls) -> tuple[str, ...]:
        J = controls.ffn.num_substeps
        return ("ln1", "attention", "ln2", *(f"ffn{j + 1}" for j in range(J)), "residual")

    def advance(self, u, controls, dt, *, grid, causal, masks):
        def attention_op(p1):
            return attend(self, p1, controls.attn, grid=grid, causal=causal, masks=masks)

        return _pre_ln(attention_op, u, controls, dt, grid)


def pre_ln_step(scheme, attend, u, controls, dt, *, grid: Grid | None, record: bool):
    """The pre-LN step of :class:`PreNormScheme` with the attention operator ``attend``.

    ``u¹ = u + Δt attend(P_{S1}(u))``, ``u^{n+1} = u¹ + Δt ℱ(P_{S1'}(u¹))`` with the
    projections weighted by ``grid.y_weights``. Shared by every pre-LN scheme (the CvT
    scheme passes its convolutional attention); ``record=True`` also returns the sub-step
    states named by ``scheme.substep_names``.
    """
    u2, states = _pre_ln(attend, u, controls, dt, grid)
    if not record:
        return u2
    return u2, dict(zip(scheme.substep_names(controls), states))


def _pre_ln(attend, u, c, dt, grid):
    """:func:`pre_ln_step`'s state and its sub-step states."""
    p1 = _project(u, c.norm1, grid)
    u1 = u + dt * attend(p1)
    p2 = _project(u1, c.norm2, grid)
    z, states = ffn_branch(p2, c.ffn, 1.0, record=True)
    u2 = u1 + dt * z
    return u2, (p1, u1, p2, *states, u2)
