"""F10: training curves (loss and accuracy) of the continuous model trained as an
optimal-control problem (docs/spec/continuous-model.md §5): the digits ViT and the sorting task.

Plots the declared run of each task (:data:`RUNS`): a run directory named there, or else
the newest completed ``outputs/<task>/*/`` run whose options are the declared ones (the
experiment's defaults, ``seed`` 0, full size: :func:`declared_config`) — a run with
another seed or other options (a resumed seed-1 run, a smoke run) is never plotted. Its
``curves.npz`` is complete even for a resumed run. Without such a run it trains short
versions in-process (300 steps each; ``--smoke``: 30), so the figure never hides a long
training run. The figure names the run it plots (title and ``F10.json``).
"""

from __future__ import annotations

import pathlib
from typing import Any

FIGURE = {
    "id": "F10",
    "title": "Training the split-scheme model as optimal control: loss and accuracy",
    "command": "make figures  (python paper_figures/make_all.py F10)",
    "config": "experiment=train_digits and experiment=train_sequence, seed=0, default options "
    "(the newest run dir with exactly these options, or the run dirs named in RUNS), else a "
    "300-step library call",
}

ROOT = pathlib.Path(__file__).resolve().parent.parent

#: The run directory (relative to the repository) each curve comes from; None: the newest
#: completed run of ``transflow-run experiment=<task>`` whose config is
#: :func:`declared_config` (``SEED``, the experiment's default options, full size).
RUNS: dict[str, str | None] = {"train_digits": None, "train_sequence": None}
#: The seed of the declared runs.
SEED = 0
#: Task options that do not change the trained model or its curves: not compared.
_NOT_COMPARED = ("checkpoint_dir", "resume", "throttle")


def declared_config(task: str) -> dict[str, Any]:
    """The options a run must have been made with to be plotted: ``seed``, ``precision``,
    ``smoke`` (false) and every task option of ``transflow-run experiment=<task>`` except
    :data:`_NOT_COMPARED` (resolved, as in the run's ``.hydra/resolved.yaml``)."""
    from omegaconf import OmegaConf
    from transflow.experiments.run import compose, prune

    cfg, name = compose([f"experiment={task}", f"seed={SEED}"])
    return _comparable(OmegaConf.to_container(prune(cfg, name), resolve=True))


def _comparable(cfg: dict) -> dict[str, Any]:
    from transflow.experiments.context import to_jsonable

    cfg = to_jsonable(cfg)  # enums (precision) as their values, as in a saved config
    task = {k: v for k, v in (cfg.get("task") or {}).items() if k not in _NOT_COMPARED}
    keys = ("seed", "precision", "smoke")
    return {**{k: cfg.get(k) for k in keys}, "smoke": bool(cfg.get("smoke")), "task": task}


def _run_config(run_dir: pathlib.Path) -> dict[str, Any] | None:
    from omegaconf import OmegaConf

    path = run_dir / ".hydra" / "resolved.yaml"
    if not path.exists():
        return None
    return _comparable(OmegaConf.to_container(OmegaConf.load(path), resolve=True))


def _load_curves(run_dir: pathlib.Path) -> dict:
    import numpy as np

    with np.load(run_dir / "curves.npz") as z:
        return {k: z[k].tolist() for k in z.files}


def declared_run(task: str, root: pathlib.Path | None = None) -> pathlib.Path | None:
    """The run directory F10 plots for ``task``: ``RUNS[task]`` when set (it must be a
    completed run with ``curves.npz``), else the newest completed run under
    ``<root>/outputs/<task>/`` (``root``: the repository) made with
    :func:`declared_config`; None if there is none."""
    root = ROOT if root is None else pathlib.Path(root)
    named = RUNS.get(task)
    if named:
        run_dir = root / named
        if not ((run_dir / "DONE").exists() and (run_dir / "curves.npz").exists()):
            raise FileNotFoundError(
                f"F10: RUNS[{task!r}] = {named!r} is not a completed run with curves.npz "
                f"under {root}; run `transflow-run experiment={task}` or set RUNS[{task!r}] "
                "= None (the newest run with the declared options)."
            )
        return run_dir
    want = declared_config(task)
    for marker in sorted((root / "outputs" / task).glob("*/DONE"), reverse=True):
        run_dir = marker.parent
        if (run_dir / "curves.npz").exists() and _run_config(run_dir) == want:
            return run_dir
    return None


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
        run_dir = None if figure_smoke() else declared_run(task)
        if run_dir is not None:
            c = _load_curves(run_dir)
            src = f"run {run_dir.relative_to(ROOT)} (seed {SEED})"
        else:
            c, src = _short_run(task, steps)
        curves[label], sources[label] = c, src
    from transflow.experiments.run import compose

    # the claims the curves illustrate: the tasks' own bounds (configs/experiment/*.yaml)
    thresholds = {
        f"{label} test_accuracy": float(compose([f"experiment={task}"])[0].task.min_test_accuracy)
        for label, task in (("digits", "train_digits"), ("sort", "train_sequence"))
    }
    title = "training the continuous model (optax AdamW)\n" + "\n".join(
        f"{label}: {src}" for label, src in sources.items()
    )
    fig = plot_training_curves(curves, title=title, thresholds=thresholds)
    save_figure(fig, out_dir, FIGURE["id"], {"curves": curves, "sources": sources})
    return {
        "digits_test_accuracy": curves["digits"]["eval_accuracy"][-1],
        "sort_test_accuracy": curves["sort"]["eval_accuracy"][-1],
        "digits_source": sources["digits"],
        "sort_source": sources["sort"],
    }
