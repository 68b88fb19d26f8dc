"""HuggingFace Llama-family decoders (Llama, Mistral, Qwen2) → transflow.

The three families share one architecture up to configuration: pre-norm layers with
RMSNorm, rotary grouped-query attention (Qwen2: with q/k/v biases) and a gated FFN
(SwiGLU), a final RMSNorm and an optional ``lm_head``. They load into
:class:`~transflow.interop.RMSDecoder` with the :class:`RMSPreNormScheme` (see
``transflow._llama_ops`` and docs/models.md for the continuous reading).

Configuration options that change these maps and are not modelled raise a ``ValueError``
naming the option: a ``rope_parameters['rope_type']`` other than "default", "linear",
"dynamic", "yarn" or "llama3" (the scaled types are :class:`RotaryScaling`), a mix of full
and sliding-window layers (``layer_types``), a ``hidden_act`` without an exact
counterpart, cross-attention or encoder–decoder flags. A sliding window used by every
layer (Mistral's ``sliding_window``) is modelled as a band mask of the kernel.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from .._controls import stack_controls
from .._llama_ops import (
    GatedFFNParams,
    RMSLayerControls,
    RMSNormParams,
    RotaryAttentionParams,
    RotaryScaling,
)
from ..models._causal import CausalScheme
from ..models._encoder import SplitTransformer
from ..models._rms import RMSDecoder
from ..schemes._rms import RMSPreNormScheme
from ._acts import hf_activation
from ._torch import _arr


def _linear(lin, dtype):
    w = _arr(lin.weight, dtype).T
    b = _arr(lin.bias, dtype) if lin.bias is not None else jnp.zeros((w.shape[1],), dtype)
    return w, b


def gate_activation(cfg) -> str:
    """The gate's activation (HF ``hidden_act``, any pointwise map of :func:`hf_activation`)."""
    return hf_activation(getattr(cfg, "hidden_act", None), "hidden_act")


def _rope_parameters(cfg) -> dict:
    rope = dict(getattr(cfg, "rope_parameters", None) or {})
    if "full_attention" in rope and isinstance(rope.get("full_attention"), dict):
        raise ValueError(
            "unsupported `rope_parameters` per layer type: transflow models one rotary "
            "embedding for every layer."
        )
    return rope


def rope_theta(cfg) -> float:
    """θ of the rotary embedding (its scaling: :func:`rope_scaling`)."""
    rope = _rope_parameters(cfg)
    theta = rope.get("rope_theta", getattr(cfg, "rope_theta", None))
    if theta is None:
        raise ValueError("the config has no `rope_parameters['rope_theta']`.")
    return float(theta)


def rope_scaling(cfg) -> RotaryScaling | None:
    """The rescaling of the rotary frequencies (``None``: the default embedding).

    ``rope_parameters['rope_type']`` (or the older ``rope_scaling={'type': ...}``, which
    HF moves into ``rope_parameters``) "linear", "dynamic", "yarn" and "llama3" are
    modelled (:class:`RotaryScaling`); other types (longrope, ...) and a
    ``partial_rotary_factor`` ≠ 1 raise naming the option.
    """
    rope = _rope_parameters(cfg)
    rtype = rope.get("rope_type", rope.get("type", "default"))
    if rtype not in ("default", "linear", "dynamic", "yarn", "llama3"):
        raise ValueError(
            f"unsupported `rope_parameters['rope_type']`={rtype!r}: transflow models the "
            "rope types 'default', 'linear', 'dynamic', 'yarn' and 'llama3' (rescaled "
            "rotation frequencies); rebuild the config with one of them."
        )
    partial = rope.get("partial_rotary_factor", getattr(cfg, "partial_rotary_factor", None))
    if partial not in (None, 1, 1.0):
        raise ValueError(
            f"unsupported `partial_rotary_factor`={partial!r}: transflow rotates the whole "
            "head (partial_rotary_factor = 1)."
        )
    if rtype == "default":
        return None
    max_pos = getattr(cfg, "max_position_embeddings", None)
    factor = rope.get("factor")
    orig = rope.get("original_max_position_embeddings")
    if rtype in ("yarn", "llama3") and orig is None:
        orig = max_pos
    if rtype == "yarn" and factor is None:
        factor = max_pos / orig
    if factor is None:
        raise ValueError(f"`rope_parameters` of rope_type {rtype!r} has no `factor`.")
    opt = {
        k: rope[k]
        for k in ("attention_factor", "mscale", "mscale_all_dim")
        if rope.get(k) is not None
    }
    for k in ("low_freq_factor", "high_freq_factor"):
        if rope.get(k) is not None:
            opt[k] = float(rope[k])
    for k in ("beta_fast", "beta_slow"):
        if rope.get(k):  # HF: `rope.get(k) or default`
            opt[k] = float(rope[k])
    if rtype == "yarn":
        opt["truncate"] = bool(rope.get("truncate", True))
    return RotaryScaling(
        rtype,
        float(factor),
        None if orig is None else int(orig),
        None if max_pos is None else int(max_pos),
        **opt,
    )


