"""Figures of training runs (F10): loss and accuracy against steps."""

from __future__ import annotations

from typing import Any

from ._style import new_figure, smoke_note, styled

__all__ = ["plot_training_curves"]


@styled
def plot_training_curves(runs: dict[str, list[dict] | dict[str, Any]], *, title: str = "") -> Any:
    """A two-panel matplotlib figure: loss (log scale) and accuracy against steps.

    ``runs`` maps a label to a history (list of logged dicts) or to the columns of
    :func:`transflow.control.curves_from_history` (e.g. a run's ``curves.npz``); training
    entries are thin lines, evaluation (held-out) entries markers; one key below the
    panels names every curve and the 0.95 accuracy line.
    """

    from ..control import curves_from_history

    fig, (ax_l, ax_a) = new_figure(3.0, 1, 2)
    n_eval = 0
    for i, (label, hist) in enumerate(runs.items()):
        c = hist if isinstance(hist, dict) else curves_from_history(hist)
        color = f"C{i}"
        n_eval = max(n_eval, len(c["eval_step"]))
        ax_l.plot(c["step"], c["loss"], color=color, lw=0.8, alpha=0.7, label=f"{label} train")
        ax_l.plot(c["eval_step"], c["eval_loss"], "o-", color=color, ms=3, label=f"{label} test")
        ax_a.plot(c["step"], c["train_accuracy"], color=color, lw=0.8, alpha=0.5)
        ax_a.plot(
            c["eval_step"], c["eval_accuracy"], "o-", color=color, ms=3, label=f"{label} test"
        )
    ax_l.set(xlabel="step", ylabel="cross-entropy", yscale="log", title="loss")
    ax_a.set(xlabel="step", ylabel="accuracy", ylim=(0, 1.02), title="accuracy")
    ax_a.axhline(0.95, color="0.4", ls=":", lw=1, label="accuracy 0.95")
    # one key for both panels, below them: the same runs, train and test, and the 0.95 line
    handles, labels = ax_l.get_legend_handles_labels()
    h_a, l_a = ax_a.get_legend_handles_labels()
    fig.legend(handles + h_a[-1:], labels + l_a[-1:], loc="outside lower center", ncol=5)
    for ax in (ax_l, ax_a):
        ax.grid(True, which="both")
        if n_eval < 2:
            smoke_note(ax, f"smoke size: {n_eval} evaluation")
    if title:
        fig.suptitle(title)
    return fig
