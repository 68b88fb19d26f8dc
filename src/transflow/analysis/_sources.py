"""Where a studied model comes from and what is kept of its study (``experiment=analyze``,
docs/analysis.md): a saved model's kind (:func:`model_source`), a HuggingFace or torch
module's flow (:func:`load_hf_flow`, :func:`model_from_module`, :func:`random_module`),
real inputs (:func:`flow_inputs`), the refinement identities (:func:`refinement_identities`)
and an :func:`analyze` result as records, arrays and summary numbers
(:func:`analysis_records`, :func:`analysis_arrays`, :func:`analysis_summary`).

torch and transformers are imported inside the functions only.
"""

from __future__ import annotations

import math
import pathlib

from ._geometry import STEP_QUANTITIES

__all__ = [
    "MODEL_ARCHS",
    "analysis_arrays",
    "analysis_records",
    "analysis_summary",
    "cast_floats",
    "flow_inputs",
    "load_hf_flow",
    "model_from_module",
    "model_source",
    "no_order_reason",
    "random_module",
    "refinement_identities",
]

#: The architectures of :func:`random_module`.
MODEL_ARCHS = ("vit", "gpt2", "bert", "llama", "torch_encoder")


def model_source(path, key: str = "task.model_path") -> tuple[str, pathlib.Path]:
    """``(kind, path)`` of a saved model: kind ``"hf"`` (a HuggingFace ``save_pretrained``
    directory), ``"torch"`` (a ``.pt``/``.pth`` file, or a directory holding exactly one)
    or ``"transflow"`` (a directory of ``ckpt-*.eqx`` training checkpoints). Raises before
    any compute if the path does not exist or holds no recognised checkpoint, naming it
    as ``key``."""
    p = pathlib.Path(path).expanduser()
    if not p.exists():
        raise FileNotFoundError(
            f"{key}={str(p)!r} does not exist; give a HuggingFace save_pretrained "
            "directory, a torch .pt/.pth file or a directory of transflow ckpt-*.eqx files."
        )
    if p.is_file():
        if p.suffix in (".pt", ".pth"):
            return "torch", p
    elif (p / "config.json").is_file():
        return "hf", p
    elif any(p.glob("ckpt-*.eqx")):
        return "transflow", p
    else:
        pts = sorted(q for q in p.iterdir() if q.suffix in (".pt", ".pth"))
        if len(pts) == 1:
            return "torch", pts[0]
    raise ValueError(
        f"{key}={str(p)!r} holds no recognised checkpoint: expected a HuggingFace "
        "save_pretrained directory (config.json), a torch .pt/.pth file (or a directory "
        "with exactly one) or a directory of transflow ckpt-*.eqx checkpoints."
    )


def cast_floats(model, dtype):
    """``model`` with every floating array cast to ``dtype`` (other leaves unchanged)."""
    import equinox as eqx
    import jax

    return jax.tree.map(lambda a: a.astype(dtype) if eqx.is_inexact_array(a) else a, model)


def model_from_module(module, dtype):
    """The transflow model of a torch ``TransformerEncoder(Layer)`` (:func:`from_torch`) or
    of a HuggingFace module (:func:`from_hf`), in ``dtype``."""
    import torch

    from ..interop import from_hf, from_torch

    if isinstance(module, torch.nn.TransformerEncoder | torch.nn.TransformerEncoderLayer):
        return from_torch(module.eval(), dtype=dtype)
    return from_hf(module.eval(), dtype=dtype)


def load_hf_flow(path, dtype):
    """The flow of a HuggingFace ``save_pretrained`` directory (:func:`load_hf`; a task
    head's base model) in ``dtype``, and the checkpoint's ``model_type``."""
    import json

    from ..interop import load_hf

    path = pathlib.Path(path)
    model_type = json.loads((path / "config.json").read_text()).get("model_type", "?")
    model = load_hf(path, dtype=dtype)
    # a task-head checkpoint (e.g. BertForMaskedLM): the flow is the base model's
    return getattr(model, "base", model), model_type


