"""The summary of a sweep (``transflow-run -m ...``): one table across its jobs.

:class:`SweepSummary` is a Hydra callback (``configs/hydra/default.yaml``,
``hydra.callbacks.sweep_summary``): after every job of a sweep and when the sweep ends it
rewrites, in the sweep directory,

- ``sweep_summary.md``: a markdown table, one row per job: the job number, the swept
  parameters, the status, the claim verdict (``PASS``, ``FAILED: <names>`` or
  ``INCOMPLETE: <counts>``) and the job's headline numbers (``summary.json``);
- ``sweep_summary.csv``: the same table;
- ``sweep_summary.json``: ``{"sweep_dir", "params", "columns", "rows"}`` with full values.

Because it is rewritten after every job, a sweep that stops early (``claims=enforce`` and a
failing claim) still has a summary of the jobs that ran. :func:`plot_sweep` draws one
summary column against a swept parameter.

This module imports neither JAX nor torch.
"""

from __future__ import annotations

import csv
import io
import json
import math
import pathlib
from typing import Any

from hydra.experimental.callback import Callback

from .context import INCOMPLETE, ClaimsOutcome, markdown_table, md_cell, to_jsonable, write_atomic

__all__ = ["SweepSummary", "load_sweep", "plot_sweep", "summarize_sweep", "write_sweep_summary"]

_FIXED = ["job", "status", "claims", "seconds"]


