"""What the training tasks share (not a task: files starting with ``_`` are skipped).

The runner is the library's :func:`transflow.control.run_training`; this module wires a
task's config to it, writes the curves and the figure and states the claims.

Checkpoints are written every ``checkpoint_every`` steps (atomic, checksummed); with
``checkpoint_dir=auto`` they live in ``outputs/checkpoints/<task>-<config hash>/``, so
rerunning the same command after an interruption resumes from the last good checkpoint
(bitwise identical to an uninterrupted run). A run writes ``metrics.jsonl`` (training loss
and accuracy every ``log_every`` steps, test metrics every ``eval_every`` steps and a
final record with ``test_accuracy`` and ``cpu_seconds``), ``curves.npz``,
``curves.png/pdf`` and the report.
"""

from __future__ import annotations

from typing import Any

__all__ = ["run_task"]


def run_task(name: str, label: str, cfg: Any, ctx: Any, *, claims: dict[str, float]) -> dict:
    """Train ``TRAINING_TASKS[name]`` with ``cfg``; save ``curves.npz``/``curves.png``.

    Claims: the run reaches its last step (``cfg.steps``), the training loss falls (last
    logged < first logged) and the summary's ``key ≥ bound`` for every ``key: bound`` of
    ``claims`` (e.g. ``test_accuracy``; not enforced at smoke size, where
    ``configs/sizes/smoke/train_<name>.yaml`` declares the sizes and ``not_enforced``).
    """
    from transflow.control import TRAINING_TASKS, curves_from_history, run_training
    from transflow.plotting import plot_training_curves

    task = TRAINING_TASKS[name]

    def report(text: str) -> None:
        # The library's paragraph starts "## <task name>": this report's section is Results.
        ctx.report(text.replace(f"## {task.name}\n", "## Results\n", 1))

    summary, result = run_training(
        task,
        cfg,
        run_dir=ctx.run_dir,
        seed=ctx.seed,
        log=ctx.log,
        report=report,
        progress=ctx.progress,
        message=ctx.message,
    )
    resumed = summary.get("resumed_from")
    if resumed is not None:
        ckpt = summary.get("checkpoint_dir")
        if resumed >= summary["steps"]:
            text = (
                f"resumed from finished checkpoint {ckpt} (step {resumed} of "
                f"{summary['steps']}): no training in this run; the numbers are those of "
                "the earlier run with the same config. task.resume=false trains again."
            )
        else:
            text = (
                f"resumed from checkpoint {ckpt} at step {resumed} of {summary['steps']}; "
                "trained the remaining steps."
            )
        ctx.message(text)
        ctx.report("## Resumed\n\n" + text[0].upper() + text[1:])
    curves = curves_from_history(result.history)
    ctx.save_arrays("curves", **curves)
    fig = plot_training_curves(
        {label: result.history},
        title=f"train_{name}",
        thresholds={k: v for k, v in claims.items() if k == "test_accuracy"},
    )
    ctx.save_figure(fig, "curves")
    ctx.claim("steps", summary["steps"], cfg.steps, op="==")
    if curves["loss"]:
        ctx.claim(
            "final_over_first_train_loss", curves["loss"][-1] / curves["loss"][0], 1.0, op="<"
        )
    for key, bound in claims.items():
        ctx.claim(key, summary[key], bound, op=">=")
    return summary