def random_module(
    arch: str,
    *,
    seed: int,
    n_layers: int = 6,
    d_model: int = 64,
    n_heads: int = 4,
    d_ff: int = 256,
    seq_len: int = 32,
    image_size: int = 32,
    patch_size: int = 8,
):
    """A seeded random torch module of ``arch`` (:data:`MODEL_ARCHS`): HF ``ViTModel``,
    ``GPT2Model``, ``BertModel``, ``LlamaModel``, or a post-LN
    ``torch.nn.TransformerEncoder`` (``torch_encoder``), with the given sizes."""
    if arch not in MODEL_ARCHS:
        raise ValueError(f"random_module: `arch` must be one of {MODEL_ARCHS}, got {arch!r}.")
    import torch

    torch.manual_seed(seed)
    if arch == "vit":
        from transformers import ViTConfig, ViTModel

        hf = ViTConfig(
            hidden_size=d_model,
            num_hidden_layers=n_layers,
            num_attention_heads=n_heads,
            intermediate_size=d_ff,
            image_size=image_size,
            patch_size=patch_size,
        )
        return ViTModel(hf)
    if arch == "gpt2":
        from transformers import GPT2Config, GPT2Model

        hf = GPT2Config(
            n_embd=d_model,
            n_layer=n_layers,
            n_head=n_heads,
            n_inner=d_ff,
            n_positions=max(seq_len, 64),
            vocab_size=1024,
        )
        return GPT2Model(hf)
    if arch == "bert":
        from transformers import BertConfig, BertModel

        hf = BertConfig(
            hidden_size=d_model,
            num_hidden_layers=n_layers,
            num_attention_heads=n_heads,
            intermediate_size=d_ff,
            max_position_embeddings=max(seq_len, 64),
            vocab_size=1024,
            attn_implementation="eager",
        )
        return BertModel(hf)
    if arch == "llama":
        from transformers import LlamaConfig, LlamaModel

        hf = LlamaConfig(
            hidden_size=d_model,
            num_hidden_layers=n_layers,
            num_attention_heads=n_heads,
            num_key_value_heads=n_heads,
            intermediate_size=d_ff,
            vocab_size=1024,
            rms_norm_eps=1e-6,
            attn_implementation="eager",
        )
        return LlamaModel(hf)
    layer = torch.nn.TransformerEncoderLayer(d_model, n_heads, d_ff, dropout=0.0, batch_first=True)
    return torch.nn.TransformerEncoder(
        layer, n_layers, norm=torch.nn.LayerNorm(d_model), enable_nested_tensor=False
    )


def flow_inputs(model, *, seed: int, n: int, seq_len: int, dtype, test_fraction: float = 0.2):
    """``(inputs, labels, description)``: real inputs where the model has a data domain: the
    digits test images (``test_fraction`` of the split) for a digits
    :class:`~transflow.control.FlowModel` (with their labels), resized and repeated over
    channels for a ViT; ``seq_len`` token ids drawn from the vocabulary for a decoder or
    text encoder; Gaussian tokens for a bare encoder (no embedding). ``n`` inputs
    (the digits classifier: its whole test split)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from ..control import load_digits_split
    from ..models import CausalDecoder, FlowModel, RMSDecoder, TextEncoder, VisionTransformer
    from ._across_depth import _input_rank

    rng = np.random.default_rng([seed, 7])
    if isinstance(model, FlowModel | VisionTransformer):
        _, _, xte, yte = load_digits_split(test_fraction, seed=seed)
        if isinstance(model, FlowModel):
            return jnp.asarray(xte, dtype), yte, "digits test images"
        emb = model.embedding
        c, (h, w) = emb.num_channels, emb.image_size
        imgs = jax.image.resize(jnp.asarray(xte[:n], dtype), (min(n, len(xte)), h, w), "linear")
        imgs = jnp.repeat(((imgs - 0.5) / 0.5)[:, None], c, axis=1)
        return imgs, None, f"digits test images resized to {h}x{w}, {c} channels"
    vocab = None
    if isinstance(model, CausalDecoder):
        vocab = model.embedding.table.shape[0]
    elif isinstance(model, TextEncoder):
        vocab = model.embedding.word.shape[0]
    elif isinstance(model, RMSDecoder):
        vocab = model.table.shape[0]
    if vocab is not None:
        ids = rng.integers(0, vocab, (n, seq_len))
        return jnp.asarray(ids), None, f"token ids drawn uniformly from the vocabulary ({vocab})"
    d = model.d_model if _input_rank(model) == 2 else None
    u = rng.standard_normal((n, seq_len, d))
    return jnp.asarray(u, dtype), None, "Gaussian tokens N(0, 1) (the encoder has no embedding)"


def refinement_identities(model, x) -> dict:
    """The identities every refinement must satisfy, as max |differences| on input ``x``:
    ``refine1_minus_model_max_abs`` (``refine(model, 1)`` is the model, both
    interpolations) and ``linear_interpolation_at_factor1_max_abs`` (linear interpolation
    at factor 1 is the identity on the controls); with ``output`` the model's output."""
    import jax
    import numpy as np

    from ._across_depth import _controls_of, refine, refine_controls
    from ._flow import model_output

    out = np.asarray(model_output(model, x))
    ident = max(
        float(np.max(np.abs(np.asarray(model_output(refine(model, 1, interpolation=i), x)) - out)))
        for i in ("constant", "linear")
    )
    c = _controls_of(model)
    lin = zip(jax.tree.leaves(refine_controls(c, 1, "linear")), jax.tree.leaves(c))
    return {
        "output": out,
        "refine1_minus_model_max_abs": ident,
        "linear_interpolation_at_factor1_max_abs": max(
            float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in lin
        ),
    }


