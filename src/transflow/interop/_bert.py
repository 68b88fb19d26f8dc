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

import jax.numpy as jnp

from .._controls import AttentionParams, FFNParams, LayerControls, stack_controls
from ..models._causal import CausalScheme
from ..models._encoder import SplitTransformer
from ..models._text import TextEmbedding, TextEncoder
from ..schemes._lie import LieScheme
from ._acts import hf_activation
from ._torch import _arr, _norm

__all__ = ["bert_model", "distilbert_model"]


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
