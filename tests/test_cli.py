"""The command line as a user meets it: the front page (``--help``, ``list``), values
checked before compute, progress lines when piped, ``run.log``, resuming a finished run."""

from __future__ import annotations

import dataclasses
import logging
import re
import typing

import pytest

from test_experiments import CONFIGS, EXPERIMENTS, _transflow_run


# --------------------------------------------------------------------------- front page
def test_help_lists_every_experiment_and_explains_experiment_vs_task(tmp_path):
    proc = _transflow_run("--help", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    for name in EXPERIMENTS:
        line = next((ln for ln in text.splitlines() if ln.strip().startswith(name + " ")), "")
        assert len(line.split(maxsplit=1)) == 2, f"--help has no description line for {name}"
    assert "experiment= or task=?" in text and "task=NAME only swaps the code" in text
    assert "claims=auto|enforce|record" in text
    listed = _transflow_run("list", cwd=tmp_path)
    assert listed.returncode == 0 and all(f"  {n} " in listed.stdout for n in EXPERIMENTS)
    assert not any(tmp_path.iterdir()), "--help/list must not create run directories"


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_experiment_has_an_about_line(name):
    from transflow.experiments.run import describe

    assert describe()[name], f"configs/experiment/{name}.yaml needs a '# About: ...' line"
    assert (
        (CONFIGS / "experiment" / f"{name}.yaml").read_text().splitlines()[1].startswith("# About:")
    )


# --------------------------------------------------------------------------- validation
def _numeric_task_fields():
    """(task, dotted field, is a list) for every int/float (list) field of every task."""
    from transflow.experiments.tasks import discover

    tasks, _ = discover()
    out = []

    def walk(task, cls, prefix):
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            t = hints[f.name]
            args = typing.get_args(t)
            if dataclasses.is_dataclass(t):
                walk(task, t, f"{prefix}{f.name}.")
            elif typing.get_origin(t) is list:
                inner = set(typing.get_args(args[0])) or {args[0]}
                if inner <= {int, float, type(None)}:
                    out.append((task, prefix + f.name, True))
            elif t in (int, float) or (args and set(args) <= {int, float, type(None)}):
                out.append((task, prefix + f.name, False))

    for task, module in sorted(tasks.items()):
        walk(task, module.Config, "")
    return out


NUMERIC_TASK_FIELDS = _numeric_task_fields()


def test_every_numeric_task_field_has_a_range():
    from transflow.experiments.validate import rule_for

    assert len(NUMERIC_TASK_FIELDS) > 50
    missing = [
        f"{t}: task.{f}" for t, f, _ in NUMERIC_TASK_FIELDS if rule_for(t, f.split(".")[-1]) is None
    ]
    assert not missing, f"add a rule to experiments/validate.py RULES for {missing}"


@pytest.mark.parametrize("task", sorted({t for t, _, _ in NUMERIC_TASK_FIELDS}))
def test_bad_task_value_is_rejected_naming_the_key(task, tmp_path):
    """Each numeric field of the task with a value out of its range stops before compute
    (and before anything is written) with the key in the message."""
    import copy

    from omegaconf import OmegaConf
    from transflow.experiments.run import compose, run_job
    from transflow.experiments.validate import ConfigValueError, rule_for

    base, _ = compose([f"experiment={task}"])
    fields = [(f, is_list) for t, f, is_list in NUMERIC_TASK_FIELDS if t == task]
    assert fields
    for field, is_list in fields:
        bad = rule_for(task, field.split(".")[-1]).violation()
        cfg = copy.deepcopy(base)
        OmegaConf.update(cfg, f"task.{field}", [bad] if is_list else bad, merge=False)
        with pytest.raises(ConfigValueError, match=re.escape(f"task.{field} = ")):
            run_job(cfg, run_dir=tmp_path / "run", task_name=task)
        assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "override",
    ["grid.n_tokens=0", "grid.n_features=-1", "model.nhead=0", "scheme.dt=-0.5", "seed=-1"],
)
def test_bad_group_value_is_rejected_naming_the_key(override, tmp_path):
    from transflow.experiments.run import compose, run_job
    from transflow.experiments.validate import ConfigValueError

    key = override.split("=")[0]
    cfg, task = compose(["debug=smoke", override])
    with pytest.raises(ConfigValueError, match=re.escape(f"{key} = ")):
        run_job(cfg, run_dir=tmp_path / "run", task_name=task)
    assert not (tmp_path / "run").exists()


