"""F10: training curves (loss and accuracy) of the continuous model trained as an
optimal-control problem (docs/spec/continuous-model.md §5): the digits ViT and the sorting task.

Reads the newest completed run directories ``outputs/train_digits/*/`` and
``outputs/train_sequence/*/`` (their ``curves.npz``, complete even for resumed runs) if
present; otherwise trains short versions in-process (300 steps each; ``--smoke``: 30), so
the figure never hides a long training run.
"""

from __future__ import annotations

import pathlib

FIGURE = {
    "id": "F10",
    "title": "Training the split-scheme model as optimal control: loss and accuracy",
    "command": "make figures  (python paper_figures/make_all.py F10)",
    "config": "experiment=train_digits and experiment=train_sequence (newest run dirs), "
    "else a 300-step library call",
}

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _latest_curves(task: str):
    import numpy as np

    done = sorted((ROOT / "outputs" / task).glob("*/DONE"))
    for marker in reversed(done):
        path = marker.parent / "curves.npz"
        if path.exists():
            with np.load(path) as z:
                return {k: z[k].tolist() for k in z.files}, str(marker.parent.relative_to(ROOT))
    return None, None


def _short_run(task: str, steps: int):
    import tempfile

    from transflow.control import TRAINING_TASKS, curves_from_history, run_training

    spec = TRAINING_TASKS["digits" if task == "train_digits" else "sequence"]
    cfg = spec.config(
        steps=steps,
        eval_every=max(steps // 6, 1),
        checkpoint_dir="none",
        warmup_steps=max(steps // 20, 1),
    )
    with tempfile.TemporaryDirectory() as tmp:
        summary, result = run_training(spec, cfg, run_dir=tmp, progress=lambda it, **kw: it)
    return curves_from_history(result.history), f"library call ({steps} steps)"


def make(out_dir: pathlib.Path) -> dict:
    from transflow.plotting import figure_smoke, plot_training_curves, save_figure

    steps = 30 if figure_smoke() else 300
    curves, sources = {}, {}
    for label, task in (("digits", "train_digits"), ("sort", "train_sequence")):
        c, src = (None, None) if figure_smoke() else _latest_curves(task)
        if c is None:
            c, src = _short_run(task, steps)
        curves[label], sources[label] = c, src
    from transflow.experiments.run import compose

    # the claims the curves illustrate: the tasks' own bounds (configs/experiment/*.yaml)
    thresholds = {
        f"{label} test_accuracy": float(compose([f"experiment={task}"])[0].task.min_test_accuracy)
        for label, task in (("digits", "train_digits"), ("sort", "train_sequence"))
    }
    fig = plot_training_curves(
        curves, title="training the continuous model (optax AdamW)", thresholds=thresholds
    )
    save_figure(fig, out_dir, FIGURE["id"], {"curves": curves, "sources": sources})
    return {
        "digits_test_accuracy": curves["digits"]["eval_accuracy"][-1],
        "sort_test_accuracy": curves["sort"]["eval_accuracy"][-1],
        "digits_source": sources["digits"],
        "sort_source": sources["sort"],
    }
