"""The HF/causal equivalence study: HuggingFace ViT/CvT/GPT-2 and causal torch layers
reproduced by transflow, over random configurations, in float64 and float32.

Families (:data:`HF_FAMILIES`):

- ``vit_layer``: ``ViTLayer`` (pre-LN + GELU, :class:`transflow.PreNormScheme`);
- ``vit_model``: a 2-layer ``ViTModel``: pixels → embeddings f on the 2-D patch grid →
  layers → final LayerNorm, and the pooler (class-token read-out);
- ``cvt_layer``: ``CvtLayer`` (depthwise conv + BatchNorm(eval) + pointwise projections,
  strided K/V, class token, ``embed_dim**-0.5`` scale);
- ``cvt_stage``: a ``CvtStage`` (conv embedding + 2 layers);
- ``gpt2_block``: ``GPT2Block`` with the causal mask (docs/spec/continuous-model.md §4.4);
- ``torch_causal``: ``torch.nn.TransformerEncoderLayer`` with a causal mask.

:func:`hf_equivalence_rows` returns one record per configuration with ``max_abs_fp64 =
max |transflow − reference|`` and ``max_rel_fp32 = max |Δ| / max |reference|``; the task
``experiment=vit_equivalence`` writes and checks them. The weights are drawn at unit
scale (:func:`randomize_`).

HF's eager ViT attention computes its softmax in float32 even for float64 inputs; with
``fp64_softmax=True`` (default) the float64 comparison runs HF's eager attention with the
softmax in float64 (:func:`fp64_vit_softmax`, the same code otherwise). With False the
float64 ViT gap is the float32 rounding of γ (~1e-8) and the ViT rows fail at 1e-10.

torch and transformers are imported inside the functions only. This module only builds
references and compares; the conversion itself is :func:`transflow.interop.from_hf`.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

__all__ = [
    "HF_FAMILIES",
    "fp64_vit_softmax",
    "hf_compare",
    "hf_configurations",
    "hf_equivalence_rows",
    "randomize_",
]

#: The reference families of :func:`hf_configurations`.
HF_FAMILIES = ("vit_layer", "vit_model", "cvt_layer", "cvt_stage", "gpt2_block", "torch_causal")


def _check_family(family: str) -> None:
    if family not in HF_FAMILIES:
        raise ValueError(f"`family` must be one of {list(HF_FAMILIES)}, got {family!r}.")


def randomize_(module, seed: int):
    """Re-draw a torch module's parameters at unit-scale activations (in place).

    Linear/conv weights ~ N(0, 1/fan_in), biases ~ N(0, 0.2²), LayerNorm weights
    1 + N(0, 0.2²), class tokens and position embeddings ~ N(0, 1); BatchNorm running
    statistics are drawn too. HF's own init (std 0.02) gives almost uniform attention.
    """
    import torch

    g = torch.Generator().manual_seed(int(seed))
    with torch.no_grad():
        for mod in module.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.copy_(0.3 * torch.randn(mod.running_mean.shape, generator=g))
                mod.running_var.copy_(0.5 + torch.rand(mod.running_var.shape, generator=g))
        for name, p in module.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            r = torch.randn(p.shape, generator=g, dtype=p.dtype)
            owner = module
            for part in name.split(".")[:-1]:
                owner = getattr(owner, part)
            if "norm" in name or "ln_" in name:
                p.copy_((1.0 if leaf == "weight" else 0.0) + 0.2 * r)
            elif leaf == "bias":
                p.copy_(0.2 * r)
            elif p.ndim >= 2 and "embeddings" not in name and "cls_token" not in name:
                conv1d = type(owner).__name__ == "Conv1D"  # GPT-2: (in, out)
                fan_in = p.shape[0] if conv1d else math.prod(p.shape[1:])
                p.copy_(r * fan_in**-0.5)
            else:
                p.copy_(r)
    return module


@contextlib.contextmanager
def fp64_vit_softmax(enabled: bool = True):
    """HF ViT's eager attention with the softmax in the input dtype (HF: float32)."""
    if not enabled:
        yield
        return
    import torch
    from transformers.models.vit import modeling_vit

    def eager(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kw):
        scaling = query.size(-1) ** -0.5 if scaling is None else scaling
        w = torch.matmul(query, key.transpose(2, 3)) * scaling
        if attention_mask is not None:
            w = w + attention_mask
        w = torch.nn.functional.softmax(w, dim=-1)
        w = torch.nn.functional.dropout(w, p=dropout, training=module.training)
        return torch.matmul(w, value).transpose(1, 2).contiguous(), w

    old = modeling_vit.eager_attention_forward
    modeling_vit.eager_attention_forward = eager
    try:
        yield
    finally:
        modeling_vit.eager_attention_forward = old