def test_cli_invalid_value_stops_cleanly_and_leaves_no_directory(tmp_path):
    proc = _transflow_run("experiment=clustering", "debug=smoke", "task.n_tokens=-3", cwd=tmp_path)
    assert proc.returncode != 0
    assert "task.n_tokens = -3" in proc.stderr and "> 0" in proc.stderr
    assert "Traceback" not in proc.stderr and "MLIR" not in proc.stderr
    assert not any(tmp_path.iterdir()), sorted(str(p) for p in tmp_path.rglob("*"))


# --------------------------------------------------------------------------- progress, log
def test_progress_lines_when_piped(tmp_path, capsys):
    """Not a TTY (pytest captures stderr): periodic lines with rate and ETA on stdout and in
    run.log, the set_postfix values appended; no bar."""
    import time

    from transflow.experiments.context import Progress, RunLog

    with RunLog(tmp_path):
        it = Progress(range(6), total=6, desc="train", every=0.0)
        for i in it:
            it.set_postfix(loss=f"{1 / (i + 1):.2f}")
            time.sleep(0.01)
    out = capsys.readouterr()
    lines = [ln for ln in out.out.splitlines() if ln.startswith("transflow-run: train:")]
    assert lines[0] == "transflow-run: train: started, 6 iterations"
    periodic = [ln for ln in lines if "ETA" in ln]
    assert len(periodic) == 5  # after items 1..5; the 6th is the "done" line
    assert re.search(r"train: 3/6 \(50%\), [0-9.]+ it/s, elapsed \d+ s, ETA \d+ s", lines[3])
    assert lines[-1].startswith("transflow-run: train: done 6/6 (100%)")
    assert "loss=0.17" in lines[-1]
    assert "it/s" not in out.err  # no tqdm bar when stderr is not a terminal
    log = (tmp_path / "run.log").read_text()
    assert log.count("train: ") == len(lines)
    assert logging.getLogger("transflow.run").handlers == []  # RunLog cleaned up


def test_progress_lines_while_one_iteration_takes_long(tmp_path, capsys):
    """A line every `every` seconds also while one iteration runs (a compilation)."""
    import time

    from transflow.experiments.context import Progress, RunLog

    with RunLog(tmp_path):
        for _ in Progress(range(1), total=1, desc="compile", every=0.1):
            time.sleep(0.65)
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "compile: 0/1 (0%)" in ln]
    assert len(lines) >= 3, lines  # ~6 expected; 3 leaves room for a loaded machine


def test_run_log_heartbeat_without_progress_loop(tmp_path, capsys):
    """A task with no progress loop still says it is running (RunLog's heartbeat)."""
    import time

    from transflow.experiments.context import RunLog

    with RunLog(tmp_path, task="probe", heartbeat=0.1):
        time.sleep(0.65)
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "'probe' running" in ln]
    assert len(lines) >= 3, lines
    assert (tmp_path / "run.log").read_text().count("'probe' running, elapsed") == len(lines)


