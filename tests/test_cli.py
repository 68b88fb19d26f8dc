"""The command line as a user meets it: the front page (``--help``, ``list``), values
checked before compute, progress lines when piped, ``run.log``, resuming a finished run."""

from __future__ import annotations

import dataclasses
import json
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
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert [ln.split()[0] for ln in lines] == EXPERIMENTS  # one line per experiment
    assert all(len(ln.split()) > 3 for ln in lines)  # each with its description
    assert not any(tmp_path.iterdir()), "--help/list must not create run directories"


def test_experiment_help_lists_its_options_with_meaning_and_range(tmp_path):
    """`transflow-run experiment=depth --help` (and `help depth`): the experiment's own page."""
    proc = _transflow_run("experiment=depth", "--help", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert text.startswith("transflow-run experiment=depth: depth transfer")
    assert "Runtime:" in text  # the experiment file's comment
    assert "task.ref_rtol=1e-08  [float; > 0]" in text
    assert "its tolerance (atol = rtol)" in text  # the field's comment
    assert "task.digits.gradient=backprop  [str; one of backprop, checkpointed, adjoint]" in text
    assert "task.digits.steps" not in text and "task.digits.scheme" not in text
    assert "Common options:" in text
    assert "Config groups" not in text  # not Hydra's generic page
    assert _transflow_run("help", "depth", cwd=tmp_path).stdout == text
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_experiment_help_shows_every_task_option(name):
    from transflow.experiments.run import compose, experiment_help
    from transflow.experiments.tasks import discover

    text = experiment_help(name)
    _, task = compose([f"experiment={name}"])
    module = discover()[0][task]
    for f in dataclasses.fields(module.Config):
        assert f"  task.{f.name}" in text, f"{name}: task.{f.name} missing from its help"
    for line in text.splitlines():
        m = re.match(r"  task\.([\w.]+)=(\S+)  \[(\w+)", line)
        if m and m.group(3) in ("int", "float"):
            assert ";" in line, f"{name}: no allowed range on {line!r}"


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
    ["grid.n_tokens=0", "grid.n_features=-1", "model.nhead=0", "seed=-1"],
)
def test_bad_group_value_is_rejected_naming_the_key(override, tmp_path):
    """Equivalence reads grid.n_tokens/n_features and model: their values are range-checked
    before any work."""
    from transflow.experiments.run import compose, run_job
    from transflow.experiments.validate import ConfigValueError

    key = override.split("=")[0]
    cfg, task = compose(["debug=smoke", override])
    expected = f"{key} = "
    with pytest.raises(ConfigValueError, match=re.escape(expected)):
        run_job(cfg, run_dir=tmp_path / "run", task_name=task, overrides=["debug=smoke", override])
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
    # test_accuracy holds only at full size: not enforced, so not every claim is PASS
    assert "claims: INCOMPLETE: 2 of 3 PASS, 1 not enforced; test_accuracy: " in log


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


# --------------------------------------------------------------------------- what a task reads
TOP_GROUPS = ("grid", "model")


def _group_overrides(group: str) -> list[str]:
    """Two overrides of ``group``: another option file, and one field of it."""
    from test_experiments import CONFIGS as configs

    options = sorted(p.stem for p in (configs / group).glob("*.yaml"))
    field = {"grid": "grid.n_tokens=5", "model": "model.nhead=1"}
    return [f"{group}={options[-1]}", field[group]]


@pytest.mark.parametrize("name", EXPERIMENTS)
@pytest.mark.parametrize("group", TOP_GROUPS)
def test_every_experiment_reads_or_refuses_every_group(name, group):
    """Every experiment x every top-level group: an override of the group is either read by
    the task (it stays in the composed config the task sees) or refused before any work,
    naming the key and listing what the task reads. Composition only."""
    from transflow.experiments.run import compose, precheck, prune, task_reads
    from transflow.experiments.validate import ConfigValueError

    base, task = compose([f"experiment={name}"])
    reads = task_reads(task)
    seen = prune(base, task)
    assert all(g in seen for g in TOP_GROUPS if any(r.split(".")[0] == g for r in reads))
    assert not any(g in seen for g in TOP_GROUPS if not any(r.split(".")[0] == g for r in reads))
    for override in _group_overrides(group):
        key = override.split("=")[0]
        if key in reads or any(key.startswith(r + ".") for r in reads):
            [(_, cfg, _)] = precheck([f"experiment={name}", override])
            assert group in prune(cfg, task)
        else:
            with pytest.raises(ConfigValueError) as err:
                precheck([f"experiment={name}", override])
            msg = str(err.value)
            assert msg.startswith(f"{key}: not read by task '{task}'")
            assert "It reads: task.* (" in msg


