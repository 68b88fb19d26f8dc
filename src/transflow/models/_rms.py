"""The Llama-family causal decoder (Llama, Mistral, Qwen2): :class:`RMSDecoder`.

Its operators (RMSNorm as the projection onto a sphere without the mean constraint,
rotary attention, SwiGLU, the pre-norm scheme) live in ``transflow._llama_ops``; their
continuous readings are in docs/models.md.
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from .._errors import check_array, check_kind, check_number, check_values
from .._llama_ops import RMSNormParams, check_not_hf_mask, project_sphere
from ._heads import AbstractLanguageModel

__all__ = ["RMSDecoder"]


class RMSDecoder(AbstractLanguageModel):
    """A Llama-family causal decoder: token embedding → causal pre-norm steps → RMSNorm.

    ``model(ids)`` is HF ``LlamaModel``'s ``last_hidden_state``; ``model.logits(ids)`` the
    ``LlamaForCausalLM`` logits ``u_T @ unembedding``. There is no position table: the
    positions (token indices) enter through the rotary attention, so a left-padded
    sequence gives its kept tokens the same states as the unpadded one up to round-off
    (the kernel depends on position differences only).

    Masks (one sequence; batch with ``jax.vmap``): ``key_padding_mask`` ``(n,)`` bool,
    True = padded (HF's ``attention_mask`` 1 = keep is ``key_padding_mask = (mask == 0)``,
    :func:`transflow.mask_from_hf`); ``attention_mask`` ``(n, n)`` bool True = may attend
    or additive float; both combine with the causal mask. ``sliding_window`` W (Mistral,
    Qwen2): key x̃ is admissible for query x only if x − x̃ < W (HF's
    ``kv_idx > q_idx − W``), another restriction of the kernel's support.
    """

    table: Float[Array, "vocab d"]
    decoder: eqx.Module  # a SplitTransformer with CausalScheme(RMSPreNormScheme())
    final_norm: RMSNormParams
    unembedding: Float[Array, "d vocab"] | None = None
    sliding_window: int | None = eqx.field(static=True, default=None)

    def __check_init__(self):
        from ._encoder import SplitTransformer

        owner = "RMSDecoder"
        d = check_values("table", self.table, owner, ndim=2).shape[1]
        check_kind("decoder", self.decoder, SplitTransformer, owner)
        if self.decoder.d_model != d:
            raise ValueError(
                f"{owner}: `decoder` acts on d = {self.decoder.d_model} features but `table` "
                f"embeds {d}; they must match."
            )
        check_kind("final_norm", self.final_norm, RMSNormParams, owner)
        if self.unembedding is not None:
            check_values("unembedding", self.unembedding, owner, shape=(d, None))
        if self.sliding_window is not None:
            check_number(
                "sliding_window",
                self.sliding_window,
                owner,
                lower=0,
                integer=True,
                example="4096",
            )

    def initial_condition(self, ids: Int[Array, " n"]) -> Float[Array, "n d"]:
        check_array("ids", ids, ndim=1, floating=False)
        if not jnp.issubdtype(ids.dtype, jnp.integer):
            raise TypeError(f"`ids` must be integer token ids, got dtype {ids.dtype}.")
        return self.table[ids]

    def _window_mask(self, n: int, attention_mask):
        if self.sliding_window is None or n <= self.sliding_window:
            return attention_mask
        i = jnp.arange(n)
        band = (i[:, None] - i[None, :]) < self.sliding_window
        if attention_mask is None:
            return band
        check_not_hf_mask(attention_mask)
        if attention_mask.dtype == jnp.bool_:
            return jnp.logical_and(attention_mask, band)
        return jnp.where(band, attention_mask, -jnp.inf)

    def __call__(
        self,
        ids: Int[Array, " n"],
        *,
        key_padding_mask: Bool[Array, " n"] | None = None,
        attention_mask: Bool[Array, "*h n n"] | Float[Array, "*h n n"] | None = None,
    ) -> Float[Array, "n d"]:
        f = self.initial_condition(ids)
        check_not_hf_mask(attention_mask)
        attention_mask = self._window_mask(ids.shape[0], attention_mask)
        u = self.decoder(f, key_padding_mask=key_padding_mask, attention_mask=attention_mask)
        return project_sphere(u, self.final_norm.gain, eps=self.final_norm.eps)

    def logits(
        self,
        ids: Int[Array, " n"],
        *,
        key_padding_mask: Bool[Array, " n"] | None = None,
        attention_mask: Bool[Array, "*h n n"] | Float[Array, "*h n n"] | None = None,
    ) -> Float[Array, "n vocab"]:
        if self.unembedding is None:
            raise ValueError("this RMSDecoder has no `unembedding` (convert a *ForCausalLM model).")
        u = self(ids, key_padding_mask=key_padding_mask, attention_mask=attention_mask)
        return u @ self.unembedding
