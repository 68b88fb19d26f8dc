"""The wheel is a working toolkit: one top-level package, configs inside, runs anywhere.

Builds the wheel from a copy of the sources, installs it (without dependencies: they come
from the test environment) into a temporary directory and runs the smoke experiment from
a third directory, so nothing of the repository can leak in.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import zipfile

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent


def _listed_packages() -> set[str]:
    import tomllib

    meta = tomllib.loads((REPO / "pyproject.toml").read_text())
    return set(meta["tool"]["setuptools"]["packages"])


def test_every_subpackage_is_listed():
    """A new folder of src/transflow must be added to pyproject's explicit package list."""
    found = {
        ".".join(p.parent.relative_to(REPO / "src").parts)
        for p in (REPO / "src" / "transflow").rglob("__init__.py")
        if "__pycache__" not in p.parts
    }
    missing = sorted(found - _listed_packages())
    assert not missing, f"add {missing} to [tool.setuptools] packages in pyproject.toml"


def _project() -> dict:
    import tomllib

    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def test_license_file_matches_the_metadata():
    import yaml

    text = (REPO / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text, "LICENSE must be the full Apache-2.0 text"
    project = _project()
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]
    cff = yaml.safe_load((REPO / "CITATION.cff").read_text())
    assert cff["license"] == project["license"]


def test_no_placeholder_repository_or_site_address():
    """No public repository or documentation site exists yet: no file states an address
    for them (a placeholder sent users nowhere, issue #38)."""
    import yaml

    assert "urls" not in _project()
    mk = {
        k
        for line in (REPO / "mkdocs.yml").read_text().splitlines()
        if ":" in line and not line.startswith((" ", "#"))
        for k in [line.split(":", 1)[0]]
    }
    assert not mk & {"repo_url", "site_url", "repo_name"}
    cff = yaml.safe_load((REPO / "CITATION.cff").read_text())
    assert not set(cff) & {"repository-code", "url", "repository"}
    for path in ("pyproject.toml", "mkdocs.yml", "CITATION.cff", "README.md"):
        assert "transflow-dev" not in (REPO / path).read_text(), path


def test_readme_install_line_takes_cpu_torch_and_names_the_extras():
    pin = next(
        line.strip()
        for line in (REPO / "constraints" / "cpu.txt").read_text().splitlines()
        if line.startswith("torch==")
    )
    readme = (REPO / "README.md").read_text()
    line = next((ln for ln in readme.splitlines() if ln.startswith(f"pip install {pin} ")), "")
    assert "--index-url https://download.pytorch.org/whl/cpu" in line, (
        f"README must install {pin} from the CPU index (the default index gives a CUDA build)"
    )
    extras = set(_project()["optional-dependencies"])
    assert {"reference", "data"} <= extras
    assert 'pip install ".[reference,data]"' in readme


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> pathlib.Path:
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO / name, src / name)
    for name in ("src", "experiments", "configs"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (whl,) = out.glob("transflow-*.whl")
    return whl


def test_wheel_has_one_top_level_package(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    top = {n.split("/")[0] for n in names}
    top = {t for t in top if not t.endswith(".dist-info")}
    assert top == {"transflow"}, f"the wheel installs top-level names {sorted(top)}"
    packages = {n.rsplit("/", 1)[0].replace("/", ".") for n in names if n.endswith("__init__.py")}
    assert _listed_packages() <= packages
    for path in (REPO / "configs").rglob("*.yaml"):
        rel = path.relative_to(REPO / "configs").as_posix()
        assert f"transflow/configs/{rel}" in names, f"configs/{rel} is not in the wheel"
    for path in (REPO / "experiments" / "tasks").glob("[!_]*.py"):
        assert f"transflow/experiments/tasks/{path.name}" in names


def test_wheel_ships_the_license(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        (lic,) = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
        assert "Apache License" in z.read(lic).decode()
        (meta,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        metadata = z.read(meta).decode()
    assert "License-Expression: Apache-2.0" in metadata
    assert "Project-URL:" not in metadata  # no placeholder address (no public repository yet)


def test_installed_wheel_runs_an_experiment_from_any_directory(wheel, tmp_path):
    site = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index"]
        + ["--target", str(site), str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = dict(os.environ, PYTHONPATH=str(site), HYDRA_FULL_ERROR="1")
    env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    where = subprocess.run(
        [
            sys.executable,
            "-c",
            "import transflow, transflow.configs as c; print(transflow.__file__)",
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
    )
    assert where.returncode == 0, where.stderr
    assert pathlib.Path(where.stdout.strip()).is_relative_to(site), where.stdout

    exe = site / "bin" / "transflow-run"
    assert exe.exists(), "the wheel did not install the transflow-run console script"
    run = subprocess.run(
        [str(exe), "experiment=equivalence", "debug=smoke"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    done = list((work / "outputs").rglob("equivalence/*/DONE"))
    assert len(done) == 1, f"no finished run directory under {work}/outputs: {run.stdout}"
    assert (done[0].parent / "summary.json").exists()
