"""Task ``analyze``: a trained or converted transformer studied as a flow
(:mod:`transflow.analysis`).

The model comes from one of

- ``task.model_path=<path>``: a HuggingFace ``save_pretrained`` directory (``config.json``;
  ViT, GPT-2, BERT, Llama and whatever else :func:`transflow.interop.load_hf` loads), a torch
  checkpoint (a ``.pt``/``.pth`` file, or a directory holding exactly one) of a
  ``torch.nn.TransformerEncoder(Layer)``, read safely with ``weights_only=True``
  (:func:`transflow.interop.load_torch_checkpoint`): a state dict
  (``torch.save(encoder.state_dict(), path)``), its architecture from a sidecar
  ``<path>.json`` or else from ``task.n_heads`` (the shapes give the rest); a whole pickled
  module (``torch.save(module, path)``) runs code when unpickled and loads only with
  ``task.trust_pickle=true``, for files you trust; or a directory of transflow training
  checkpoints (``ckpt-*.eqx``, written by
  ``experiment=train_digits`` with the ``task.digits`` configuration);
- ``task.source=digits`` (default): the model of ``experiment=train_digits`` with the
  ``task.digits`` configuration, from its checkpoint directory
  (``outputs/checkpoints/train_digits-<hash>``; trained there first if it is missing or
  unfinished, exactly as ``transflow-run experiment=train_digits`` would);
- ``task.source=random``: a seeded random configuration, ``task.arch`` = ``vit``
  (HF ``ViTModel``), ``gpt2`` (HF ``GPT2Model``), ``bert`` (HF ``BertModel``), ``llama``
  (HF ``LlamaModel``) or ``torch_encoder`` (``torch.nn.TransformerEncoder``, post-LN).

Inputs are real where the model has a data domain: the digits test images for the digits
model (resized and repeated over channels for a ViT), token ids drawn from the vocabulary
for a decoder, Gaussian tokens for a bare encoder (it has no embedding). The trajectory
and the per-step diagnostics use the first input; the refinement study all ``n_inputs``
(the whole test split for the digits classifier, with its accuracy per factor).

Writes ``metrics.jsonl`` (kinds ``step``, ``substep``, ``control``, ``scaling``,
``refine``, ``final``), ``analysis.npz``, the figures ``trajectories``, ``cosine``,
``geometry``, ``budgets``, ``smoothness``, ``refinement`` and the claims (trajectory end =
model output, ``refine(model, 1)`` = model).
"""

from __future__ import annotations

import math
import pathlib
from dataclasses import dataclass, field

from transflow.control._tasks import DigitsConfig

from ..context import format_number
from ..validate import Constraint

__all__ = ["Config", "run", "resolve_model_path"]

_ARCHS = ("vit", "gpt2", "bert", "llama", "torch_encoder")

#: Names checked before any work, smoke runs included (transflow-run help analyze).
CHOICES = {
    "source": ("digits", "random"),
    "arch": _ARCHS,
    "interpolation": ("constant", "linear", "both"),
}


CONSTRAINTS = (
    Constraint(
        ("task.digits.patch",),
        lambda p: 8 % p == 0,
        "task.digits.patch dividing the 8×8 image: 1, 2, 4 or 8",
    ),
    Constraint(
        ("task.image_size", "task.patch_size"),
        lambda size, patch: size % patch == 0,
        "task.patch_size dividing task.image_size",
    ),
)


def check(cfg) -> None:
    """Before any work: ``task.model_path`` exists and is a model (else a ValueError or
    FileNotFoundError naming it)."""
    if cfg.model_path:
        resolve_model_path(cfg.model_path)


@dataclass
class Config:
    """Which model, which inputs, which refinement (``task.<field>=...``)."""

    source: str = "digits"  # "digits" | "random" (ignored when model_path is set)
    model_path: str = ""  # HF save_pretrained dir, torch .pt/.pth, or a ckpt-*.eqx dir
    trust_pickle: bool = False  # unpickle a whole torch module (runs the file's code)
    arch: str = "vit"  # source=random: "vit" | "gpt2" | "bert" | "llama" | "torch_encoder"
    n_layers: int = 6  # source=random
    d_model: int = 64
    n_heads: int = 4
    d_ff: int = 256
    seq_len: int = 32  # tokens of a decoder / bare encoder input
    image_size: int = 32  # random ViT: image side (digits are resized to it)
    patch_size: int = 8
    n_inputs: int = 16  # inputs of the refinement study (digits: the whole test split)
    factors: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16])
    interpolation: str = "both"  # "constant" | "linear" | "both"
    threshold: float = 0.99  # cosine threshold of the cluster count
    # the refined models' accuracy on the labelled inputs (digits) beside the refinement
    evaluate: bool = True
    digits: DigitsConfig = field(default_factory=DigitsConfig)  # the train_digits config