def no_order_reason(study: dict) -> str:
    """Why a :func:`refinement_study` has no fitted order (``""`` when it has one)."""
    n = len(study["successive"])
    if n < 2:
        return f"{len(study['factors'])} refinement factors, 3 needed: task.factors"
    return "" if math.isfinite(study["order"]) else "a successive difference is 0"


def analysis_records(res: dict, studies: dict) -> list[dict]:
    """The records of an :func:`analyze` result and its refinement studies (by
    interpolation), one dict each, by ``kind``: ``step`` (:data:`STEP_QUANTITIES`),
    ``substep``, ``control``, ``scaling``, ``refine``."""
    out: list[dict] = []

    diag = res["diagnostics"]
    for k in range(len(diag["step"])):
        out.append({"kind": "step", "step": k, **{q: diag[q][k] for q in STEP_QUANTITIES}})
    for name in diag["substep_names"]:
        out.append({"kind": "substep", "substep": name, "increment": diag["increments"][name]})
    for block, vals in res["increments"].items():
        out.append({"kind": "control", "block": block, "relative_increment": vals})
    if res["scaling"] is not None:
        sc = res["scaling"]
        out.append({"kind": "scaling", **{k: sc[k] for k in ("strides", "max_increment", "beta")}})
    for interp, st in studies.items():
        for i, k in enumerate(st["factors"]):
            rec = {
                "kind": "refine",
                "interpolation": interp,
                "factor": k,
                "change": st["change"][i],
            }
            if i < len(st["successive"]):
                rec["successive"] = st["successive"][i]
            if "evaluate" in st:
                rec.update({f"test_{q}": v for q, v in st["evaluate"][i].items()})
            out.append(rec)
    return out


def analysis_arrays(res: dict, studies: dict) -> dict:
    """The arrays of an :func:`analyze` result and its refinement studies, by name
    (``states``, ``projection``, ``cosine``, :data:`STEP_QUANTITIES`, ``increment/<sub-step>``,
    ``control/<block>``, ``refine/<interpolation>/{factors,change,accuracy}``)."""
    diag = res["diagnostics"]
    arrays = {
        "states": diag["states"],
        "projection": res["projection"],
        "cosine": diag["cosine"],
        **{q: diag[q] for q in STEP_QUANTITIES},
        **{f"increment/{k}": v for k, v in diag["increments"].items()},
        **{f"control/{k}": v for k, v in res["increments"].items()},
    }
    for interp, st in studies.items():
        arrays[f"refine/{interp}/factors"] = st["factors"]
        arrays[f"refine/{interp}/change"] = st["change"]
        if "evaluate" in st:
            arrays[f"refine/{interp}/accuracy"] = [e["accuracy"] for e in st["evaluate"]]
    return arrays


def analysis_summary(res: dict, studies: dict) -> dict:
    """The numbers of an :func:`analyze` result and its refinement studies: steps, tokens,
    first and last cosine, clusters and effective rank, the control increments, the
    scaling exponent, the trajectory-output error, and per interpolation the fitted order
    (None without two successive differences: :func:`no_order_reason`), the last change
    and the accuracies."""
    import numpy as np

    diag, incs = res["diagnostics"], res["increments"]["all"]
    summary = {
        "n_steps": len(diag["step"]) - 1,
        "n_tokens": int(diag["states"].shape[1]),
        "min_cosine_first": float(diag["min_cosine"][0]),
        "min_cosine_last": float(diag["min_cosine"][-1]),
        "mean_cosine_last": float(diag["mean_cosine"][-1]),
        "clusters_first": int(diag["n_clusters"][0]),
        "clusters_last": int(diag["n_clusters"][-1]),
        "effective_rank_first": float(diag["effective_rank"][0]),
        "effective_rank_last": float(diag["effective_rank"][-1]),
        "control_increment_median": float(np.median(incs)) if len(incs) else None,
        "control_increment_max": float(np.max(incs)) if len(incs) else None,
        "scaling_beta": None if res["scaling"] is None else res["scaling"]["beta"],
        "trajectory_output_error": res["trajectory_output_error"],
        "seconds": res["seconds"],
    }
    for interp, st in studies.items():
        # a fitted order needs two successive differences: null (not NaN) without them
        summary[f"refine_{interp}_order"] = None if no_order_reason(st) else st["order"]
        summary[f"refine_{interp}_change_last"] = st["change"][-1]
        if "evaluate" in st:
            summary[f"refine_{interp}_accuracy"] = [e["accuracy"] for e in st["evaluate"]]
    return summary