def test_issue_sweep_over_unread_groups_stops_naming_them(tmp_path):
    """The sweep of issue 36 stops before any job, naming scheme and grid.n_tokens."""
    import time

    t0 = time.perf_counter()
    proc = _transflow_run(
        "-m",
        "experiment=clustering",
        "debug=smoke",
        "scheme=lie,lie_2dt",
        "grid.n_tokens=4,8",
        cwd=tmp_path,
    )
    assert proc.returncode != 0
    # no task read the top-level scheme group, so it was removed (CHANGELOG.md): the key is
    # refused as unknown, in the same message as the grid key clustering does not read
    assert "scheme: no such config key or group" in proc.stderr, proc.stderr
    assert "grid.n_tokens: not read by task 'clustering'" in proc.stderr, proc.stderr
    assert "task.* (n_tokens, d, t1, dt, temperature)" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not any(tmp_path.iterdir()), "no sweep directory for a refused sweep"
    assert time.perf_counter() - t0 < 60


def test_unknown_scheme_name_fails_in_seconds_also_in_smoke(tmp_path):
    import time

    t0 = time.perf_counter()
    proc = _transflow_run(
        "experiment=schemes", "task.schemes=[lie,foo]", "debug=smoke", cwd=tmp_path
    )
    elapsed = time.perf_counter() - t0
    assert proc.returncode != 0
    assert proc.stderr.startswith("transflow-run: invalid config: task.schemes: 'foo'")
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert not any(tmp_path.iterdir())
    assert elapsed < 60, elapsed  # composition only (~5 s on a loaded 2-core machine)


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        (
            "task.digits.scheme=foo",
            "task.digits.scheme: not an option of task 'depth'. The task "
            "sets scheme itself from task.study.factors.scheme",
        ),
        (
            "task.digits.steps=3",
            "task.digits.steps: not an option of task 'depth'. The task sets "
            "steps itself from task.steps",
        ),
        (
            "task.digits.d=8",
            "task.digits.d: not an option of task 'depth'. The task sets d itself from task.d",
        ),
        ("task.digits.gradient=foo", "task.digits.gradient: 'foo' is not allowed"),
        ("task.eval_schemes=[heun,foo]", "task.eval_schemes: 'foo' is not allowed"),
        (
            "task.study.factors.path=[legendre,foo]",
            "task.study.factors.path: 'foo' is not a parameterization",
        ),
        ("task.study.seed_offset=-1", "task.study.seed_offset = -1 is out of range"),
    ],
)
def test_depth_has_one_name_per_option_and_checks_names(override, expected):
    from transflow.experiments.run import precheck
    from transflow.experiments.validate import ConfigValueError

    for smoke in ([], ["debug=smoke"]):
        with pytest.raises(ConfigValueError, match=re.escape(expected)):
            precheck(["experiment=depth", *smoke, override])
    precheck(["experiment=depth", "debug=smoke", "task.digits.lr=0.01", "task.steps=3"])


def test_depth_builds_the_digits_config_from_its_own_options():
    from transflow.experiments.config import complete
    from transflow.experiments.tasks.depth import Config

    from transflow.control import DepthDigitsConfig

    cfg = Config(steps=7, d=16)
    dcfg = complete(cfg.digits, d=cfg.d, n_steps=cfg.n_steps, steps=cfg.steps, scheme="lie")
    assert isinstance(dcfg, DepthDigitsConfig)
    assert (dcfg.steps, dcfg.d, dcfg.scheme, dcfg.lr) == (7, 16, "lie", DepthDigitsConfig().lr)


def test_model_path_is_checked_before_any_work(tmp_path):
    proc = _transflow_run(
        "experiment=analyze", "debug=smoke", f"task.model_path={tmp_path}/missing", cwd=tmp_path
    )
    assert proc.returncode != 0
    assert "model_path" in proc.stderr and "missing" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not any(p.name != "missing" for p in tmp_path.iterdir())


