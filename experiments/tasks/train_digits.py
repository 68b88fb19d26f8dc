"""Task ``train_digits``: the scikit-learn handwritten digits (8×8) with a small
continuous ViT (patches on a 2-D token grid).

Training as optimal control (spec §5) of the continuous model (patch embedding +
position embedding → N_t steps of the split scheme → mean-pool/class-token read-out), with
:func:`transflow.control.run_digits` (the same code as ``python -m transflow.control digits``).
Checkpoints are written every ``checkpoint_every`` steps (atomic, checksummed); with
``checkpoint_dir=auto`` they live in ``outputs/checkpoints/train_digits-<config hash>/``, so
rerunning the same command after an interruption resumes from the last good checkpoint
(bitwise identical to an uninterrupted run). Writes ``metrics.jsonl`` (training loss and
accuracy every ``log_every`` steps, test metrics every ``eval_every`` steps and a final
record with ``test_accuracy`` and ``cpu_seconds``), ``curves.npz``, ``curves.png/pdf`` and
the report. The field meanings are documented in
:class:`transflow.control.DigitsConfig` (this ``Config`` mirrors it; a test checks that).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Config", "run"]


@dataclass
class Config:
    """Digits classification with a small continuous ViT (defaults reach ≥ 95 %)."""

    d: int = 32  # feature grid size N_y = d_model
    n_steps: int = 4  # time steps N_t (layers)
    n_heads: int = 2
    d_ff: int = 0  # 0: the paper's square FFN (W_j: Ω_y → Ω_y); >0: lifted hidden width
    patch: int = 2  # patch size: 8×8 image → (8/patch)² tokens on a 2-D grid
    pool: str = "mean"  # read-out: "mean" over Ω_x or "cls" (class token)
    scheme: str = "lie"  # "lie" (paper, post-LN) or "prenorm" (extension)
    ffn_branch_dt: str = "dt"  # LieScheme option (spec §3.2): "dt" or "2dt"
    remat: str = "step"  # "none" | "step" (jax.checkpoint per step) | "nested" (√N_t)
    batch_size: int = 64
    steps: int = 1500
    lr: float = 3e-3
    warmup_steps: int = 75
    weight_decay: float = 1e-4
    test_fraction: float = 0.2
    log_every: int = 10
    eval_every: int = 250
    checkpoint_every: int = 250
    checkpoint_dir: str = "auto"  # "auto": shared by reruns of the same config; "run"; a path
    resume: bool = True  # continue from the last checkpoint in checkpoint_dir
    throttle: float = 0.0  # seconds of sleep per step (to demonstrate interruption)


def run(cfg, ctx) -> dict:
    from transflow.control import curves_from_history, plot_training_curves, run_digits

    summary, result = run_digits(
        cfg, run_dir=ctx.run_dir, seed=ctx.seed, smoke=ctx.smoke, log=ctx.log, report=ctx.report
    )
    curves = curves_from_history(result.history)
    ctx.save_arrays("curves", **curves)
    ctx.save_figure(
        plot_training_curves({"digits": result.history}, title="train_digits"), "curves"
    )
    return summary
