"""Encoder–decoder transformers: a decoder evolves u driven by the fixed field m (memory).

A decoder layer (``torch.nn.TransformerDecoderLayer``) adds one operator to the split
scheme: cross-attention, the attention integral over the memory's own token domain Ω_x′,

    (𝒜_c(u; m))(x) = ∫_{Ω_x′} γ(x, x′) V(m)(x′) dx′,   γ from Q(u(x)) and K(m(x′)),

(:func:`transflow.cross_attention`). Post-LN (the paper's :class:`~transflow.LieScheme`
with one more explicit sub-step and projection, M = 6 + J sub-steps per step):

1. self-attention, explicit Euler:   u¹ = u⁰ + Δt 𝒜(u⁰)            (tgt masks)
2. projection onto S1:               u² = P_{S1}(u¹)
3. cross-attention, explicit Euler:  u³ = u² + Δt 𝒜_c(u²; m)       (memory masks)
4. projection onto S1:               u⁴ = P_{S1}(u³)
5..4+J. FFN sub-steps from u⁴, relaxation ½(Z + u⁴), closing projection (ε/4, as the
   Lie scheme).

Pre-LN (``norm_first=True``): explicit Euler on the composite operators,
``u¹ = u + Δt 𝒜(P₁u)``, ``u² = u¹ + Δt 𝒜_c(P₂u¹; m)``, ``u³ = u² + Δt ℱ(P₃u²)``.

:class:`SplitEncoderDecoder` (``torch.nn.Transformer``) first evolves the source with a
:class:`~transflow.SplitTransformer` (the encoder, its final norm as closing projection);
its final state is the memory m that drives the decoder.
"""

from __future__ import annotations

import equinox as eqx
import jax
from jaxtyping import Array, Bool, Float

from .._controls import AttentionParams, FFNParams, NormParams
from .._errors import check_array, check_finite, check_kind, check_step
from .._grid import Grid
from .._masks import check_attention_mask, check_key_padding_mask
from .._operators import attention, cross_attention
from ..schemes._base import _masks, _project, ffn_branch
from ._encoder import SplitTransformer

__all__ = ["DecoderLayerControls", "SplitDecoder", "SplitEncoderDecoder"]


class DecoderLayerControls(eqx.Module):
    """Controls of one decoder step: self-attention, cross-attention, FFN, three norms."""

    self_attn: AttentionParams
    norm1: NormParams
    cross_attn: AttentionParams
    norm2: NormParams
    ffn: FFNParams
    norm3: NormParams

    def __check_init__(self):
        d = self.self_attn.wq.shape[-2]
        sizes = {
            "cross_attn": self.cross_attn.wo.shape[-1],
            "ffn": self.ffn.weights[0].shape[-2],
        }
        for name, got in sizes.items():
            if got != d:
                raise ValueError(
                    f"DecoderLayerControls: `{name}` acts on {got} features but `self_attn` on "
                    f"d_model = {d}; build every part with the same d_model."
                )

    @property
    def d_model(self) -> int:
        return self.self_attn.wq.shape[-2]


def _num_layers(controls: DecoderLayerControls) -> int:
    lead = controls.self_attn.wq.shape[:-2]
    if len(lead) != 1:
        raise ValueError(
            "SplitDecoder: `controls` must be stacked over layers (a leading axis); got "
            f"wq of shape {controls.self_attn.wq.shape}. Stack them with "
            "jax.tree.map(lambda *x: jnp.stack(x), *layers)."
        )
    return int(lead[0])


def decoder_step(
    u,
    m,
    c: DecoderLayerControls,
    dt=1.0,
    *,
    norm_first: bool,
    grid=None,
    memory_grid=None,
    causal=False,
    key_padding_mask=None,
    attention_mask=None,
    memory_key_padding_mask=None,
    memory_attention_mask=None,
):
    """One decoder step (one ``TransformerDecoderLayer``), post-LN or pre-LN."""
    self_masks = _masks(key_padding_mask, attention_mask)
    cross_masks = _masks(memory_key_padding_mask, memory_attention_mask)

    def sa(x):
        return attention(x, c.self_attn, grid=grid, causal=causal, **self_masks)

    def ca(x):
        return cross_attention(
            x, m, c.cross_attn, grid=grid, memory_grid=memory_grid, **cross_masks
        )

    if norm_first:
        u1 = u + dt * sa(_project(u, c.norm1, grid))
        u2 = u1 + dt * ca(_project(u1, c.norm2, grid))
        return u2 + dt * ffn_branch(_project(u2, c.norm3, grid), c.ffn, 1.0)
    u2 = _project(u + dt * sa(u), c.norm1, grid)
    u4 = _project(u2 + dt * ca(u2), c.norm2, grid)
    z = ffn_branch(u4, c.ffn, dt)
    return _project(0.5 * (z + u4), c.norm3, grid, eps_scale=0.25)


