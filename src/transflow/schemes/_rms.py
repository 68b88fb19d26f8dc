"""The RMS pre-norm scheme (Llama, Mistral, Qwen2): RMSNorm, rotary GQA and a gated FFN.

The operators (:func:`~transflow.interop.project_sphere`, :func:`rotary_attention`,
:func:`gated_ffn`) live in ``transflow._llama_ops``; the scheme lives here with the others.
"""

from __future__ import annotations

import equinox as eqx

from .._errors import check_choice
from .._llama_ops import gated_ffn, project_sphere, rotary_attention
from ._base import AbstractAttentionChoice, AbstractMaskable, AbstractODEScheme

__all__ = ["RMSPreNormScheme"]


class RMSPreNormScheme(AbstractAttentionChoice, AbstractODEScheme, AbstractMaskable):
    """Pre-norm step with RMSNorm, rotary GQA and a gated FFN (Llama, Mistral, Qwen2).

    Explicit Euler on the composite operators, as :class:`~transflow.PreNormScheme`:

        u¹ = u⁰ + Δt 𝒜_rot(P_sph u⁰),     u^{n+1} = u¹ + Δt ℱ_gated(P_sph' u¹),

    with the projections onto the RMS sphere (:func:`project_sphere`, each layer's gain).
    Rotary positions are the token indices (the index grid; ``grid`` must be ``None``).
    With Δt = 1 it is one ``LlamaDecoderLayer`` (causal via
    :class:`~transflow.CausalScheme`).

    Sub-step names: ``rms1``, ``attention``, ``rms2``, ``gate`` (the gated hidden field),
    ``ffn`` (the FFN branch), ``residual``.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow import CausalScheme, SplitTransformer, stack_controls
        >>> from transflow.interop import RMSPreNormScheme, random_rms_controls
        >>> theta = stack_controls([random_rms_controls(8, 4, 2, 12, key=jax.random.key(0))])
        >>> model = SplitTransformer(theta, CausalScheme(RMSPreNormScheme()))
        >>> model(jnp.ones((5, 8)) * jnp.arange(8.0)).shape
        (5, 8)
    """

    implementation: str = eqx.field(static=True, default="auto")

    def __check_init__(self):
        check_choice("implementation", self.implementation, ("auto", "dense", "chunked"))

    order = 1
    nodes = (0.5,)

    def substep_names(self, controls) -> tuple[str, ...]:
        return ("rms1", "attention", "rms2", "gate", "ffn", "residual")

    def advance(self, u, controls, dt, *, ops):
        if ops.grid is not None:
            raise ValueError(
                "RMSPreNormScheme: rotary positions are token indices; `grid` must be None "
                "(the index grid)."
            )
        c = controls
        p1 = project_sphere(u, c.norm1.gain, eps=c.norm1.eps)
        attn = rotary_attention(
            p1, c.attn, causal=ops.causal, implementation=self.implementation, **ops.masks
        )
        u1 = u + dt * attn
        p2 = project_sphere(u1, c.norm2.gain, eps=c.norm2.eps)
        z, hidden = gated_ffn(p2, c.ffn, record=True)
        u2 = u1 + dt * z
        return u2, (p1, u1, p2, hidden, z, u2)
