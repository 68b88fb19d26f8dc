"""Task ``hf_equivalence``: the HuggingFace model zoo reproduced by transflow, one table
over all families, with and without padding masks, in float64 and float32.

Families (``task.families``):

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

Reported per row: ``err_fp64 = max |transflow − HF| / max(1, max |HF|)`` (claim ≤
``tol_fp64``; HF run through :func:`transflow.interop.hf_float64_reference`, its float64-
exact path) and ``err_fp32 = max |Δ| / max |HF|`` (claim ≤ ``tol_fp32``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Config", "run", "compare", "configurations", "vit_row", "FAMILIES"]

FAMILIES = (
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
MASKABLE = tuple(f for f in FAMILIES if f not in ("vit", "cvt"))
#: Names checked before any work, smoke runs included (transflow-run help hf_equivalence).
CHOICES = {"families": FAMILIES}

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


@dataclass
class Config:
    """Parameters of the HF model-zoo equivalence experiment (``task.<field>=...``)."""

    families: list[str] = field(default_factory=lambda: list(FAMILIES))
    n_configs: int = 2  # random configurations per family (each with and without mask)
    masks: bool = True  # also run every maskable family with a padded batch
    # keep the first this many configurations of each family (0: all of them)
    first_configs: int = 0
    unmasked: bool = True  # with masks: also the unpadded row of a maskable family
    tol_fp64: float = 1e-10  # on max |Δ| / max(1, max |HF|) in float64
    tol_fp32: float = 1e-5  # on max |Δ| / max |HF| in float32


def configurations(family: str, n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` random configurations of one family (seeded)."""
    import numpy as np

    rng = np.random.default_rng([seed, FAMILIES.index(family), 7])
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
            pass  # drawn by vit_equivalence.configurations
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

    from transflow.interop import randomize_

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

    from transflow.interop import from_hf, hf_float64_reference

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

    from transflow.interop import from_hf, hf_float64_reference

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
    ref = (o.logits if hasattr(o, "logits") else o.last_hidden_state).numpy()
    model = from_hf(hf)
    lm = hasattr(o, "logits") and hasattr(model, "logits")
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


def compare(c: dict[str, Any], masked: bool) -> dict[str, float]:
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


def vit_row(family: str, seed: int, i: int) -> dict[str, Any]:
    """One ViT (``family="vit"``) or CvT (``"cvt"``) row of the table: the ``i``-th
    configuration of its family (:func:`transflow.interop.hf_configurations`) against the
    Hugging Face model, errors in float64 and float32."""
    from transflow.interop import fast_eager, hf_compare, hf_configurations

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


def _label(c):
    keys = [k for k in c if k not in ("family", "seed")]
    return " ".join(f"{k}={c[k]}" for k in keys)


def run(cfg, ctx) -> dict:
    """Run the ``hf_equivalence`` experiment.

    Transflow = HF ViT, CvT, GPT-2, BERT, RoBERTa, DistilBERT, Llama, Mistral, Qwen2, T5
    (random configs).
    """
    import jax

    jax.config.update("jax_enable_x64", True)
    import torch

    families = list(cfg.families)
    todo = []
    for fam in families:
        configs = configurations(fam, int(cfg.n_configs), ctx.seed)
        if cfg.first_configs:
            configs = configs[: int(cfg.first_configs)]
        for i, c in enumerate(configs):
            masks = (False, True) if (cfg.masks and fam in MASKABLE) else (False,)
            for masked in masks if cfg.unmasked else masks[-1:]:
                todo.append((fam, i, c, masked))
    rows = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for fam, i, c, masked in ctx.progress(todo, total=len(todo), desc="hf_equivalence"):
            with jax.disable_jit():  # many small differently-shaped models: op by op
                if fam in ("vit", "cvt"):
                    res = vit_row(fam, ctx.seed, i)
                    label, mask = res.pop("config"), "n/a"
                else:
                    res, label = compare(c, masked), _label(c)
                    mask = "padded" if masked else "none"
            ok = res["err_fp64"] <= cfg.tol_fp64 and res["err_fp32"] <= cfg.tol_fp32
            row = {"family": fam, "mask": mask, "config": label, **res, "pass": bool(ok)}
            ctx.log(row)
            rows.append(row)
    finally:
        torch.set_num_threads(threads)
    lines = [
        "| family | mask | configuration | err fp64 | err fp32 | pass |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['family']} | {r['mask']} | {r['config']} | {r['err_fp64']:.2e} | "
        f"{r['err_fp32']:.2e} | {'yes' if r['pass'] else 'NO'} |"
        for r in rows
    ]
    table = "\n".join(lines)
    print(table)
    ctx.report("## Results\n\nHuggingFace model zoo vs transflow.\n\n" + table + "\n")
    err64 = max(r["err_fp64"] for r in rows)
    err32 = max(r["err_fp32"] for r in rows)
    ctx.claim("max_err_fp64", err64, cfg.tol_fp64)
    ctx.claim("max_err_fp32", err32, cfg.tol_fp32)
    masked_rows = [r for r in rows if r["mask"] == "padded"]
    if masked_rows:
        ctx.claim("max_err_fp64_masked", max(r["err_fp64"] for r in masked_rows), cfg.tol_fp64)
    summary: dict[str, Any] = {
        "n_rows": len(rows),
        "n_pass": sum(r["pass"] for r in rows),
        "max_err_fp64": err64,
        "max_err_fp32": err32,
    }
    for fam in families:
        fr = [r for r in rows if r["family"] == fam]
        summary[f"{fam}_err_fp64"] = max(r["err_fp64"] for r in fr)
    return summary