class SplitDecoder(eqx.Module):
    """N_t decoder steps driven by a memory m: ``torch.nn.TransformerDecoder`` (one layer:
    ``TransformerDecoderLayer``). See the module docstring for the scheme.

    ``model(tgt, memory)`` maps one target sequence ``(n, d)`` and one memory ``(m, d)``
    to the decoder's output; batch with ``jax.vmap``. Masks (transflow's polarity):
    ``key_padding_mask`` ``(n,)`` and ``memory_key_padding_mask`` ``(m,)`` bool, True =
    padded; ``attention_mask`` ``(n, n)`` (self-attention, torch's ``tgt_mask``) and
    ``memory_attention_mask`` ``(n, m)`` (torch's ``memory_mask``), bool True = may
    attend or additive float (:func:`transflow.mask_from_torch` converts torch's masks);
    ``causal=True`` is torch's ``tgt_is_causal`` with a causal ``tgt_mask``.

    Example:
        >>> import torch, jax.numpy as jnp
        >>> from transflow.interop import from_torch
        >>> layer = torch.nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
        >>> model = from_torch(layer)
        >>> model(jnp.ones((5, 8)), jnp.ones((3, 8)), causal=True).shape
        (5, 8)
    """

    controls: DecoderLayerControls
    norm_first: bool = eqx.field(static=True, default=False)
    dt: float = eqx.field(static=True, default=1.0)
    final_norm: NormParams | None = None

    def __check_init__(self):
        check_step("dt", self.dt, "SplitDecoder")
        _num_layers(self.controls)

    @property
    def num_layers(self) -> int:
        return _num_layers(self.controls)

    def __call__(
        self,
        tgt: Float[Array, "n d"],
        memory: Float[Array, "m d"],
        *,
        causal: bool = False,
        key_padding_mask: Bool[Array, " n"] | None = None,
        memory_key_padding_mask: Bool[Array, " m"] | None = None,
        attention_mask: Bool[Array, "*h n n"] | Float[Array, "*h n n"] | None = None,
        memory_attention_mask: Bool[Array, "*h n m"] | Float[Array, "*h n m"] | None = None,
        grid: Grid | None = None,
        memory_grid: Grid | None = None,
    ) -> Float[Array, "n d"]:
        d = self.controls.d_model
        check_array("tgt", tgt, ndim=2, shape=(None, d))
        check_array("memory", memory, ndim=2, shape=(None, d))
        n, m = tgt.shape[0], memory.shape[0]
        H = self.controls.self_attn.n_heads
        check_key_padding_mask(key_padding_mask, n)
        check_key_padding_mask(memory_key_padding_mask, m, "memory_key_padding_mask")
        check_attention_mask(attention_mask, n, n, H)
        check_attention_mask(
            memory_attention_mask, n, m, self.controls.cross_attn.n_heads, "memory_attention_mask"
        )
        tgt = check_finite("tgt", tgt)
        memory = check_finite("memory", memory)

        def body(u, c):
            u = decoder_step(
                u,
                memory,
                c,
                self.dt,
                norm_first=self.norm_first,
                grid=grid,
                memory_grid=memory_grid,
                causal=causal,
                key_padding_mask=key_padding_mask,
                attention_mask=attention_mask,
                memory_key_padding_mask=memory_key_padding_mask,
                memory_attention_mask=memory_attention_mask,
            )
            return u, None

        u, _ = jax.lax.scan(body, tgt, self.controls)
        if self.final_norm is not None:
            u = _project(u, self.final_norm, grid)
        return u


class SplitEncoderDecoder(eqx.Module):
    """``torch.nn.Transformer``: the encoder evolves the source into the memory m, the
    decoder evolves the target driven by m.

    ``model(src, tgt)`` for one example (batch with ``jax.vmap``). Masks in transflow's
    polarity (convert torch's with :func:`transflow.mask_from_torch`):
    ``src_key_padding_mask``, ``tgt_key_padding_mask`` and ``memory_key_padding_mask``
    bool True = padded (as in torch, the memory's padding is passed explicitly, usually
    equal to ``src_key_padding_mask``); ``src_attention_mask``,
    ``tgt_attention_mask``, ``memory_attention_mask`` bool True = may attend or float;
    ``tgt_causal=True`` is a causal ``tgt_mask``.
    """

    encoder: SplitTransformer
    decoder: SplitDecoder

    def __check_init__(self):
        owner = "SplitEncoderDecoder"
        check_kind("encoder", self.encoder, SplitTransformer, owner)
        check_kind("decoder", self.decoder, SplitDecoder, owner)
        d_enc = self.encoder.d_model
        d_dec = self.decoder.controls.self_attn.wq.shape[-2]
        if d_enc != d_dec:
            raise ValueError(
                f"{owner}: `decoder` acts on d = {d_dec} features but `encoder` on {d_enc}; "
                "the memory the encoder makes must fit the decoder's cross-attention."
            )

    def __call__(
        self,
        src: Float[Array, "m d"],
        tgt: Float[Array, "n d"],
        *,
        src_causal: bool = False,
        tgt_causal: bool = False,
        src_key_padding_mask: Bool[Array, " m"] | None = None,
        tgt_key_padding_mask: Bool[Array, " n"] | None = None,
        memory_key_padding_mask: Bool[Array, " m"] | None = None,
        src_attention_mask: Bool[Array, "*h m m"] | Float[Array, "*h m m"] | None = None,
        tgt_attention_mask: Bool[Array, "*h n n"] | Float[Array, "*h n n"] | None = None,
        memory_attention_mask: Bool[Array, "*h n m"] | Float[Array, "*h n m"] | None = None,
    ) -> Float[Array, "n d"]:
        memory = self.encoder(
            src,
            causal=src_causal,
            key_padding_mask=src_key_padding_mask,
            attention_mask=src_attention_mask,
        )
        return self.decoder(
            tgt,
            memory,
            causal=tgt_causal,
            key_padding_mask=tgt_key_padding_mask,
            memory_key_padding_mask=memory_key_padding_mask,
            attention_mask=tgt_attention_mask,
            memory_attention_mask=memory_attention_mask,
        )
