"""Figures of training runs (F10): loss and accuracy against steps."""

from __future__ import annotations

from typing import Any

from ._style import new_figure, smoke_note, styled, threshold_line

__all__ = ["plot_training_curves"]


@styled
def plot_training_curves(
    runs: dict[str, list[dict] | dict[str, Any]],
    *,
    title: str = "",
    thresholds: dict[str, float] | None = None,
) -> Any:
    """A two-panel matplotlib figure: loss (log scale) and accuracy against steps.

    ``runs`` maps a label to a history (list of logged dicts) or to the columns of
    :func:`transflow.control.curves_from_history` (e.g. a run's ``curves.npz``); training
    entries are thin lines, evaluation (held-out) entries markers. ``thresholds`` maps a
    claim name to its bound (e.g. ``{"test_accuracy": 0.99}``, the run's claims): each is
    drawn on the accuracy panel by :func:`threshold_line` from that value. One key below
    the panels names every curve and threshold.
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
    styles = [":", "--", "-."]
    for k, (claim, value) in enumerate((thresholds or {}).items()):
        threshold_line(
            ax_a,
            claim,
            value,
            label=f"claim: {claim} ≥ {float(value):g}",
            color="0.4",
            ls=styles[k % len(styles)],
            lw=1,
        )
    # one key for both panels, below them: the same runs, train and test, and the claims
    handles, labels = ax_l.get_legend_handles_labels()
    h_a, l_a = ax_a.get_legend_handles_labels()
    n_thr = len(thresholds or {})
    h_t, l_t = (h_a[-n_thr:], l_a[-n_thr:]) if n_thr else ([], [])
    fig.legend(handles + h_t, labels + l_t, loc="outside lower center", ncol=4)
    for ax in (ax_l, ax_a):
        ax.grid(True, which="both")
        if n_eval < 2:
            smoke_note(ax, f"smoke size: {n_eval} evaluation")
    if title:
        fig.suptitle(title)
    return fig
