"""Load HuggingFace ``transformers`` layers (ViT, CvT, GPT-2, BERT family, Llama family).

torch and transformers are imported inside the functions only.

How each HuggingFace layer reads in the continuous model:

- ``ViTLayer``, ``GPT2Block``, ``CvtLayer`` are pre-LN + GELU blocks: the
  :class:`~transflow.PreNormScheme` extension of docs/spec/continuous-model.md §4.2 (explicit Euler
  on 𝒜(P_{S1} u), additive FFN branch, no closing projection); the FFN is the lifting form
  (``d_ff ≠ d``, docs/spec/continuous-model.md Q6) with activation "gelu" (exact erf) or
  "gelu_tanh".
- GPT-2 is causal: the restricted token integral of docs/spec/continuous-model.md §4.4
    (:class:`CausalScheme`).
- ViT's patch embedding, class token and position embedding build the initial condition f
  on a 2-D token grid (:class:`~transflow.vision.PatchEmbedding`); the final LayerNorm is
  the encoder's closing projection and the pooler the class-token read-out.
- CvT's depthwise-conv + BatchNorm(eval) + pointwise projections are
  :class:`~transflow.vision.DepthwiseConv2d` + :class:`~transflow.AttentionParams`, with
  the ``embed_dim**-0.5`` score scale of the HF implementation (not the head width).
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from .._controls import AttentionParams, FFNParams, LayerControls, stack_controls
from .._errors import CheckpointError, check_float_dtype, check_path
from ..models._causal import CausalDecoder, CausalScheme, TokenEmbedding
from ..models._cvt import (
    ConvAttentionParams,
    ConvEmbedding,
    ConvLayerControls,
    ConvPreNormScheme,
    CvtModel,
    CvtStageModel,
    DepthwiseConv2d,
)
from ..models._encoder import SplitTransformer
from ..models._vit import ClassTokenReadout, PatchEmbedding, VisionTransformer
from ..schemes._prenorm import PreNormScheme
from . import _bert, _hf_heads, _llama, _t5
from ._acts import hf_activation, torch_activation
from ._torch import _arr, _check_module, _norm, _resolve_dtype, _torch

__all__ = ["from_hf", "hf_activation", "load_hf"]


def _linear(lin, dtype, *, conv1d: bool = False):
    """(W, b) in the row-vector convention ``x @ W + b``."""
    if conv1d:  # transformers' Conv1D stores (in, out)
        w = _arr(lin.weight, dtype)
    else:  # nn.Linear stores (out, in)
        w = _arr(lin.weight, dtype).T
    b = _arr(lin.bias, dtype) if lin.bias is not None else jnp.zeros((w.shape[1],), dtype)
    return w, b


def _fold_scale(wq, bq, scaling: float, head_dim: int):
    """Fold a score scale ``scaling`` ≠ 1/√d_k into the query kernel (exact up to rounding)."""
    factor = float(scaling) * head_dim**0.5
    if factor == 1.0:
        return wq, bq
    return wq * factor, bq * factor


def _check_gelu_module(act, where: str) -> str:
    return torch_activation(act, where)


# ----------------------------------------------------------------------------- ViT
def _vit_layer(layer, dtype) -> LayerControls:
    cfg = layer.attention.config
    act = hf_activation(cfg.hidden_act)
    at = layer.attention
    H, dk = at.num_attention_heads, at.head_dim
    wq, bq = _linear(at.q_proj, dtype)
    wk, bk = _linear(at.k_proj, dtype)
    wv, bv = _linear(at.v_proj, dtype)
    wo, bo = _linear(at.o_proj, dtype)
    wq, bq = _fold_scale(wq, bq, at.scaling, dk)
    attn = AttentionParams(wq, wk, wv, wo, bq, bk, bv, bo, H)
    w1, b1 = _linear(layer.mlp.fc1, dtype)
    w2, b2 = _linear(layer.mlp.fc2, dtype)
    ffn = FFNParams((w1, w2), (b1, b2), (False, False), act)
    return LayerControls(
        attn, _norm(layer.layernorm_before, dtype), ffn, _norm(layer.layernorm_after, dtype)
    )


def _vit_embedding(emb, dtype) -> PatchEmbedding:
    pe = emb.patch_embeddings
    conv = pe.projection
    if tuple(conv.stride) != tuple(conv.kernel_size) or any(conv.padding):
        raise ValueError(
            f"unsupported ViT patch projection {conv}: expected stride = kernel and no padding."
        )
    w = _arr(conv.weight, dtype)  # (D, C, ph, pw)
    kernel = w.reshape(w.shape[0], -1).T
    bias = _arr(conv.bias, dtype) if conv.bias is not None else jnp.zeros((w.shape[0],), dtype)
    cls_tok = _arr(emb.cls_token, dtype).reshape(-1)
    pos = _arr(emb.position_embeddings, dtype)[0]
    return PatchEmbedding(
        kernel,
        bias,
        cls_tok,
        pos,
        tuple(int(s) for s in pe.image_size),
        tuple(int(s) for s in pe.patch_size),
    )


def _vit_model(model, dtype) -> VisionTransformer:
    layers = list(model.layers) if hasattr(model, "layers") else list(model.encoder.layer)
    controls = stack_controls([_vit_layer(la, dtype) for la in layers])
    encoder = SplitTransformer(controls, PreNormScheme(), 1.0, _norm(model.layernorm, dtype))
    readout = None
    if getattr(model, "pooler", None) is not None:
        w, b = _linear(model.pooler.dense, dtype)
        readout = ClassTokenReadout(None, w, b, _pooler_act(model.config.pooler_act))
    return VisionTransformer(_vit_embedding(model.embeddings, dtype), encoder, readout)


def _pooler_act(name) -> str:
    return hf_activation(name, "pooler_act")


# ----------------------------------------------------------------------------- GPT-2
def _gpt2_block(block, dtype) -> LayerControls:
    cfg = block.attn.config
    if getattr(block, "crossattention", None) is not None or getattr(
        cfg, "add_cross_attention", False
    ):
        raise ValueError(
            "unsupported `add_cross_attention`=True in a GPT-2 (decoder-only) config: "
            "transflow's GPT-2 blocks have no cross-attention."
        )
    act = hf_activation(cfg.activation_function, "activation_function")
    at = block.attn
    E, H, dk = at.embed_dim, at.num_heads, at.head_dim
    w, b = _linear(at.c_attn, dtype, conv1d=True)  # (E, 3E): columns [q | k | v]
    wq, wk, wv = w[:, :E], w[:, E : 2 * E], w[:, 2 * E :]
    bq, bk, bv = b[:E], b[E : 2 * E], b[2 * E :]
    wo, bo = _linear(at.c_proj, dtype, conv1d=True)
    # scale_attn_weights / scale_attn_by_inverse_layer_idx are folded into W^Q, b^Q.
    wq, bq = _fold_scale(wq, bq, at.scaling, dk)
    attn = AttentionParams(wq, wk, wv, wo, bq, bk, bv, bo, H)
    w1, b1 = _linear(block.mlp.c_fc, dtype, conv1d=True)
    w2, b2 = _linear(block.mlp.c_proj, dtype, conv1d=True)
    ffn = FFNParams((w1, w2), (b1, b2), (False, False), act)
    return LayerControls(attn, _norm(block.ln_1, dtype), ffn, _norm(block.ln_2, dtype))


def _gpt2_model(model, dtype, unembedding=None) -> CausalDecoder:
    blocks = stack_controls([_gpt2_block(b, dtype) for b in model.h])
    decoder = SplitTransformer(blocks, CausalScheme(PreNormScheme()), 1.0, _norm(model.ln_f, dtype))
    emb = TokenEmbedding(_arr(model.wte.weight, dtype), _arr(model.wpe.weight, dtype))
    return CausalDecoder(emb, decoder, unembedding)


# ----------------------------------------------------------------------------- CvT
def _dw_bn(proj, dtype, option: str) -> DepthwiseConv2d:
    torch = _torch()
    cp = getattr(proj, "convolution_projection", None)
    if cp is None:
        raise ValueError(
            f"unsupported `qkv_projection_method` for the {option} projection: transflow "
            "reproduces 'dw_bn' (depthwise conv + BatchNorm); HF builds no convolution for "
            "other methods (its 'avg' key/value projection has no module to run)."
        )
    conv, bn = cp.convolution, cp.normalization
    if not isinstance(bn, torch.nn.BatchNorm2d) or bn.running_mean is None:
        raise ValueError(
            f"the {option} projection needs a BatchNorm2d with running "
            "statistics (track_running_stats=True); transflow uses eval mode."
        )
    (sh, sw), (ph, pw) = tuple(conv.stride), tuple(conv.padding)
    if sh != sw or ph != pw or tuple(conv.dilation) != (1, 1):
        raise ValueError(
            f"unsupported {option} convolution {conv}: needs equal strides and "
            "paddings in both directions and no dilation."
        )
    if conv.groups != conv.in_channels or conv.in_channels != conv.out_channels:
        raise ValueError(f"the {option} convolution must be depthwise, got {conv}.")
    kernel = jnp.transpose(_arr(conv.weight, dtype)[:, 0], (1, 2, 0))  # (kh, kw, d)
    if conv.bias is not None:
        raise ValueError(f"the {option} depthwise convolution must have bias=False.")
    d = kernel.shape[-1]
    mean, var = _arr(bn.running_mean, dtype), _arr(bn.running_var, dtype)
    gamma = _arr(bn.weight, dtype) if bn.weight is not None else jnp.ones((d,), dtype)
    beta = _arr(bn.bias, dtype) if bn.bias is not None else jnp.zeros((d,), dtype)
    scale = gamma / jnp.sqrt(var + bn.eps)
    return DepthwiseConv2d(kernel, scale, beta - mean * scale, int(sh), int(ph))


def _cvt_layer(layer, dtype) -> tuple[ConvLayerControls, int]:
    sa = layer.attention.attention
    H = sa.num_heads
    wq, bq = _linear(sa.projection_query, dtype)
    wk, bk = _linear(sa.projection_key, dtype)
    wv, bv = _linear(sa.projection_value, dtype)
    wo, bo = _linear(layer.attention.output.dense, dtype)
    attn = AttentionParams(wq, wk, wv, wo, bq, bk, bv, bo, H)
    qc = sa.convolution_projection_query
    q_conv = _dw_bn(qc, dtype, "query") if hasattr(qc, "convolution_projection") else None
    k_conv = _dw_bn(sa.convolution_projection_key, dtype, "key")
    v_conv = _dw_bn(sa.convolution_projection_value, dtype, "value")
    cattn = ConvAttentionParams(attn, q_conv, k_conv, v_conv, float(sa.scale))
    act = _check_gelu_module(layer.intermediate.activation, "CvtIntermediate")
    w1, b1 = _linear(layer.intermediate.dense, dtype)
    w2, b2 = _linear(layer.output.dense, dtype)
    ffn = FFNParams((w1, w2), (b1, b2), (False, False), act)
    controls = ConvLayerControls(
        cattn, _norm(layer.layernorm_before, dtype), ffn, _norm(layer.layernorm_after, dtype)
    )
    return controls, int(bool(sa.with_cls_token))


def _cvt_stage(stage, dtype) -> CvtStageModel:
    ce = stage.embedding.convolution_embeddings
    conv = ce.projection
    (sh, sw), (ph, pw) = tuple(conv.stride), tuple(conv.padding)
    if sh != sw or ph != pw:
        raise ValueError(
            f"unsupported CvT embedding convolution {conv}: needs equal strides "
            "and paddings in both directions."
        )
    kernel = _arr(conv.weight, dtype)
    bias = _arr(conv.bias, dtype) if conv.bias is not None else jnp.zeros((kernel.shape[0],), dtype)
    norm = _norm(ce.normalization, dtype) if ce.normalization is not None else None
    emb = ConvEmbedding(kernel, bias, norm, int(sh), int(ph))
    layers = [_cvt_layer(la, dtype) for la in stage.layers]
    prefixes = {p for _, p in layers}
    has_cls = bool(stage.config.cls_token[stage.stage])
    if prefixes != {int(has_cls)}:
        raise ValueError("the layers of the CvtStage disagree with the stage's `cls_token`.")
    cls_tok = _arr(stage.cls_token, dtype).reshape(-1) if has_cls else None
    return CvtStageModel(emb, cls_tok, stack_controls([c for c, _ in layers]))


# ----------------------------------------------------------------------------- entry
def _classes():
    from transformers.models.cvt import modeling_cvt
    from transformers.models.gpt2 import modeling_gpt2
    from transformers.models.vit import modeling_vit

    return modeling_vit, modeling_cvt, modeling_gpt2


def from_hf(
    module: Any, *, dtype=None, grid_shape: tuple[int, int] | None = None
) -> SplitTransformer | VisionTransformer | CvtStageModel | CausalDecoder:
    """Load a HuggingFace layer or model into transflow (eval-mode semantics).

    Supported modules and what is returned:

    - ``ViTLayer`` → :class:`~transflow.SplitTransformer` (one :class:`PreNormScheme`
      step); a ``torch.nn.ModuleList`` of ``ViTLayer`` (e.g. ``ViTModel.layers``) → a
      stacked one.
    - ``ViTModel`` → :class:`~transflow.vision.VisionTransformer`: ``model(image)`` is
      ``last_hidden_state`` (embedding f, the layers, the final LayerNorm as closing
      projection) and ``model.pooled(image)`` is ``pooler_output``.
    - ``GPT2Block`` (or a ``ModuleList`` of them) → ``SplitTransformer`` with
      ``CausalScheme(PreNormScheme())``: causal whatever ``causal=`` the caller passes.
      GPT-2's ``Conv1D`` (in, out) weights, ``scale_attn_weights`` and
      ``scale_attn_by_inverse_layer_idx`` (folded into W^Q) are handled.
    - ``GPT2Model`` → :class:`CausalDecoder`: ``model(input_ids)`` is
      ``last_hidden_state`` (f = wte[ids] + wpe[positions], the blocks, ``ln_f``);
      ``GPT2LMHeadModel`` also gives ``model.logits(input_ids)`` (``lm_head``).
    - ``CvtLayer`` → ``SplitTransformer`` with :class:`~transflow.vision.ConvPreNormScheme`
      on the token grid ``grid_shape=(rows, columns)`` (required: HF passes height and
      width at call time), the class token split off if ``with_cls_token``.
    - ``CvtStage`` → :class:`~transflow.vision.CvtStageModel` (conv embedding, class
      token, layers); ``stage(x)`` returns ``(hidden (D, h, w), cls_token or None)``.
      ``CvtModel`` → :class:`~transflow.vision.CvtModel` (all stages in turn):
      ``model(image)`` is ``(last_hidden_state, cls_token_value)``.
    - Task heads → :class:`~transflow.interop.HeadModel` (``model(ids, ...)`` = HF's
      ``logits``; ``model.base`` the base model): ``{Bert,Roberta,DistilBert}ForMaskedLM``
      (per-token logits), ``{Bert,Roberta,DistilBert}ForSequenceClassification`` (first
      token), ``GPT2ForSequenceClassification`` and
      ``{Llama,Mistral,Qwen2}ForSequenceClassification`` (last non-padding token).
    - ``BertLayer``/``RobertaLayer``/DistilBERT ``TransformerBlock`` (or ModuleLists) →
      ``SplitTransformer`` with the paper's :class:`~transflow.LieScheme` (post-LN);
      ``BertModel``/``RobertaModel``/``DistilBertModel`` → :class:`TextEncoder`:
      ``model(ids, token_type_ids)`` is ``last_hidden_state``, ``model.pooled(...)`` the
      ``pooler_output`` (RoBERTa's padding-aware position ids included).
    - ``{Llama,Mistral,Qwen2}DecoderLayer`` (or ModuleLists) → ``SplitTransformer`` with
      ``CausalScheme(RMSPreNormScheme())``; ``{Llama,Mistral,Qwen2}Model`` →
      :class:`RMSDecoder` (``model(ids)`` = ``last_hidden_state``); ``*ForCausalLM`` also
      gives ``model.logits(ids)``. See docs/models.md for RMSNorm, rotary and grouped-query
      attention, SwiGLU and the refused options.
    - ``T5EncoderModel`` → :class:`~transflow.models.T5Encoder` (``model(ids)`` =
      ``last_hidden_state``); ``T5Model`` → :class:`~transflow.models.T5EncoderDecoder`
      (``model(ids, decoder_ids)`` = the decoder's ``last_hidden_state``,
      ``model.encode(ids)`` the encoder's); ``T5ForConditionalGeneration`` also gives
      ``model.logits(ids, decoder_ids)``; a ``T5Stack`` → :class:`~transflow.models.T5Stack`.
      Relative position buckets, RMS norm without mean or bias, unscaled scores, ReLU or
      gated-GELU FFN, cross-attention (docs/models.md).

    Converted whole models take ``key_padding_mask=`` ``(n,)`` bool (True = padded) and
    ``attention_mask=`` ``(n, n)`` (True = may attend, or additive float). HF's
    ``attention_mask`` (1 = keep) is ``key_padding_mask = (mask == 0)``
    (:func:`transflow.mask_from_hf`). For float64 references run HF inside
    :func:`hf_float64_reference`; checkpoint directories load with :func:`load_hf`.

    Models map one example (a sequence ``(n, d)`` or an image ``(C, H, W)``); batch with
    ``jax.vmap``. Dropout and drop-path are identities (eval mode); BatchNorm uses its
    running statistics.

    Args:
        module: the HF module.
        dtype: float32/float64; default follows the module's parameters.
        grid_shape: token grid ``(rows, columns)``, for ``CvtLayer`` only.

    Raises:
        ValueError: for configurations without an exact counterpart, naming the option
            (``hidden_act``/``activation_function``, ``qkv_projection_method``, ...).
        TypeError: for unsupported module types.

    Example:
        >>> import torch, jax.numpy as jnp
        >>> from transformers import ViTConfig
        >>> from transformers.models.vit.modeling_vit import ViTLayer
        >>> from transflow.interop import from_hf
        >>> cfg = ViTConfig(hidden_size=8, num_attention_heads=2, intermediate_size=16)
        >>> model = from_hf(ViTLayer(cfg).eval())
        >>> model(jnp.ones((5, 8)) * jnp.arange(8.0)).shape
        (5, 8)
    """
    torch = _torch()
    vit, cvt, gpt2 = _classes()
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"`module` must be a torch.nn.Module, got {type(module).__name__}.")
    _check_module(module)
    dtype = _resolve_dtype(module, dtype)
    if grid_shape is not None and not isinstance(module, cvt.CvtLayer):
        raise ValueError(f"`grid_shape` is only used for a CvtLayer; got {type(module).__name__}.")

    zoo = _zoo(module, dtype)
    if zoo is not None:
        return zoo

    headed = _hf_heads.convert_head(module, dtype, from_hf)
    if headed is not None:
        return headed
    if isinstance(module, cvt.CvtModel):
        return CvtModel(tuple(_cvt_stage(s, dtype) for s in module.encoder.stages))
    if isinstance(module, torch.nn.ModuleList):
        kinds = {type(m) for m in module}
        if kinds == {vit.ViTLayer}:
            return SplitTransformer(
                stack_controls([_vit_layer(m, dtype) for m in module]), PreNormScheme()
            )
        if kinds == {gpt2.GPT2Block}:
            return SplitTransformer(
                stack_controls([_gpt2_block(m, dtype) for m in module]),
                CausalScheme(PreNormScheme()),
            )
        raise TypeError(
            "a ModuleList must hold layers of one kind (ViTLayer, GPT2Block, BertLayer, "
            "RobertaLayer, DistilBERT TransformerBlock, Llama/Mistral/Qwen2 decoder layers), got "
            f"{sorted(k.__name__ for k in kinds)}."
        )
    if isinstance(module, vit.ViTLayer):
        return SplitTransformer(stack_controls([_vit_layer(module, dtype)]), PreNormScheme())
    if isinstance(module, vit.ViTModel):
        return _vit_model(module, dtype)
    if isinstance(module, gpt2.GPT2Block):
        return SplitTransformer(
            stack_controls([_gpt2_block(module, dtype)]), CausalScheme(PreNormScheme())
        )
    if isinstance(module, gpt2.GPT2Model):
        return _gpt2_model(module, dtype)
    if isinstance(module, gpt2.GPT2LMHeadModel):
        head = module.lm_head
        if head.bias is not None:
            raise ValueError("unsupported GPT2LMHeadModel: `lm_head` with a bias.")
        return _gpt2_model(module.transformer, dtype, _arr(head.weight, dtype).T)
    if isinstance(module, cvt.CvtLayer):
        if grid_shape is None:
            raise ValueError(
                "`grid_shape=(rows, columns)` is required for a CvtLayer: its token grid is "
                "not stored in the layer (HF passes height and width at call time)."
            )
        controls, n_prefix = _cvt_layer(module, dtype)
        scheme = ConvPreNormScheme(tuple(int(s) for s in grid_shape), n_prefix)
        return SplitTransformer(stack_controls([controls]), scheme)
    if isinstance(module, cvt.CvtStage):
        return _cvt_stage(module, dtype)
    raise TypeError(
        "from_hf: `module` must be one of ViTLayer, ViTModel, GPT2Block, GPT2Model, "
        "GPT2LMHeadModel, CvtLayer, CvtStage, CvtModel, {Bert,Roberta,DistilBert}ForMaskedLM, "
        "*ForSequenceClassification (BERT, RoBERTa, DistilBERT, GPT-2, Llama family), "
        "BertLayer, BertModel, RobertaLayer, RobertaModel, DistilBERT "
        "TransformerBlock, DistilBertModel, {Llama,Mistral,Qwen2}DecoderLayer, "
        "{Llama,Mistral,Qwen2}Model, {Llama,Mistral,Qwen2}ForCausalLM, T5EncoderModel, "
        "T5Model, T5ForConditionalGeneration, T5Stack and ModuleLists of "
        f"layers; got {type(module).__name__}. torch.nn.TransformerEncoder"
        "(Layer): see transflow.interop.from_torch."
    )


def _zoo(module, dtype):
    """The BERT- and Llama-family conversions (``None`` if ``module`` is neither)."""
    import torch

    bert, roberta, distil = _bert.bert_classes()
    lc = _llama.llama_classes()
    bert_layers = (bert.BertLayer, roberta.RobertaLayer)
    if isinstance(module, torch.nn.ModuleList):
        kinds = {type(m) for m in module}
        if len(kinds) != 1:
            return None
        (kind,) = kinds
        if issubclass(kind, bert_layers):
            ctrls = [_bert.bert_layer_controls(m, dtype) for m in module]
            return _bert.encoder_stack(ctrls, causal=bool(module[0].is_decoder))
        if issubclass(kind, distil.TransformerBlock):
            return _bert.encoder_stack([_bert.distilbert_layer_controls(m, dtype) for m in module])
        if issubclass(kind, lc["layers"]):
            return _llama.llama_layers(list(module), dtype)
        return None
    if isinstance(module, bert_layers):
        ctrls = [_bert.bert_layer_controls(module, dtype)]
        return _bert.encoder_stack(ctrls, causal=bool(module.is_decoder))
    if isinstance(module, distil.TransformerBlock):
        return _bert.encoder_stack([_bert.distilbert_layer_controls(module, dtype)])
    if isinstance(module, roberta.RobertaModel):
        return _bert.bert_model(module, dtype, roberta=True)
    if isinstance(module, bert.BertModel):
        return _bert.bert_model(module, dtype)
    if isinstance(module, distil.DistilBertModel):
        return _bert.distilbert_model(module, dtype)
    if isinstance(module, lc["layers"]):
        return _llama.llama_layers([module], dtype)
    if isinstance(module, lc["models"]):
        return _llama.llama_model(module, dtype)
    if isinstance(module, lc["lms"]):
        return _llama.llama_model(module.model, dtype, module.lm_head)
    t5 = _t5.t5_classes()
    if isinstance(module, (t5.T5EncoderModel, t5.T5Model, t5.T5ForConditionalGeneration)):
        return _t5.t5_model(module, dtype)
    if isinstance(module, t5.T5Stack):
        return _t5.t5_stack(module, dtype)
    return None


# ----------------------------------------------------------------------------- checkpoints
# saved T5 checkpoints load with their own class (AutoModel would build a T5Model, which an
# encoder-only checkpoint cannot fill, and would drop a T5ForConditionalGeneration's head)
_T5_ARCHITECTURES = ("T5EncoderModel", "T5Model", "T5ForConditionalGeneration")
_CAUSAL_LM_ARCHITECTURES = (
    "GPT2LMHeadModel",
    "LlamaForCausalLM",
    "MistralForCausalLM",
    "Qwen2ForCausalLM",
)


_FLOAT_DTYPES = {"F16", "BF16", "F32", "F64", "F8_E4M3", "F8_E5M2"}


def _safetensors_headers(p) -> dict[str, dict]:
    """``{file: header}`` of every ``*.safetensors`` file of a checkpoint directory, each
    file checked (non-empty, a readable header, data covering the header's offsets)."""
    import json
    import struct

    out = {}
    for f in sorted(p.glob("*.safetensors")):
        size = f.stat().st_size
        if size == 0:
            raise CheckpointError(f"load_hf: {str(f)!r} is empty (0 bytes).")
        with open(f, "rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                raise CheckpointError(
                    f"load_hf: {str(f)!r} is truncated: {size} bytes, shorter than the "
                    "8-byte header length of a safetensors file."
                )
            (n,) = struct.unpack("<Q", head)
            if n > size - 8:
                raise CheckpointError(
                    f"load_hf: {str(f)!r} is truncated or corrupted: its header claims {n} "
                    f"bytes but the file holds {size - 8} after the length field."
                )
            raw = fh.read(n)
        try:
            header = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise CheckpointError(
                f"load_hf: {str(f)!r} is corrupted: its header is not valid JSON ({e})."
            ) from None
        if not isinstance(header, dict):
            raise CheckpointError(f"load_hf: {str(f)!r} is corrupted: its header is not a table.")
        end = 0
        for name, info in header.items():
            if name == "__metadata__":
                continue
            try:
                end = max(end, int(info["data_offsets"][1]))
            except (KeyError, TypeError, IndexError, ValueError):
                raise CheckpointError(
                    f"load_hf: {str(f)!r} is corrupted: tensor {name!r} has no data offsets."
                ) from None
        if 8 + n + end > size:
            raise CheckpointError(
                f"load_hf: {str(f)!r} is truncated: its tensors need {8 + n + end} bytes, the "
                f"file holds {size}."
            )
        out[str(f)] = header
    return out


def _check_dtypes(headers: dict[str, dict], model) -> None:
    """A tensor stored with a non-float dtype where the model has a float parameter."""
    floats = {k for k, v in model.state_dict().items() if v.is_floating_point()}
    prefix = getattr(model, "base_model_prefix", "")
    for f, header in headers.items():
        for name, info in header.items():
            if name == "__metadata__" or info.get("dtype") in _FLOAT_DTYPES:
                continue
            stripped = name[len(prefix) + 1 :] if prefix and name.startswith(prefix + ".") else name
            if name in floats or stripped in floats:
                raise CheckpointError(
                    f"load_hf: {f!r} stores {name!r} as {info.get('dtype')}, a non-float "
                    "dtype, where the model has a floating-point parameter (HF would cast it "
                    "silently); the file is corrupted or was written wrongly."
                )


def _mismatch_cause(p, auto, cfg, headers) -> str:
    """The tensors whose stored shapes differ from the shapes config.json gives."""
    import torch

    try:
        with torch.device("meta"):
            ref = auto.from_config(cfg).state_dict()
    except Exception:  # noqa: BLE001 - only used to word the message
        return ""
    bad = []
    for header in headers.values():
        for name, info in header.items():
            if name == "__metadata__":
                continue
            key = name if name in ref else name.split(".", 1)[-1]
            if key in ref and tuple(ref[key].shape) != tuple(info.get("shape", ())):
                bad.append(f"{name}: stored {tuple(info['shape'])}, config {tuple(ref[key].shape)}")
    return "; ".join(bad[:4]) + (" ..." if len(bad) > 4 else "")


def load_hf(path, *, dtype=None):
    """Load a HuggingFace checkpoint directory (``save_pretrained``) and convert it.

    The directory's ``config.json`` decides the class: a checkpoint saved from
    ``GPT2LMHeadModel`` or ``{Llama,Mistral,Qwen2}ForCausalLM`` loads with
    ``AutoModelForCausalLM`` (the result has ``.logits``); one saved from a supported task
    model (``{Bert,Roberta,DistilBert}ForMaskedLM``, ``*ForSequenceClassification`` of
    BERT, RoBERTa, DistilBERT, GPT-2 and the Llama family) loads with that class and
    converts to a :class:`~transflow.interop.HeadModel` (``model(ids)`` are the logits,
    ``model.base`` the base model); every other checkpoint loads with ``AutoModel`` (the
    base model; other task heads are dropped, and a pooler the checkpoint does not hold is
    left out rather than drawn at random; any other missing weight raises). The model is
    loaded locally only (no network), in eval mode, with ``attn_implementation="eager"``,
    then converted by :func:`from_hf`.

    Before HF reads them, the ``*.safetensors`` files are checked: not empty, a readable
    header, data covering every tensor's offsets, and (after loading) no tensor stored with
    a non-float dtype where the model has a float parameter (HF would cast it silently).

    Args:
        path: a local directory written by ``model.save_pretrained(path)``.
        dtype: float32/float64 of the converted model; default the checkpoint's dtype.

    Raises:
        FileNotFoundError: ``path`` does not exist, naming it.
        CheckpointError: (``transflow.interop.CheckpointError``, a ``ValueError``)
            ``path`` holds no loadable HF checkpoint: no ``config.json`` or an
            unrecognised one, an empty, truncated or corrupted weights file, a tensor
            with a wrong dtype, weights whose shapes do not fit ``config.json``, missing
            weights; the message names the path (the file) and the cause.
        ValueError: the model has an option transflow does not model (see :func:`from_hf`).
        TypeError: the checkpoint's model class is not supported by :func:`from_hf`.

    Example:
        >>> import tempfile, jax.numpy as jnp
        >>> from transformers import BertConfig, BertModel
        >>> from transflow.interop import load_hf
        >>> d = tempfile.mkdtemp()
        >>> BertModel(BertConfig(hidden_size=8, num_attention_heads=2, intermediate_size=16,
        ...                      num_hidden_layers=1, vocab_size=20)).save_pretrained(d)
        >>> load_hf(d)(jnp.array([1, 5, 7])).shape
        (3, 8)
    """
    import pathlib

    check_path("path", path, "load_hf")
    check_float_dtype("dtype", dtype, "load_hf")
    p = pathlib.Path(path)
    if not p.exists():
        raise FileNotFoundError(f"load_hf: `path`={str(p)!r} does not exist.")
    if not p.is_dir() or not (p / "config.json").is_file():
        raise CheckpointError(
            f"load_hf: `path`={str(p)!r} holds no HuggingFace checkpoint (expected a directory "
            "with config.json and the weights, as written by `model.save_pretrained(path)`)."
        )
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

    try:
        cfg = AutoConfig.from_pretrained(p, local_files_only=True)
    except (ValueError, OSError, KeyError) as e:
        raise CheckpointError(
            f"load_hf: `path`={str(p)!r}: config.json is not a recognised HuggingFace "
            f"configuration ({e})."
        ) from e
    headers = _safetensors_headers(p)
    archs = list(getattr(cfg, "architectures", None) or [])
    heads = [a for a in archs if a in _hf_heads.HEAD_ARCHITECTURES]
    if heads:
        import transformers

        auto = getattr(transformers, heads[0])
    elif any(a in _CAUSAL_LM_ARCHITECTURES for a in archs):
        auto = AutoModelForCausalLM
    elif any(a in _T5_ARCHITECTURES for a in archs):
        import transformers

        auto = getattr(transformers, next(a for a in archs if a in _T5_ARCHITECTURES))
    else:
        auto = AutoModel
    try:
        model, info = auto.from_pretrained(
            p, local_files_only=True, attn_implementation="eager", output_loading_info=True
        )
    except Exception as e:  # noqa: BLE001 - every reader failure becomes one error type
        text = str(e)
        if "mismatch" in text.lower():
            cause = _mismatch_cause(p, auto, cfg, headers)
            raise CheckpointError(
                f"load_hf: the weights in `path`={str(p)!r} do not fit the shapes of its "
                f"config.json ({cause or text.splitlines()[0]})."
            ) from None
        first = text.strip().splitlines()[0] if text.strip() else ""
        raise CheckpointError(
            f"load_hf: `path`={str(p)!r} holds no loadable {auto.__name__} checkpoint "
            f"({type(e).__name__}: {first})."
        ) from e
    _check_dtypes(headers, model)
    missing = sorted(info.get("missing_keys", ()))
    if missing and all(k.startswith("pooler.") for k in missing):
        model.pooler = None  # a checkpoint without pooler (e.g. BertForMaskedLM): drop it
    elif missing:
        raise CheckpointError(
            f"load_hf: the checkpoint in `path`={str(p)!r} lacks weights of "
            f"{type(model).__name__} ({missing[:5]}{' ...' if len(missing) > 5 else ''}); "
            "HF would initialise them at random."
        )
    return from_hf(model.eval(), dtype=dtype)
