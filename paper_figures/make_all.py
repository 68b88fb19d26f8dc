"""Regenerate the paper figures (``make figures``).

Every ``paper_figures/f<N>_<short_name>.py`` defines::

    FIGURE = {"id": "F3", "title": "...", "command": "make figures",
              "config": "experiment=... (or 'library call')"}

    def make(out_dir: pathlib.Path) -> dict:
        # draw with matplotlib (Agg); save out_dir/F3.png, out_dir/F3.pdf and the plotted
        # numbers out_dir/F3.json (or .csv); return a small dict of headline numbers
        ...

This script discovers the scripts, runs each ``make(out_dir)`` (default
``paper_figures/out/``) and writes ``out_dir/manifest.json``: figure id → title, config,
command, script, numbers, files, status, seconds. A failing figure is reported and the
others still run; the exit status is then 1.

Usage::

    python paper_figures/make_all.py              # every figure
    python paper_figures/make_all.py F1 F2        # a subset (ids, case-insensitive)
    python paper_figures/make_all.py --list       # list the figures
    python paper_figures/make_all.py --smoke F2   # TRANSFLOW_SMOKE=1: tiny versions (tests)
    python paper_figures/make_all.py --out out/figs

Smoke-size figures (``--smoke``, or ``TRANSFLOW_SMOKE=1``) go into ``<out>/smoke/`` with
their own manifest (entries marked ``"smoke": true``), and each says "smoke size" under
its panels: they never overwrite a full-size figure or its manifest entry.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pathlib
import re
import sys
import time
import traceback
from types import ModuleType
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent
DEFAULT_OUT = ROOT / "out"
REQUIRED_KEYS = ("id", "title", "command", "config")

__all__ = ["SMOKE_DIR", "discover", "main", "output_dir", "run_figures"]

#: The subdirectory of the output directory that smoke-size figures go to.
SMOKE_DIR = "smoke"


def _smoke() -> bool:
    return os.environ.get("TRANSFLOW_SMOKE", "0") not in ("", "0", "false", "False")


def output_dir(out_dir: pathlib.Path, smoke: bool | None = None) -> pathlib.Path:
    """Where the figures go: ``out_dir``, or ``out_dir/smoke`` for smoke-size figures
    (``smoke``; None: ``TRANSFLOW_SMOKE``), so that they never replace full-size ones.

    Example:
        >>> output_dir(pathlib.Path("out"), smoke=True), output_dir(pathlib.Path("out"), False)
        (PosixPath('out/smoke'), PosixPath('out'))
    """
    out_dir = pathlib.Path(out_dir)
    smoke = _smoke() if smoke is None else smoke
    return out_dir if not smoke or out_dir.name == SMOKE_DIR else out_dir / SMOKE_DIR


def _figure_id_from_path(path: pathlib.Path) -> str:
    return path.stem.split("_", 1)[0].upper()


def _sort_key(path: pathlib.Path):
    m = re.match(r"f(\d+)_", path.stem)
    return (int(m.group(1)) if m else 10**9, path.stem)


def discover(fig_dir: pathlib.Path = ROOT) -> list[pathlib.Path]:
    """The figure scripts ``f<id>_<name>.py`` in ``fig_dir``: numbered ids in order
    (F1, F2, …, F10), then the others (e.g. ``fperf_benchmarks.py`` → FPERF)."""
    return sorted(
        (p for p in fig_dir.glob("f*_*.py") if re.match(r"f[A-Za-z0-9]+_\w", p.stem)),
        key=_sort_key,
    )


def load(path: pathlib.Path) -> ModuleType:
    """Import a figure script by path and check its ``FIGURE``/``make`` protocol."""
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    name = f"paper_figures_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look modules up by name
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    fig = getattr(module, "FIGURE", None)
    if not isinstance(fig, dict) or any(k not in fig for k in REQUIRED_KEYS):
        raise ValueError(
            f"{path.name} must define FIGURE = dict with keys {list(REQUIRED_KEYS)}; got {fig!r}."
        )
    if not callable(getattr(module, "make", None)):
        raise ValueError(f"{path.name} must define `def make(out_dir: pathlib.Path) -> dict`.")
    return module


class _IsolateJax:
    """Restore JAX's x64 flag after a figure (figures run one after another in-process)."""

    def __enter__(self):
        self.old = None
        if "jax" in sys.modules:
            self.old = bool(sys.modules["jax"].config.jax_enable_x64)
        return self

    def __exit__(self, *exc):
        if "jax" in sys.modules:
            sys.modules["jax"].config.update("jax_enable_x64", bool(self.old))
        if "matplotlib.pyplot" in sys.modules:
            sys.modules["matplotlib.pyplot"].close("all")
        return False