# ----------------------------------------------------------------------------- loading
def resolve_model_path(path: str) -> tuple[str, pathlib.Path]:
    """``(kind, path)`` with kind ``"hf"``, ``"torch"`` or ``"transflow"``; raises before
    any compute if the path does not exist or holds no recognised checkpoint."""
    p = pathlib.Path(path).expanduser()
    if not p.exists():
        raise FileNotFoundError(
            f"task.model_path={str(p)!r} does not exist; give a HuggingFace save_pretrained "
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
        f"task.model_path={str(p)!r} holds no recognised checkpoint: expected a HuggingFace "
        "save_pretrained directory (config.json), a torch .pt/.pth file (or a directory "
        "with exactly one) or a directory of transflow ckpt-*.eqx checkpoints."
    )


def _dtype():
    import jax
    import jax.numpy as jnp

    return jnp.float64 if jax.config.jax_enable_x64 else jnp.float32


def _cast(model, dtype):
    import equinox as eqx
    import jax

    return jax.tree.map(lambda a: a.astype(dtype) if eqx.is_inexact_array(a) else a, model)


def _load_digits(cfg, ctx, path: pathlib.Path | None):
    """The trained digits model and the number train_digits reported for it."""
    from transflow.control import run_training

    dcfg = cfg.digits
    if path is None:
        summary, result = run_training(
            "digits",
            dcfg,
            run_dir=ctx.run_dir,
            seed=ctx.seed,
            progress=ctx.progress,
        )
        return result.model, {
            "checkpoint_dir": summary["checkpoint_dir"],
            "train_test_accuracy": summary["test_accuracy"],
            "train_steps": summary["steps"],
        }
    from transflow.control import load_trained

    return load_trained("digits", path, dcfg, ctx.seed)


def _from_module(module, dtype):
    import torch

    from transflow.interop import from_hf, from_torch

    if isinstance(module, torch.nn.TransformerEncoder | torch.nn.TransformerEncoderLayer):
        return from_torch(module.eval(), dtype=dtype)
    return from_hf(module.eval(), dtype=dtype)


def _load_hf(path: pathlib.Path, dtype):
    import json

    from transflow.interop import load_hf

    model_type = json.loads((path / "config.json").read_text()).get("model_type", "?")
    model = load_hf(path, dtype=dtype)
    # a task-head checkpoint (e.g. BertForMaskedLM): the flow is the base model's
    return getattr(model, "base", model), model_type


def _random_module(cfg, seed: int):
    import torch

    torch.manual_seed(seed)
    if cfg.arch == "vit":
        from transformers import ViTConfig, ViTModel

        hf = ViTConfig(
            hidden_size=cfg.d_model,
            num_hidden_layers=cfg.n_layers,
            num_attention_heads=cfg.n_heads,
            intermediate_size=cfg.d_ff,
            image_size=cfg.image_size,
            patch_size=cfg.patch_size,
        )
        return ViTModel(hf)
    if cfg.arch == "gpt2":
        from transformers import GPT2Config, GPT2Model

        hf = GPT2Config(
            n_embd=cfg.d_model,
            n_layer=cfg.n_layers,
            n_head=cfg.n_heads,
            n_inner=cfg.d_ff,
            n_positions=max(cfg.seq_len, 64),
            vocab_size=1024,
        )
        return GPT2Model(hf)
    if cfg.arch == "bert":
        from transformers import BertConfig, BertModel

        hf = BertConfig(
            hidden_size=cfg.d_model,
            num_hidden_layers=cfg.n_layers,
            num_attention_heads=cfg.n_heads,
            intermediate_size=cfg.d_ff,
            max_position_embeddings=max(cfg.seq_len, 64),
            vocab_size=1024,
            attn_implementation="eager",
        )
        return BertModel(hf)
    if cfg.arch == "llama":
        from transformers import LlamaConfig, LlamaModel

        hf = LlamaConfig(
            hidden_size=cfg.d_model,
            num_hidden_layers=cfg.n_layers,
            num_attention_heads=cfg.n_heads,
            num_key_value_heads=cfg.n_heads,
            intermediate_size=cfg.d_ff,
            vocab_size=1024,
            rms_norm_eps=1e-6,
            attn_implementation="eager",
        )
        return LlamaModel(hf)
    layer = torch.nn.TransformerEncoderLayer(
        cfg.d_model, cfg.n_heads, cfg.d_ff, dropout=0.0, batch_first=True
    )
    return torch.nn.TransformerEncoder(
        layer, cfg.n_layers, norm=torch.nn.LayerNorm(cfg.d_model), enable_nested_tensor=False
    )


