"""``make figures`` (paper_figures/make_all.py): discovery, the protocol of every figure
script, the manifest, failures, and the figures F1/F2 of the equivalence experiment."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
FIG_DIR = REPO / "paper_figures"
SCRIPTS = sorted(p.name for p in FIG_DIR.glob("f*_*.py"))


def _make_all():
    spec = importlib.util.spec_from_file_location("paper_figures_make_all", FIG_DIR / "make_all.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_figure_script_follows_the_protocol(script):
    """FIGURE has id/title/command/config, the id matches the file name, make is callable."""
    make_all = _make_all()
    module = make_all.load(FIG_DIR / script)
    fig = module.FIGURE
    assert fig["id"].upper() == script.split("_", 1)[0].upper(), (fig["id"], script)
    for key in make_all.REQUIRED_KEYS:
        assert isinstance(fig[key], str) and fig[key].strip(), f"{script}: FIGURE[{key!r}]"


def test_figure_ids_are_unique():
    """Two scripts with one id would overwrite each other's PNG/PDF/JSON and manifest entry."""
    make_all = _make_all()
    seen: dict[str, str] = {}
    clashes = []
    for path in make_all.discover():
        fid = path.stem.split("_", 1)[0].upper()
        if fid in seen:
            clashes.append(f"{fid}: {seen[fid]} and {path.name}")
        seen.setdefault(fid, path.name)
    assert not clashes, "duplicate figure ids (rename one script and its FIGURE['id']): " + (
        "; ".join(clashes)
    )


def test_discovery_order_and_ids():
    make_all = _make_all()
    paths = make_all.discover()
    assert {"f1_substeps.py", "f2_agreement.py"} <= {p.name for p in paths}
    ids = [p.stem.split("_")[0][1:] for p in paths]
    numbers = [int(i) for i in ids if i.isdigit()]
    assert numbers == sorted(numbers)
    # numbered figures first, then named ones (e.g. fperf_...)
    assert all(i.isdigit() for i in ids[: len(numbers)])


def test_make_f1_f2_and_manifest(tmp_path, monkeypatch):
    """F1 and F2 (smoke size) are regenerated with PNG, PDF, JSON and a manifest (in the
    smoke subdirectory of --out)."""
    import jax

    make_all = _make_all()
    monkeypatch.setenv("TRANSFLOW_SMOKE", "1")
    x64 = jax.config.jax_enable_x64
    rc = make_all.main(["F1", "f2", "--out", str(tmp_path)])
    assert rc == 0
    assert not (tmp_path / "manifest.json").exists()
    tmp_path = tmp_path / "smoke"
    assert jax.config.jax_enable_x64 == x64, "make_all did not restore jax_enable_x64"
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert set(manifest) == {"F1", "F2"}
    for fid in ("F1", "F2"):
        entry = manifest[fid]
        assert entry["status"] == "ok", entry.get("traceback")
        assert {f"{fid}.png", f"{fid}.pdf", f"{fid}.json"} <= set(entry["files"])
        for key in ("title", "config", "command", "script", "numbers"):
            assert entry[key], (fid, key)
        assert (tmp_path / f"{fid}.png").stat().st_size > 0
    f1 = manifest["F1"]["numbers"]
    assert f1["n_substeps"] == 6  # M = 4 + J with J = 2 FFN sub-steps
    assert f1["substep_max_abs_fp64"] < 1e-10
    f2 = manifest["F2"]["numbers"]
    assert f2["n_pass"] == f2["n_configs"] > 0
    assert f2["max_abs_fp64"] < 1e-10 and f2["max_rel_fp32"] < 1e-5
    data = json.loads((tmp_path / "F1.json").read_text())
    assert [r["substep"] for r in data["substeps"]] == [
        "attention",
        "ln1",
        "ffn1",
        "ffn2",
        "relax",
        "ln2",
    ]
    rows = json.loads((tmp_path / "F2.json").read_text())["rows"]
    assert len(rows) == f2["n_configs"]


