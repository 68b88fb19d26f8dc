"""The Hydra experiment machinery: composition of every config, smoke runs of every
experiment, run directories, sweeps, bad keys/types, task discovery, RunContext.

Parametrized over the files found at collection time, so experiments added by others
(``configs/experiment/*.yaml``, ``experiments/tasks/*.py``) are tested automatically.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
CONFIGS = REPO / "configs"
BIN = pathlib.Path(sys.executable).parent
GROUPS = sorted(p.name for p in CONFIGS.iterdir() if p.is_dir() and p.name != "hydra")
GROUP_OPTIONS = [
    (g, p.stem) for g in GROUPS if g != "experiment" for p in sorted((CONFIGS / g).glob("*.yaml"))
]
PRIMARY_GROUPS = {
    line.strip()[2:].split(":")[0].strip()
    for line in (CONFIGS / "config.yaml").read_text().splitlines()
    if line.strip().startswith("- ") and ":" in line
}
EXPERIMENTS = sorted(p.stem for p in (CONFIGS / "experiment").glob("*.yaml"))
#: Experiments whose smoke run trains several models (minutes on 2 cores): their smoke
#: run is in the slow tier.
# Smoke runs of a minute or more (under load) run in the slow tier; the fast tier keeps the
# others. hf_equivalence's rows are also tested family by family (tests/test_hf_*.py),
# analyze's study in tests/test_analysis.py.
SLOW_SMOKE = {
    "depth",
    "depth_confirm",  # the depth smoke study (configs/sizes/smoke/depth.yaml)
    "depth_confirm_full",  # the same smoke study (depth_confirm at full size)
    "depth_memory",  # a fresh process per (gradient, depth)
    "depth_text",  # 4 trainings and the n-gram baselines
    "schemes",
    "hf_equivalence",
    "analyze",
    "trained_regions",
}
SMOKE_PARAMS = [
    pytest.param(n, marks=pytest.mark.slow) if n in SLOW_SMOKE else n for n in EXPERIMENTS
]


def _env():
    env = dict(os.environ)
    env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    env["HYDRA_FULL_ERROR"] = "0"
    return env


def _transflow_run(*args, cwd=REPO, timeout=300):
    exe = BIN / "transflow-run"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "transflow.experiments.run"]
    return subprocess.run(
        [*cmd, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=_env()
    )


def _status(run_dir: pathlib.Path) -> dict:
    return json.loads((run_dir / "status.json").read_text())


def _cells(row: str) -> list[str]:
    """The cells of a markdown table row, ``\\|`` unescaped."""
    import re

    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", row)[1:-1]]


def assert_verdicts_agree(run_dir: pathlib.Path, console: str | None = None) -> dict:
    """Console, report.md, summary.json and status.json give every claim of the run in
    ``run_dir`` the same verdict, and the run the same overall verdict and counts.

    The console is ``console`` (captured stdout) or, without it, the lines of ``run.log``
    (the same log records). Returns the summary's counts per verdict.
    """
    import re

    summary = json.loads((run_dir / "summary.json").read_text())
    claims = summary.get("claims") or []
    log = console if console is not None else (run_dir / "run.log").read_text()
    report = (run_dir / "report.md").read_text()
    if not claims:
        assert "## Claim checks" not in report and "claims: " not in log
        return {}
    words = ("PASS", "FAILED", "not enforced", "not checked")
    verdicts = [c["verdict"] for c in claims]
    assert set(verdicts) <= set(words), verdicts
    counts = {w: verdicts.count(w) for w in words}
    overall = (
        "FAILED" if counts["FAILED"] else "PASS" if counts["PASS"] == len(claims) else "INCOMPLETE"
    )
    # summary.json and status.json
    assert summary["claims_counts"] == counts
    assert summary["claims_verdict"] == overall and summary["claims_pass"] is (overall == "PASS")
    assert _status(run_dir)["claims"] == overall
    for c in claims:  # a missing value is null, never NaN, and never passes
        value = c["value"]
        assert value is None or not (isinstance(value, float) and value != value), c
        if value is None:
            assert c["verdict"] != "PASS" and c["missing"], c
    # report.md: the claim table (one row per claim, in order) and the overall line
    section = report.split("## Claim checks", 1)[1]
    rows = [ln for ln in section.splitlines() if ln.startswith("| ")][1:]  # header
    assert len(rows) == len(claims), rows
    for row, c in zip(rows, claims):
        name, value, _, result = _cells(row)
        assert name == c["name"] and result.split(" (")[0] == c["verdict"], (row, c)
        assert "nan" not in value.lower().split(), row
        if c["value"] is None:
            assert value.startswith("n/a ("), row
    parts = [f"{counts['PASS']} of {len(claims)} PASS"]
    parts += [f"{counts[w]} {w}" for w in words[1:] if counts[w]]
    line = f"{overall}: " + ", ".join(parts)
    assert f"Claims: **{line}**." in report
    # the console: the same overall line, and every claim that is not PASS with its verdict
    said = [ln for ln in log.splitlines() if "claims: " in ln]
    assert len(said) == 1 and re.search(rf"claims: {re.escape(line)}(;|$)", said[0]), said
    for c in claims:
        if c["verdict"] != "PASS":
            assert f"; {c['name']}: " in said[0] and f"→ {c['verdict']}" in said[0], said[0]
    if console is None:  # run.log also has one line per claim
        for c in claims:
            assert re.search(rf"claim {re.escape(c['name'])}: .* → {c['verdict']}", log), c
    return counts


# --------------------------------------------------------------------------- composition
def test_config_tree_has_the_groups():
    for group in ("grid", "model", "experiment", "hydra", "debug"):
        assert (CONFIGS / group).is_dir(), f"configs/{group}/ is missing"
    assert (CONFIGS / "debug" / "smoke.yaml").exists()
    assert "equivalence" in EXPERIMENTS


def test_compose_default():
    from omegaconf import OmegaConf
    from transflow.experiments.config import GridConfig, ModelConfig, RunConfig
    from transflow.experiments.run import compose

    cfg, task = compose([])
    assert task == "equivalence"
    assert OmegaConf.get_type(cfg) is RunConfig
    assert OmegaConf.get_type(cfg.grid) is GridConfig
    assert OmegaConf.get_type(cfg.model) is ModelConfig
    assert "scheme" not in cfg  # no top-level scheme group: each task names its schemes
    assert cfg.model.d_model == cfg.grid.n_features  # interpolation
    assert cfg.model.init_seed == cfg.seed
    assert cfg.smoke is False


@pytest.mark.parametrize(("group", "option"), GROUP_OPTIONS)
def test_compose_every_group_option(group, option):
    from omegaconf import OmegaConf
    from transflow.experiments.run import compose

    if group not in PRIMARY_GROUPS:
        # A group used only from experiment overlays (e.g. `- /parallel@task.parallel: x`):
        # it must load on its own and be used by at least one experiment, which
        # test_compose_every_experiment composes.
        from hydra import compose as hydra_compose, initialize_config_dir

        with initialize_config_dir(str(CONFIGS), version_base="1.3"):
            node = hydra_compose(f"{group}/{option}")
        assert node is not None
        users = [
            p.stem
            for p in (CONFIGS / "experiment").glob("*.yaml")
            if f"/{group}" in p.read_text() or f"{group}:" in p.read_text()
        ]
        assert users, f"configs/{group}/ is used by no experiment and not by config.yaml"
        return
    cfg, task = compose([f"{group}={option}"])
    OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)  # every value resolves
    if group == "task":
        assert task == option
    if group == "debug" and option == "smoke":
        assert cfg.smoke is True
    if group == "grid":
        from transflow.experiments.builders import build_grid

        g = build_grid(cfg.grid)
        assert g.n_tokens == cfg.grid.n_tokens and g.n_features == cfg.grid.n_features


def test_compose_every_registered_task():
    from transflow.experiments.run import compose
    from transflow.experiments.tasks import discover

    tasks, errors = discover()
    assert not errors, "task modules that cannot be used:\n" + "\n\n".join(
        f"{k}: {v}" for k, v in errors.items()
    )
    for name, module in tasks.items():
        cfg, task = compose([f"task={name}"])
        assert task == name
        from omegaconf import OmegaConf

        assert OmegaConf.get_type(cfg.task) is module.Config


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_compose_every_experiment(name):
    from omegaconf import OmegaConf
    from transflow.experiments.run import compose

    for extra in ([], ["debug=smoke"]):
        cfg, task = compose([f"experiment={name}", *extra])
        OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
        assert "experiment" not in cfg, (
            f"configs/experiment/{name}.yaml was not merged at the top level: it needs the "
            "'# @package _global_' directive in its leading comment block"
        )
    assert cfg.smoke is True


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_file_header(name):
    text = (CONFIGS / "experiment" / f"{name}.yaml").read_text()
    header = []
    for line in text.splitlines():
        if line.strip() and not line.strip().startswith("#"):
            break
        header.append(line)
    assert any(line.strip().replace(" ", "") == "#@package_global_" for line in header), (
        f"configs/experiment/{name}.yaml: the leading comment block must contain "
        "'# @package _global_'"
    )
    # Hydra reads only the first 512 characters for directives.
    # Hydra reads directives only from the comment lines before the first other comment.
    assert text.splitlines()[0].strip() == "# @package _global_", (
        f"configs/experiment/{name}.yaml: the first line must be '# @package _global_' "
        "(Hydra stops reading directives at the first comment that is not one)"
    )
    comments = [line for line in header if "@package" not in line and line.strip()]
    assert comments, (
        f"configs/experiment/{name}.yaml must start with a comment: the command, the "
        "expected runtime and the expected result"
    )


def test_no_private_hydra_names():
    """transflow uses Hydra's public API only (no patches of its private code)."""
    import re

    roots = [REPO / "src", REPO / "experiments", REPO / "paper_figures", REPO / "tests"]
    offenders = []
    for root in roots:
        for path in root.rglob("*.py"):
            if path.name == "test_experiments.py":
                continue
            text = path.read_text()
            if re.search(r"hydra\.(plugins|_internal)|ConfigSource\.|_get_header_dict", text):
                offenders.append(str(path.relative_to(REPO)))
    assert not offenders, f"private Hydra names used in {offenders}"


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("grid.n_tokns=4", "grid.n_tokns"),
        ("grid.n_tokens=abc", "grid.n_tokens"),
        ("model.nhead=two", "model.nhead"),
        ("precision=fp16", "precision"),
        ("task.batchh=3", "task.batchh"),
        ("task.batch=1.5", "task.batch"),
        ("sed=1", "sed"),
    ],
)
def test_compose_rejects_bad_key_or_type(override, key):
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException
    from transflow.experiments.run import compose

    with pytest.raises((HydraException, OmegaConfBaseException)) as info:
        compose([override])
    text = str(info.value) + str(info.value.__cause__ or "")
    assert key in text, text