def _inputs(model, cfg, seed: int, n: int, dtype):
    """Real inputs where the model has a data domain (see the module docstring)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from transflow.analysis._across_depth import _input_rank
    from transflow.control import FlowModel, load_digits_split
    from transflow.interop import CausalDecoder
    from transflow.vision import VisionTransformer

    rng = np.random.default_rng([seed, 7])
    if isinstance(model, FlowModel | VisionTransformer):
        _, _, xte, yte = load_digits_split(cfg.digits.test_fraction, seed=seed)
        if isinstance(model, FlowModel):
            return jnp.asarray(xte, dtype), yte, "digits test images"
        emb = model.embedding
        c, (h, w) = emb.num_channels, emb.image_size
        imgs = jax.image.resize(jnp.asarray(xte[:n], dtype), (min(n, len(xte)), h, w), "linear")
        imgs = jnp.repeat(((imgs - 0.5) / 0.5)[:, None], c, axis=1)
        return imgs, None, f"digits test images resized to {h}x{w}, {c} channels"
    from transflow.interop import RMSDecoder, TextEncoder

    vocab = None
    if isinstance(model, CausalDecoder):
        vocab = model.embedding.table.shape[0]
    elif isinstance(model, TextEncoder):
        vocab = model.embedding.word.shape[0]
    elif isinstance(model, RMSDecoder):
        vocab = model.table.shape[0]
    if vocab is not None:
        ids = rng.integers(0, vocab, (n, cfg.seq_len))
        return jnp.asarray(ids), None, f"token ids drawn uniformly from the vocabulary ({vocab})"
    d = model.d_model if _input_rank(model) == 2 else None
    u = rng.standard_normal((n, cfg.seq_len, d))
    return jnp.asarray(u, dtype), None, "Gaussian tokens N(0, 1) (the encoder has no embedding)"


# ----------------------------------------------------------------------------- run
def _no_order(study: dict) -> str:
    """Why a refinement study has no fitted order (``""`` when it has one)."""
    n = len(study["successive"])
    if n < 2:
        return f"{len(study['factors'])} refinement factors, 3 needed: task.factors"
    return "" if math.isfinite(study["order"]) else "a successive difference is 0"


def _model(cfg, ctx, kind: str, path, dtype):
    """The model to study (``kind``: digits, transflow, hf, torch or random) in ``dtype``,
    and what to say about it."""
    info: dict = {"source": kind}
    if kind in ("digits", "transflow"):
        model, extra = _load_digits(cfg, ctx, path if kind == "transflow" else None)
        info.update(extra)
        info["model"] = "digits FlowModel"
    elif kind == "hf":
        model, info["model"] = _load_hf(path, dtype)
    elif kind == "torch":
        from transflow.interop import load_torch_checkpoint

        module = load_torch_checkpoint(
            path, trust_pickle=bool(cfg.trust_pickle), defaults={"nhead": cfg.n_heads}
        )
        model, info["model"] = _from_module(module, dtype), type(module).__name__
    else:
        model, info["model"] = _from_module(_random_module(cfg, ctx.seed), dtype), cfg.arch
    return _cast(model, dtype), info


def _studies(cfg, ctx, model, xs, labels) -> tuple[dict, dict]:
    """:func:`transflow.analysis.analyze` on the first input, and the refinement study of
    every interpolation on all of them (with the accuracy where there are labels)."""
    import numpy as np

    from transflow.analysis import analyze, refinement_study

    evaluate = None
    if labels is not None and cfg.evaluate:
        from transflow.control import evaluate as evaluate_classifier

        def evaluate(m):
            return evaluate_classifier(m, np.asarray(xs), labels)

    interps = ("constant", "linear") if cfg.interpolation == "both" else (cfg.interpolation,)
    factors = [int(k) for k in cfg.factors]
    res = analyze(
        model,
        xs[0],
        refine_inputs=xs,
        factors=factors,
        interpolation=interps[0],
        threshold=cfg.threshold,
        evaluate=evaluate,
        progress=ctx.progress,
    )
    studies = {interps[0]: res["refinement"]}
    for interp in interps[1:]:
        studies[interp] = refinement_study(
            model, xs, factors, interpolation=interp, evaluate=evaluate, progress=ctx.progress
        )
    return res, studies


def _log_records(ctx, res, studies) -> None:
    """``metrics.jsonl``: the records of kinds step, substep, control, scaling, refine."""
    from transflow.analysis import STEP_QUANTITIES

    diag = res["diagnostics"]
    for k in range(len(diag["step"])):
        ctx.log({"kind": "step", "step": k, **{q: diag[q][k] for q in STEP_QUANTITIES}})
    for name in diag["substep_names"]:
        ctx.log({"kind": "substep", "substep": name, "increment": diag["increments"][name]})
    for block, vals in res["increments"].items():
        ctx.log({"kind": "control", "block": block, "relative_increment": vals})
    if res["scaling"] is not None:
        sc = res["scaling"]
        ctx.log({"kind": "scaling", **{k: sc[k] for k in ("strides", "max_increment", "beta")}})
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
            ctx.log(rec)


def _claims(ctx, model, x, res, studies, dtype) -> None:
    """The trajectory ends at the model's output; refine(model, 1) is the model; linear
    interpolation at factor 1 is the identity; the refinement ratio (recorded)."""
    import jax
    import numpy as np

    from transflow.analysis import model_output, refine, refine_controls
    from transflow.analysis._across_depth import _controls_of

    out = np.asarray(model_output(model, x))
    tol = 1e-12 if dtype == np.float64 else 1e-5 * max(1.0, float(np.max(np.abs(out))))
    ctx.claim("trajectory_last_minus_output_max_abs", res["trajectory_output_error"], tol)
    ident = max(
        float(np.max(np.abs(np.asarray(model_output(refine(model, 1, interpolation=i), x)) - out)))
        for i in ("constant", "linear")
    )
    ctx.claim("refine1_minus_model_max_abs", ident, tol)
    c = _controls_of(model)
    lin1 = refine_controls(c, 1, "linear")
    ctx.claim(
        "linear_interpolation_at_factor1_max_abs",
        max(
            float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
            for a, b in zip(jax.tree.leaves(lin1), jax.tree.leaves(c))
        ),
        0.0,
    )
    const = studies.get("constant", next(iter(studies.values())))
    if len(const["ratios"]):
        ctx.claim(
            "refinement_successive_ratio_min", min(const["ratios"]), 1.5, op=">=", enforce=False
        )


def _save(ctx, res, studies, title: str) -> None:
    """``analysis.npz`` and the six figures."""
    from transflow import plotting
    from transflow.analysis import STEP_QUANTITIES

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
    ctx.save_arrays("analysis", **arrays)
    ctx.save_figure(plotting.plot_token_trajectories(res, title=title), "trajectories")
    ctx.save_figure(plotting.plot_cosine_matrices(res), "cosine")
    ctx.save_figure(plotting.plot_token_geometry(res), "geometry")
    ctx.save_figure(plotting.plot_substep_budgets(res), "budgets")
    ctx.save_figure(plotting.plot_control_smoothness(res), "smoothness")
    ctx.save_figure(
        plotting.plot_refinement(studies, title=f"depth refinement: {title}"), "refinement"
    )


def _summary(info, res, studies, dtype) -> dict:
    import numpy as np

    diag, incs = res["diagnostics"], res["increments"]["all"]
    summary = {
        **info,
        "n_steps": len(diag["step"]) - 1,
        "n_tokens": int(diag["states"].shape[1]),
        "dtype": str(np.dtype(dtype)),
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
        summary[f"refine_{interp}_order"] = None if _no_order(st) else st["order"]
        summary[f"refine_{interp}_change_last"] = st["change"][-1]
        if "evaluate" in st:
            summary[f"refine_{interp}_accuracy"] = [e["accuracy"] for e in st["evaluate"]]
    return summary


def _report(cfg, ctx, summary, studies) -> None:
    ctx.report(
        f"## Results\n\n{summary['model']} ({summary['source']}): "
        f"{summary['n_steps']} steps, {summary['n_tokens']} tokens, inputs: "
        f"{summary['inputs']}. Min pairwise cosine {summary['min_cosine_first']:.3f} → "
        f"{summary['min_cosine_last']:.3f}, clusters (cos ≥ {cfg.threshold}) "
        f"{summary['clusters_first']} → {summary['clusters_last']}; median relative control "
        f"increment {format_number(summary['control_increment_median'], 'no control increments')}"
        "; refinement orders "
        + ", ".join(
            f"{i}: {format_number(st['order'], _no_order(st))}" for i, st in studies.items()
        )
        + "."
    )


def run(cfg, ctx) -> dict:
    """Run the ``analyze`` experiment.

    Dynamical-systems analysis of a trained or HF model: trajectories, clustering,
    refinement in depth.
    """
    kind, path = resolve_model_path(cfg.model_path) if cfg.model_path else (cfg.source, None)
    dtype = _dtype()
    model, info = _model(cfg, ctx, kind, path, dtype)
    xs, labels, info["inputs"] = _inputs(model, cfg, ctx.seed, cfg.n_inputs, dtype)
    res, studies = _studies(cfg, ctx, model, xs, labels)
    _log_records(ctx, res, studies)
    _claims(ctx, model, xs[0], res, studies, dtype)
    _save(ctx, res, studies, str(info["model"]))
    first = next(iter(studies.values()))
    if "evaluate" in first:
        info["test_accuracy"] = first["evaluate"][0]["accuracy"]
    summary = _summary(info, res, studies, dtype)
    ctx.log({"kind": "final", **summary})
    _report(cfg, ctx, summary, studies)
    return summary
