"""Task ``analyze``: a trained or converted transformer studied as a flow
(:mod:`transflow.analysis`; docs/analysis.md, "transflow-run experiment=analyze", lists the
model sources, the inputs and the outputs).

The model is ``task.model_path`` (a HuggingFace ``save_pretrained`` directory, a torch
checkpoint read safely with ``weights_only=True`` unless ``task.trust_pickle=true``, or a
directory of transflow training checkpoints ``ckpt-*.eqx``), else ``task.source``:
``digits`` (the model of ``experiment=train_digits`` with the ``task.digits``
configuration, trained first if its checkpoints are missing or unfinished) or ``random``
(a seeded ``task.arch``). The trajectory and per-step diagnostics use the first input, the
refinement study all ``n_inputs``; the claims: trajectory end = model output,
``refine(model, 1)`` = model.
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass, field

from transflow.control._tasks import DigitsConfig

from ..context import format_number
from ..validate import Constraint

__all__ = ["CHOICES", "CONSTRAINTS", "Config", "check", "run"]


def _archs() -> tuple[str, ...]:
    from transflow.analysis import MODEL_ARCHS

    return tuple(MODEL_ARCHS)


#: Names checked before any work, smoke runs included (transflow-run help analyze).
CHOICES = {
    "source": ("digits", "random"),
    "arch": _archs,
    "interpolation": ("constant", "linear", "both"),
}

#: Cross-option constraints, checked before any work (experiments/validate.py).
CONSTRAINTS = (
    # task.digits.patch dividing 8: refused by the library's DigitsConfig itself
    Constraint(
        ("task.image_size", "task.patch_size"),
        lambda size, patch: size % patch == 0,
        "task.patch_size dividing task.image_size",
    ),
)


def check(cfg) -> None:
    """Before any work: ``task.model_path`` exists and is a model (else a ValueError or
    FileNotFoundError naming it)."""
    from transflow.analysis import model_source

    if cfg.model_path:
        model_source(cfg.model_path)


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


# ----------------------------------------------------------------------------- the model
def _dtype():
    import jax
    import jax.numpy as jnp

    return jnp.float64 if jax.config.jax_enable_x64 else jnp.float32


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


def _model(cfg, ctx, kind: str, path, dtype):
    """The model to study (``kind``: digits, transflow, hf, torch or random) in ``dtype``,
    and what to say about it."""
    from transflow import analysis as an

    info: dict = {"source": kind}
    if kind in ("digits", "transflow"):
        model, extra = _load_digits(cfg, ctx, path if kind == "transflow" else None)
        info.update(extra)
        info["model"] = "digits FlowModel"
    elif kind == "hf":
        model, info["model"] = an.load_hf_flow(path, dtype)
    elif kind == "torch":
        from transflow.interop import load_torch_checkpoint

        module = load_torch_checkpoint(
            path, trust_pickle=bool(cfg.trust_pickle), defaults={"nhead": cfg.n_heads}
        )
        model, info["model"] = an.model_from_module(module, dtype), type(module).__name__
    else:
        sizes = ("n_layers", "d_model", "n_heads", "d_ff", "seq_len", "image_size", "patch_size")
        module = an.random_module(cfg.arch, seed=ctx.seed, **{k: getattr(cfg, k) for k in sizes})
        model, info["model"] = an.model_from_module(module, dtype), cfg.arch
    return an.cast_floats(model, dtype), info


# ----------------------------------------------------------------------------- run
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


def _claims(ctx, model, x, res, studies, dtype) -> None:
    """The trajectory ends at the model's output; refine(model, 1) is the model; linear
    interpolation at factor 1 is the identity; the refinement ratio (recorded)."""
    import numpy as np

    from transflow.analysis import refinement_identities

    ident = refinement_identities(model, x)
    tol = 1e-12 if dtype == np.float64 else 1e-5 * max(1.0, float(np.max(np.abs(ident["output"]))))
    ctx.claim("trajectory_last_minus_output_max_abs", res["trajectory_output_error"], tol)
    ctx.claim("refine1_minus_model_max_abs", ident["refine1_minus_model_max_abs"], tol)
    ctx.claim(
        "linear_interpolation_at_factor1_max_abs",
        ident["linear_interpolation_at_factor1_max_abs"],
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
    from transflow.analysis import analysis_arrays

    ctx.save_arrays("analysis", **analysis_arrays(res, studies))
    ctx.save_figure(plotting.plot_token_trajectories(res, title=title), "trajectories")
    for plot, name in (
        (plotting.plot_cosine_matrices, "cosine"),
        (plotting.plot_token_geometry, "geometry"),
        (plotting.plot_substep_budgets, "budgets"),
        (plotting.plot_control_smoothness, "smoothness"),
    ):
        ctx.save_figure(plot(res), name)
    refinement = plotting.plot_refinement(studies, title=f"depth refinement: {title}")
    ctx.save_figure(refinement, "refinement")


def _report(cfg, ctx, summary, studies) -> None:
    from transflow.analysis import no_order_reason

    ctx.report(
        f"## Results\n\n{summary['model']} ({summary['source']}): "
        f"{summary['n_steps']} steps, {summary['n_tokens']} tokens, inputs: "
        f"{summary['inputs']}. Min pairwise cosine {summary['min_cosine_first']:.3f} → "
        f"{summary['min_cosine_last']:.3f}, clusters (cos ≥ {cfg.threshold}) "
        f"{summary['clusters_first']} → {summary['clusters_last']}; median relative control "
        f"increment {format_number(summary['control_increment_median'], 'no control increments')}"
        "; refinement orders "
        + ", ".join(
            f"{i}: {format_number(st['order'], no_order_reason(st))}" for i, st in studies.items()
        )
        + "."
    )


def run(cfg, ctx) -> dict:
    """Run the ``analyze`` experiment.

    Dynamical-systems analysis of a trained or HF model: trajectories, clustering,
    refinement in depth.
    """
    import numpy as np

    from transflow import analysis as an

    kind, path = an.model_source(cfg.model_path) if cfg.model_path else (cfg.source, None)
    dtype = _dtype()
    model, info = _model(cfg, ctx, kind, path, dtype)
    xs, labels, info["inputs"] = an.flow_inputs(
        model, seed=ctx.seed, n=cfg.n_inputs, seq_len=cfg.seq_len, dtype=dtype,
        test_fraction=cfg.digits.test_fraction,
    )  # fmt: skip
    res, studies = _studies(cfg, ctx, model, xs, labels)
    for record in an.analysis_records(res, studies):
        ctx.log(record)
    _claims(ctx, model, xs[0], res, studies, dtype)
    _save(ctx, res, studies, str(info["model"]))
    first = next(iter(studies.values()))
    if "evaluate" in first:
        info["test_accuracy"] = first["evaluate"][0]["accuracy"]
    summary = {**info, **an.analysis_summary(res, studies)}
    summary["dtype"] = str(np.dtype(dtype))
    ctx.log({"kind": "final", **summary})
    _report(cfg, ctx, summary, studies)
    return summary
