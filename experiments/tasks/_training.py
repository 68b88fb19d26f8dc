"""What the training tasks share (not a task: files starting with ``_`` are skipped).

The runner is the library's :func:`transflow.control.run_training`; this module wires a
task's config to it, writes the curves and the figure and states the claims.
"""

from __future__ import annotations

from typing import Any

__all__ = ["run_task"]


def run_task(name: str, label: str, cfg: Any, ctx: Any, *, claims: dict[str, float]) -> dict:
    """Train ``TRAINING_TASKS[name]`` with ``cfg``; save ``curves.npz``/``curves.png``.

    Claims: at every size, the run reaches its last step and the training loss falls
    (last logged < first logged); at full size (``enforce=not ctx.smoke``) the summary's
    ``key ≥ bound`` for every ``key: bound`` of ``claims`` (e.g. ``test_accuracy``).
    """
    from transflow.control import TRAINING_TASKS, curves_from_history, run_training
    from transflow.plotting import plot_training_curves

    summary, result = run_training(
        TRAINING_TASKS[name],
        cfg,
        run_dir=ctx.run_dir,
        seed=ctx.seed,
        smoke=ctx.smoke,
        log=ctx.log,
        report=ctx.report,
        progress=ctx.progress,
    )
    curves = curves_from_history(result.history)
    ctx.save_arrays("curves", **curves)
    ctx.save_figure(plot_training_curves({label: result.history}, title=f"train_{name}"), "curves")
    target = min(cfg.steps, 40) if ctx.smoke else cfg.steps
    ctx.claim("steps", summary["steps"], target, op="==")
    if curves["loss"]:
        ctx.claim(
            "final_over_first_train_loss", curves["loss"][-1] / curves["loss"][0], 1.0, op="<"
        )
    for key, bound in claims.items():
        ctx.claim(key, summary[key], bound, op=">=", enforce=not ctx.smoke)
    return summary