# --------------------------------------------------------------------------- smoke runs
_SMOKE_RUNS: dict[str, tuple[pathlib.Path, dict, object]] = {}


def _smoke_run(name: str, tmp_path_factory) -> tuple[pathlib.Path, dict, object]:
    """Run ``experiment=<name> debug=smoke`` in-process once per test process."""
    if name not in _SMOKE_RUNS:
        from transflow.experiments.run import run_in_process

        run_dir = tmp_path_factory.mktemp(f"smoke_{name}")
        summary, cfg = run_in_process([f"experiment={name}", "debug=smoke"], run_dir)
        _SMOKE_RUNS[name] = (run_dir, summary, cfg)
    return _SMOKE_RUNS[name]


# The claims each task states in smoke mode: name -> enforced (a failing enforced claim
# marks the run FAILED; the full-size-only ones are recorded but not enforced).
SMOKE_CLAIMS = {
    "equivalence": {
        "n_fail": True,
        "max_abs_fp64": True,
        "max_rel_fp32": True,
        "substep_max_abs": True,
    },
    "vit_equivalence": {"n_fail": True, "max_abs_fp64": True, "max_rel_fp32": True},
    "sharded": {"n_failed": True, "max_rel_diff_float64": True},
    "train_digits": {"steps": True, "final_over_first_train_loss": True, "test_accuracy": False},
    "train_sequence": {
        "steps": True,
        "final_over_first_train_loss": True,
        "test_accuracy": False,
        "eval_sequence_accuracy": False,
    },
}


