"""Task ``depth_text``: depth transfer on text (a side study of the depth page,
docs/depth.md; part of ``experiment=depth`` before the study runner).

Two character-level models (:data:`transflow.control.DEPTH_TEXT`, ``pydoc_data.topics``)
per seed: the **path** model (parameterization ``task.path``, K = ``task.path_size``, T =
``task.text_T``, N_t drawn per batch from ``task.random_depths``, stepped by
``task.text_path_scheme``) and a **per-layer** model with as many parameters (``task.
n_steps`` layers, pre-LN Euler, Δt = 1). Both are scored in validation bits per character
at ``task.text_eval_depths`` (with ``n_steps`` and ``4 n_steps`` added) and compared with
n-gram count baselines on the same validation windows. Seeds: ``seed`` … ``seed +
task.text_seeds − 1``.

Runs on the study runner (:mod:`transflow.experiments.study.runner`): the cells
``text-path`` and ``text-per_layer``, one record per (model, seed) in
``cells/<cell>/seed<k>/record.json`` reused on a rerun in the same folder with the same
options. Claims: the path model's |bpc(4 N_t) − bpc(N_t)| / bpc(N_t) <= ``task.
max_bpc_change`` in every seed; both models beat the 4-gram at N_t (mean over seeds); the
two models have equal parameter counts.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from transflow.control import DepthTextConfig

from ..config import complete, library_names, options_without
from ..context import markdown_table
from ..study.protocol import Cell, digest, keyed_fields
from ..study.runner import StudySpec, job_dir, run_jobs

__all__ = [
    "CHOICES",
    "RECORD_VERSION",
    "Config",
    "TextOptions",
    "record_keys",
    "run",
    "text_table",
]

#: The fields of DepthTextConfig this task sets itself (per model or from its options).
TextOptions = options_without(
    DepthTextConfig,
    ["checkpoint_dir", "steps", "n_steps", "path", "path_size", "scheme", "train_depths"]
    + ["smoothness", "dt"],
    name="TextOptions",
    hints={
        "steps": "task.text_steps",
        "n_steps": "task.n_steps",
        "path": "task.path",
        "path_size": "task.path_size",
        "scheme": "task.text_path_scheme (the path model; per-layer: prenorm)",
        "train_depths": "task.random_depths (the path model)",
        "smoothness": "task.smoothness",
        "dt": "task.text_T (dt = text_T / task.n_steps; per-layer: 1)",
        "checkpoint_dir": "the run directory",
    },
)


def _paths():
    from transflow.continuous import PATH_KINDS

    return tuple(k for k in PATH_KINDS if k != "per_layer")


#: Names checked before any work, smoke runs included (transflow-run help depth_text).
CHOICES = {
    "text_path_scheme": library_names("", "SCHEME_NAMES"),
    "path": _paths,
    "text.activation": library_names("control", "DEPTH_ACTIVATIONS"),
    "text.theta_at": library_names("models", "THETA_AT"),
}

#: The version of a (model, seed) record: part of its digest (as in experiment=depth).
RECORD_VERSION = 2


@dataclass
class Config:
    """The text models of the depth page (``task.<field>=...``)."""

    path: str = "legendre"  # the path model's parameterization (the depth headline's)
    path_size: int = 4  # its K
    n_steps: int = 4  # N_t of the per-layer model, the path model's Δt = text_T / n_steps
    random_depths: list[int] = field(default_factory=lambda: [4, 8, 16])  # path model
    smoothness: float = 0.0  # λ of λ ∫‖θ'(t)‖² dt
    text_seeds: int = 3
    # design v2: 4000 steps and T = 1 (v1: 1500 steps and T = 0.2, where neither model beat
    # the 4-gram; docs/depth.md)
    text_steps: int = 4000
    text_T: float = 1.0  # the text path model's horizon
    text_eval_depths: list[int] = field(default_factory=lambda: [4, 8, 16, 32])
    max_bpc_change: float = 0.02  # claim: |bpc(4 N_t) − bpc(N_t)| / bpc(N_t), path model
    text_path_scheme: str = "heun"
    # the text models' other options (DepthTextConfig without the fields set above)
    text: TextOptions = field(default_factory=TextOptions)


def _models(cfg: Config) -> dict[str, DepthTextConfig]:
    base = complete(cfg.text, checkpoint_dir="run", steps=cfg.text_steps, n_steps=cfg.n_steps)
    path = dict(
        path=cfg.path,
        path_size=cfg.path_size,
        train_depths=[int(n) for n in cfg.random_depths],
        smoothness=cfg.smoothness,
        dt=float(cfg.text_T) / cfg.n_steps,
        scheme=cfg.text_path_scheme,
    )
    per_layer = dict(path="none", dt=1.0, scheme="prenorm")
    return {
        "path": dataclasses.replace(base, **path),
        "per_layer": dataclasses.replace(base, **per_layer),
        "base": base,
    }


def _depths(cfg: Config) -> list[int]:
    n0 = int(cfg.n_steps)
    return sorted({int(n) for n in cfg.text_eval_depths} | {n0, 4 * n0})


def record_keys(cfg: Config) -> dict[str, str]:
    """The record key of each cell (``text-path``, ``text-per_layer``): the digest of the
    model's training config, the evaluation depths and :data:`RECORD_VERSION`, as
    ``experiment=depth`` wrote them before these models were a task of their own."""
    depths, models = _depths(cfg), _models(cfg)
    return {
        f"text-{m}": digest(
            {
                "version": RECORD_VERSION,
                "config": keyed_fields(dataclasses.asdict(models[m])),
                "depths": depths,
            }
        )
        for m in ("path", "per_layer")
    }


def _measure(ctx, tcfg: DepthTextConfig, depths: list[int], job) -> dict:
    """The job function: train one text model and score it at ``depths``."""
    from transflow.control import (
        DEPTH_TEXT,
        bits_per_char,
        depth_accuracy,
        run_training,
        validation_windows,
    )

    folder = job_dir(ctx.run_dir, job.cell.name, job.seed)
    summary, result = run_training(
        DEPTH_TEXT, tcfg, run_dir=folder, seed=job.seed, progress=ctx.progress
    )
    xv, yv = validation_windows(tcfg)
    r = depth_accuracy(result.model, xv, yv, depths, adaptive=None)
    return {
        "bpc": [bits_per_char(v) for v in r["loss"]],
        "n_params": summary["n_params"],
        "cpu_seconds": summary["cpu_seconds"],
    }


def _summary(records: dict[int, dict], depths: list[int], n0: int, scheme: str) -> dict:
    import numpy as np

    per_seed = [records[s] for s in sorted(records)]
    bpc = np.asarray([r["bpc"] for r in per_seed])  # (seeds, depths)
    i0, i4 = depths.index(n0), depths.index(4 * n0)
    return {
        "bpc": bpc.mean(0).tolist(),
        "bpc_std": (bpc.std(0, ddof=1) if len(per_seed) > 1 else 0 * bpc[0]).tolist(),
        "bpc_seeds": bpc.tolist(),
        "bpc_train": float(bpc[:, i0].mean()),
        "change_4x": (np.abs(bpc[:, i4] - bpc[:, i0]) / bpc[:, i0]).tolist(),
        "n_params": per_seed[0]["n_params"],
        "cpu_seconds": float(np.mean([r["cpu_seconds"] for r in per_seed])),
        "scheme": scheme,
    }


def text_table(text: dict | None) -> str:
    """The two models' bits per character (mean ± std over seeds) at every depth, their
    worst change at 4x, CPU seconds, and the n-gram baselines (markdown)."""
    from transflow.control import baselines_table

    if not text:
        return ""
    depths = text["depths"]
    head = ["model", "scheme", "parameters", *(f"N={n}" for n in depths)]
    rows = []
    for name in ("path", "per_layer"):
        m = text[name]
        bpc = [f"{b:.3f} ± {e:.3f}" for b, e in zip(m["bpc"], m["bpc_std"])]
        change, cpu = f"{100 * max(m['change_4x']):.2f} %", f"{m['cpu_seconds']:.1f}"
        rows.append([name, m["scheme"], m["n_params"], *bpc, change, cpu])
    table = markdown_table([*head, "change at 4x (worst seed)", "CPU s (mean)"], rows)
    return (
        f"\n\nText (pydoc_data.topics, validation bits per character, mean ± std over seeds "
        f"{text['seeds']}):\n\n" + table + "\n\n" + baselines_table(text["baselines"])
    )


def run(cfg: Config, ctx) -> dict:
    """Train and score both models for every seed (the study runner), then the claims."""
    from transflow.control import text_baselines

    n0, depths, models = int(cfg.n_steps), _depths(cfg), _models(cfg)
    seeds = [ctx.seed + i for i in range(int(cfg.text_seeds))]
    cells = [Cell(f"text-{m}", {"model": m}, seeds, m) for m in ("path", "per_layer")]
    keys = record_keys(cfg)
    spec = StudySpec(
        "depth_text",
        cells,
        measure=lambda job: _measure(ctx, models[job.cell.levels["model"]], depths, job),
        key=lambda job: keys[job.cell.name],
        line=lambda r: f"bpc at N_t {r['bpc'][depths.index(n0)]:.3f}",
    )
    result = run_jobs(spec, ctx)
    text: dict = {"depths": depths, "seeds": seeds}
    for m in ("path", "per_layer"):
        text[m] = _summary(result.records[f"text-{m}"], depths, n0, models[m].scheme)
    text["baselines"] = text_baselines(models["base"])  # n-gram baselines (issue 37)
    ctx.log({"kind": "text_baselines", **text["baselines"]})
    ctx.claim(  # every seed
        "text_path_bpc_change_at_4x_depth",
        max(text["path"]["change_4x"]),
        cfg.max_bpc_change,
        op="<=",
    )
    four = text["baselines"]["bpc"][3]
    for m in ("path", "per_layer"):  # mean over seeds, at the training depth
        ctx.claim(f"text_{m}_beats_4gram", text[m]["bpc_train"], four, op="<")
    gap = abs(text["path"]["n_params"] - text["per_layer"]["n_params"])
    ctx.claim("text_equal_parameters", gap, 0, op="<=")
    ctx.report("## Results\n\n" + text_table(text).lstrip("\n"))
    return {
        **{f"text_bpc_{m}": text[m]["bpc"] for m in ("path", "per_layer")},
        "text_ngram_bpc": text["baselines"]["bpc"],  # orders 1..5
        "text_val_overlap": text["baselines"]["overlap"],
        "n_records_reused": result.n_reused,
    }
