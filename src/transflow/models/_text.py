"""BERT-family text encoders (BERT, RoBERTa, DistilBERT): :class:`TextEmbedding` (the
initial condition f from token ids) and :class:`TextEncoder` (f → post-LN Lie steps →
pooler). ``transflow.interop.from_hf`` builds them from HuggingFace modules.

RoBERTa's position ids start after ``padding_idx`` and skip padding tokens:
``pos_i = padding_idx + cumsum_{j ≤ i}[ids_j ≠ pad] · [ids_i ≠ pad]`` (padding tokens
get ``padding_idx``), so padding changes the positions of the tokens after it.
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from .._controls import NormParams
from .._errors import check_array, check_kind, check_number, check_values, check_width
from .._llama_ops import check_not_hf_mask
from .._operators import project_s1
from ._encoder import SplitTransformer

__all__ = ["TextEmbedding", "TextEncoder"]


class TextEmbedding(eqx.Module):
    """Initial condition f of a BERT-family encoder from token ids.

    ``f = LN(word[ids] + token_types[type_ids] + positions[pos])`` with ``pos = arange(n)``
    (BERT, DistilBERT) or RoBERTa's padding-aware ids when ``padding_idx`` is set.

    Example:
        >>> import jax.numpy as jnp
        >>> from transflow import NormParams
        >>> from transflow.models import TextEmbedding
        >>> emb = TextEmbedding(jnp.eye(6, 4), jnp.ones((8, 4)), None,
        ...                     NormParams(jnp.ones(4), jnp.zeros(4), 1e-12))
        >>> emb(jnp.array([1, 2, 3])).shape
        (3, 4)
    """

    word: Float[Array, "vocab d"]
    positions: Float[Array, "max_len d"]
    token_types: Float[Array, "types d"] | None
    norm: NormParams
    padding_idx: int | None = eqx.field(static=True, default=None)

    def __check_init__(self):
        owner = "TextEmbedding"
        vocab, d = check_values("word", self.word, owner, ndim=2).shape
        check_values("positions", self.positions, owner, shape=(None, d))
        if self.token_types is not None:
            check_values("token_types", self.token_types, owner, shape=(None, d))
        check_kind("norm", self.norm, NormParams, owner)
        if self.padding_idx is not None:
            check_number(
                "padding_idx",
                self.padding_idx,
                owner,
                lower=0,
                strict=False,
                integer=True,
                example="1",
            )

    def position_ids(self, ids: Int[Array, " n"]) -> Int[Array, " n"]:
        if self.padding_idx is None:
            return jnp.arange(ids.shape[0])
        keep = (ids != self.padding_idx).astype(jnp.int32)
        return jnp.cumsum(keep) * keep + self.padding_idx

    def __call__(
        self, ids: Int[Array, " n"], token_type_ids: Int[Array, " n"] | None = None
    ) -> Float[Array, "n d"]:
        check_array("ids", ids, ndim=1, floating=False)
        if not jnp.issubdtype(ids.dtype, jnp.integer):
            raise TypeError(f"`ids` must be integer token ids, got dtype {ids.dtype}.")
        n = ids.shape[0]
        offset = 0 if self.padding_idx is None else self.padding_idx + 1
        if n + offset > self.positions.shape[0]:
            raise ValueError(
                f"`ids` has {n} tokens but the position table holds "
                f"{self.positions.shape[0] - offset} positions."
            )
        f = self.word[ids]
        if self.token_types is not None:
            if token_type_ids is None:
                token_type_ids = jnp.zeros((n,), jnp.int32)
            check_array("token_type_ids", token_type_ids, shape=(n,), floating=False)
            f = f + self.token_types[token_type_ids]
        elif token_type_ids is not None:
            raise ValueError("`token_type_ids` given but this embedding has no token types.")
        f = f + self.positions[self.position_ids(ids)]
        return project_s1(f, self.norm.bias, self.norm.gain, eps=self.norm.eps)


class TextEncoder(eqx.Module):
    """A BERT-family encoder: embedding f → post-LN Lie steps → (pooler).

    ``model(ids, token_type_ids)`` is HF's ``last_hidden_state``; ``model.pooled(...)``
    the ``pooler_output`` ``tanh(u_T(x_0) W + b)`` (if the model has a pooler).
    """

    embedding: TextEmbedding
    encoder: SplitTransformer
    pooler: tuple[Float[Array, "d d"], Float[Array, " d"]] | None = None

    def __check_init__(self):
        owner = "TextEncoder"
        check_kind("embedding", self.embedding, TextEmbedding, owner)
        check_kind("encoder", self.encoder, SplitTransformer, owner)
        d = self.embedding.word.shape[1]
        check_width(owner, "encoder", self.encoder.d_model, "embedding", d)
        if self.pooler is not None:
            if not isinstance(self.pooler, tuple | list) or len(self.pooler) != 2:
                raise TypeError(
                    f"{owner}: `pooler` must be a pair (W (d, d), b (d,)) or None, got "
                    f"{type(self.pooler).__name__}."
                )
            check_values("pooler", self.pooler[0], owner, shape=(d, d))
            check_values("pooler", self.pooler[1], owner, shape=(d,))

    def initial_condition(self, ids, token_type_ids=None):
        return self.embedding(ids, token_type_ids)

    def __call__(
        self,
        ids: Int[Array, " n"],
        token_type_ids: Int[Array, " n"] | None = None,
        *,
        key_padding_mask: Bool[Array, " n"] | None = None,
        attention_mask: Bool[Array, "*h n n"] | Float[Array, "*h n n"] | None = None,
    ) -> Float[Array, "n d"]:
        """``last_hidden_state`` of one sequence.

        ``key_padding_mask`` ``(n,)`` bool, True = padded: HF's ``attention_mask``
        (1 = keep) is ``key_padding_mask = (mask == 0)`` (:func:`transflow.mask_from_hf`);
        ``attention_mask`` ``(n, n)`` bool True = may attend, or additive float.
        """
        check_not_hf_mask(attention_mask)
        return self.encoder(
            self.embedding(ids, token_type_ids),
            key_padding_mask=key_padding_mask,
            attention_mask=attention_mask,
        )

    def readout(self, u: Float[Array, "n d"]) -> Float[Array, " d"]:
        if self.pooler is None:
            raise ValueError("this TextEncoder has no pooler (HF add_pooling_layer=False).")
        w, b = self.pooler
        return jnp.tanh(u[0] @ w + b)

    def pooled(
        self, ids, token_type_ids=None, *, key_padding_mask=None, attention_mask=None
    ) -> Float[Array, " d"]:
        """``pooler_output``: ``tanh(u_T(x_0) W + b)`` (masks as in ``__call__``)."""
        u = self(
            ids, token_type_ids, key_padding_mask=key_padding_mask, attention_mask=attention_mask
        )
        return self.readout(u)