def sliding_window(cfg) -> int | None:
    """The sliding window W of a Mistral/Qwen2 config (``None``: full attention).

    Modelled when every layer uses it (Mistral; Qwen2 with ``max_window_layers=0``): a band
    restriction of the attention kernel (:class:`RMSDecoder`). A mix of full and sliding
    layers raises naming ``layer_types``.
    """
    window = getattr(cfg, "sliding_window", None)
    if getattr(cfg, "model_type", "") == "qwen2" and not getattr(cfg, "use_sliding_window", False):
        window = None
    types = getattr(cfg, "layer_types", None)
    if types is not None:
        kinds = set(types)
        bad = sorted(kinds - {"full_attention", "sliding_attention"})
        if bad:
            raise ValueError(
                f"unsupported `layer_types` {bad}: transflow models 'full_attention' and "
                "'sliding_attention' layers."
            )
        if kinds == {"full_attention"}:
            return None
        if len(kinds) > 1 and window is not None:
            raise ValueError(
                f"unsupported `layer_types`={list(types)}: a mix of full and sliding-window "
                "layers (Qwen2's `max_window_layers`); transflow applies one attention mask "
                "to every layer. Use max_window_layers=0 (all sliding) or no sliding window."
            )
    return None if window is None else int(window)


def check_decoder_config(cfg) -> None:
    """Refuse options of a decoder-only config that change the layer maps."""
    for option in ("add_cross_attention", "is_encoder_decoder"):
        if getattr(cfg, option, False):
            raise ValueError(
                f"unsupported `{option}`=True in a decoder-only {type(cfg).__name__}: "
                "transflow's Llama-family decoders have no cross-attention."
            )
    gate_activation(cfg)
    rope_theta(cfg)
    rope_scaling(cfg)


def _rms(norm, dtype) -> RMSNormParams:
    return RMSNormParams(_arr(norm.weight, dtype), float(norm.variance_epsilon))


def llama_layer_controls(layer, dtype) -> RMSLayerControls:
    """Controls of one ``LlamaDecoderLayer`` (or Mistral/Qwen2)."""
    at = layer.self_attn
    cfg = at.config
    check_decoder_config(cfg)
    H = int(cfg.num_attention_heads)
    G = int(getattr(cfg, "num_key_value_heads", None) or H)
    if abs(float(at.scaling) - at.head_dim**-0.5) > 1e-15:
        raise ValueError(
            f"unsupported attention scaling {at.scaling} (expected head_dim**-0.5 = "
            f"{at.head_dim**-0.5})."
        )
    wq, bq = _linear(at.q_proj, dtype)
    wk, bk = _linear(at.k_proj, dtype)
    wv, bv = _linear(at.v_proj, dtype)
    wo, bo = _linear(at.o_proj, dtype)
    attn = RotaryAttentionParams(
        wq, wk, wv, wo, bq, bk, bv, bo, H, G, rope_theta(cfg), rope_scaling(cfg)
    )
    mlp = layer.mlp
    wg, bg = _linear(mlp.gate_proj, dtype)
    wu, bu = _linear(mlp.up_proj, dtype)
    wd, bd = _linear(mlp.down_proj, dtype)
    ffn = GatedFFNParams(wg, wu, wd, bg, bu, bd, gate_activation(cfg))
    return RMSLayerControls(
        attn, _rms(layer.input_layernorm, dtype), ffn, _rms(layer.post_attention_layernorm, dtype)
    )


def llama_layers(layers, dtype) -> SplitTransformer:
    controls = stack_controls([llama_layer_controls(la, dtype) for la in layers])
    return SplitTransformer(controls, CausalScheme(RMSPreNormScheme()))


def llama_model(model, dtype, lm_head=None) -> RMSDecoder:
    """``LlamaModel``/``MistralModel``/``Qwen2Model`` (+ ``lm_head``) → :class:`RMSDecoder`."""
    cfg = model.config
    check_decoder_config(cfg)
    window = sliding_window(cfg)
    decoder = llama_layers(list(model.layers)[: cfg.num_hidden_layers], dtype)
    unembedding = None
    if lm_head is not None:
        if lm_head.bias is not None:
            raise ValueError("unsupported `lm_head` with a bias.")
        unembedding = _arr(lm_head.weight, dtype).T
    return RMSDecoder(
        _arr(model.embed_tokens.weight, dtype),
        decoder,
        _rms(model.norm, dtype),
        unembedding,
        window,
    )


def llama_classes() -> dict[str, Any]:
    from transformers.models.llama import modeling_llama as ll
    from transformers.models.mistral import modeling_mistral as mi
    from transformers.models.qwen2 import modeling_qwen2 as qw

    return {
        "layers": (ll.LlamaDecoderLayer, mi.MistralDecoderLayer, qw.Qwen2DecoderLayer),
        "models": (ll.LlamaModel, mi.MistralModel, qw.Qwen2Model),
        "lms": (ll.LlamaForCausalLM, mi.MistralForCausalLM, qw.Qwen2ForCausalLM),
    }
