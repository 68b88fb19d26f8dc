"""A float64-exact HuggingFace reference path, for equivalence checks at 1e-10.

Some HF modules compute in float32 even when the model is float64:

- the eager attention of ViT and of the Llama family runs its softmax in float32
  (``softmax(..., dtype=torch.float32)``, docs/spec/reference-layers.md pitfall 5);
- ``LlamaRMSNorm`` (and Mistral's, Qwen2's) and ``T5LayerNorm`` compute the mean square in
  float32;
- ``LlamaRotaryEmbedding`` computes ``inv_freq`` and the angles in float32 (also for
  the scaled rope types linear, dynamic, yarn and llama3, whose initialisers in
  ``transformers.modeling_rope_utils`` name float32 explicitly).

Their float64 outputs then carry float32 rounding (~1e-7). :func:`hf_float64_reference`
replaces these functions, for the duration of a ``with`` block, by the same code computed
in the input dtype; in float32 the replacements compute exactly what HF computes. BERT,
RoBERTa, DistilBERT and GPT-2 already compute in the input dtype.
"""

from __future__ import annotations

import contextlib

__all__ = ["hf_float64_reference"]


def _eager(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    import torch

    groups = getattr(module, "num_key_value_groups", 1)
    if groups > 1:  # HF's repeat_kv
        key = torch.repeat_interleave(key, groups, dim=1)
        value = torch.repeat_interleave(value, groups, dim=1)
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    w = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        w = w + attention_mask[:, :, :, : key.shape[-2]]
    w = torch.nn.functional.softmax(w, dim=-1)
    w = torch.nn.functional.dropout(w, p=dropout, training=module.training)
    return torch.matmul(w, value).transpose(1, 2).contiguous(), w


def _rms_forward(self, hidden_states):
    import torch

    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))


class _TorchIn:
    """``torch`` with ``torch.float``/``torch.float32`` read as ``dtype``: HF's own rope
    initialisers (which name float32 explicitly) evaluated in the input dtype."""

    def __init__(self, dtype):
        import torch

        self._torch, self.float, self.float32 = torch, dtype, dtype

    def __getattr__(self, name):
        return getattr(self._torch, name)


def _inv_freq(self, x, position_ids):
    """HF's inverse frequencies of this rotary module, computed in ``x.dtype``.

    For rope types other than "default" HF's ``ROPE_INIT_FUNCTIONS`` run with ``torch``
    replaced by :class:`_TorchIn` (their float32 is the input dtype). "dynamic" is
    evaluated at the current length max(position_ids) + 1 (HF's module on its first call;
    HF's module keeps the frequencies of the longest sequence seen since the last reset).
    """
    import torch
    from transformers import modeling_rope_utils as mru

    cfg = self.config
    if self.rope_type == "default":
        base = cfg.rope_parameters["rope_theta"]
        dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        arange = torch.arange(0, dim, 2, dtype=x.dtype, device=x.device)
        return 1.0 / (base ** (arange / dim)), 1.0
    if self.rope_type not in ("linear", "dynamic", "yarn", "llama3"):
        raise ValueError(f"hf_float64_reference: rope_type {self.rope_type!r} is not handled.")
    kwargs = {}
    if self.rope_type == "dynamic":
        kwargs["seq_len"] = int(position_ids.max()) + 1
    saved = mru.torch
    mru.torch = _TorchIn(x.dtype)
    try:
        inv_freq, scaling = mru.ROPE_INIT_FUNCTIONS[self.rope_type](cfg, x.device, **kwargs)
    finally:
        mru.torch = saved
    return inv_freq.to(x.dtype), scaling


def _rotary_forward(self, x, position_ids):
    import torch

    inv_freq, scaling = _inv_freq(self, x, position_ids)
    freqs = position_ids[..., None].to(x.dtype) * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos() * scaling, emb.sin() * scaling


@contextlib.contextmanager
def hf_float64_reference(enabled: bool = True):
    """Run HF ViT, Llama/Mistral/Qwen2 and T5 modules in the input dtype (no float32 casts).

    Inside the block, the eager attention (softmax), RMSNorm and rotary embedding of
    these families compute in the dtype of their input, so a float64 HF model is a float64
    reference. Load models with ``attn_implementation="eager"``. The patch is undone on
    exit.

    Example:
        >>> import torch
        >>> from transformers import LlamaConfig
        >>> from transformers.models.llama.modeling_llama import LlamaRMSNorm
        >>> from transflow.interop import hf_float64_reference
        >>> norm = LlamaRMSNorm(4).double()
        >>> x = torch.tensor([[1.0, 2.0, 3.0, 4.0 + 1e-12]], dtype=torch.float64)
        >>> with hf_float64_reference():
        ...     exact = norm(x)
        >>> bool((exact - x / x.pow(2).mean().add(1e-6).sqrt()).abs().max() < 1e-15)
        True
    """
    from .._errors import check_flag

    check_flag("enabled", enabled, "hf_float64_reference")
    if not enabled:
        yield
        return
    from transformers.models.llama import modeling_llama
    from transformers.models.mistral import modeling_mistral
    from transformers.models.qwen2 import modeling_qwen2
    from transformers.models.t5 import modeling_t5
    from transformers.models.vit import modeling_vit

    saved = []

    def patch(obj, name, value):
        saved.append((obj, name, getattr(obj, name)))
        setattr(obj, name, value)

    try:
        patch(modeling_vit, "eager_attention_forward", _eager)
        patch(modeling_t5.T5LayerNorm, "forward", _rms_forward)
        for mod, prefix in (
            (modeling_llama, "Llama"),
            (modeling_mistral, "Mistral"),
            (modeling_qwen2, "Qwen2"),
        ):
            patch(mod, "eager_attention_forward", _eager)
            patch(getattr(mod, f"{prefix}RMSNorm"), "forward", _rms_forward)
            patch(getattr(mod, f"{prefix}RotaryEmbedding"), "forward", _rotary_forward)
        yield
    finally:
        for obj, name, value in reversed(saved):
            setattr(obj, name, value)
