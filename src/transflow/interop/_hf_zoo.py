"""The HuggingFace model zoo reproduced by transflow (``experiment=hf_equivalence``): every
family, with and without padding masks, in float64 and float32.


Families (:data:`HF_ZOO_FAMILIES`):

- ``vit``: a 2-layer ``ViTModel`` (embeddings, pre-LN layers, final LayerNorm, pooler);
- ``cvt``: a ``CvtStage`` (conv embedding, 2 conv-projection layers);
- ``gpt2``: a 2-layer ``GPT2LMHeadModel`` (logits);
- ``bert``: a 2-layer ``BertModel`` with token types and pooler (post-LN: the Lie scheme);
- ``roberta``: a 2-layer ``RobertaModel`` (padding-aware position ids) with pooler;
- ``distilbert``: a 2-layer ``DistilBertModel``;
- ``llama``: a 2-layer ``LlamaForCausalLM`` (logits; GQA, q/k/v/o and MLP biases);
- ``mistral``: a 2-layer ``MistralModel`` (GQA; sliding window wider than the sequence);
- ``qwen2``: a 2-layer ``Qwen2ForCausalLM`` (logits; q/k/v biases, GQA);
- ``rope``: ``LlamaForCausalLM`` with each scaled rotary embedding (rope_type linear via
  the legacy ``rope_scaling`` keyword, dynamic NTK with the sequence longer than
  ``max_position_embeddings``, yarn, llama3 with Llama 3.2's parameters);
- ``heads``: the task heads (``{Bert,Roberta,DistilBert}ForMaskedLM`` token logits,
  ``{Bert,Roberta,DistilBert,GPT2,Llama}ForSequenceClassification`` logits);
- ``activations``: BERT, RoBERTa, DistilBERT, GPT-2 and Llama with each pointwise
  activation beyond gelu/relu (silu, swish, quick_gelu, gelu_fast, gelu_pytorch_tanh,
  tanh, leaky_relu, relu6, mish);
- ``t5``: a 2-layer ``T5EncoderModel`` (encoder only) and a 2 + 2-layer
  ``T5ForConditionalGeneration`` (encoder–decoder, LM logits), each with the ReLU FFN
  (T5 v1.0) and the gated-GELU FFN (v1.1, flan): relative position buckets (8 buckets,
  max distance 12, so the logarithmic buckets are used), RMS norm without mean or bias,
  unscaled scores, cross-attention. With ``mask=padded`` the encoder and the decoder
  inputs are right-padded; the decoder rows are compared.

Each configuration draws random sizes and unit-scale weights. ``mask=padded`` runs a
batch of two sequences, the second padded (right padding for encoders and GPT-2, left
padding for the Llama family, as their tokenizers do), with HF's ``attention_mask``
(1 = keep) and transflow's ``key_padding_mask = ~attention_mask`` (True = padded); only
kept tokens are compared (padded rows are not defined the same way, docs/models.md).
ViT and CvT take no mask (``mask=n/a``).

Reported per row (:func:`hf_zoo_rows`): ``err_fp64 = max |transflow − HF| / max(1, max
|HF|)`` (HF run through :func:`transflow.interop.hf_float64_reference`, its float64-exact
path) and ``err_fp32 = max |Δ| / max |HF|``.

torch and transformers are imported inside the functions only.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ..models._heads import AbstractLanguageModel
from ._hf import from_hf
from ._hf_reference import hf_float64_reference
from ._hf_studies import hf_compare, hf_configurations, randomize_
from ._studies import fast_eager

__all__ = [
    "HF_ZOO_FAMILIES",
    "hf_zoo_compare",
    "hf_zoo_configurations",
    "hf_zoo_rows",
    "hf_zoo_vit_row",
]

#: The families of :func:`hf_zoo_rows` (see the module docstring).
HF_ZOO_FAMILIES = (
    "vit",
    "cvt",
    "gpt2",
    "bert",
    "roberta",
    "distilbert",
    "llama",
    "mistral",
    "qwen2",
    "rope",
    "heads",
    "activations",
    "t5",
)
# every family but the vision ones takes a padding mask
MASKABLE = tuple(f for f in HF_ZOO_FAMILIES if f not in ("vit", "cvt"))

# the scaled rotary embeddings (HF rope_parameters / the legacy rope_scaling keyword)
ROPES = {
    "llama3": {  # Llama 3.2
        "rope_parameters": {
            "rope_type": "llama3",
            "factor": 32.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
            "rope_theta": 500000.0,
        },
        "max_position_embeddings": 131072,
    },
    "yarn": {
        "rope_parameters": {
            "rope_type": "yarn",
            "factor": 4.0,
            "rope_theta": 10000.0,
            "original_max_position_embeddings": 4,
        },
        "max_position_embeddings": 16,
    },
    "linear": {"rope_scaling": {"type": "linear", "factor": 2.0}},
    "dynamic": {  # 6-9 tokens > L₀ = 4: the base grows with the length
        "rope_parameters": {"rope_type": "dynamic", "factor": 3.0, "rope_theta": 10000.0},
        "max_position_embeddings": 4,
    },
}
# T5: (HF class, feed_forward_proj)
T5S = (
    ("T5EncoderModel", "relu"),
    ("T5EncoderModel", "gated-gelu"),
    ("T5ForConditionalGeneration", "relu"),
    ("T5ForConditionalGeneration", "gated-gelu"),
)
HEADS = (
    "BertForMaskedLM",
    "BertForSequenceClassification",
    "RobertaForMaskedLM",
    "RobertaForSequenceClassification",
    "DistilBertForMaskedLM",
    "DistilBertForSequenceClassification",
    "GPT2ForSequenceClassification",
    "LlamaForSequenceClassification",
)
ACTIVATIONS = (
    ("bert", "silu"),
    ("bert", "quick_gelu"),
    ("bert", "tanh"),
    ("bert", "mish"),
    ("roberta", "leaky_relu"),
    ("roberta", "relu6"),
    ("distilbert", "silu"),
    ("gpt2", "gelu_fast"),
    ("gpt2", "swish"),
    ("llama", "gelu_fast"),
    ("llama", "gelu_pytorch_tanh"),
)


def hf_zoo_configurations(family: str, n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` random configurations of one family (seeded)."""
    import numpy as np

    if family not in HF_ZOO_FAMILIES:
        raise ValueError(
            f"hf_zoo_configurations: `family` must be one of {list(HF_ZOO_FAMILIES)}, got "
            f"{family!r}."
        )
    rng = np.random.default_rng([seed, HF_ZOO_FAMILIES.index(family), 7])
    out = []
    if family in ("rope", "heads", "activations", "t5"):
        kinds = {
            "rope": list(ROPES),
            "heads": list(HEADS),
            "activations": list(ACTIVATIONS),
            "t5": list(T5S),
        }
        for i in range(n):
            for j, kind in enumerate(kinds[family]):
                c = {"family": family, "seed": seed * 1000 + 100 * i + j}
                if family == "rope":
                    c |= {"base": "llama", "rope": kind, "kv_heads": 1}
                elif family == "heads":
                    c |= {"base": "head", "head": kind}
                elif family == "t5":
                    c |= {"base": "t5", "t5": kind[0], "ffn": kind[1]}
                else:
                    c |= {"base": kind[0], "act": kind[1]}
                heads = int(rng.choice([2, 4]))
                c |= {"d": 8 * heads, "heads": heads}
                if c["base"] == "llama":  # the Llama family's key/value heads
                    c["kv_heads"] = c.get("kv_heads", heads)
                c |= {"inter": int(rng.choice([24, 40])), "n_tokens": int(rng.integers(6, 10))}
                out.append(c)
        return out
    for i in range(n):
        c: dict[str, Any] = {"family": family, "seed": seed * 1000 + i}
        if family in ("llama", "mistral", "qwen2"):
            heads = int(rng.choice([2, 4, 6]))
            kv = int(rng.choice([k for k in (1, 2, 3, 6) if heads % k == 0 and k <= heads]))
            c |= {"d": 8 * heads, "heads": heads, "kv_heads": kv}
            c |= {"inter": int(rng.choice([24, 40, 64])), "n_tokens": int(rng.integers(6, 10))}
        elif family in ("vit", "cvt"):
            pass  # drawn by hf_configurations (hf_zoo_vit_row)
        else:
            d = int(rng.choice([16, 24, 32]))
            heads = int(rng.choice([h for h in (1, 2, 4, 8) if d % h == 0]))
            c |= {"d": d, "heads": heads, "inter": int(rng.choice([d, 2 * d, 3 * d]))}
            c |= {"n_tokens": int(rng.integers(6, 10))}
            c["act"] = ["gelu", "gelu_new", "relu"][i % 3]
        out.append(c)
    return out


