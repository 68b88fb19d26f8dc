"""Figures of training runs (F10): loss and accuracy against steps."""

from __future__ import annotations

from typing import Any

from ._common import _pyplot

__all__ = ["plot_training_curves"]


def plot_training_curves(runs: dict[str, list[dict] | dict[str, Any]], *, title: str = "") -> Any:
    """A two-panel matplotlib figure: loss (log scale) and accuracy against steps.

    ``runs`` maps a label to a history (list of logged dicts) or to the columns of
    :func:`transflow.control.curves_from_history` (e.g. a run's ``curves.npz``); training
    entries are thin lines, evaluation (held-out) entries markers.
    """

    from ..control import curves_from_history

    plt = _pyplot()

    fig, (ax_l, ax_a) = plt.subplots(1, 2, figsize=(9, 3.4), constrained_layout=True)
    for i, (label, hist) in enumerate(runs.items()):
        c = hist if isinstance(hist, dict) else curves_from_history(hist)
        color = f"C{i}"
        ax_l.plot(c["step"], c["loss"], color=color, lw=0.8, alpha=0.7, label=f"{label} train")
        ax_l.plot(c["eval_step"], c["eval_loss"], "o-", color=color, ms=3, label=f"{label} test")
        ax_a.plot(c["step"], c["train_accuracy"], color=color, lw=0.8, alpha=0.5)
        ax_a.plot(
            c["eval_step"], c["eval_accuracy"], "o-", color=color, ms=3, label=f"{label} test"
        )
    ax_l.set(xlabel="step", ylabel="cross-entropy", yscale="log", title="loss")
    ax_a.set(xlabel="step", ylabel="accuracy", ylim=(0, 1.02), title="accuracy")
    ax_a.axhline(0.95, color="gray", ls=":", lw=0.8)
    ax_l.legend(fontsize=7)
    ax_a.legend(fontsize=7, loc="lower right")
    if title:
        fig.suptitle(title, fontsize=9)
    return fig