def _heads(rng, d_choices=(8, 12, 16, 20, 24)):
    d = int(rng.choice(d_choices))
    heads = [h for h in (1, 2, 3, 4, 5) if d % h == 0]
    return d, int(rng.choice(heads))


def hf_configurations(family: str, n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` random configurations of one family of :data:`HF_FAMILIES` (seeded).

    Random sizes (odd and even head counts, non-square patch grids, ``qkv_bias`` on/off,
    activations with exact counterparts); each dict has ``family``, ``d``, ``heads``,
    ``seed`` and the family's own fields.

    Example:
        >>> from transflow.interop import hf_configurations
        >>> [c["family"] for c in hf_configurations("gpt2_block", 2, seed=0)]
        ['gpt2_block', 'gpt2_block']
    """
    _check_family(family)
    import numpy as np

    rng = np.random.default_rng([seed, HF_FAMILIES.index(family)])
    out = []
    for i in range(n):
        d, h = _heads(rng)
        c: dict[str, Any] = {"family": family, "d": d, "heads": h, "seed": seed * 1000 + i}
        if family in ("vit_layer", "vit_model"):
            patch = [int(rng.choice([2, 3, 4])), int(rng.choice([2, 3, 4]))]
            c |= {
                "image": [patch[0] * int(rng.integers(2, 4)), patch[1] * int(rng.integers(2, 4))],
                "patch": patch,
                "qkv_bias": bool(i % 2 == 0),
                "act": ["gelu", "gelu_new", "relu", "gelu_pytorch_tanh"][i % 4],
                "inter": int(rng.choice([d, 2 * d, 3 * d])),
            }
        elif family in ("cvt_layer", "cvt_stage"):
            c |= {
                "grid": [int(rng.integers(3, 6)), int(rng.integers(3, 6))],
                "stride_kv": int(rng.choice([1, 2])),
                "qkv_bias": bool(i % 2 == 0),
                "cls": bool(i % 2 == 1),
                "kernel": int(rng.choice([3, 5])),
                "mlp_ratio": float(rng.choice([1.5, 2.0, 4.0])),
            }
        elif family == "gpt2_block":
            c |= {
                "act": ["gelu_new", "gelu", "relu", "gelu_pytorch_tanh"][i % 4],
                "layer_idx": int(rng.integers(0, 4)),
                "inverse_idx": bool(i % 2 == 1),
                "n_tokens": int(rng.integers(4, 9)),
            }
        else:  # torch_causal
            c |= {
                "norm_first": bool(i % 2 == 1),
                "act": ["relu", "gelu"][(i // 2) % 2],
                "dim_ff": int(rng.choice([d, 2 * d])),
                "n_tokens": int(rng.integers(4, 9)),
            }
        out.append(c)
    return out


def _build(c: dict[str, Any], torch_dtype):
    """(reference callable x -> np, transflow callable x -> np, input x as torch tensor)."""
    import jax.numpy as jnp
    import numpy as np
    import torch

    from ._hf import from_hf
    from ._torch import from_torch

    g = torch.Generator().manual_seed(c["seed"])
    fam, d, h = c["family"], c["d"], c["heads"]
    t2n = lambda t: t.detach().cpu().numpy()
    if fam in ("vit_layer", "vit_model"):
        from transformers import ViTConfig
        from transformers.models.vit.modeling_vit import ViTLayer, ViTModel

        cfg = ViTConfig(
            hidden_size=d,
            num_attention_heads=h,
            intermediate_size=c["inter"],
            num_hidden_layers=2,
            image_size=c["image"],
            patch_size=c["patch"],
            num_channels=3,
            qkv_bias=c["qkv_bias"],
            hidden_act=c["act"],
            attn_implementation="eager",
        )
        if fam == "vit_layer":
            m = randomize_(ViTLayer(cfg).to(torch_dtype).eval(), c["seed"])
            n = 1 + (c["image"][0] // c["patch"][0]) * (c["image"][1] // c["patch"][1])
            x = torch.randn(n, d, generator=g, dtype=torch_dtype)
            tf = from_hf(m)
            return (
                (lambda x: t2n(m(x[None])[0])),
                (lambda x: np.asarray(tf(jnp.asarray(t2n(x))))),
                x,
            )
        m = randomize_(ViTModel(cfg).to(torch_dtype).eval(), c["seed"])
        x = torch.randn(3, *c["image"], generator=g, dtype=torch_dtype)
        tf = from_hf(m)

        def ref(x):
            o = m(x[None])
            return np.concatenate([t2n(o.last_hidden_state[0]), t2n(o.pooler_output)])

        def ours(x):
            u = tf(jnp.asarray(t2n(x)))
            return np.concatenate([np.asarray(u), np.asarray(tf.readout(u))[None]])

        return ref, ours, x
    if fam in ("cvt_layer", "cvt_stage"):
        from transformers import CvtConfig
        from transformers.models.cvt.modeling_cvt import CvtLayer, CvtStage

        k, (gh, gw) = c["kernel"], c["grid"]
        if fam == "cvt_layer":
            m = CvtLayer(
                num_heads=h,
                embed_dim=d,
                kernel_size=k,
                padding_q=k // 2,
                padding_kv=k // 2,
                stride_q=1,
                stride_kv=c["stride_kv"],
                qkv_projection_method="dw_bn",
                qkv_bias=c["qkv_bias"],
                attention_drop_rate=0.0,
                drop_rate=0.0,
                mlp_ratio=c["mlp_ratio"],
                drop_path_rate=0.0,
                with_cls_token=c["cls"],
            )
            m = randomize_(m.to(torch_dtype).eval(), c["seed"])
            x = torch.randn(int(c["cls"]) + gh * gw, d, generator=g, dtype=torch_dtype)
            tf = from_hf(m, grid_shape=(gh, gw))
            return (
                (lambda x: t2n(m(x[None], gh, gw)[0])),
                (lambda x: np.asarray(tf(jnp.asarray(t2n(x))))),
                x,
            )
        cfg = CvtConfig(
            num_channels=3,
            patch_sizes=[3],
            patch_stride=[2],
            patch_padding=[1],
            embed_dim=[d],
            num_heads=[h],
            depth=[2],
            mlp_ratio=[c["mlp_ratio"]],
            attention_drop_rate=[0.0],
            drop_rate=[0.0],
            drop_path_rate=[0.0],
            qkv_bias=[c["qkv_bias"]],
            cls_token=[c["cls"]],
            qkv_projection_method=["dw_bn"],
            kernel_qkv=[k],
            padding_kv=[k // 2],
            stride_kv=[c["stride_kv"]],
            padding_q=[k // 2],
            stride_q=[1],
        )
        m = randomize_(CvtStage(cfg, 0).to(torch_dtype).eval(), c["seed"])
        x = torch.randn(3, 2 * gh, 2 * gw, generator=g, dtype=torch_dtype)
        tf = from_hf(m)

        def ref(x):
            hid, cls = m(x[None])
            flat = t2n(hid[0]).reshape(d, -1).T
            return flat if cls is None else np.concatenate([flat, t2n(cls[0])])

        def ours(x):
            hid, cls = tf(jnp.asarray(t2n(x)))
            flat = np.asarray(hid).reshape(d, -1).T
            return flat if cls is None else np.concatenate([flat, np.asarray(cls)[None]])

        return ref, ours, x
    n = c["n_tokens"]
    x = torch.randn(n, d, generator=g, dtype=torch_dtype)
    if fam == "gpt2_block":
        from transformers import GPT2Config
        from transformers.models.gpt2.modeling_gpt2 import GPT2Block

        cfg = GPT2Config(
            n_embd=d,
            n_head=h,
            activation_function=c["act"],
            scale_attn_by_inverse_layer_idx=c["inverse_idx"],
            attn_implementation="eager",
        )
        m = randomize_(GPT2Block(cfg, layer_idx=c["layer_idx"]).to(torch_dtype).eval(), c["seed"])
        mask = torch.full((n, n), -torch.inf, dtype=torch_dtype).triu(1)[None, None]
        tf = from_hf(m)
        return (
            (lambda x: t2n(m(x[None], attention_mask=mask)[0])),
            (lambda x: np.asarray(tf(jnp.asarray(t2n(x))))),
            x,
        )
    m = torch.nn.TransformerEncoderLayer(
        d,
        h,
        c["dim_ff"],
        dropout=0.0,
        activation=c["act"],
        batch_first=True,
        norm_first=c["norm_first"],
        dtype=torch_dtype,
    )
    m = randomize_(m, c["seed"]).train()  # train() + dropout 0: torch's slow path
    mask = torch.nn.Transformer.generate_square_subsequent_mask(n, dtype=torch_dtype)
    tf = from_torch(m)
    return (
        (lambda x: t2n(m(x[None], src_mask=mask, is_causal=True)[0])),
        (lambda x: np.asarray(tf(jnp.asarray(t2n(x)), causal=True))),
        x,
    )


def hf_compare(c: dict[str, Any], *, fp64_softmax: bool = True) -> dict[str, float]:
    """``max_abs_fp64``, ``max_rel_fp32`` and ``ref_scale`` of one configuration.

    Builds the reference module and its transflow conversion twice (float64, float32) from
    the configuration ``c`` of :func:`hf_configurations` and compares their outputs on a
    seeded random input. float64 needs x64 enabled. ``fp64_softmax``: run HF ViT's eager
    attention with a float64 softmax in the float64 comparison (:func:`fp64_vit_softmax`).
    """
    import numpy as np
    import torch

    out = {}
    for name, dt in (("fp64", torch.float64), ("fp32", torch.float32)):
        ref_fn, ours_fn, x = _build(c, dt)
        with torch.no_grad(), fp64_vit_softmax(fp64_softmax and name == "fp64"):
            ref = ref_fn(x)
        ours = ours_fn(x)
        diff = float(np.max(np.abs(ours.astype(np.float64) - ref.astype(np.float64))))
        if name == "fp64":
            out["max_abs_fp64"] = diff
            out["ref_scale"] = float(np.max(np.abs(ref)))
        else:
            out["max_rel_fp32"] = diff / float(np.max(np.abs(ref)))
    return out


def _label(c: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in c.items() if k not in ("family", "seed"))


def hf_equivalence_rows(
    families: Sequence[str] = HF_FAMILIES,
    n_configs: int = 4,
    *,
    seed: int = 0,
    fp64_softmax: bool = True,
    tol_fp64: float = 1e-10,
    tol_fp32: float = 1e-5,
    progress: Callable[..., Iterable] | None = None,
    log: Callable[[dict], None] | None = None,
) -> list[dict[str, Any]]:
    """Compare ``n_configs`` random configurations of every family; one dict per config.

    Each row has ``family``, ``config`` (a label of the sizes), ``max_abs_fp64``,
    ``ref_scale``, ``max_rel_fp32`` and ``pass`` (``max_abs_fp64 ≤ tol_fp64`` and
    ``max_rel_fp32 ≤ tol_fp32``). Needs x64 enabled (``jax_enable_x64``). Runs op by op
    with torch on one thread (:func:`transflow.interop.fast_eager`): many small models of
    different shapes. ``progress`` wraps the iteration, ``log`` receives each row.
    """
    import jax

    from ._studies import fast_eager

    unknown = sorted(set(families) - set(HF_FAMILIES))
    if unknown:
        raise ValueError(
            f"`families` has unknown entries {unknown}; choose from {list(HF_FAMILIES)}."
        )
    if not jax.config.jax_enable_x64:
        raise ValueError(
            "hf_equivalence_rows compares in float64 but JAX runs in 32-bit mode; enable it "
            "first with `jax.config.update('jax_enable_x64', True)`."
        )
    todo = [c for fam in families for c in hf_configurations(fam, int(n_configs), seed)]
    it = progress(todo, total=len(todo), desc="vit_equivalence") if progress else todo
    rows = []
    with fast_eager():
        for c in it:
            res = hf_compare(c, fp64_softmax=fp64_softmax)
            ok = res["max_abs_fp64"] <= tol_fp64 and res["max_rel_fp32"] <= tol_fp32
            row = {"family": c["family"], "config": _label(c), **res, "pass": bool(ok)}
            rows.append(row)
            if log is not None:
                log(row)
    return rows