VOCAB = 41


def _hf_model(c: dict[str, Any], torch_dtype):
    """The random HF model of one configuration (eval mode, eager attention)."""
    import torch
    import transformers as tr

    fam, seed = c.get("base", c["family"]), c["seed"]
    common = {"attn_implementation": "eager"}
    if fam == "head":
        model = _head_model(c, tr)
    elif fam == "t5":
        cfg = tr.T5Config(
            vocab_size=VOCAB, d_model=c["d"], d_kv=6, d_ff=c["inter"], num_layers=2,
            num_heads=c["heads"], relative_attention_num_buckets=8,
            relative_attention_max_distance=12, feed_forward_proj=c["ffn"], dropout_rate=0.0,
            decoder_start_token_id=0, pad_token_id=0, **common,
        )  # fmt: skip
        model = getattr(tr, c["t5"])(cfg)
    elif fam in ("llama", "mistral", "qwen2"):
        cfg_cls = {"llama": tr.LlamaConfig, "mistral": tr.MistralConfig, "qwen2": tr.Qwen2Config}
        extra = {"llama": {"attention_bias": True, "mlp_bias": True}, "mistral": {}}
        if "rope" in c:
            common |= copy.deepcopy(ROPES[c["rope"]])
        if "act" in c:
            common["hidden_act"] = c["act"]
        cfg = cfg_cls[fam](
            hidden_size=c["d"],
            num_attention_heads=c["heads"],
            num_key_value_heads=c["kv_heads"],
            intermediate_size=c["inter"],
            num_hidden_layers=2,
            vocab_size=VOCAB,
            **extra.get(fam, {}),
            **common,
        )
        cls = {"llama": tr.LlamaForCausalLM, "mistral": tr.MistralModel}
        model = cls.get(fam, tr.Qwen2ForCausalLM)(cfg)
    elif fam == "gpt2":
        cfg = tr.GPT2Config(
            n_embd=c["d"],
            n_head=c["heads"],
            n_inner=c["inter"],
            n_layer=2,
            vocab_size=VOCAB,
            n_positions=16,
            activation_function=c["act"],
            **common,
        )
        model = tr.GPT2LMHeadModel(cfg)
    elif fam == "distilbert":
        cfg = tr.DistilBertConfig(
            dim=c["d"],
            n_heads=c["heads"],
            hidden_dim=c["inter"],
            n_layers=2,
            vocab_size=VOCAB,
            max_position_embeddings=16,
            activation=c["act"],
            **common,
        )
        model = tr.DistilBertModel(cfg)
    else:
        cfg_cls = tr.RobertaConfig if fam == "roberta" else tr.BertConfig
        cfg = cfg_cls(
            hidden_size=c["d"],
            num_attention_heads=c["heads"],
            intermediate_size=c["inter"],
            num_hidden_layers=2,
            vocab_size=VOCAB,
            max_position_embeddings=20,
            hidden_act=c["act"],
            **common,
        )
        model = (tr.RobertaModel if fam == "roberta" else tr.BertModel)(cfg)
    model = randomize_(model.to(torch_dtype).eval(), seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():  # LayerNorm gains ~ 1 (randomize_ misses BERT's "LayerNorm")
        for mod in model.modules():
            if isinstance(mod, torch.nn.LayerNorm):
                r = torch.randn(mod.weight.shape, generator=g, dtype=mod.weight.dtype)
                mod.weight.copy_(1.0 + 0.2 * r)
    return model


def _head_model(c: dict[str, Any], tr):
    """The random HF task model of a ``heads`` configuration (3 labels, pad id 0)."""
    name = c["head"]
    kw = {"num_labels": 3, "attn_implementation": "eager"}
    d, h, inter = c["d"], c["heads"], c["inter"]
    if name.startswith("DistilBert"):
        cfg = tr.DistilBertConfig(
            dim=d, n_heads=h, hidden_dim=inter, n_layers=2, vocab_size=VOCAB,
            max_position_embeddings=16, **kw,
        )  # fmt: skip
    elif name.startswith("GPT2"):
        cfg = tr.GPT2Config(
            n_embd=d, n_head=h, n_inner=inter, n_layer=2, vocab_size=VOCAB, n_positions=16,
            pad_token_id=0, bos_token_id=1, eos_token_id=1, **kw,
        )  # fmt: skip
    elif name.startswith("Llama"):
        cfg = tr.LlamaConfig(
            hidden_size=d, num_attention_heads=h, num_key_value_heads=1,  # multi-query
            intermediate_size=inter, num_hidden_layers=2, vocab_size=VOCAB, pad_token_id=0,
            **kw,
        )  # fmt: skip
    else:
        cls = tr.RobertaConfig if name.startswith("Roberta") else tr.BertConfig
        cfg = cls(
            hidden_size=d, num_attention_heads=h, intermediate_size=inter,
            num_hidden_layers=2, vocab_size=VOCAB, max_position_embeddings=20, **kw,
        )  # fmt: skip
    return getattr(tr, name)(cfg)


def _inputs(c: dict[str, Any], masked: bool):
    """Token ids (B, n), HF attention mask (B, n) (1 = keep) and token types or None."""
    import torch

    g = torch.Generator().manual_seed(c["seed"] + 2)
    n, fam = c["n_tokens"], c.get("base", c["family"])
    B = 2 if masked else 1
    ids = torch.randint(2, VOCAB, (B, n), generator=g)
    keep = torch.ones(B, n, dtype=torch.long)
    if masked:
        pad = 3
        if fam in ("llama", "mistral", "qwen2"):
            keep[1, :pad] = 0  # left padding, as decoder tokenizers do
        else:
            keep[1, n - pad :] = 0  # right padding
        if fam == "roberta" or c.get("head", "").startswith("Roberta"):
            ids[keep == 0] = 1  # RoBERTa's padding_idx: positions skip the pads
        elif fam == "head":
            ids[keep == 0] = 0  # the pad id: sequence classification reads the last non-pad
    types = None
    if fam == "bert":
        types = (torch.arange(n)[None, :] >= n // 2).long().expand(B, n).clone()
    return ids, keep, types


def _run_t5(c: dict[str, Any], hf, masked: bool, fp64: bool):
    """(HF output, transflow output, kept-token mask) of a T5 configuration."""
    import jax
    import jax.numpy as jnp
    import torch

    ids, keep, _ = _inputs(c, masked)
    g = torch.Generator().manual_seed(c["seed"] + 3)
    t = max(c["n_tokens"] - 2, 4)  # the decoder's own length
    dec = torch.randint(2, VOCAB, (ids.shape[0], t), generator=g)
    dkeep = torch.ones(ids.shape[0], t, dtype=torch.long)
    if masked:
        dkeep[1, t - 2 :] = 0
    encoder_only = c["t5"] == "T5EncoderModel"
    kw = {"attention_mask": keep} if masked else {}
    if not encoder_only:
        kw |= {"decoder_input_ids": dec} | ({"decoder_attention_mask": dkeep} if masked else {})
    with torch.no_grad(), hf_float64_reference(fp64):
        o = hf(ids, **kw)
    model = from_hf(hf)
    ji, jd = jnp.asarray(ids.numpy()), jnp.asarray(dec.numpy())
    kpm, dkpm = jnp.asarray(keep.numpy() == 0), jnp.asarray(dkeep.numpy() == 0)
    if not masked:
        kpm = dkpm = None
    if encoder_only:
        out = jax.vmap(lambda i, p: model(i, key_padding_mask=p))(ji, kpm)
        return o.last_hidden_state.numpy(), out, keep.numpy().astype(bool)

    def one(i, d, p, q):
        return model.logits(i, d, key_padding_mask=p, decoder_key_padding_mask=q)

    out = jax.vmap(one)(ji, jd, kpm, dkpm)
    return o.logits.numpy(), out, dkeep.numpy().astype(bool)


def _run_pair(c: dict[str, Any], torch_dtype, masked: bool):
    """(HF output, transflow output, kept-token mask), each ``(B, n, ·)`` numpy."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch

    hf = _hf_model(c, torch_dtype)
    if c.get("base") == "t5":
        ref, out, kept = _run_t5(c, hf, masked, torch_dtype == torch.float64)
        return ref, np.asarray(out), kept
    ids, keep, types = _inputs(c, masked)
    kw = {"attention_mask": keep} if masked else {}
    if types is not None:
        kw["token_type_ids"] = types
    with torch.no_grad(), hf_float64_reference(torch_dtype == torch.float64):
        o = hf(ids, **kw)
    has_logits = "logits" in o  # a transformers ModelOutput is a mapping of its fields
    ref = (o.logits if has_logits else o.last_hidden_state).numpy()
    model = from_hf(hf)
    lm = has_logits and isinstance(model, AbstractLanguageModel)  # declared, not probed
    ji = jnp.asarray(ids.numpy())
    kpm = jnp.asarray(keep.numpy() == 0)
    jt = None if types is None else jnp.asarray(types.numpy())

    def one(i, pad, t):
        args = (i,) if t is None else (i, t)
        kwargs = {"key_padding_mask": pad} if masked else {}
        return model.logits(*args, **kwargs) if lm else model(*args, **kwargs)

    if jt is None:
        out = jax.vmap(lambda i, p: one(i, p, None))(ji, kpm)
    else:
        out = jax.vmap(one)(ji, kpm, jt)
    kept = keep.numpy().astype(bool)
    if ref.ndim == 2:  # sequence classification: one row of logits per sequence
        kept = np.ones(ref.shape[:1], bool)
    return ref, np.asarray(out), kept


def hf_zoo_compare(c: dict[str, Any], masked: bool) -> dict[str, float]:
    """``err_fp64`` and ``err_fp32`` of one configuration (kept tokens only)."""
    import numpy as np
    import torch

    out: dict[str, float] = {}
    for name, dt in (("fp64", torch.float64), ("fp32", torch.float32)):
        ref, ours, keep = _run_pair(c, dt, masked)
        ref, ours = ref[keep].astype(np.float64), ours[keep].astype(np.float64)
        diff = float(np.max(np.abs(ours - ref)))
        scale = float(np.max(np.abs(ref)))
        out[f"err_{name}"] = diff / max(1.0, scale) if name == "fp64" else diff / scale
    return out


def hf_zoo_vit_row(family: str, seed: int, i: int) -> dict[str, Any]:
    """One ViT (``family="vit"``) or CvT (``"cvt"``) row of the table: the ``i``-th
    configuration of its family (:func:`transflow.interop.hf_configurations`) against the
    Hugging Face model, errors in float64 and float32."""
    fam = {"vit": "vit_model", "cvt": "cvt_stage"}[family]
    c = hf_configurations(fam, i + 1, seed)[i]
    with fast_eager():
        res = hf_compare(c)
    return {
        "config": f"d={c['d']} heads={c['heads']}",
        # vit_equivalence reports max |Δ| (≥ the relative-to-max(1,|y|) error used here)
        "err_fp64": res["max_abs_fp64"],
        "err_fp32": res["max_rel_fp32"],
    }


def _label(c: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in c.items() if k not in ("family", "seed"))


def hf_zoo_rows(
    families: Sequence[str] = HF_ZOO_FAMILIES,
    n_configs: int = 2,
    *,
    seed: int = 0,
    masks: bool = True,
    first_configs: int = 0,
    unmasked: bool = True,
    progress: Callable[..., Iterable] | None = None,
) -> list[dict[str, Any]]:
    """Compare ``n_configs`` random configurations of every family (the first
    ``first_configs`` of them when > 0), each maskable family also with a padded batch
    (``masks``; without ``unmasked`` only that one); one dict per row: ``family``,
    ``mask`` (``none``, ``padded`` or ``n/a``), ``config`` (a label of the sizes),
    ``err_fp64`` and ``err_fp32``. Needs x64 enabled (``jax_enable_x64``). Runs op by
    op with torch on one thread: many small models of different shapes. ``progress``
    wraps the iteration (``progress(items, total=..., desc=...)``).
    """
    import jax
    import torch

    unknown = sorted(set(families) - set(HF_ZOO_FAMILIES))
    if unknown:
        raise ValueError(
            f"`families` has unknown entries {unknown}; choose from {list(HF_ZOO_FAMILIES)}."
        )
    if not jax.config.jax_enable_x64:
        raise ValueError(
            "hf_zoo_rows compares in float64 but JAX runs in 32-bit mode; enable it first "
            "with `jax.config.update('jax_enable_x64', True)`."
        )
    todo = []
    for fam in families:
        configs = hf_zoo_configurations(fam, int(n_configs), seed)
        for i, c in enumerate(configs[: int(first_configs)] if first_configs else configs):
            both = (False, True) if (masks and fam in MASKABLE) else (False,)
            todo += [(fam, i, c, m) for m in (both if unmasked else both[-1:])]
    rows = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for fam, i, c, masked in (
            progress(todo, total=len(todo), desc="hf_equivalence") if progress else todo
        ):
            with jax.disable_jit():  # many small differently-shaped models: op by op
                if fam in ("vit", "cvt"):
                    res = hf_zoo_vit_row(fam, seed, i)
                    label, mask = res.pop("config"), "n/a"
                else:
                    res, label = hf_zoo_compare(c, masked), _label(c)
                    mask = "padded" if masked else "none"
            rows.append({"family": fam, "mask": mask, "config": label, **res})
    finally:
        torch.set_num_threads(threads)
    return rows