@pytest.mark.parametrize("name", SMOKE_PARAMS)
def test_smoke_run_every_experiment(name, tmp_path_factory):
    """Every experiment runs in debug=smoke mode and leaves a complete run directory."""
    import jax

    x64 = jax.config.jax_enable_x64
    run_dir, summary, cfg = _smoke_run(name, tmp_path_factory)
    assert cfg.smoke is True
    assert jax.config.jax_enable_x64 == x64, "the job did not restore jax_enable_x64"
    assert _status(run_dir)["status"] == "COMPLETED"
    assert (run_dir / "DONE").exists()
    assert set(json.loads((run_dir / "summary.json").read_text())) == set(summary)
    report = (run_dir / "report.md").read_text()
    # Uniform reports: '# <task>: <about>', the command, '## Results', '## Summary', ...
    # (the experiment's task: depth_confirm is an experiment of the task depth)
    from transflow.experiments.run import compose

    task = compose([f"experiment={name}"])[1]
    headings = [ln for ln in report.splitlines() if ln.startswith("#")]
    assert headings[0].startswith(f"# {task}: "), headings
    assert "## Results" in headings and "## Summary" in headings, headings
    assert not [h for h in headings[1:] if not h.startswith("## ")], headings
    # Markdown tables: every row of a table has as many cells as its header (an unescaped
    # '|' in a cell would add one).
    table: list[int] = []
    for line in [*report.splitlines(), ""]:
        if line.startswith("|"):
            table.append(line.replace("\\|", "").count("|"))
        elif table:
            assert len(set(table)) == 1, f"ragged markdown table in report.md: {table}"
            table = []
    assert (run_dir / ".hydra" / "config.yaml").exists()
    assert (run_dir / ".hydra" / "resolved.yaml").exists()
    # Console (run.log), report.md and summary.json agree on every claim's verdict.
    counts = assert_verdicts_agree(run_dir)
    assert not counts.get("FAILED"), counts  # or the run would have FAILED
    if name in SMOKE_CLAIMS:
        # The task states its claims; the smoke run enforces those that hold at smoke
        # size (all pass, or the run would have FAILED); the others are "not enforced",
        # so such a run does not say that all its claims pass.
        saved = json.loads((run_dir / "summary.json").read_text())
        claims = {c["name"]: c for c in saved["claims"]}
        assert {k: c["enforced"] for k, c in claims.items()} == SMOKE_CLAIMS[name]
        assert all(c["verdict"] == "PASS" for c in claims.values() if c["enforced"])
        assert all(c["verdict"] == "not enforced" for c in claims.values() if not c["enforced"])
        assert saved["claims_pass"] is all(SMOKE_CLAIMS[name].values())
        assert "## Claim checks" in (run_dir / "report.md").read_text()