def _read_json(path: pathlib.Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _overrides(job_dir: pathlib.Path) -> dict[str, str]:
    path = job_dir / ".hydra" / "overrides.yaml"
    if not path.exists():
        return {}
    import yaml

    items = (str(item).partition("=") for item in yaml.safe_load(path.read_text()) or [])
    return {key.lstrip("+~"): value for key, _, value in items}


def _scalar(v: Any) -> bool:
    return v is None or isinstance(v, bool | int | float) or (isinstance(v, str) and len(v) <= 60)


def summarize_sweep(sweep_dir: str | pathlib.Path) -> dict[str, Any]:
    """The sweep's table as a dict: ``params`` (the swept keys), ``columns``, ``rows``.

    Jobs are the numbered subdirectories of ``sweep_dir``. ``params`` are the override keys
    whose values differ between jobs (all override keys when there is a single job). A row
    has ``job``, one entry per parameter, ``status`` (``status.json``: COMPLETED, FAILED,
    RUNNING, or MISSING), ``claims`` (``PASS``, ``FAILED: a; b`` with the names of the
    failing enforced claims, ``INCOMPLETE: k of n PASS, m not enforced`` as the job's
    console and report say (:class:`~transflow.experiments.context.ClaimsOutcome`), or
    ``""`` when the task states none), ``seconds`` and every
    scalar of the job's ``summary.json``.
    """
    sweep_dir = pathlib.Path(sweep_dir)
    jobs = sorted(
        (p for p in sweep_dir.iterdir() if p.is_dir() and p.name.isdigit()),
        key=lambda p: int(p.name),
    )
    overrides = {p.name: _overrides(p) for p in jobs}
    keys = list(dict.fromkeys(k for ov in overrides.values() for k in ov))  # in order, once
    varying = [k for k in keys if len({ov.get(k) for ov in overrides.values()}) > 1]
    params = varying if varying or len(jobs) != 1 else keys
    rows, metric_cols = [], []
    for job in jobs:
        status = _read_json(job / "status.json")
        summary = _read_json(job / "summary.json")
        outcome = ClaimsOutcome(summary.get("claims") or [])
        row: dict[str, Any] = {"job": int(job.name)}
        row.update({k: overrides[job.name].get(k, "") for k in params})
        row["status"] = status.get("status", "MISSING")
        row["claims"] = (
            ("FAILED: " + "; ".join(outcome.failed))
            if outcome.failed
            else (outcome.line if outcome.verdict == INCOMPLETE else outcome.verdict)
        )
        if row["status"] == "FAILED" and not summary:
            row["claims"] = row["claims"] or "-"
            row["error"] = str(status.get("error", ""))[:200]
        row["seconds"] = status.get("seconds")
        for k, v in summary.items():
            if k in ("claims", "claims_pass", "claims_verdict") or not _scalar(v):
                continue
            row[k] = v
            if k not in metric_cols:
                metric_cols.append(k)
        rows.append(row)
    extra = ["error"] if any("error" in r for r in rows) else []
    columns = ["job", *params, *_FIXED[1:], *extra, *metric_cols]
    return {
        "sweep_dir": str(sweep_dir),
        "params": params,
        "columns": columns,
        "rows": to_jsonable(rows),
        "n_jobs": len(rows),
        "n_failed_claims": sum(str(r["claims"]).startswith("FAILED") for r in rows),
        "n_failed_jobs": sum(r["status"] == "FAILED" for r in rows),
    }


def write_sweep_summary(sweep_dir: str | pathlib.Path) -> dict[str, Any]:
    """Write ``sweep_summary.md``, ``.csv`` and ``.json`` into ``sweep_dir``; returns the
    summary (:func:`summarize_sweep`)."""
    sweep_dir = pathlib.Path(sweep_dir)
    s = summarize_sweep(sweep_dir)
    cols, rows = s["columns"], s["rows"]
    md = [
        f"# Sweep summary: {sweep_dir}",
        "",
        f"{s['n_jobs']} jobs; {s['n_failed_jobs']} FAILED; {s['n_failed_claims']} with "
        "failing claims. Swept: " + (", ".join(f"`{p}`" for p in s["params"]) or "nothing") + ".",
        "",
        markdown_table(map(md_cell, cols), ([md_cell(r.get(c, "")) for c in cols] for r in rows)),
    ]
    write_atomic(sweep_dir / "sweep_summary.md", "\n".join(md) + "\n")
    table = io.StringIO(newline="")
    w = csv.DictWriter(table, fieldnames=cols, extrasaction="ignore")
    w.writeheader()
    w.writerows({c: r.get(c, "") for c in cols} for r in rows)
    write_atomic(sweep_dir / "sweep_summary.csv", table.getvalue())
    write_atomic(sweep_dir / "sweep_summary.json", json.dumps(s, indent=2, allow_nan=True) + "\n")
    return s


def load_sweep(sweep: str | pathlib.Path | dict) -> dict[str, Any]:
    """A sweep summary: ``sweep_summary.json`` of a sweep directory (computed from the job
    directories if it is missing), or the dict itself."""
    if isinstance(sweep, dict):
        return sweep
    path = pathlib.Path(sweep)
    file = path if path.is_file() else path / "sweep_summary.json"
    return json.loads(file.read_text()) if file.exists() else summarize_sweep(path)


def _number(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def plot_sweep(
    sweep: str | pathlib.Path | dict,
    y: str,
    x: str,
    *,
    hue: str | None = None,
    logx: bool = False,
    logy: bool = False,
    ax: Any = None,
):
    """Plot the summary column ``y`` against the swept parameter ``x``; returns the figure.

    ``sweep`` is a sweep directory, its ``sweep_summary.json`` or a summary dict. ``hue``
    (another swept parameter) draws one line per value. Jobs whose claims failed are
    marked with a red ×, FAILED jobs (no value) are left out.

    Example (a sweep over the clustering temperature)::

        transflow-run -m experiment=clustering task.temperature=0.5,1,2
        fig = plot_sweep("multirun/clustering/<date>_<time>", "t_cluster", "task.temperature")
        fig.savefig("t_cluster.png")
    """
    from transflow.plotting import figure_style

    with figure_style():  # the style of every transflow figure (transflow.plotting.STYLE)
        return _plot_sweep(load_sweep(sweep), y, x, hue=hue, logx=logx, logy=logy, ax=ax)


def _plot_sweep(s: dict, y: str, x: str, *, hue, logx, logy, ax):
    from transflow.plotting import new_figure
    from transflow.plotting._style import finish, integer_axis

    rows = s["rows"]
    for key in (x, y, hue):
        if key is not None and key not in s["columns"]:
            raise KeyError(
                f"plot_sweep: {key!r} is not a column of the sweep summary; columns are "
                f"{s['columns']}."
            )
    fig, ax = new_figure(3.2) if ax is None else (ax.figure, ax)
    groups: dict[Any, list[dict]] = {}
    drawn: dict[str, list[float]] = {"x": [], "y": []}
    for r in rows:
        groups.setdefault(r.get(hue) if hue else None, []).append(r)
    for label, group in groups.items():
        pts = sorted(
            (_number(r.get(x)), _number(r.get(y)), str(r.get("claims", "")).startswith("FAILED"))
            for r in group
        )
        pts = [p for p in pts if not (math.isnan(p[0]) or math.isnan(p[1]))]
        if not pts:
            continue
        xs, ys, _ = zip(*pts)
        drawn["x"] += xs
        drawn["y"] += ys
        ax.plot(xs, ys, "o-", label=f"{hue} = {label}" if hue else y)
        failed = [(a, c) for a, c, b in pts if b]
        if failed:
            fx, fy = zip(*failed)
            ax.plot(fx, fy, "x", color="tab:red", markersize=10, mew=2, label="claims FAILED")
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    for name, values in drawn.items():  # integer data (a count, a size): integer ticks
        if values and all(float(v).is_integer() for v in values):
            integer_axis(getattr(ax, f"{name}axis"))
    ax.legend(fontsize="small")  # every drawn colour is keyed (transflow.plotting checks)
    ax.set_title(f"{y} vs {x} ({len(rows)} jobs)", fontsize="medium")
    return finish(fig)


class SweepSummary(Callback):
    """Hydra callback writing the sweep summary (:func:`write_sweep_summary`).

    Does nothing for single runs. Registered in ``configs/hydra/default.yaml``.
    """

    def _sweep_dir(self, config: Any) -> pathlib.Path | None:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        try:
            hc = HydraConfig.get()
        except ValueError:
            return None
        if hc.mode != RunMode.MULTIRUN:
            return None
        return pathlib.Path(str(hc.sweep.dir))

    def on_job_end(self, config: Any, job_return: Any = None, **kwargs: Any) -> None:
        sweep_dir = self._sweep_dir(config)
        if sweep_dir is not None and sweep_dir.is_dir():
            write_sweep_summary(sweep_dir)

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        from omegaconf import OmegaConf

        sweep_dir = pathlib.Path(str(OmegaConf.select(config, "hydra.sweep.dir")))
        if not sweep_dir.is_dir():
            return
        s = write_sweep_summary(sweep_dir)
        print(
            f"transflow-run: sweep of {s['n_jobs']} jobs finished ({s['n_failed_jobs']} "
            f"FAILED, {s['n_failed_claims']} with failing claims); summary in "
            f"{sweep_dir / 'sweep_summary.md'} (.csv, .json)"
        )
