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
    if not isinstance(history, list | tuple) or not all(isinstance(h, dict) for h in history):
        raise TypeError(
            f"curves_from_history: `history` must be a list of record dicts (the history of "
            f"train, or metrics.jsonl), got {history!r:.60}."
        )
    for i, h in enumerate(history):
        wants = (("loss", "train_accuracy"), ("eval_accuracy", "eval_loss"))
        for key, other in wants:
            if key in h and not h.get("final") and ("step" not in h or other not in h):
                raise ValueError(
                    f"curves_from_history: `history[{i}]` has {key!r} but lacks 'step' or "
                    f"{other!r}; got the keys {sorted(h)}."
                )
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
