"""Sweeps (``transflow-run -m``): the claims switch, the sweep summary and its figure.

The fast tier runs one real sweep with a failing claim (clustering, 8 tokens, ~15 s of CPU)
and checks the rest in-process; the slow tier runs the documented sweep exactly as written
and one smoke sweep of every experiment, none of them setting ``hydra.sweep.dir``.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import types

import pytest

from test_experiments import EXPERIMENTS, _status, _transflow_run


def _only_sweep(root: pathlib.Path) -> pathlib.Path:
    sweeps = [p for p in root.iterdir() if p.is_dir()]
    assert len(sweeps) == 1, sweeps
    return sweeps[0]


def test_sweep_with_a_failing_claim_records_it_and_finishes(tmp_path):
    """claims=record: the job whose claim fails (t1 = 1: no single cluster yet) completes,
    the next job runs, the command exits 0 and the summary marks the failure."""
    proc = _transflow_run(
        "-m",
        "experiment=clustering",
        "task.t1=1,20",
        "task.n_tokens=8",
        "claims=record",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    sweep = _only_sweep(tmp_path / "multirun" / "clustering")
    for job in ("0", "1"):
        assert _status(sweep / job)["status"] == "COMPLETED"
        assert (sweep / job / "DONE").exists()
    assert _status(sweep / "0")["claims"] == "FAILED"
    assert _status(sweep / "0")["failed_claims"] == ["min pairwise cosine at t = T"]
    assert _status(sweep / "1")["claims"] == "PASS"
    report = (sweep / "0" / "report.md").read_text()
    assert "FAILED (recorded, claims=record)" in report
    summary = json.loads((sweep / "sweep_summary.json").read_text())
    assert summary["params"] == ["task.t1"]
    assert summary["n_failed_claims"] == 1 and summary["n_failed_jobs"] == 0
    rows = {r["task.t1"]: r for r in summary["rows"]}
    assert rows["1"]["claims"] == "FAILED: min pairwise cosine at t = T"
    assert rows["20"]["claims"] == "PASS"
    assert rows["20"]["min_cosine_final"] > 0.99 > rows["1"]["min_cosine_final"]
    md = (sweep / "sweep_summary.md").read_text()
    assert "FAILED: min pairwise cosine at t = T" in md
    assert "1 with failing claims" in proc.stdout


# --------------------------------------------------------------------------- claims modes
@dataclasses.dataclass
class _ProbeConfig:
    value: float = 1.0


def _probe_run(cfg, ctx):
    ctx.claim("holds", 0.5, 1.0)
    ctx.claim("a | b", cfg.value, 1e-3)  # a '|' in a claim name
    return {"value": cfg.value, "t": 6.800000000000001}


@pytest.fixture
def probe(monkeypatch):
    import transflow.experiments.run as runmod

    module = types.SimpleNamespace(Config=_ProbeConfig, run=_probe_run)
    monkeypatch.setattr(runmod, "discover", lambda: ({"probe": module}, {}))
    return runmod


def _cfg(claims: str):
    from omegaconf import OmegaConf

    return OmegaConf.create(
        {"task": {}, "smoke": True, "seed": 0, "precision": "fp32", "claims": claims}
    )


@pytest.mark.parametrize(
    ("claims", "multirun", "raises"),
    [
        ("enforce", False, True),
        ("enforce", True, True),
        ("record", False, False),
        ("auto", False, True),  # a single run enforces
        ("auto", True, False),  # a sweep records
    ],
)
def test_claims_mode(probe, tmp_path, claims, multirun, raises):
    from transflow.experiments.context import ClaimsFailed

    if raises:
        with pytest.raises(ClaimsFailed, match="a \\| b"):
            probe.run_job(_cfg(claims), run_dir=tmp_path, task_name="probe", multirun=multirun)
        assert _status(tmp_path)["status"] == "FAILED"
        assert not (tmp_path / "DONE").exists()
    else:
        probe.run_job(_cfg(claims), run_dir=tmp_path, task_name="probe", multirun=multirun)
        status = _status(tmp_path)
        assert status["status"] == "COMPLETED" and (tmp_path / "DONE").exists()
        assert status["claims"] == "FAILED" and status["failed_claims"] == ["a | b"]
        assert status["claims_mode"] == "record"
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["claims_pass"] is False


def test_report_escapes_and_formats(probe, tmp_path):
    """report.md: a header naming the task, '|' escaped in claim names, short floats."""
    probe.run_job(_cfg("record"), run_dir=tmp_path, task_name="probe")
    report = (tmp_path / "report.md").read_text()
    assert report.startswith("# probe\n")
    assert "| a \\| b | 1 | <= 0.001 | FAILED (recorded, claims=record) |" in report
    assert "| t | 6.8 |" in report and "6.800000000000001" not in report
    for line in report.splitlines():
        if line.startswith("|"):  # every table row has 2 or 4 cells, no stray '|'
            cells = line.replace("\\|", "").count("|") - 1
            assert cells in (2, 4), line
    log = (tmp_path / "run.log").read_text()
    assert "claim a | b: 1 <= 0.001" in log and "finished" in log


# --------------------------------------------------------------------------- summary, figure
def _fake_job(root: pathlib.Path, num: int, overrides: list[str], status: str, summary: dict):
    job = root / str(num)
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    (job / "status.json").write_text(json.dumps({"status": status, "seconds": 1.5}))
    if summary:
        (job / "summary.json").write_text(json.dumps(summary))


def test_summary_and_plot_of_a_sweep(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from transflow.experiments.sweep import load_sweep, plot_sweep, write_sweep_summary

    fail = {"name": "c", "pass": False, "enforced": True}
    ok = {"name": "c", "pass": True, "enforced": True}
    for i, (temp, err, claim) in enumerate([(0.5, 3.0, fail), (1.0, 2.0, ok), (2.0, 1.0, ok)]):
        _fake_job(
            tmp_path,
            i,
            ["experiment=clustering", f"task.temperature={temp}"],
            "COMPLETED",
            {"err": err, "claims": [claim], "claims_pass": claim["pass"], "curve": [1, 2]},
        )
    _fake_job(tmp_path, 3, ["experiment=clustering", "task.temperature=4.0"], "FAILED", {})
    s = write_sweep_summary(tmp_path)
    assert s["params"] == ["task.temperature"]  # experiment= is the same for every job
    assert s["columns"][:5] == ["job", "task.temperature", "status", "claims", "seconds"]
    assert "curve" not in s["columns"]  # lists stay in the jobs' summary.json
    assert [r["claims"] for r in s["rows"]] == ["FAILED: c", "PASS", "PASS", "-"]
    assert [r["status"] for r in s["rows"]] == ["COMPLETED"] * 3 + ["FAILED"]
    assert s["n_failed_claims"] == 1 and s["n_failed_jobs"] == 1
    assert load_sweep(tmp_path) == json.loads((tmp_path / "sweep_summary.json").read_text())
    csv_lines = (tmp_path / "sweep_summary.csv").read_text().splitlines()
    assert len(csv_lines) == 5

    fig = plot_sweep(tmp_path, "err", "task.temperature", logx=True)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "task.temperature" and ax.get_ylabel() == "err"
    xs, ys = ax.lines[0].get_data()
    assert list(xs) == [0.5, 1.0, 2.0] and list(ys) == [3.0, 2.0, 1.0]  # FAILED job left out
    marked = [ln for ln in ax.lines if ln.get_label() == "claims FAILED"]
    assert len(marked) == 1 and list(marked[0].get_xdata()) == [0.5]
    from transflow.plotting._check import figure_problems

    assert figure_problems(fig) == []  # the sweep figure passes the checks of every figure
    with pytest.raises(KeyError, match="columns are"):
        plot_sweep(tmp_path, "nope", "task.temperature")


# --------------------------------------------------------------------------- slow tier
@pytest.mark.slow
def test_documented_sweep_as_written(tmp_path):
    """The command of the docs, exactly: no restriction of the task, no hydra.sweep.dir."""
    proc = _transflow_run(
        "-m", "experiment=equivalence", "debug=smoke", "seed=0,1", cwd=tmp_path, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    sweep = _only_sweep(tmp_path / "multirun" / "smoke" / "equivalence")
    summary = json.loads((sweep / "sweep_summary.json").read_text())
    assert [(r["seed"], r["status"], r["claims"]) for r in summary["rows"]] == [
        ("0", "COMPLETED", "PASS"),
        ("1", "COMPLETED", "PASS"),
    ]


@pytest.mark.slow
@pytest.mark.parametrize("name", [e for e in EXPERIMENTS if e != "equivalence"])
def test_smoke_sweep_of_every_experiment(name, tmp_path):
    """A two-seed smoke sweep of every other experiment succeeds out of the box."""
    proc = _transflow_run(
        "-m", f"experiment={name}", "debug=smoke", "seed=0,1", cwd=tmp_path, timeout=1800
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    sweep = _only_sweep(tmp_path / "multirun" / "smoke" / name)
    summary = json.loads((sweep / "sweep_summary.json").read_text())
    assert summary["n_jobs"] == 2 and summary["n_failed_jobs"] == 0
    for row in summary["rows"]:
        assert row["status"] == "COMPLETED"
        assert not str(row["claims"]).startswith("FAILED"), row


def test_write_atomic_leaves_the_text_as_given_and_no_temporary_file(tmp_path):
    """The one atomic writer of status.json, summary.json and the sweep summaries."""
    from transflow.experiments.context import write_atomic

    path = tmp_path / "sweep_summary.csv"
    write_atomic(path, "a,b\r\n1,2\r\n")
    assert path.read_bytes() == b"a,b\r\n1,2\r\n"
    assert not path.with_suffix(".csv.tmp").exists()