def test_equivalence_smoke_results(tmp_path_factory):
    """The default experiment's numbers, tables and figures in smoke mode."""
    tmp_path, summary, _ = _smoke_run("equivalence", tmp_path_factory)
    assert summary["all_pass"] is True
    # 2 x 2 layers + the two encoder stacks (post-/pre-LN) at depth 2
    assert summary["n_pass"] == summary["n_configs"] == 6
    assert summary["max_abs_fp64"] < 1e-10  # the stated fp64 tolerance
    assert summary["max_rel_fp32"] < 1e-5  # the stated fp32 tolerance
    assert summary["substep_max_abs"] < 1e-10
    claims = {c["name"]: c for c in summary["claims"]}
    assert set(claims) == {"n_fail", "max_abs_fp64", "max_rel_fp32", "substep_max_abs"}
    assert all(c["pass"] and c["enforced"] for c in claims.values())
    assert claims["max_abs_fp64"]["bound"] == 1e-10 and claims["max_rel_fp32"]["bound"] == 1e-5
    lines = [json.loads(s) for s in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    agreement = [r for r in lines if r["kind"] == "agreement"]
    substeps = [r for r in lines if r["kind"] == "substep"]
    assert len(agreement) == summary["n_configs"]
    assert [r["substep"] for r in substeps] == ["attention", "ln1", "ffn1", "ffn2", "relax", "ln2"]
    for stem in ("F1_substeps", "F2_agreement"):
        assert (tmp_path / f"{stem}.png").stat().st_size > 0
        assert (tmp_path / f"{stem}.pdf").stat().st_size > 0
    with np.load(tmp_path / "agreement.npz") as z:
        assert z["max_abs_fp64"].shape == (summary["n_configs"],)
        assert np.all(z["passed"])
    report = (tmp_path / "report.md").read_text()
    assert "| config |" in report and "PASS" in report


def test_equivalence_detects_a_wrong_model(tmp_path, monkeypatch):
    """The comparison can fail: perturb transflow's output, the rows say FAIL and the
    claims stop the run (FAILED, no DONE)."""
    from transflow.experiments.context import ClaimsFailed
    from transflow.experiments.run import run_in_process

    import transflow

    original = transflow.SplitTransformer.__call__

    def perturbed(self, u, **kw):
        return original(self, u, **kw) * (1 + 1e-6)

    monkeypatch.setattr(transflow.SplitTransformer, "__call__", perturbed)
    with pytest.raises(ClaimsFailed, match="max_abs_fp64"):
        run_in_process(
            [
                "experiment=equivalence",
                "debug=smoke",
                "task.encoder_layers=0",
                "task.norm_first=[false,true]",
                "task.activation=[relu]",
            ],
            tmp_path,
        )
    assert _status(tmp_path)["status"] == "FAILED"
    assert not (tmp_path / "DONE").exists()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["n_configs"] == 2
    assert summary["all_pass"] is False and summary["n_pass"] == 0
    assert summary["max_abs_fp64"] > 1e-10
    failed = {c["name"] for c in summary["claims"] if not c["pass"]}
    assert {"n_fail", "max_abs_fp64"} <= failed
    assert summary["claims_pass"] is False


def test_failed_run_says_failed(tmp_path):
    from transflow.experiments.run import run_in_process

    # nhead=3 does not divide d_model=16: the task raises while building the layers.
    with pytest.raises(ValueError, match="divisible"):
        run_in_process(["debug=smoke", "task.nhead=[3]"], tmp_path)
    status = _status(tmp_path)
    assert status["status"] == "FAILED" and "divisible" in status["error"]
    assert not (tmp_path / "DONE").exists() and not (tmp_path / "summary.json").exists()


def test_added_task_key_is_rejected_before_compute(tmp_path):
    from omegaconf.errors import ConfigKeyError
    from transflow.experiments.run import run_in_process

    with pytest.raises(ConfigKeyError, match="batchh"):
        run_in_process(["debug=smoke", "+task.batchh=3"], tmp_path)
    # Rejected before the job starts: no status.json (no FAILED run), no results.
    assert not (tmp_path / "status.json").exists()
    assert not (tmp_path / "DONE").exists() and not (tmp_path / "metrics.jsonl").exists()


# --------------------------------------------------------------------------- command line
@pytest.mark.parametrize(
    ("override", "key"),
    [("grid.n_tokns=4", "grid.n_tokns"), ("grid.n_tokens=abc", "grid.n_tokens")],
)
def test_cli_bad_override_exits_nonzero(override, key, tmp_path):
    run_dir = tmp_path / "run"
    proc = _transflow_run(override, f"hydra.run.dir={run_dir}")
    assert proc.returncode != 0
    assert key in proc.stderr + proc.stdout, proc.stderr
    # Nothing that looks like a success: no DONE, no COMPLETED status (no dir at all).
    assert not (run_dir / "DONE").exists()
    if (run_dir / "status.json").exists():
        assert _status(run_dir)["status"] != "COMPLETED"


@pytest.mark.slow  # the fast tier runs a real sweep in tests/test_sweeps.py
def test_cli_multirun_sweep(tmp_path):
    """`transflow-run -m ... seed=0,1` from a fresh directory, without setting
    hydra.sweep.dir: the configured sweep directory resolves (multirun/smoke/<task>/<time>/),
    one directory per job, each complete, and the sweep summary lists both jobs."""
    proc = _transflow_run(
        "-m",
        "experiment=equivalence",
        "debug=smoke",
        "seed=0,1",
        "task.norm_first=[false]",
        "task.activation=[relu]",
        "task.encoder_layers=0",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    sweeps = list((tmp_path / "multirun" / "smoke" / "equivalence").iterdir())
    assert len(sweeps) == 1, sweeps
    sweep = sweeps[0]
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir() and not p.name.startswith("."))
    assert [p.name for p in jobs] == ["0", "1"]
    import yaml

    for seed, job in enumerate(jobs):
        cfg = yaml.safe_load((job / ".hydra" / "config.yaml").read_text())
        assert cfg["seed"] == seed and cfg["smoke"] is True
        resolved = yaml.safe_load((job / ".hydra" / "resolved.yaml").read_text())
        assert resolved["model"]["init_seed"] == seed
        assert (job / ".hydra" / "overrides.yaml").exists()
        rows = [json.loads(s) for s in (job / "metrics.jsonl").read_text().splitlines()]
        assert any(r["kind"] == "agreement" for r in rows)
        assert _status(job)["status"] == "COMPLETED" and (job / "DONE").exists()
        assert _status(job)["claims_mode"] == "record"  # claims=auto in a sweep
        assert (job / "F2_agreement.png").exists()
        assert (job / "run.log").stat().st_size > 0
    assert "results in" in proc.stdout
    summary = json.loads((sweep / "sweep_summary.json").read_text())
    assert summary["params"] == ["seed"]
    assert [(r["job"], r["seed"], r["status"], r["claims"]) for r in summary["rows"]] == [
        (0, "0", "COMPLETED", "PASS"),
        (1, "1", "COMPLETED", "PASS"),
    ]
    assert (sweep / "sweep_summary.md").read_text().count("| COMPLETED | PASS |") == 2
    assert (sweep / "sweep_summary.csv").read_text().splitlines()[0].startswith("job,seed,status")
    assert "sweep of 2 jobs finished" in proc.stdout


def test_importing_the_entry_point_starts_no_backend_and_no_torch():
    """Task discovery imports neither torch nor starts a JAX backend.

    The experiments live inside the ``transflow`` package, so importing them imports JAX
    (``transflow/__init__``); what launchers need is that no backend is initialised and x64
    can still be switched per job, and that torch stays out until a task asks for it.
    """
    code = (
        "import sys, transflow.experiments.run as r; r.register_configs(warn=False); "
        "import jax._src.xla_bridge as xb; "
        "print('torch' in sys.modules, bool(xb._backends))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=_env(), cwd=REPO
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "False"], (
        "importing transflow.experiments.run (task discovery) imported torch or started a "
        f"JAX backend (torch imported, backend started) = {proc.stdout.split()}; import "
        "torch and touch devices inside run(cfg, ctx) only"
    )


# --------------------------------------------------------------------------- discovery
def test_discovery_reports_broken_tasks(tmp_path):
    from transflow.experiments.tasks import discover

    (tmp_path / "good_probe.py").write_text(
        "from dataclasses import dataclass\n@dataclass\nclass Config:\n    n: int = 1\n"
        "def run(cfg, ctx):\n    return {'n': cfg.n}\n"
    )
    (tmp_path / "broken_probe.py").write_text("import not_a_module_xyz\n")
    (tmp_path / "norun_probe.py").write_text(
        "from dataclasses import dataclass\n@dataclass\nclass Config:\n    n: int = 1\n"
    )
    (tmp_path / "_private.py").write_text("raise RuntimeError('never imported')\n")
    tasks, errors = discover(tmp_path)
    assert sorted(tasks) == ["good_probe"]
    assert sorted(errors) == ["broken_probe", "norun_probe"]
    assert "not_a_module_xyz" in errors["broken_probe"]
    assert "def run(cfg, ctx)" in errors["norun_probe"]
    for name in ("good_probe", "norun_probe"):
        sys.modules.pop(f"transflow.experiments.tasks.{name}", None)


# --------------------------------------------------------------------------- RunContext
def test_run_context_writers(tmp_path, capsys):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from transflow.experiments.context import RunContext

    ctx = RunContext(tmp_path / "r", smoke=True, seed=3, precision="fp32")
    assert ctx.run_dir.is_dir() and ctx.dtypes == ("float32",)
    ctx.log({"step": 0, "err": np.float32(0.25), "v": np.arange(3), "nan": float("nan")})
    ctx.log({"step": 1})
    rows = [json.loads(s) for s in (ctx.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["err"] == 0.25 and rows[0]["v"] == [0, 1, 2] and np.isnan(rows[0]["nan"])
    assert rows[1] == {"step": 1}
    with pytest.raises(TypeError, match="record"):
        ctx.log([1, 2])
    path = ctx.save_arrays("arrs", a=np.eye(2), b=[1, 2])
    with np.load(path) as z:
        np.testing.assert_array_equal(z["a"], np.eye(2))
    with pytest.raises(ValueError, match="name"):
        ctx.save_arrays("../x", a=1)
    from transflow.plotting import FigureProblems

    fig, ax = plt.subplots()
    ax.plot([0, 1])  # no labels, a colour in no legend: the checker faults it, files stay
    with pytest.raises(FigureProblems, match=r"^bare \(.*bare.png\): the figure checker found"):
        ctx.save_figure(fig, "bare")
    assert (ctx.run_dir / "bare.png").stat().st_size and not plt.fignum_exists(fig.number)
    fig, ax = plt.subplots()
    ax.plot([0, 1], label="line")
    ax.set(xlabel="x", ylabel="y")
    ax.legend(loc="lower right")
    paths = ctx.save_figure(fig, "fig")
    assert [p.suffix for p in paths] == [".png", ".pdf"] and all(p.stat().st_size for p in paths)
    ctx.report("# Title")
    ctx.report("text")
    assert ctx.report_path.read_text() == "# Title\n\ntext\n\n"
    assert list(ctx.progress(range(4), desc="quiet")) == [0, 1, 2, 3]
    # pytest captures stderr (not a TTY): the progress bar stays quiet.
    assert "quiet" not in capsys.readouterr().err


def test_precision_context_restores_x64():
    import jax
    from transflow.experiments.run import _Precision

    before = jax.config.jax_enable_x64
    with _Precision("fp32"):
        assert jax.config.jax_enable_x64 is False
        import jax.numpy as jnp

        assert jnp.ones(2).dtype == jnp.float32
    assert jax.config.jax_enable_x64 == before
    with _Precision("both"):
        assert jax.config.jax_enable_x64 is True
    assert jax.config.jax_enable_x64 == before


# --------------------------------------------------------------------------- builders
def test_builders():
    import torch
    from transflow.experiments.builders import build_torch_reference
    from transflow.experiments.config import ModelConfig

    m = ModelConfig(d_model=8, init_seed=5)
    a = build_torch_reference(m, nhead=2)
    b = build_torch_reference(m, nhead=2)
    assert isinstance(a, torch.nn.TransformerEncoderLayer) and not a.training
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)  # seeded
    assert not torch.equal(a.norm1.weight, torch.ones(8))  # randomize_affine
    enc = build_torch_reference(m, num_layers=3, final_norm=True, dtype="float64")
    assert isinstance(enc, torch.nn.TransformerEncoder) and enc.norm is not None
    assert enc.layers[0].linear1.weight.dtype == torch.float64
    assert not torch.equal(enc.layers[0].linear1.weight, enc.layers[1].linear1.weight)
    with pytest.raises(ValueError, match="divisible"):
        build_torch_reference(m, nhead=3)


def test_equivalence_run_without_hydra(tmp_path):
    """A task's run(cfg, ctx) also works when called directly (ctx.cfg is None)."""
    from transflow.experiments.context import RunContext
    from transflow.experiments.tasks.equivalence import Config, run

    # the sizes are the config's (smoke sizes are configuration, not ctx.smoke)
    one = dict(nhead=[1], dim_feedforward=[None], bias=[True], layer_norm_eps=[1e-5], batch=1)
    cfg = Config(norm_first=[True], activation=["gelu"], encoder_layers=0, **one)
    summary = run(cfg, RunContext(tmp_path, smoke=True, precision="fp64"))
    assert summary["n_configs"] == 1 and summary["all_pass"] is True
    assert summary["max_abs_fp64"] < 1e-10
    assert np.isnan(summary["max_rel_fp32"])  # precision=fp64: no float32 comparison


def test_equivalence_model_group_sets_depth(tmp_path):
    """model=torch_encoder: the product rows are 3-layer stacks with a final LayerNorm."""
    from transflow.experiments.run import run_in_process

    summary, _ = run_in_process(
        [
            "debug=smoke",
            "model=torch_encoder",
            "task.norm_first=[true]",
            "task.activation=[relu]",
            "task.encoder_layers=0",
            "precision=fp64",
        ],
        tmp_path,
    )
    rows = [json.loads(s) for s in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    agreement = [r for r in rows if r["kind"] == "agreement"]
    assert [(r["num_layers"], r["final_norm"]) for r in agreement] == [(3, True)]
    assert summary["all_pass"] is True and summary["max_abs_fp64"] < 1e-10


def test_failing_claim_marks_the_run_failed(tmp_path, monkeypatch):
    """An enforced claim that fails: summary.json records it, status FAILED, no DONE."""
    import dataclasses
    import types

    import transflow.experiments.run as runmod
    from omegaconf import OmegaConf
    from transflow.experiments.context import ClaimsFailed

    @dataclasses.dataclass
    class Config:
        value: float = 1.0

    def run(cfg, ctx):
        ctx.claim("holds", 0.5, 1.0)
        ctx.claim("informative", 3.0, 1.0, enforce=False)
        ctx.claim("wrong", cfg.value, 1e-3)
        return {"value": cfg.value}

    probe = types.SimpleNamespace(Config=Config, run=run)
    monkeypatch.setattr(runmod, "discover", lambda: ({"probe": probe}, {}))
    cfg = OmegaConf.create({"task": {}, "smoke": True, "seed": 0, "precision": "fp32"})
    with pytest.raises(ClaimsFailed, match="wrong"):
        runmod.run_job(cfg, run_dir=tmp_path, task_name="probe")
    assert _status(tmp_path)["status"] == "FAILED"
    assert not (tmp_path / "DONE").exists()
    summary = json.loads((tmp_path / "summary.json").read_text())
    verdicts = {c["name"]: (c["pass"], c["enforced"], c["verdict"]) for c in summary["claims"]}
    assert verdicts == {
        "holds": (True, True, "PASS"),
        "informative": (False, False, "not enforced"),
        "wrong": (False, True, "FAILED"),
    }
    assert summary["claims_pass"] is False and summary["claims_verdict"] == "FAILED"
    assert "Claim checks" in (tmp_path / "report.md").read_text()
    assert_verdicts_agree(tmp_path)

    # The same task with a value that satisfies the claim completes; its claim that is
    # not enforced keeps it from saying that all claims pass.
    cfg.task = {"value": 1e-4}
    out = tmp_path / "ok"
    runmod.run_job(cfg, run_dir=out, task_name="probe")
    assert (out / "DONE").exists()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["claims_pass"] is False and summary["claims_verdict"] == "INCOMPLETE"
    assert assert_verdicts_agree(out) == {
        "PASS": 2,
        "FAILED": 0,
        "not enforced": 1,
        "not checked": 0,
    }
