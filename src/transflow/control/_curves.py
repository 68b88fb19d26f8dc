"""Training curves (loss and accuracy against steps) as columns, from :func:`train` histories.

The figure is :func:`transflow.plotting.plot_training_curves`.
"""

from __future__ import annotations

__all__ = ["curves_from_history"]


def curves_from_history(history: list[dict]) -> dict[str, list]:
    """Split a history (or ``metrics.jsonl`` records) into plottable columns.

    Returns ``step``/``loss``/``train_accuracy`` (the logged training entries) and
    ``eval_step``/``eval_loss``/``eval_accuracy`` (the evaluation entries).
    """
    train = [h for h in history if "loss" in h and not h.get("final")]
    ev = [h for h in history if "eval_accuracy" in h and not h.get("final")]
    return {
        "step": [h["step"] for h in train],
        "loss": [h["loss"] for h in train],
        "train_accuracy": [h["train_accuracy"] for h in train],
        "eval_step": [h["step"] for h in ev],
        "eval_loss": [h["eval_loss"] for h in ev],
        "eval_accuracy": [h["eval_accuracy"] for h in ev],
    }
