"""HuggingFace task heads → :class:`transflow.models.HeadModel` (read-outs after the flow).

- ``{Bert,Roberta,DistilBert}ForMaskedLM``: per-token logits; the head is dense → act →
  LayerNorm → decoder (BERT: ``hidden_act``; RoBERTa: exact GELU; DistilBERT:
  ``activation``), the decoder tied to the word embeddings in HF (copied here).
- ``BertForSequenceClassification``: the pooler ``tanh(W u_T(x₀) + b)`` then the
  classifier; ``RobertaForSequenceClassification``: dense → tanh → out_proj on the first
  token; ``DistilBertForSequenceClassification``: pre_classifier → ReLU → classifier on
  the first token.
- ``GPT2ForSequenceClassification``, ``{Llama,Mistral,Qwen2}ForSequenceClassification``:
  ``score`` on the last token whose id is not ``pad_token_id`` (HF's rule).
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from ..models._heads import DenseHead, HeadModel
from ._acts import hf_activation, torch_activation
from ._torch import _arr, _norm


def _lin(lin, dtype, bias=None):
    w = _arr(lin.weight, dtype).T
    b = lin.bias if lin.bias is not None else bias
    b = _arr(b, dtype) if b is not None else jnp.zeros((w.shape[1],), dtype)
    return w, b


def _head(stages, dtype) -> DenseHead:
    """``stages``: ``(linear, activation or None, LayerNorm or None)`` per affine map."""
    ws, bs, norms, acts = [], [], [], []
    for lin, act, norm in stages:
        w, b = _lin(lin, dtype)
        ws.append(w)
        bs.append(b)
        acts.append(act)
        norms.append(None if norm is None else _norm(norm, dtype))
    return DenseHead(tuple(ws), tuple(bs), tuple(norms), tuple(acts))


def head_classes() -> dict[str, Any]:
    import transformers as t

    return {
        "mlm": (t.BertForMaskedLM, t.RobertaForMaskedLM, t.DistilBertForMaskedLM),
        "cls": (
            t.BertForSequenceClassification,
            t.RobertaForSequenceClassification,
            t.DistilBertForSequenceClassification,
            t.GPT2ForSequenceClassification,
            t.LlamaForSequenceClassification,
            t.MistralForSequenceClassification,
            t.Qwen2ForSequenceClassification,
        ),
    }


#: ``config.architectures`` names that :func:`transflow.interop.load_hf` loads with the head.
HEAD_ARCHITECTURES = (
    "BertForMaskedLM",
    "RobertaForMaskedLM",
    "DistilBertForMaskedLM",
    "BertForSequenceClassification",
    "RobertaForSequenceClassification",
    "DistilBertForSequenceClassification",
    "GPT2ForSequenceClassification",
    "LlamaForSequenceClassification",
    "MistralForSequenceClassification",
    "Qwen2ForSequenceClassification",
)


def convert_head(module, dtype, from_hf) -> HeadModel | None:
    """The :class:`HeadModel` of a supported HF task model (``None`` for other modules)."""
    import transformers as t

    if isinstance(module, t.BertForMaskedLM):
        p = module.cls.predictions
        act = hf_activation(module.config.hidden_act)
        head = _head(
            [(p.transform.dense, act, p.transform.LayerNorm), (p.decoder, None, None)], dtype
        )
        return HeadModel(from_hf(module.bert, dtype=dtype), head, "tokens")
    if isinstance(module, t.RobertaForMaskedLM):
        h = module.lm_head
        head = _head([(h.dense, "gelu", h.layer_norm), (h.decoder, None, None)], dtype)
        return HeadModel(from_hf(module.roberta, dtype=dtype), head, "tokens")
    if isinstance(module, t.DistilBertForMaskedLM):
        act = torch_activation(module.activation, "DistilBertForMaskedLM.activation")
        head = _head(
            [
                (module.vocab_transform, act, module.vocab_layer_norm),
                (module.vocab_projector, None, None),
            ],
            dtype,
        )
        return HeadModel(from_hf(module.distilbert, dtype=dtype), head, "tokens")
    if isinstance(module, t.BertForSequenceClassification):
        if module.bert.pooler is None:
            raise ValueError("BertForSequenceClassification without a pooler is not supported.")
        head = _head(
            [(module.bert.pooler.dense, "tanh", None), (module.classifier, None, None)], dtype
        )
        return HeadModel(from_hf(module.bert, dtype=dtype), head, "first")
    if isinstance(module, t.RobertaForSequenceClassification):
        c = module.classifier
        head = _head([(c.dense, "tanh", None), (c.out_proj, None, None)], dtype)
        return HeadModel(from_hf(module.roberta, dtype=dtype), head, "first")
    if isinstance(module, t.DistilBertForSequenceClassification):
        head = _head(
            [(module.pre_classifier, "relu", None), (module.classifier, None, None)], dtype
        )
        return HeadModel(from_hf(module.distilbert, dtype=dtype), head, "first")
    if isinstance(module, t.GPT2ForSequenceClassification):
        base = from_hf(module.transformer, dtype=dtype)
    elif isinstance(
        module,
        t.LlamaForSequenceClassification
        | t.MistralForSequenceClassification
        | t.Qwen2ForSequenceClassification,
    ):
        base = from_hf(module.model, dtype=dtype)
    else:
        return None
    pad = module.config.pad_token_id
    head = _head([(module.score, None, None)], dtype)
    return HeadModel(base, head, "last", None if pad is None else int(pad))