def test_failing_figure_is_reported_and_others_run(tmp_path, capsys):
    make_all = _make_all()
    figs = tmp_path / "figs"
    figs.mkdir()
    (figs / "f1_good.py").write_text(
        "import json\n"
        "FIGURE = {'id': 'F1', 'title': 't', 'command': 'c', 'config': 'library call'}\n"
        "def make(out_dir):\n"
        "    import matplotlib; matplotlib.use('Agg')\n"
        "    import matplotlib.pyplot as plt\n"
        "    fig, ax = plt.subplots(); ax.plot([0, 1])\n"
        "    for ext in ('png', 'pdf'): fig.savefig(out_dir / f'F1.{ext}')\n"
        "    (out_dir / 'F1.json').write_text(json.dumps([0, 1]))\n"
        "    return {'n': 2}\n"
    )
    (figs / "f2_broken.py").write_text(
        "FIGURE = {'id': 'F2', 'title': 't', 'command': 'c', 'config': 'c'}\n"
        "def make(out_dir):\n    raise RuntimeError('boom')\n"
    )
    (figs / "f3_nofiles.py").write_text(
        "FIGURE = {'id': 'F3', 'title': 't', 'command': 'c', 'config': 'c'}\n"
        "def make(out_dir):\n    return {}\n"
    )
    (figs / "f4_noprotocol.py").write_text("x = 1\n")
    (figs / "f1_zz_duplicate.py").write_text("raise RuntimeError('must not be imported')\n")
    out = tmp_path / "out"
    results = make_all.run_figures(out_dir=out, fig_dir=figs)
    assert results["F1"]["status"] == "ok" and results["F1"]["numbers"] == {"n": 2}
    assert results["F2"]["status"] == "FAILED" and "boom" in results["F2"]["error"]
    assert results["F3"]["status"] == "FAILED" and "F3.png" in results["F3"]["error"]
    assert results["F4"]["status"] == "FAILED" and "FIGURE" in results["F4"]["error"]
    dup = results["F1:f1_zz_duplicate"]  # sorted by name: f1_good runs first
    assert dup["status"] == "FAILED" and "duplicate figure id F1" in dup["error"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert [manifest[f]["status"] for f in ("F1", "F2", "F3", "F4", "F1:f1_zz_duplicate")] == [
        "ok",
        "FAILED",
        "FAILED",
        "FAILED",
        "FAILED",
    ]
    # The command line exits non-zero when a figure failed; a subset re-run updates the
    # manifest in place.
    assert make_all.main(["--figures-dir", str(figs), "--out", str(out), "F2"]) == 1
    assert make_all.main(["--figures-dir", str(figs), "--out", str(out), "F1"]) == 1  # clash
    (figs / "f1_zz_duplicate.py").unlink()
    assert make_all.main(["--figures-dir", str(figs), "--out", str(out), "F1"]) == 0
    # the entry of the deleted script is dropped, the others are kept
    assert set(json.loads((out / "manifest.json").read_text())) == {"F1", "F2", "F3", "F4"}
    with pytest.raises(SystemExit, match="F9"):
        make_all.main(["--figures-dir", str(figs), "--out", str(out), "F9"])
    for name in list(sys.modules):
        if name.startswith("paper_figures_f"):
            sys.modules.pop(name)


# --------------------------------------------------------------------------- every figure


def _style_cases():
    """The record builders of tests/test_figure_style.py (records shaped as the studies
    return them; F9/F13 are real partitions, FPERF reads the committed results)."""
    spec = importlib.util.spec_from_file_location(
        "figure_style_cases", REPO / "tests" / "test_figure_style.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CASES


def _figure_function(path: pathlib.Path) -> str:
    """The one ``transflow.plotting.plot_*`` function a figure script draws with."""
    import re

    names = set(re.findall(r"\b(plot_[a-z_]+)\(", path.read_text()))
    assert len(names) == 1, f"{path.name}: expected one plot_* call, found {sorted(names)}"
    return names.pop()


def _experiment_figure_functions() -> dict[str, list[str]]:
    """Task file → the ``plot_*`` functions it saves into its run directory."""
    import re

    out = {}
    for path in sorted((REPO / "experiments" / "tasks").glob("*.py")):
        names = sorted(set(re.findall(r"\b(plot_[a-z_]+)\(", path.read_text())))
        if names:
            out[path.stem] = names
    return out


def _check(fig, what: str) -> None:
    import matplotlib.pyplot as plt

    import transflow.plotting as P

    problems = P.figure_problems(fig)
    width = float(fig.get_size_inches()[0])
    plt.close(fig)
    assert not problems, f"{what}: " + "; ".join(problems)
    assert width == P.FIGURE_WIDTH, f"{what}: {width} in wide, expected {P.FIGURE_WIDTH}"


def test_every_figure_of_make_figures_and_of_the_experiments_is_drawn_clean():
    """Every figure of ``make figures`` (one per paper_figures script, drawn by its plot
    function from records of the shape its study returns; F-perf from the committed
    benchmarks/results) and every figure function the experiments' tasks save into their
    run directories, inspected on the rendered artists by
    :func:`transflow.plotting.figure_problems`: no legend over data, no overlapping
    texts, labelled axes, every colour keyed, readable log axes, explained error bars.
    Full and smoke-size records both (< 60 CPU seconds; about 20)."""
    import time

    import transflow.plotting as P

    cases = _style_cases()
    t0 = time.process_time()  # CPU seconds: the 2-core machine is shared
    drawn = []
    make_all = _make_all()
    by_function: dict[str, list[str]] = {}
    for path in make_all.discover():
        fid = path.stem.split("_", 1)[0].upper()
        by_function.setdefault(_figure_function(path), []).append(fid)
    for tasks in _experiment_figure_functions().values():
        for name in tasks:
            by_function.setdefault(name, [])
    assert {"plot_depth_factorial", "plot_schemes"} <= set(by_function), by_function
    for name, fids in sorted(by_function.items()):
        assert hasattr(P, name), f"{name} is not a transflow.plotting function"
        variants = [v for (f, v) in cases if f == name]
        assert "full" in variants, f"no full-size record for {name} ({fids})"
        for variant in variants:
            _check(cases[(name, variant)](), f"{name} ({variant}; {', '.join(fids) or 'run'})")
            drawn.append((name, variant))
    fperf = make_all.load(FIG_DIR / "fperf_benchmarks.py")
    _check(P.plot_benchmarks(fperf._load(fperf.RESULTS)), "FPERF (committed results)")
    seconds = time.process_time() - t0
    assert len(by_function) >= 20 and len(drawn) >= 30, drawn
    assert seconds < 60, f"drawing every figure took {seconds:.0f} CPU s"


# --------------------------------------------------------------------------- smoke vs full
def _snapshot(root: pathlib.Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "smoke" not in p.relative_to(root).parts
    }


_TINY_FIGURE = (
    "FIGURE = {{'id': '{fid}', 'title': 't', 'command': 'c', 'config': 'library call'}}\n"
    "def make(out_dir):\n"
    "    from transflow.plotting import figure_smoke, save_figure\n"
    "    from transflow.plotting._style import _pyplot\n"
    "    fig, ax = _pyplot().subplots()\n"
    "    n = 3 if figure_smoke() else 30\n"
    "    ax.plot(range(n), range(n), label='value = k')\n"
    "    ax.set(xlabel='k', ylabel='value')\n"
    "    ax.legend(loc='lower right')\n"
    "    save_figure(fig, out_dir, '{fid}', {{'n': n}})\n"
    "    return {{'n': n}}\n"
)


def test_make_figures_marks_a_figure_the_checker_faults_as_failed(tmp_path, monkeypatch):
    """``make figures`` runs the figure checker on every figure it saves
    (``save_figure(check=True)``): a figure with a problem (here an unlabelled y axis and
    a line in no legend) is still written, for a reader to look at, but its manifest
    entry is FAILED with the checker's findings, and the command exits 1."""
    make_all = _make_all()
    figs, out = tmp_path / "figs", tmp_path / "out"
    figs.mkdir()
    bad = _TINY_FIGURE.replace("label='value = k'", "").replace(", ylabel='value'", "")
    bad = bad.replace("    ax.legend(loc='lower right')\n", "")
    (figs / "f1_tiny.py").write_text(bad.format(fid="F1"))
    monkeypatch.delenv("TRANSFLOW_SMOKE", raising=False)
    assert make_all.main(["--figures-dir", str(figs), "--out", str(out)]) == 1
    entry = json.loads((out / "manifest.json").read_text())["F1"]
    assert entry["status"] == "FAILED"
    assert "figure checker found 2 problem(s)" in entry["error"], entry["error"]
    assert "no y label" in entry["error"] and "no legend" in entry["error"]
    assert (out / "F1.png").exists() and (out / "F1.json").exists()


def test_make_figures_smoke_leaves_every_full_size_figure_and_manifest_entry(tmp_path, monkeypatch):
    """``make_all.py --smoke`` (every figure, and a subset) writes into ``<out>/smoke/``
    with its own manifest: every full-size figure file and manifest entry of ``<out>``
    stays byte-identical; the smoke entries say smoke and the command that made them."""
    make_all = _make_all()
    figs, out = tmp_path / "figs", tmp_path / "out"
    figs.mkdir()
    for fid in ("F1", "F2"):
        (figs / f"{fid.lower()}_tiny.py").write_text(_TINY_FIGURE.format(fid=fid))
    monkeypatch.delenv("TRANSFLOW_SMOKE", raising=False)
    assert make_all.main(["--figures-dir", str(figs), "--out", str(out)]) == 0
    full = _snapshot(out)
    assert {"F1.png", "F1.pdf", "F1.json", "F2.png", "manifest.json"} <= set(full)
    assert json.loads(full["manifest.json"])["F1"]["smoke"] is False
    monkeypatch.setenv("TRANSFLOW_SMOKE", "0")  # restored after the test: main sets it
    for argv in (["--smoke"], ["--smoke", "F2"]):
        assert make_all.main(["--figures-dir", str(figs), "--out", str(out), *argv]) == 0
        assert _snapshot(out) == full  # nothing full-size changed, byte for byte
    smoke = json.loads((out / "smoke" / "manifest.json").read_text())
    assert set(smoke) == {"F1", "F2"} and all(e["smoke"] for e in smoke.values())
    assert smoke["F2"]["command"] == "python paper_figures/make_all.py --smoke F2"
    assert json.loads((out / "smoke" / "F1.json").read_text()) == {"smoke": True, "n": 3}
    assert json.loads(full["F1.json"]) == {"n": 30}
    # a full-size run after it leaves the smoke figures where they are
    monkeypatch.setenv("TRANSFLOW_SMOKE", "0")
    assert make_all.main(["--figures-dir", str(figs), "--out", str(out), "F1"]) == 0
    assert json.loads((out / "smoke" / "F1.json").read_text())["smoke"] is True


def test_smoke_f5_never_overwrites_the_full_size_f5(tmp_path, monkeypatch):
    """Issue 48: ``make_all.py --smoke F5`` overwrote paper_figures/out/F5.png and its
    manifest entry. Now the full-size files and entries are kept byte for byte, and the
    smoke F5 says so in the figure and its numbers."""
    make_all = _make_all()
    out = tmp_path / "out"
    out.mkdir()
    for ext in ("png", "pdf", "json"):
        (out / f"F5.{ext}").write_bytes(f"full-size F5 {ext}".encode())
    entry = {"id": "F5", "command": "make figures", "numbers": {"min_cosine_final": 0.999}}
    (out / "manifest.json").write_text(json.dumps({"F5": entry, "F1": {"id": "F1"}}))
    before = _snapshot(out)
    monkeypatch.setenv("TRANSFLOW_SMOKE", "0")
    assert make_all.main(["--smoke", "--out", str(out), "F5"]) == 0
    assert _snapshot(out) == before
    smoke = json.loads((out / "smoke" / "manifest.json").read_text())["F5"]
    assert smoke["status"] == "ok" and smoke["smoke"] is True, smoke.get("traceback")
    assert smoke["command"] == "python paper_figures/make_all.py --smoke F5"
    assert json.loads((out / "smoke" / "F5.json").read_text())["smoke"] is True
    assert (out / "smoke" / "F5.png").stat().st_size > 0


def test_a_smoke_figure_says_so_below_everything_it_shows():
    """The smoke stamp is a visible line under the lowest artist (the key below the
    panels included): it overlaps nothing and the figure still passes the checker."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import transflow.plotting as P
    from transflow.plotting._style import SMOKE_MARK

    curves = {
        "digits": {
            "step": [0, 10, 20],
            "loss": [2.3, 1.0, 0.5],
            "train_accuracy": [0.1, 0.6, 0.9],
            "eval_step": [0, 20],
            "eval_loss": [2.3, 0.6],
            "eval_accuracy": [0.1, 0.88],
        }
    }
    fig = P.plot_training_curves(curves, title="t")
    fig.canvas.draw()  # the laid-out figure (the layout engine moves the artists)
    renderer = fig.canvas.get_renderer()
    lowest = fig.get_tightbbox(renderer).y0 * fig.dpi  # inches -> display pixels
    P.smoke_mark(P.smoke_mark(fig))  # idempotent: one mark
    (stamp,) = [t for t in fig.texts if t.get_gid() == "smoke-mark"]
    assert stamp.get_text() == SMOKE_MARK and "SMOKE SIZE" in SMOKE_MARK
    box = stamp.get_window_extent(renderer)
    assert box.y1 <= lowest, (box, lowest)  # entirely below everything else
    assert P.figure_problems(fig) == []
    plt.close(fig)


def _fake_training_run(run_dir: pathlib.Path, overrides: list[str], accuracy: float) -> None:
    """A completed train_digits run directory as transflow-run leaves it: the resolved
    config of ``overrides``, curves.npz and DONE (no training)."""
    import numpy as np
    from omegaconf import OmegaConf
    from transflow.experiments.run import compose, prune

    cfg, name = compose(["experiment=train_digits", *overrides])
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "resolved.yaml").write_text(
        OmegaConf.to_yaml(prune(cfg, name), resolve=True)
    )
    np.savez(
        run_dir / "curves.npz",
        step=[0, 10],
        loss=[2.3, 0.4],
        train_accuracy=[0.1, 0.9],
        eval_step=[0, 10],
        eval_loss=[2.3, 0.5],
        eval_accuracy=[0.1, accuracy],
    )
    (run_dir / "DONE").write_text("")


def test_f10_plots_the_declared_run_not_the_newest_and_names_it(tmp_path, monkeypatch):
    """Issue 48: F10 plotted the newest outputs/train_digits/* run whatever its config (a
    resumed seed-1 run). It plots the newest run with the declared options (seed 0, the
    defaults, full size), or the run named in RUNS, and names it in its title."""
    import transflow.plotting as P

    monkeypatch.delenv("TRANSFLOW_SMOKE", raising=False)
    f10 = _make_all().load(FIG_DIR / "f10_training.py")
    runs = tmp_path / "outputs" / "train_digits"
    _fake_training_run(runs / "2026-12-01_10-00-00", [], 0.9777)  # the declared run
    _fake_training_run(runs / "2026-12-01_11-00-00", ["task.steps=1400"], 0.95)
    _fake_training_run(runs / "2026-12-02_10-00-00", ["seed=1"], 0.9638)  # newest
    _fake_training_run(runs / "2026-12-03_10-00-00", ["debug=smoke"], 0.1)
    assert f10.declared_run("train_digits", tmp_path) == runs / "2026-12-01_10-00-00"
    assert f10.declared_run("train_sequence", tmp_path) is None  # none: a library call
    monkeypatch.setitem(f10.RUNS, "train_digits", "outputs/train_digits/2026-12-02_10-00-00")
    assert f10.declared_run("train_digits", tmp_path) == runs / "2026-12-02_10-00-00"
    monkeypatch.setitem(f10.RUNS, "train_digits", "outputs/train_digits/nope")
    with pytest.raises(FileNotFoundError, match=r"RUNS\['train_digits'\]"):
        f10.declared_run("train_digits", tmp_path)
    monkeypatch.setitem(f10.RUNS, "train_digits", None)

    # the figure: curves of the declared run, named in the title and the numbers
    monkeypatch.setattr(f10, "ROOT", tmp_path)
    monkeypatch.setattr(f10, "_short_run", lambda task, steps: (_short_curves(), "library"))
    titles = []

    def keep_title(fig, out_dir, fid, data, **kw):
        titles.append(fig._suptitle.get_text())
        import matplotlib.pyplot as plt

        plt.close(fig)

    monkeypatch.setattr(P, "save_figure", keep_title)
    numbers = f10.make(tmp_path / "figs")
    assert numbers["digits_test_accuracy"] == 0.9777
    assert numbers["digits_source"] == "run outputs/train_digits/2026-12-01_10-00-00 (seed 0)"
    assert "digits: run outputs/train_digits/2026-12-01_10-00-00 (seed 0)" in titles[0]


def _short_curves() -> dict:
    return {
        "step": [0, 5],
        "loss": [1.0, 0.5],
        "train_accuracy": [0.5, 0.9],
        "eval_step": [0, 5],
        "eval_loss": [1.0, 0.6],
        "eval_accuracy": [0.5, 1.0],
    }
