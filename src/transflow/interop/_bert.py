"""HuggingFace BERT-family encoders (BERT, RoBERTa, DistilBERT) → transflow.

These are post-LN encoders: each layer is ``a = LN₁(h + 𝒜h)``, ``out = LN₂(a + ℱa)``,
exactly the paper's Lie scheme (:class:`~transflow.LieScheme`, docs/spec/continuous-model.md
§3.2/§3.5, with the lifting FFN of docs/spec/continuous-model.md Q6 and GELU), as for
``torch.nn.TransformerEncoderLayer``'s post-LN default. The embeddings build the initial condition f
(word + position [+ token type], then LayerNorm: a projection onto S1 of the embedded field); the
pooler is the class-token read-out ``tanh(W u_T(x_0) + b)``.

RoBERTa's position ids start after ``padding_idx`` and skip padding tokens:
``pos_i = padding_idx + cumsum_{j ≤ i}[ids_j ≠ pad] · [ids_i ≠ pad]`` (padding tokens
get ``padding_idx``), so padding changes the positions of the tokens after it.
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from .._causal import CausalScheme
from .._controls import AttentionParams, FFNParams, LayerControls, NormParams, stack_controls
from .._errors import check_array
from .._llama_ops import check_not_hf_mask
from .._model import SplitTransformer
from .._operators import project_s1
from .._splitting import LieScheme
from ._acts import hf_activation
from ._torch import _arr, _norm

__all__ = ["TextEmbedding", "TextEncoder"]


class TextEmbedding(eqx.Module):
    """Initial condition f of a BERT-family encoder from token ids.

    ``f = LN(word[ids] + token_types[type_ids] + positions[pos])`` with ``pos = arange(n)``
    (BERT, DistilBERT) or RoBERTa's padding-aware ids when ``padding_idx`` is set.

    Example:
        >>> import jax.numpy as jnp
        >>> from transflow import NormParams
        >>> from transflow.interop import TextEmbedding
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


# ----------------------------------------------------------------------------- converters
def _linear(lin, dtype):
    w = _arr(lin.weight, dtype).T
    b = _arr(lin.bias, dtype) if lin.bias is not None else jnp.zeros((w.shape[1],), dtype)
    return w, b


def _fold(wq, bq, scaling: float, head_dim: int):
    factor = float(scaling) * head_dim**0.5
    return (wq, bq) if factor == 1.0 else (wq * factor, bq * factor)


def _check_encoder_config(cfg, act_option: str):
    if getattr(cfg, "add_cross_attention", False):
        raise ValueError(
            f"unsupported `add_cross_attention`=True in {type(cfg).__name__}: transflow's "
            "BERT-family encoders have no cross-attention (see from_torch for "
            "nn.TransformerDecoderLayer)."
        )
    pet = getattr(cfg, "position_embedding_type", "absolute")
    if pet not in (None, "absolute"):
        raise ValueError(
            f"unsupported `position_embedding_type`={pet!r}: transflow models 'absolute'."
        )
    return hf_activation(getattr(cfg, act_option), act_option)


def bert_layer_controls(layer, dtype) -> LayerControls:
    """Controls of one ``BertLayer``/``RobertaLayer`` (post-LN, the Lie scheme)."""
    sa = layer.attention.self
    act = _check_encoder_config(sa.config, "hidden_act")
    if getattr(layer.attention, "is_cross_attention", False):
        raise ValueError("unsupported BertAttention with `is_cross_attention`=True.")
    H, dk = sa.num_attention_heads, sa.attention_head_size
    wq, bq = _fold(*_linear(sa.query, dtype), sa.scaling, dk)
    wk, bk = _linear(sa.key, dtype)
    wv, bv = _linear(sa.value, dtype)
    wo, bo = _linear(layer.attention.output.dense, dtype)
    attn = AttentionParams(wq, wk, wv, wo, bq, bk, bv, bo, H)
    w1, b1 = _linear(layer.intermediate.dense, dtype)
    w2, b2 = _linear(layer.output.dense, dtype)
    ffn = FFNParams((w1, w2), (b1, b2), (False, False), act)
    return LayerControls(
        attn,
        _norm(layer.attention.output.LayerNorm, dtype),
        ffn,
        _norm(layer.output.LayerNorm, dtype),
    )


def distilbert_layer_controls(block, dtype) -> LayerControls:
    """Controls of one DistilBERT ``TransformerBlock`` (post-LN, the Lie scheme)."""
    at = block.attention
    act = _check_encoder_config(at.config, "activation")
    H, dk = at.n_heads, at.attention_head_size
    wq, bq = _fold(*_linear(at.q_lin, dtype), at.scaling, dk)
    wk, bk = _linear(at.k_lin, dtype)
    wv, bv = _linear(at.v_lin, dtype)
    wo, bo = _linear(at.out_lin, dtype)
    attn = AttentionParams(wq, wk, wv, wo, bq, bk, bv, bo, H)
    w1, b1 = _linear(block.ffn.lin1, dtype)
    w2, b2 = _linear(block.ffn.lin2, dtype)
    ffn = FFNParams((w1, w2), (b1, b2), (False, False), act)
    return LayerControls(
        attn, _norm(block.sa_layer_norm, dtype), ffn, _norm(block.output_layer_norm, dtype)
    )


def encoder_stack(controls: list[LayerControls], causal: bool = False) -> SplitTransformer:
    scheme = CausalScheme(LieScheme()) if causal else LieScheme()
    return SplitTransformer(stack_controls(controls), scheme)


def bert_model(model, dtype, *, roberta: bool = False) -> TextEncoder:
    """``BertModel``/``RobertaModel`` → :class:`TextEncoder`."""
    cfg = model.config
    _check_encoder_config(cfg, "hidden_act")
    emb = model.embeddings
    padding_idx = None
    if roberta:
        padding_idx = int(emb.padding_idx)
    embedding = TextEmbedding(
        _arr(emb.word_embeddings.weight, dtype),
        _arr(emb.position_embeddings.weight, dtype),
        _arr(emb.token_type_embeddings.weight, dtype),
        _norm(emb.LayerNorm, dtype),
        padding_idx,
    )
    layers = [bert_layer_controls(la, dtype) for la in model.encoder.layer]
    encoder = encoder_stack(layers, causal=bool(getattr(cfg, "is_decoder", False)))
    pooler = None
    if getattr(model, "pooler", None) is not None:
        pooler = _linear(model.pooler.dense, dtype)
    return TextEncoder(embedding, encoder, pooler)


def distilbert_model(model, dtype) -> TextEncoder:
    """``DistilBertModel`` → :class:`TextEncoder` (no token types, no pooler)."""
    _check_encoder_config(model.config, "activation")
    emb = model.embeddings
    embedding = TextEmbedding(
        _arr(emb.word_embeddings.weight, dtype),
        _arr(emb.position_embeddings.weight, dtype),
        None,
        _norm(emb.LayerNorm, dtype),
    )
    layers = [distilbert_layer_controls(b, dtype) for b in model.transformer.layer]
    return TextEncoder(embedding, encoder_stack(layers))


def bert_classes():
    from transformers.models.bert import modeling_bert as bert
    from transformers.models.distilbert import modeling_distilbert as distil
    from transformers.models.roberta import modeling_roberta as roberta

    return bert, roberta, distil
