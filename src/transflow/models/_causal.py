"""Causal (decoder) variants: the restricted token integral of docs/spec/continuous-model.md §4.4.

Causal attention restricts the token integral to x̃ ≤ x in both the numerator and the
denominator of γ,

    (𝒜u)(x, y) = ∫_{x̃ ≤ x} γ(x, x̃; u) V(x̃, y; u) dx̃,   ∫_{x̃ ≤ x} γ(x, x̃; u) dx̃ = 1,

so the state at token x after any number of steps depends only on the initial condition
at tokens x̃ ≤ x (prefix dependence). Every scheme takes ``causal=True``; a
:class:`CausalScheme` (defined in :mod:`transflow.schemes`, re-exported here) wraps a
scheme so that a model (e.g. a GPT-2 block loaded with :func:`transflow.interop.from_hf`)
is causal whatever its caller passes.

A decoder's initial condition is f(x_i, ·) = E[token_i] + P[i] (token and position
embeddings, :class:`TokenEmbedding`), and its read-out the logits ⟨u_T(x_i, ·), E[v]⟩
(tied unembedding) inside the loss ℓ (docs/spec/continuous-model.md §5); :class:`CausalDecoder`
assembles them.
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from .._errors import as_input, check_kind, check_values, check_width
from ..schemes._base import AbstractCausal, has
from ..schemes._causal import CausalScheme as CausalScheme
from ._encoder import SplitTransformer
from ._heads import AbstractLanguageModel

__all__ = ["CausalScheme", "TokenEmbedding", "CausalDecoder"]


class TokenEmbedding(eqx.Module):
    """Initial condition of a decoder: ``f(x_i, ·) = table[ids_i] + positions[i]``.

    Example:
        >>> import jax.numpy as jnp
        >>> from transflow.interop import TokenEmbedding
        >>> emb = TokenEmbedding(jnp.eye(5, 4), jnp.zeros((8, 4)))
        >>> emb(jnp.array([0, 3, 3])).shape
        (3, 4)
    """

    table: Float[Array, "vocab d"]
    positions: Float[Array, "max_len d"] | None

    def __check_init__(self):
        table = check_values("table", self.table, "TokenEmbedding", ndim=2)
        if self.positions is not None:
            d = table.shape[1]
            check_values("positions", self.positions, "TokenEmbedding", shape=(None, d))

    def __call__(self, ids: Int[Array, " n"]) -> Float[Array, "n d"]:
        ids = as_input("ids", ids, ndim=1, floating=False)
        if not jnp.issubdtype(ids.dtype, jnp.integer):
            raise TypeError(f"`ids` must be integer token ids, got dtype {ids.dtype}.")
        n = ids.shape[0]
        f = self.table[ids]
        if self.positions is not None:
            if n > self.positions.shape[0]:
                raise ValueError(
                    f"`ids` has {n} tokens but the position table holds "
                    f"{self.positions.shape[0]} positions."
                )
            f = f + self.positions[:n]
        return f


class CausalDecoder(AbstractLanguageModel):
    """A causal decoder (GPT): token embedding f → causal evolution → (logits).

    ``model(ids)`` is the final state (HF ``GPT2Model``'s ``last_hidden_state``: the
    blocks then the final LayerNorm as closing projection); ``model.logits(ids)`` applies
    the unembedding ``u_T @ unembedding`` (HF ``GPT2LMHeadModel``: the tied ``wte``).
    The decoder's scheme should be a :class:`CausalScheme`.
    """

    embedding: TokenEmbedding
    decoder: SplitTransformer
    unembedding: Float[Array, "d vocab"] | None = None

    def __check_init__(self):
        owner = "CausalDecoder"
        check_kind("embedding", self.embedding, TokenEmbedding, owner)
        check_kind("decoder", self.decoder, SplitTransformer, owner)
        d = self.embedding.table.shape[1]
        check_width(owner, "decoder", self.decoder.d_model, "embedding", d)
        if self.unembedding is not None:
            check_values("unembedding", self.unembedding, owner, shape=(d, None))
        if not has(self.decoder.scheme, AbstractCausal):
            raise ValueError(
                "CausalDecoder: `decoder.scheme` must be causal (capability AbstractCausal, "
                f"got {type(self.decoder.scheme).__name__}); wrap it: CausalScheme(scheme)."
            )

    def initial_condition(self, ids: Int[Array, " n"]) -> Float[Array, "n d"]:
        return self.embedding(ids)

    def __call__(
        self,
        ids: Int[Array, " n"],
        *,
        key_padding_mask: Bool[Array, " n"] | None = None,
        attention_mask: Bool[Array, "*h n n"] | Float[Array, "*h n n"] | None = None,
    ) -> Float[Array, "n d"]:
        """Final state; ``key_padding_mask`` (True = padded, e.g.
        ``transflow.mask_from_hf(hf_attention_mask)``) and ``attention_mask`` combine with
        the causal mask (positions stay ``arange(n)``, as HF's GPT-2 without
        ``position_ids``)."""
        return self.decoder(
            self.embedding(ids), key_padding_mask=key_padding_mask, attention_mask=attention_mask
        )

    def logits(
        self,
        ids: Int[Array, " n"],
        *,
        key_padding_mask: Bool[Array, " n"] | None = None,
        attention_mask: Bool[Array, "*h n n"] | Float[Array, "*h n n"] | None = None,
    ) -> Float[Array, "n vocab"]:
        if self.unembedding is None:
            raise ValueError("this CausalDecoder has no `unembedding`.")
        out = self(ids, key_padding_mask=key_padding_mask, attention_mask=attention_mask)
        return out @ self.unembedding
