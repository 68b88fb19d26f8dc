"""HuggingFace T5 (``T5EncoderModel``, ``T5Model``, ``T5ForConditionalGeneration``) →
:class:`transflow.models.T5Encoder` / :class:`transflow.models.T5EncoderDecoder`.

T5 v1.0 (``feed_forward_proj="relu"``) and v1.1 / flan-T5 (``"gated-gelu"``, any
``gated-<act>`` or ``<act>`` with a pointwise activation). The continuous readings are in
:mod:`transflow.models._t5` and docs/models.md.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .._controls import AttentionParams, FFNParams
from .._llama_ops import GatedFFNParams, RMSNormParams
from ..models._t5 import RelativePositionBias, T5Encoder, T5EncoderDecoder, T5LayerControls, T5Stack
from ._acts import hf_activation
from ._torch import _arr

__all__ = ["t5_classes", "t5_model"]


def t5_classes():
    from transformers.models.t5 import modeling_t5

    return modeling_t5


def _w(lin, dtype):
    if lin.bias is not None:  # T5's linears have no bias
        raise ValueError(f"unsupported bias in T5 linear {lin}.")
    return _arr(lin.weight, dtype).T


def _norm(ln, dtype) -> RMSNormParams:
    return RMSNormParams(_arr(ln.weight, dtype), float(ln.variance_epsilon))


def _attn(at, dtype) -> AttentionParams:
    wq, wk, wv, wo = (_w(x, dtype) for x in (at.q, at.k, at.v, at.o))
    hk, d = wq.shape[1], wo.shape[1]
    z = lambda k: jnp.zeros((k,), dtype)  # noqa: E731
    return AttentionParams(wq, wk, wv, wo, z(hk), z(hk), z(hk), z(d), int(at.n_heads))


def _ffn(ff, cfg, dtype):
    act = hf_activation(cfg.dense_act_fn, "feed_forward_proj")
    dense = ff.DenseReluDense
    if cfg.is_gated_act:
        w0, w1, wo = _w(dense.wi_0, dtype), _w(dense.wi_1, dtype), _w(dense.wo, dtype)
        h, d = wo.shape
        z = jnp.zeros((h,), dtype)
        return GatedFFNParams(w0, w1, wo, z, z, jnp.zeros((d,), dtype), act)
    wi, wo = _w(dense.wi, dtype), _w(dense.wo, dtype)
    zeros = (jnp.zeros((wi.shape[1],), dtype), jnp.zeros((wo.shape[1],), dtype))
    return FFNParams((wi, wo), zeros, (False, False), act)


def _block(block, cfg, dtype) -> T5LayerControls:
    sa = block.layer[0]
    ff = block.layer[-1]
    kw = {}
    if block.is_decoder:
        ca = block.layer[1]
        kw = {"cross": _attn(ca.EncDecAttention, dtype), "cross_norm": _norm(ca.layer_norm, dtype)}
    return T5LayerControls(
        _attn(sa.SelfAttention, dtype),
        _norm(sa.layer_norm, dtype),
        _ffn(ff, cfg, dtype),
        _norm(ff.layer_norm, dtype),
        **kw,
    )


def t5_stack(stack, dtype) -> T5Stack:
    """A HF ``T5Stack`` (encoder or decoder) → :class:`T5Stack`."""
    cfg = stack.config
    first = stack.block[0].layer[0].SelfAttention
    if not first.has_relative_attention_bias:
        raise ValueError("unsupported T5Stack whose first block has no relative_attention_bias.")
    bias = RelativePositionBias(
        _arr(first.relative_attention_bias.weight, dtype),
        bidirectional=not bool(cfg.is_decoder),
        max_distance=int(cfg.relative_attention_max_distance),
    )
    layers = [_block(b, cfg, dtype) for b in stack.block]
    controls = jax.tree.map(lambda *x: jnp.stack(x), *layers)
    return T5Stack(
        controls, bias, _norm(stack.final_layer_norm, dtype), causal=bool(cfg.is_decoder)
    )


def t5_model(model, dtype) -> T5Encoder | T5EncoderDecoder:
    """``T5EncoderModel`` → :class:`T5Encoder`; ``T5Model``/``T5ForConditionalGeneration``
    → :class:`T5EncoderDecoder` (with ``lm_head`` for the latter)."""
    t5 = t5_classes()
    table = _arr(model.shared.weight, dtype)
    encoder = t5_stack(model.encoder, dtype)
    if isinstance(model, t5.T5EncoderModel):
        return T5Encoder(table, encoder)
    decoder = t5_stack(model.decoder, dtype)
    lm_head, scale = None, False
    if isinstance(model, t5.T5ForConditionalGeneration):
        lm_head = _w(model.lm_head, dtype)
        scale = bool(getattr(model.config, "scale_decoder_outputs", True))
    return T5EncoderDecoder(table, encoder, decoder, lm_head, scale)