def test_cli_piped_training_prints_progress_and_fills_run_log(tmp_path):
    proc = _transflow_run("experiment=train_digits", "debug=smoke", cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    progress = [ln for ln in proc.stdout.splitlines() if "train_digits:" in ln and "it/s" in ln]
    assert progress, proc.stdout
    run_dir = next((tmp_path / "outputs" / "smoke" / "train_digits").iterdir())
    log = (run_dir / "run.log").read_text()
    assert "train_digits: done 40/40" in log and "finished" in log
    assert re.search(r"claims: \d of 3 PASS", log)


# --------------------------------------------------------------------------- resume
def test_resume_from_a_finished_checkpoint_is_said(tmp_path, monkeypatch, capsys):
    """The training tasks say on the console, in run.log and in report.md when a run only
    reloaded a finished checkpoint (run_training replaced by one that reports so)."""
    import types

    from transflow.experiments.context import RunContext, RunLog
    from transflow.experiments.tasks import train_digits

    import transflow.control

    history = [
        {"step": 20, "loss": 2.0, "train_accuracy": 0.3},
        {"step": 40, "loss": 1.0, "train_accuracy": 0.5},
        {"step": 40, "eval_loss": 1.1, "eval_accuracy": 0.5},
    ]

    def fake_run_training(task, cfg, **kw):
        kw["report"](f"## {task.name}\nTest accuracy **0.5000** after 40 steps.")
        summary = {
            "steps": 40,
            "resumed_from": 40,
            "checkpoint_dir": "ck/train_digits-abc",
            "test_accuracy": 0.5,
        }
        return summary, types.SimpleNamespace(history=history)

    monkeypatch.setattr(transflow.control, "run_training", fake_run_training)
    ctx = RunContext(tmp_path, smoke=True)
    with RunLog(tmp_path):
        train_digits.run(train_digits.Config(), ctx)
    expected = "resumed from finished checkpoint ck/train_digits-abc (step 40 of 40)"
    assert expected in capsys.readouterr().out
    assert expected in (tmp_path / "run.log").read_text()
    report = (tmp_path / "report.md").read_text()
    assert report.startswith("## Results\n")  # the library's "## train_digits" heading
    assert "## Resumed\n\nResumed from finished checkpoint ck/train_digits-abc" in report
    assert "task.resume=false trains again" in report


@pytest.mark.slow
def test_rerun_says_it_resumed_from_a_finished_checkpoint(tmp_path, capsys):
    from transflow.experiments.run import run_in_process

    ckpt = tmp_path / "ckpt"
    args = ["experiment=train_digits", "debug=smoke", f"task.checkpoint_dir={ckpt}"]
    first, _ = run_in_process(args, tmp_path / "a")
    assert first["resumed_from"] is None
    assert "Resumed" not in (tmp_path / "a" / "report.md").read_text()
    capsys.readouterr()
    second, _ = run_in_process(args, tmp_path / "b")
    assert second["resumed_from"] == second["steps"] == 40
    assert second["test_accuracy"] == first["test_accuracy"]
    out = capsys.readouterr().out
    assert f"resumed from finished checkpoint {ckpt} (step 40 of 40)" in out
    report = (tmp_path / "b" / "report.md").read_text()
    assert "## Resumed" in report and "Resumed from finished checkpoint" in report
    assert "resumed from finished checkpoint" in (tmp_path / "b" / "run.log").read_text()


def test_report_headings_are_uniform(tmp_path):
    """Every report starts with '# <task>: <about>' and the command; the task's section is
    '## Results'; the summary and claims follow."""
    from transflow.experiments.run import run_in_process

    run_in_process(["experiment=clustering", "debug=smoke"], tmp_path)
    report = (tmp_path / "report.md").read_text()
    headings = [ln for ln in report.splitlines() if ln.startswith("#")]
    assert headings[0].startswith("# clustering: F5:")
    assert headings[1:] == ["## Results", "## Summary", "## Claim checks"]
    assert re.search(r"t = 4; > 0\.99 from t = [0-9.]+\.|never > 0\.99", report)
    assert not re.search(r"\d\.\d{9,}", report), "unformatted float in report.md"
    assert "Command: `transflow-run experiment=clustering debug=smoke`" in report


@pytest.mark.slow
def test_cli_piped_full_training_prints_a_progress_line_every_10_s(tmp_path):
    """`transflow-run experiment=train_digits`, piped: progress lines at most 10 s apart
    while it trains (timestamps of run.log), and they reach the console."""
    import datetime

    proc = _transflow_run("experiment=train_digits", cwd=tmp_path, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sum("train_digits:" in ln and "ETA" in ln for ln in proc.stdout.splitlines()) >= 3
    run_dir = next((tmp_path / "outputs" / "train_digits").iterdir())
    stamps = [
        datetime.datetime.strptime(ln[1:20], "%Y-%m-%d %H:%M:%S")
        for ln in (run_dir / "run.log").read_text().splitlines()
        if re.match(r"^\[[0-9-]+ [0-9:]+\]\[INFO\] train_digits: ", ln)
    ]
    assert len(stamps) >= 3
    gaps = [(b - a).total_seconds() for a, b in zip(stamps, stamps[1:])]
    assert max(gaps) <= 10, gaps
