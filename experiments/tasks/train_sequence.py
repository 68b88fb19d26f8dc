"""Task ``train_sequence``: sorting (or reversing) a short random sequence, a
synthetic task where every output token needs attention over all tokens.

Training as optimal control (spec §5) of the continuous model (token + position
embedding on a 1-D token grid → N_t steps of the split scheme → per-token read-out), with
:func:`transflow.control.run_sequence` (the same code as ``python -m transflow.control sequence``).
Checkpoints are written every ``checkpoint_every`` steps (atomic, checksummed); with
``checkpoint_dir=auto`` they live in ``outputs/checkpoints/train_sequence-<config hash>/``, so
rerunning the same command after an interruption resumes from the last good checkpoint
(bitwise identical to an uninterrupted run). Writes ``metrics.jsonl`` (training loss and
accuracy every ``log_every`` steps, test metrics every ``eval_every`` steps and a final
record with ``test_accuracy`` and ``cpu_seconds``), ``curves.npz``, ``curves.png/pdf`` and
the report. The field meanings are documented in
:class:`transflow.control.SequenceConfig` (this ``Config`` mirrors it; a test checks that).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Config", "run"]


@dataclass
class Config:
    """Sorting (or reversing) a random sequence: each output token needs attention."""

    kind: str = "sort"  # "sort" or "reverse"
    length: int = 8
    vocab: int = 10
    d: int = 32
    n_steps: int = 2
    n_heads: int = 2
    d_ff: int = 0
    scheme: str = "lie"
    ffn_branch_dt: str = "dt"
    remat: str = "step"
    batch_size: int = 64
    steps: int = 1500
    lr: float = 3e-3
    warmup_steps: int = 75
    weight_decay: float = 1e-4
    n_test: int = 1000
    log_every: int = 10
    eval_every: int = 250
    checkpoint_every: int = 250
    checkpoint_dir: str = "auto"
    resume: bool = True
    throttle: float = 0.0


def run(cfg, ctx) -> dict:
    from transflow.control import curves_from_history, plot_training_curves, run_sequence

    summary, result = run_sequence(
        cfg, run_dir=ctx.run_dir, seed=ctx.seed, smoke=ctx.smoke, log=ctx.log, report=ctx.report
    )
    curves = curves_from_history(result.history)
    ctx.save_arrays("curves", **curves)
    ctx.save_figure(
        plot_training_curves({"sort": result.history}, title="train_sequence"), "curves"
    )
    return summary