def test_cfg_job_and_saved_config_hold_only_what_the_task_reads(tmp_path):
    import yaml
    from transflow.experiments.run import run_in_process

    proc = _transflow_run("experiment=clustering", "--cfg", "job", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    shown = yaml.safe_load(proc.stdout)
    assert sorted(shown) == ["claims", "not_enforced", "precision", "seed", "smoke", "task"]
    proc = _transflow_run("experiment=equivalence", "--cfg", "job", "--resolve", cwd=tmp_path)
    shown = yaml.safe_load(proc.stdout)
    assert shown["grid"] == {"n_tokens": 8, "n_features": 16}
    assert shown["model"]["d_model"] == 16 and "scheme" not in shown
    assert not any(tmp_path.iterdir())
    run_in_process(["experiment=clustering", "debug=smoke"], tmp_path / "run")
    saved = yaml.safe_load((tmp_path / "run" / ".hydra" / "config.yaml").read_text())
    assert sorted(saved) == ["claims", "not_enforced", "precision", "seed", "smoke", "task"]
    report = (tmp_path / "run" / "report.md").read_text()
    assert "Command: `transflow-run experiment=clustering debug=smoke`" in report


def test_a_sweep_over_a_group_the_task_reads_changes_its_results(tmp_path):
    """equivalence reads grid.n_tokens: two values, two different comparisons (and the
    smoke run keeps the value given on the command line instead of shrinking it)."""
    from transflow.experiments.run import run_in_process

    base = ["experiment=equivalence", "debug=smoke", "precision=fp64", "task.encoder_layers=0"]
    base += ["task.norm_first=[false]", "task.activation=[relu]", "task.nhead=[1]"]
    out = {}
    for n in (3, 6):
        summary, _ = run_in_process([*base, f"grid.n_tokens={n}"], tmp_path / str(n))
        report = (tmp_path / str(n) / "report.md").read_text()
        assert f"{n} tokens" in report
        assert summary["all_pass"]
        out[n] = (summary["max_abs_fp64"], summary["substep_max_abs"])
    assert out[3] != out[6]


# --------------------------------------------------------------------------- smoke
def test_smoke_sizes_are_configuration_below_the_command_line(tmp_path):
    """debug=smoke merges configs/sizes/smoke/<task>.yaml below the command line: its
    sizes apply unless the user gives the option, and the claims it declares not enforced
    are recorded, not enforced (was: ctx.smoke_value in the task, replaced by config)."""
    from transflow.experiments.context import RunContext
    from transflow.experiments.run import compose

    cfg, _ = compose(["experiment=clustering", "debug=smoke"])
    assert (cfg.task.t1, cfg.task.n_tokens) == (4.0, 8)
    assert list(cfg.not_enforced) == ["min pairwise cosine at t = T"]
    cfg, _ = compose(["experiment=clustering", "debug=smoke", "task.t1=20", "not_enforced=[]"])
    assert (cfg.task.t1, cfg.task.n_tokens, list(cfg.not_enforced)) == (20.0, 8, [])
    cfg, _ = compose(["experiment=clustering"])
    assert (cfg.task.t1, cfg.task.n_tokens, list(cfg.not_enforced)) == (20.0, 32, [])
    ctx = RunContext(tmp_path, smoke=True, not_enforced=("min pairwise cosine at t = T",))
    assert not ctx.claim("min pairwise cosine at t = T", 0.5, 0.99, op=">")
    assert not ctx.claim("min pairwise cosine at t = 0", 0.5, 0.0, op="<")
    assert [c["enforced"] for c in ctx.claims] == [False, True]
    assert ctx.failed_claims == ["min pairwise cosine at t = 0"]


# --------------------------------------------------------------------------- failures
def test_failing_claim_is_one_line_per_claim_and_the_summary_path(tmp_path):
    """clustering at full size over a short horizon: the tokens do not cluster, the enforced
    claim fails; the command says so in one line per claim, no traceback, exit 1."""
    run_dir = tmp_path / "run"
    args = ["experiment=clustering", "task.n_tokens=6", "task.t1=0.3"]
    proc = _transflow_run(*args, f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    err = proc.stderr.strip().splitlines()
    assert err[0].startswith("transflow-run: claim FAILED: min pairwise cosine at t = T: ")
    assert err[-1] == f"transflow-run: summary: {run_dir / 'summary.json'} (report.md)"
    assert len(err) == 2 and "Traceback" not in proc.stderr + proc.stdout
    assert "HYDRA_FULL_ERROR" not in proc.stderr
    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "FAILED" and status["error"].startswith("ClaimsFailed")
    report = (run_dir / "report.md").read_text()
    assert "Command: `transflow-run experiment=clustering task.n_tokens=6 task.t1=0.3 " in report


def test_failing_claim_in_an_enforced_sweep_stops_it_with_its_summary(tmp_path):
    sweep = tmp_path / "sweep"
    proc = _transflow_run(
        "-m",
        "experiment=clustering",
        "task.n_tokens=6",
        "task.t1=0.3,0.4",
        "claims=enforce",
        f"hydra.sweep.dir={sweep}",
        cwd=tmp_path,
    )
    assert proc.returncode == 1
    err = proc.stderr.strip().splitlines()
    assert err[0].startswith("transflow-run: claim FAILED: min pairwise cosine at t = T")
    assert err[-1].startswith("transflow-run: sweep stopped (claims=enforce) after 1 job(s)")
    assert str(sweep / "sweep_summary.md") in err[-1]
    assert "Traceback" not in proc.stderr + proc.stdout
    summary = json.loads((sweep / "sweep_summary.json").read_text())
    assert [r["claims"] for r in summary["rows"]] == ["FAILED: min pairwise cosine at t = T"]


def test_config_error_raised_inside_a_task_leaves_no_run_directory(tmp_path, monkeypatch):
    import types

    import transflow.experiments.run as runmod
    from omegaconf import OmegaConf
    from transflow.experiments.validate import ConfigValueError

    @dataclasses.dataclass
    class Config:
        name: str = "foo"

    def run(cfg, ctx):
        raise ConfigValueError(f"task.name: {cfg.name!r} is not a scheme")

    probe = types.SimpleNamespace(Config=Config, run=run)
    monkeypatch.setattr(runmod, "discover", lambda: ({"probe": probe}, {}))
    cfg = OmegaConf.create({"task": {}, "smoke": True, "seed": 0, "precision": "fp32"})
    with pytest.raises(ConfigValueError, match="task.name"):
        runmod.run_job(cfg, run_dir=tmp_path / "run", task_name="probe")
    left = {p.name for p in (tmp_path / "run").iterdir()}
    assert left <= {".hydra", "run.log"}, left  # what _remove_invalid_run_dir removes
    assert not (tmp_path / "run" / "status.json").exists()


@pytest.mark.parametrize("sig", ["SIGTERM", pytest.param("SIGINT", marks=pytest.mark.slow)])
def test_killed_run_records_killed_with_the_time(tmp_path, sig):
    """A run stopped by a signal says KILLED (with the signal and the time), not RUNNING."""
    import os
    import signal
    import subprocess
    import time

    from test_experiments import BIN, _env

    run_dir = tmp_path / "run"
    args = ["experiment=clustering", "task.t1=500", f"hydra.run.dir={run_dir}"]
    proc = subprocess.Popen(
        [str(BIN / "transflow-run"), *args],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    try:
        deadline = time.time() + 120
        log = run_dir / "run.log"
        while time.time() < deadline:
            if log.exists() and "task 'clustering' in" in log.read_text():
                break
            time.sleep(0.2)
        assert log.exists(), "the run did not start"
        time.sleep(1.0)
        proc.send_signal(getattr(signal, sig))
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
    assert proc.returncode == (130 if sig == "SIGINT" else 143), err[-2000:]
    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "KILLED" and status["signal"] == sig
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", status["killed"])
    assert f"KILLED ({sig})" in err and "Traceback" not in err
    assert not (run_dir / "DONE").exists()


def test_checkpoints_live_under_the_documented_root_keyed_by_code_version(tmp_path, monkeypatch):
    import transflow.control._tasks as tasks
    from transflow.control import DigitsConfig

    monkeypatch.setenv("TRANSFLOW_CHECKPOINT_ROOT", str(tmp_path / "root"))
    elsewhere = tmp_path / "my" / "chosen" / "run"

    def where():
        cfg = DigitsConfig()
        return tasks.checkpoint_dir_for("train_digits", cfg, elsewhere, seed=0, smoke=False)

    first = where()
    assert first.parent == tmp_path / "root" and first.name.startswith("train_digits-")
    monkeypatch.setattr(tasks, "_CODE_VERSION", ["changedcode0"])
    second = where()
    assert second.parent == first.parent and second != first  # a code change: a new key
    monkeypatch.delenv("TRANSFLOW_CHECKPOINT_ROOT")
    monkeypatch.chdir(tmp_path)
    third = where()
    assert third.parent == tmp_path / "outputs" / "checkpoints"
