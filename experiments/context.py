"""The run context handed to every task: where results go and how to write them.

A task ``run(cfg, ctx)`` writes everything through ``ctx`` so that every run directory
has the same layout::

    <run_dir>/
      .hydra/            config.yaml (resolved), overrides.yaml, hydra.yaml (by Hydra)
      status.json        RUNNING → COMPLETED | FAILED (+ error and traceback), timings
      metrics.jsonl      one JSON object per ctx.log(...) call
      <name>.npz         ctx.save_arrays(name, ...)
      <name>.png/.pdf    ctx.save_figure(fig, name)
      report.md          ctx.report(...) text, then the summary table
      summary.json       the dict returned by run(cfg, ctx)
      DONE               written last, only after a successful run

This module imports neither JAX nor torch.
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
import sys
from collections.abc import Iterable, Iterator
from typing import Any

from transflow._records import to_jsonable

__all__ = ["RunContext", "to_jsonable"]


def _json_dumps(obj: Any) -> str:
    return json.dumps(to_jsonable(obj), allow_nan=True)


@dataclasses.dataclass
class RunContext:
    """Where a task writes its results (one per job).

    Attributes:
        run_dir: the job's directory (created if missing).
        smoke: ``debug=smoke``: the task must shrink itself to run in a few seconds.
        seed: the job's seed (top-level ``seed``).
        precision: ``"fp32"``, ``"fp64"`` or ``"both"``; x64 is enabled for the last two.
        cfg: the whole composed config (``grid``, ``model``, ``scheme``, ``task``, ...),
            or ``None`` when a task is run outside ``transflow-run``.

    Example:
        >>> import tempfile, pathlib
        >>> ctx = RunContext(pathlib.Path(tempfile.mkdtemp()), smoke=True)
        >>> ctx.log({"step": 0, "loss": 1.5})
        >>> (ctx.run_dir / "metrics.jsonl").read_text()
        '{"step": 0, "loss": 1.5}\\n'
    """

    run_dir: pathlib.Path
    smoke: bool = False
    seed: int = 0
    precision: str = "both"
    cfg: Any = None
    claims: list[dict[str, Any]] = dataclasses.field(default_factory=list, init=False, repr=False)

    def __post_init__(self):
        self.run_dir = pathlib.Path(self.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)

    # ------------------------------------------------------------------ paths
    @property
    def metrics_path(self) -> pathlib.Path:
        return self.run_dir / "metrics.jsonl"

    @property
    def report_path(self) -> pathlib.Path:
        return self.run_dir / "report.md"

    @property
    def dtypes(self) -> tuple[str, ...]:
        """The float dtypes this job is asked to run in: ``("float32",)``, … or both."""
        return {"fp32": ("float32",), "fp64": ("float64",)}.get(
            self.precision, ("float32", "float64")
        )

    # ------------------------------------------------------------------ writers
    def log(self, record: dict[str, Any]) -> None:
        """Append ``record`` as one JSON line to ``metrics.jsonl``."""
        if not isinstance(record, dict):
            raise TypeError(f"ctx.log: `record` must be a dict, got {type(record).__name__}.")
        with self.metrics_path.open("a") as f:
            f.write(_json_dumps(record) + "\n")

    def save_arrays(self, name: str, **arrays: Any) -> pathlib.Path:
        """Save named arrays to ``<run_dir>/<name>.npz``; returns the path."""
        import numpy as np

        _check_name("name", name)
        if not arrays:
            raise ValueError(f"ctx.save_arrays({name!r}): give at least one array as keyword.")
        path = self.run_dir / f"{name.removesuffix('.npz')}.npz"
        np.savez(path, **{k: np.asarray(v) for k, v in arrays.items()})
        return path

    def save_figure(self, fig: Any, name: str, *, dpi: int = 150) -> list[pathlib.Path]:
        """Save a matplotlib figure as ``<name>.png`` and ``<name>.pdf`` and close it."""
        import matplotlib.pyplot as plt

        _check_name("name", name)
        paths = [self.run_dir / f"{name}.png", self.run_dir / f"{name}.pdf"]
        for p in paths:
            fig.savefig(p, dpi=dpi, bbox_inches="tight")
        plt.close(fig)
        return paths

    def progress(self, iterable: Iterable, total: int | None = None, desc: str = "") -> Iterator:
        """A tqdm progress bar with ETA over ``iterable``; silent when stderr is not a TTY."""
        from tqdm.auto import tqdm

        quiet = not (hasattr(sys.stderr, "isatty") and sys.stderr.isatty())
        return iter(
            tqdm(iterable, total=total, desc=desc, disable=quiet, file=sys.stderr, leave=False)
        )

    def claim(
        self, name: str, value: Any, bound: Any, *, op: str = "<=", enforce: bool = True
    ) -> bool:
        """Record a claim check ``value <op> bound``; returns whether it holds.

        ``transflow-run`` writes every claim into ``summary.json`` (``claims``: name, value,
        op, bound, pass, enforced) and a table into ``report.md``. If any *enforced* claim
        fails, the run is marked FAILED (no ``DONE``) and the command exits non-zero. Use
        ``enforce=False`` for a claim that does not hold at this size (``debug=smoke``):
        it is recorded, not enforced. A NaN value never passes.

        Example:
            >>> import tempfile
            >>> ctx = RunContext(pathlib.Path(tempfile.mkdtemp()))
            >>> ctx.claim("max_abs_fp64", 2e-15, 1e-10)
            True
            >>> ctx.claim("regions", 118000, 117649, op="==")
            False
        """
        import math

        ops = {
            "<=": lambda a, b: a <= b,
            "<": lambda a, b: a < b,
            ">=": lambda a, b: a >= b,
            ">": lambda a, b: a > b,
            "==": lambda a, b: a == b,
        }
        if op not in ops:
            raise ValueError(f"ctx.claim({name!r}): op must be one of {sorted(ops)}, got {op!r}.")
        value, bound = to_jsonable(value), to_jsonable(bound)
        is_nan = isinstance(value, float) and math.isnan(value)
        ok = bool(not is_nan and ops[op](value, bound))
        self.claims.append(
            {
                "name": name,
                "value": value,
                "op": op,
                "bound": bound,
                "pass": ok,
                "enforced": bool(enforce),
            }
        )
        return ok

    @property
    def failed_claims(self) -> list[str]:
        """Names of the enforced claims that failed."""
        return [c["name"] for c in self.claims if c["enforced"] and not c["pass"]]

    def report(self, text: str) -> None:
        """Append markdown ``text`` (a paragraph, a table, ...) to ``report.md``."""
        with self.report_path.open("a") as f:
            f.write(text.rstrip("\n") + "\n\n")


def _check_name(arg: str, name: str) -> None:
    if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
        raise ValueError(
            f"`{arg}` must be a plain file name without '/' (a file in the run directory), "
            f"got {name!r}."
        )


def claims_markdown(claims: list[dict[str, Any]]) -> str:
    """The claim checks as a markdown table (for ``report.md``)."""
    if not claims:
        return ""
    lines = ["## Claim checks", "", "| claim | value | bound | result |", "|---|---|---|---|"]
    for c in claims:
        verdict = "PASS" if c["pass"] else ("FAIL" if c["enforced"] else "fail (not enforced)")
        lines.append(f"| {c['name']} | {c['value']} | {c['op']} {c['bound']} | {verdict} |")
    return "\n".join(lines)


class ClaimsFailed(RuntimeError):
    """Raised by ``transflow-run`` after the task when an enforced claim check failed."""


def summary_markdown(summary: dict[str, Any]) -> str:
    """A two-column markdown table of the headline numbers of a run."""
    lines = ["## Summary", "", "| quantity | value |", "|---|---|"]

    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.3e}" if v != 0 and (abs(v) < 1e-3 or abs(v) >= 1e5) else f"{v:.6g}"
        if isinstance(v, list | dict):
            s = json.dumps(v)
            return s if len(s) < 80 else s[:77] + "..."
        return str(v)

    for k, v in to_jsonable(summary).items():
        if isinstance(v, float) and math.isnan(v):
            v = "nan"
        lines.append(f"| {k} | {fmt(v)} |")
    return "\n".join(lines)