def _run_one(path: pathlib.Path, out_dir: pathlib.Path) -> dict[str, Any]:
    fid = _figure_id_from_path(path)
    smoke = _smoke()
    entry: dict[str, Any] = {"id": fid, "script": f"paper_figures/{path.name}", "smoke": smoke}
    t0 = time.perf_counter()
    try:
        with _IsolateJax():
            module = load(path)
            entry.update({k: module.FIGURE[k] for k in REQUIRED_KEYS})
            fid = str(module.FIGURE["id"])
            if smoke:  # the command that made this smoke-size figure
                entry["command"] = f"python paper_figures/make_all.py --smoke {fid}"
            numbers = module.make(out_dir)
        if numbers is not None and not isinstance(numbers, dict):
            raise TypeError(f"make(out_dir) must return a dict, got {type(numbers).__name__}.")
        entry["numbers"] = numbers or {}
        missing = [
            f"{fid}.{ext}" for ext in ("png", "pdf") if not (out_dir / f"{fid}.{ext}").exists()
        ]
        if missing:
            raise FileNotFoundError(f"{path.name} did not write {missing} into {out_dir}.")
        if not any((out_dir / f"{fid}.{ext}").exists() for ext in ("json", "csv")):
            raise FileNotFoundError(
                f"{path.name} did not write the plotted numbers ({fid}.json or {fid}.csv)."
            )
        entry["status"] = "ok"
    except Exception as e:  # noqa: BLE001 - report and continue with the other figures
        entry["status"] = "FAILED"
        entry["error"] = f"{type(e).__name__}: {e}"
        entry["traceback"] = traceback.format_exc()
    entry["seconds"] = round(time.perf_counter() - t0, 2)
    entry["files"] = sorted(p.name for p in out_dir.glob(f"{fid}.*"))
    return entry


def _jsonable(obj: Any) -> Any:
    try:
        from transflow.experiments.context import to_jsonable

        return to_jsonable(obj)
    except ImportError:  # pragma: no cover - experiments is installed with transflow
        return json.loads(json.dumps(obj, default=str))


def run_figures(
    ids: list[str] | None = None,
    *,
    out_dir: pathlib.Path = DEFAULT_OUT,
    fig_dir: pathlib.Path = ROOT,
) -> dict[str, dict[str, Any]]:
    """Run the selected figures (all when ``ids`` is empty) and write the manifest.

    A full run rewrites ``manifest.json``; a subset updates its entries in place (and drops
    entries of scripts that no longer exist). Smoke-size figures (``TRANSFLOW_SMOKE=1``)
    go into :func:`output_dir` (``out_dir/smoke``) and its manifest.

    Returns the manifest entries of the figures that ran, keyed by figure id.
    """
    out_dir = output_dir(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    scripts = discover(fig_dir)
    wanted = {i.upper() for i in ids or []}
    known = {_figure_id_from_path(p) for p in scripts}
    unknown = sorted(wanted - known)
    if unknown:
        raise SystemExit(f"make_all: unknown figure id(s) {unknown}; available: {sorted(known)}")
    selected = [p for p in scripts if not wanted or _figure_id_from_path(p) in wanted]
    manifest_path = out_dir / "manifest.json"
    manifest: dict[str, Any] = {}
    if wanted and manifest_path.exists():  # a subset updates the manifest in place
        try:
            manifest = json.loads(manifest_path.read_text())
        except json.JSONDecodeError:
            manifest = {}
        present = {f"paper_figures/{p.name}" for p in scripts}
        manifest = {k: v for k, v in manifest.items() if v.get("script") in present}
    results = {}
    first_of: dict[str, pathlib.Path] = {}
    for path in selected:
        print(f"[make_all] {path.name} ...", flush=True)
        fid = _figure_id_from_path(path)
        if fid in first_of:
            # Two scripts with one id would overwrite each other's files: run the first only.
            entry = {
                "id": f"{fid}:{path.stem}",
                "script": f"paper_figures/{path.name}",
                "status": "FAILED",
                "error": f"duplicate figure id {fid}: also paper_figures/{first_of[fid].name}; "
                f"rename one of them (f<new id>_...py and FIGURE['id']).",
                "traceback": "",
                "seconds": 0.0,
                "files": [],
            }
        else:
            first_of[fid] = path
            entry = _run_one(path, out_dir)
        results[entry["id"]] = entry
        manifest[entry["id"]] = entry
        state = "ok" if entry["status"] == "ok" else f"FAILED: {entry['error']}"
        print(
            f"[make_all] {entry['id']} {state} ({entry['seconds']:.1f} s) "
            f"{' '.join(entry['files'])}",
            flush=True,
        )
        if entry["status"] != "ok":
            print(entry["traceback"], file=sys.stderr)
        manifest_path.write_text(json.dumps(_jsonable(manifest), indent=2) + "\n")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("ids", nargs="*", help="figure ids to make (default: all), e.g. F1 F2")
    parser.add_argument(
        "--out",
        type=pathlib.Path,
        default=DEFAULT_OUT,
        help="output directory (default: paper_figures/out)",
    )
    parser.add_argument("--list", action="store_true", help="list the figure scripts and exit")
    parser.add_argument(
        "--figures-dir",
        type=pathlib.Path,
        default=ROOT,
        help="where the f<N>_*.py scripts are (default: paper_figures/)",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="set TRANSFLOW_SMOKE=1: figures that support it make a tiny version, written "
        "into <out>/smoke/ (never over the full-size figures)",
    )
    args = parser.parse_args(argv)
    if args.list:
        for p in discover(args.figures_dir):
            print(f"{_figure_id_from_path(p):>4}  paper_figures/{p.name}")
        return 0
    if args.smoke:
        os.environ["TRANSFLOW_SMOKE"] = "1"
    os.environ.setdefault("MPLBACKEND", "Agg")
    results = run_figures(args.ids, out_dir=args.out, fig_dir=args.figures_dir)
    failed = [fid for fid, e in results.items() if e["status"] != "ok"]
    print(
        f"[make_all] {len(results) - len(failed)}/{len(results)} figures ok; manifest: "
        f"{output_dir(args.out) / 'manifest.json'}"
    )
    if failed:
        print(f"[make_all] FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
