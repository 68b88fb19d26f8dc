"""The run context handed to every task: where results go and how to write them.

A task ``run(cfg, ctx)`` writes everything through ``ctx`` so that every run directory
has the same layout::

    <run_dir>/
      .hydra/            config.yaml (resolved), overrides.yaml, hydra.yaml (by Hydra)
      status.json        RUNNING → COMPLETED | FAILED (+ error and traceback), timings
      metrics.jsonl      one JSON object per ctx.log(...) call
      <name>.npz         ctx.save_arrays(name, ...)
      <name>.png/.pdf    ctx.save_figure(fig, name)
      report.md          a header (task, command), ctx.report(...) sections, the summary
                         table and the claim checks
      summary.json       the dict returned by run(cfg, ctx)
      run.log            the run's log: what it printed, progress lines, claim verdicts
      DONE               written last, only after a successful run

This module imports neither JAX nor torch.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import operator
import pathlib
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sized
from typing import Any

from transflow._records import to_jsonable

__all__ = [
    "FAILED",
    "INCOMPLETE",
    "NOT_CHECKED",
    "NOT_ENFORCED",
    "PASS",
    "VERDICTS",
    "ClaimsFailed",
    "ClaimsOutcome",
    "RunContext",
    "RunLog",
    "claim_line",
    "claim_verdict",
    "claims_markdown",
    "release_compiled",
    "format_number",
    "markdown_table",
    "write_atomic",
    "md_cell",
    "summary_markdown",
    "to_jsonable",
]

#: Verdict of a claim that is enforced and holds.
PASS = "PASS"
#: Verdict of a claim that is enforced and does not hold (a missing value never holds).
FAILED = "FAILED"
#: Verdict of a claim recorded but not held to its bound at this size (``debug=smoke``),
#: or a finding.
NOT_ENFORCED = "not enforced"
#: Verdict of a claim about something the run did not produce (a cell it did not run).
NOT_CHECKED = "not checked"
#: The verdicts of one claim: the same word in the console, ``report.md`` and
#: ``summary.json`` (key ``verdict`` of every entry of ``claims``).
VERDICTS = (PASS, FAILED, NOT_ENFORCED, NOT_CHECKED)
#: The verdict of a run's claims together when none FAILED but not all are PASS.
INCOMPLETE = "INCOMPLETE"

#: The logger of a run: ``RunLog`` sends it to ``run.log`` and to the console.
LOGGER = "transflow.run"
#: The comparisons of :meth:`RunContext.claim`.
_OPS = {"<=": operator.le, "<": operator.lt, ">=": operator.ge, ">": operator.gt, "==": operator.eq}
#: When the last progress line was logged (``time.perf_counter()``), for RunLog's heartbeat.
_LAST_LINE = [0.0]


@dataclasses.dataclass
class RunContext:
    """Where a task writes its results (one per job).

    Attributes:
        run_dir: the job's directory (created if missing).
        smoke: ``debug=smoke`` (a label for reports and figures; the smoke sizes are
            configuration, ``configs/sizes/smoke/<task>.yaml``, already in the task's config).
        seed: the job's seed (top-level ``seed``).
        precision: ``"fp32"``, ``"fp64"`` or ``"both"``; x64 is enabled for the last two.
        cfg: the whole composed config (``task``, ``seed``, ... and the groups ``grid``,
            ``model``, ``scheme`` the task reads), or ``None`` outside ``transflow-run``.
        overrides: the command-line overrides of this job (``task.schemes=[lie,heun]``).
        not_enforced: claims (names or ``fnmatch`` patterns) recorded but not enforced in
            this run: the top-level ``not_enforced``, which ``configs/sizes/smoke/<task>.yaml``
            sets for the claims that do not hold at smoke size.

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
    overrides: tuple[str, ...] = ()
    not_enforced: tuple[str, ...] = ()
    #: seconds between two progress lines of :meth:`progress`
    progress_every: float = 5.0
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
            f.write(json.dumps(to_jsonable(record), allow_nan=True) + "\n")

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
        """Save ``fig`` as ``<name>.png``/``.pdf`` and close it (``debug=smoke``: smoke-marked
        first); then ``transflow.plotting.check_figure`` raises ``FigureProblems`` naming any
        problem it sees: the run is FAILED, the files stay for a reader to look at."""
        import matplotlib.pyplot as plt

        from transflow.plotting import check_figure, smoke_mark

        _check_name("name", name)
        if self.smoke:
            smoke_mark(fig)
        paths = [self.run_dir / f"{name}.png", self.run_dir / f"{name}.pdf"]
        try:
            for p in paths:
                fig.savefig(p, dpi=dpi, bbox_inches="tight")
            check_figure(fig, f"{name} ({paths[0]})", smoke=self.smoke)
        finally:
            plt.close(fig)
        return paths

    def progress(self, iterable: Iterable, total: int | None = None, desc: str = "") -> "Progress":
        """Iterate over ``iterable`` reporting progress every :attr:`progress_every` seconds
        (:class:`Progress`: lines in ``run.log`` and on the console, a bar on a terminal)."""
        return Progress(iterable, total=total, desc=desc, every=self.progress_every)

    def declared_not_enforced(self, name: str) -> bool:
        """Whether claim ``name`` is declared not enforced in this run (``not_enforced``).

        Example:
            >>> import tempfile
            >>> ctx = RunContext(pathlib.Path(tempfile.mkdtemp()), not_enforced=("|slope*",))
            >>> ctx.declared_not_enforced("|slope - 2| attention")
            True
            >>> ctx.declared_not_enforced("n_fail")
            False
        """
        import fnmatch

        return any(fnmatch.fnmatchcase(name, p) for p in self.not_enforced)

    def message(self, text: str) -> None:
        """Say ``text`` on the console and in ``run.log`` (e.g. "resumed from ...")."""
        logging.getLogger(LOGGER).info("%s", text)

    def claim(
        self,
        name: str,
        value: Any,
        bound: Any,
        *,
        op: str = "<=",
        enforce: bool = True,
        missing: str = "",
    ) -> bool:
        """Record a claim check ``value <op> bound``; returns whether it holds.

        ``transflow-run`` writes every claim into ``summary.json`` (``claims``: name, value,
        op, bound, pass, enforced, verdict), a table into ``report.md`` and a line on the
        console, all with the claim's :data:`VERDICTS` word, computed here once. If any
        *enforced* claim fails, the run is marked FAILED (no ``DONE``) and the command
        exits non-zero. A claim that does not hold at smoke size is declared in
        ``configs/sizes/smoke/<task>.yaml`` (``not_enforced``), not in the task: it is
        recorded, not enforced (:meth:`declared_not_enforced`), and its verdict is ``not
        enforced``. ``enforce=False`` is for a claim the task itself cannot check in this
        run (e.g. float64 sub-steps in a float32 job); its verdict is ``not enforced`` too.
        A missing value (NaN or None) never holds: it is shown as ``n/a (<missing>)`` and
        stored as ``null`` with ``missing`` saying why (give the reason, e.g.
        ``missing="one refinement factor"``).

        Example:
            >>> import tempfile
            >>> ctx = RunContext(pathlib.Path(tempfile.mkdtemp()))
            >>> ctx.claim("max_abs_fp64", 2e-15, 1e-10)
            True
            >>> ctx.claim("regions", 118000, 117649, op="==")
            False
            >>> ctx.claim("order", float("nan"), 0.2, enforce=False, missing="one factor")
            False
            >>> [c["verdict"] for c in ctx.claims]
            ['PASS', 'FAILED', 'not enforced']
            >>> claim_line(ctx.claims[-1])
            'order: n/a (one factor) <= 0.2 → not enforced'
        """
        if op not in _OPS:
            raise ValueError(f"ctx.claim({name!r}): op must be one of {sorted(_OPS)}, got {op!r}.")
        value, bound = to_jsonable(value), to_jsonable(bound)
        absent = value is None or (isinstance(value, float) and math.isnan(value))
        ok = bool(not absent and _OPS[op](value, bound))
        enforced = bool(enforce) and not self.declared_not_enforced(name)
        verdict = (PASS if ok else FAILED) if enforced else NOT_ENFORCED
        missing = (missing or "no value") if absent else None
        self._add_claim(name, None if absent else value, op, bound, ok, enforced, verdict, missing)
        return ok

    def _add_claim(self, name, value, op, bound, ok, enforced, verdict, missing) -> None:
        # One entry of summary.json's `claims` (`missing` only for a missing value).
        entry = {"name": name, "value": value, "op": op, "bound": bound, "pass": ok}
        entry |= {"enforced": enforced, "verdict": verdict}
        if missing is not None:
            entry["missing"] = missing
        self.claims.append(entry)

    def not_checked(self, name: str, reason: str, *, op: str = "", bound: Any = None) -> None:
        """Record a declared claim this run could not check (e.g. about a cell it did not
        run): its verdict is ``not checked`` in the console, ``report.md`` and
        ``summary.json``, and the run's claims are then never all PASS.

        Example:
            >>> import tempfile
            >>> ctx = RunContext(pathlib.Path(tempfile.mkdtemp()))
            >>> ctx.not_checked("gap [a]", "cells not run: a")
            >>> claim_line(ctx.claims[0]), ClaimsOutcome(ctx.claims).verdict
            ('gap [a]: n/a (cells not run: a) → not checked', 'INCOMPLETE')
        """
        self._add_claim(name, None, op, to_jsonable(bound), False, False, NOT_CHECKED, reason)

    def record_verdicts(self, verdicts: list[dict[str, Any]], *, enforce: bool = True) -> None:
        """Record the verdicts of a study's declared claims
        (:func:`transflow.experiments.study.protocol.evaluate_claims`) as claims of this run: a
        checked one as :meth:`claim` (held to its bound unless ``enforce`` is false or the
        claim is declared not enforced, :meth:`declared_not_enforced`), a skipped one (cells
        not run) as :meth:`not_checked`. Each verdict gets the claim's ``verdict`` word, so
        the study's own table says what the console and the summary say."""
        for v in verdicts:
            if v.get("skipped"):
                reason = "cells not run: " + ", ".join(v.get("missing") or [])
                self.not_checked(v["name"], reason, op=v.get("op", ""), bound=v.get("bound"))
            else:
                n = len(v.get("values") or [])
                missing = (
                    "no seed"
                    if n == 0
                    else "std needs 2 seeds"
                    if v.get("over") == "mean_std" and n < 2
                    else "a seed's value is NaN"
                )
                self.claim(
                    v["name"], v["value"], v["bound"], op=v["op"], enforce=enforce, missing=missing
                )
            v["verdict"] = self.claims[-1]["verdict"]

    @property
    def failed_claims(self) -> list[str]:
        """Names of the enforced claims that failed."""
        return ClaimsOutcome(self.claims).failed

    def report(self, text: str) -> None:
        """Append markdown ``text`` (a paragraph, a table, ...) to ``report.md``."""
        with self.report_path.open("a") as f:
            f.write(text.rstrip("\n") + "\n\n")


def release_compiled() -> None:
    """Drop JAX's compiled programs (``jax.clear_caches()``, then a garbage collection).

    Every compiled executable stays memory-mapped until the caches are cleared: a training
    adds about 1500–2000 mappings, and Linux allows 65 530 per process
    (``vm.max_map_count``); past that LLVM fails with "Cannot allocate memory" and the
    process crashes (the full ``experiment=schemes`` did so after 41 of its 54
    trainings). ``transflow-run`` calls this after every task (a sweep runs its jobs in
    one process); a task that trains many models calls it between them. Without JAX
    imported it does nothing (this module does not import JAX).
    """
    import gc

    jax = sys.modules.get("jax")
    if jax is not None:
        jax.clear_caches()
        gc.collect()


def _check_name(arg: str, name: str) -> None:
    if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
        raise ValueError(
            f"`{arg}` must be a plain file name without '/' (a file in the run directory), "
            f"got {name!r}."
        )


def format_number(v: Any, missing: str = "") -> str:
    """A number for a report: ``6.800000000000001`` → ``6.8``, ``1.5e-15`` → ``1.5e-15``.

    Floats get 4 significant digits (scientific notation below 1e-3 or from 1e5 on); a
    missing number (NaN, None) is ``n/a``, or ``n/a (<missing>)`` with the reason; ±inf
    is ``inf``/``-inf``; integers, booleans and everything else are shown as they are.

    Example:
        >>> format_number(6.800000000000001), format_number(1.4803e-4), format_number(0.977716)
        ('6.8', '1.48e-04', '0.9777')
        >>> format_number(float("nan")), format_number(None, "one factor")
        ('n/a', 'n/a (one factor)')
    """
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return f"n/a ({missing})" if missing else "n/a"
    if not isinstance(v, float) or math.isinf(v):  # (a bool is an int, not a float)
        return str(v)
    if v != 0 and (abs(v) < 1e-3 or abs(v) >= 1e5):
        return f"{v:.2e}"
    return f"{v:.4g}"


def _rounded(v: Any) -> Any:
    # floats of a list or dict shown in a report: 4 significant digits, NaN as null
    if isinstance(v, float):
        return None if math.isnan(v) else float(format_number(v)) if math.isfinite(v) else v
    if isinstance(v, dict):
        return {k: _rounded(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_rounded(x) for x in v]
    return v


def md_cell(v: Any) -> str:
    """``v`` as the text of one markdown table cell: ``|`` escaped, no line breaks;
    numbers as :func:`format_number` writes them (also inside a list or dict), a missing
    one (NaN, None) as ``n/a``.

    Example:
        >>> md_cell(float("nan")), md_cell(None), md_cell({"a": 0.97014925373, "b": [1.0]})
        ('n/a', 'n/a', '{"a": 0.9701, "b": [1.0]}')
    """
    if v is None or isinstance(v, float):
        text = format_number(v)
    elif isinstance(v, list | dict):
        text = json.dumps(_rounded(to_jsonable(v)))
        text = text if len(text) < 80 else text[:77] + "..."
    else:
        text = str(v)
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def write_atomic(path: pathlib.Path, text: str) -> None:
    """Write ``text`` to ``path`` by ``<path>.tmp`` and a rename; line ends as given."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("w", newline="") as f:
        f.write(text)
    tmp.replace(path)


def markdown_table(header: Iterable[str], rows: Iterable[Iterable[Any]]) -> str:
    """A markdown table: the header, the ``|---|`` rule and one line per row. Cells are
    written as given (``str``): format numbers and escape ``|`` first (:func:`md_cell`).

    Example:
        >>> print(markdown_table(["n", "error"], [[4, "1.0e-03"], [8, "2.5e-04"]]))
        | n | error |
        |---|---|
        | 4 | 1.0e-03 |
        | 8 | 2.5e-04 |
    """
    header = list(header)
    lines = ["| " + " | ".join(map(str, header)) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(map(str, row)) + " |" for row in rows]
    return "\n".join(lines)


def claim_verdict(c: dict[str, Any]) -> str:
    """The :data:`VERDICTS` word of one claim (an entry of ``summary.json``'s ``claims``):
    its ``verdict``, set once by :meth:`RunContext.claim`; for a summary written before
    verdicts existed, derived from ``pass`` and ``enforced`` the same way."""
    if c.get("verdict") in VERDICTS:
        return c["verdict"]
    if not c.get("enforced", True):
        return NOT_ENFORCED
    return PASS if c.get("pass") else FAILED


def _claim_cells(c: dict[str, Any], mode: str = "enforce") -> tuple[str, str, str]:
    # A claim's value, "<op> <bound>" ("" without op) and verdict text, as the console
    # line and the report table show them.
    value = format_number(c.get("value"), c.get("missing", ""))
    bound = f"{c['op']} {format_number(c['bound'])}" if c.get("op") else ""
    v = claim_verdict(c)
    return value, bound, v + " (recorded, claims=record)" if v == FAILED and mode == "record" else v


def claim_line(c: dict[str, Any], mode: str = "enforce") -> str:
    """One claim as text: ``name: value op bound → PASS`` (``→`` its verdict word).

    Example:
        >>> claim_line({"name": "e", "value": 2e-15, "op": "<=", "bound": 1e-10,
        ...             "verdict": "PASS"})
        'e: 2.00e-15 <= 1.00e-10 → PASS'
    """
    value, bound, verdict = _claim_cells(c, mode)
    return f"{c['name']}: {value}" + (f" {bound}" if bound else "") + f" → {verdict}"


@dataclasses.dataclass(frozen=True)
class ClaimsOutcome:
    """A run's claims together: the counts per verdict and the run's verdict, computed
    once and rendered alike by the console (:attr:`line`), ``report.md``
    (:meth:`markdown`) and ``summary.json`` (:meth:`summary`).

    :attr:`verdict` is ``PASS`` only when every claim is PASS, ``FAILED`` when an enforced
    claim failed, else ``INCOMPLETE`` (some claims not enforced or not checked: such a run
    never says that all its claims pass); ``""`` without claims.

    Example:
        >>> o = ClaimsOutcome([{"name": "a", "verdict": "PASS"},
        ...                    {"name": "b", "verdict": "not enforced"}])
        >>> o.verdict, o.line
        ('INCOMPLETE', 'INCOMPLETE: 1 of 2 PASS, 1 not enforced')
    """

    claims: list[dict[str, Any]]

    @property
    def counts(self) -> dict[str, int]:
        """The number of claims per :data:`VERDICTS` word (every word, zeros included)."""
        verdicts = [claim_verdict(c) for c in self.claims]
        return {v: verdicts.count(v) for v in VERDICTS}

    @property
    def failed(self) -> list[str]:
        """Names of the claims whose verdict is FAILED (enforced, not holding)."""
        return [c["name"] for c in self.claims if claim_verdict(c) == FAILED]

    @property
    def verdict(self) -> str:
        n = self.counts
        if not self.claims:
            return ""
        if n[FAILED]:
            return FAILED
        return PASS if n[PASS] == len(self.claims) else INCOMPLETE

    @property
    def line(self) -> str:
        """``<verdict>: k of n PASS[, m FAILED][, m not enforced][, m not checked]``."""
        n = self.counts
        parts = [f"{n[PASS]} of {len(self.claims)} PASS"]
        parts += [f"{n[v]} {v}" for v in (FAILED, NOT_ENFORCED, NOT_CHECKED) if n[v]]
        return f"{self.verdict}: " + ", ".join(parts)

    def summary(self) -> dict[str, Any]:
        """The keys ``transflow-run`` adds to ``summary.json``: ``claims`` (each with its
        ``verdict``), ``claims_verdict``, ``claims_counts`` and ``claims_pass`` (true only
        when :attr:`verdict` is PASS)."""
        return {
            "claims": self.claims,
            "claims_verdict": self.verdict,
            "claims_counts": self.counts,
            "claims_pass": self.verdict == PASS,
        }

    def markdown(self, mode: str = "enforce") -> str:
        """The claim checks as a markdown table (for ``report.md``), then :attr:`line`."""
        return (
            claims_markdown(self.claims, mode)
            + f"\n\nClaims: **{self.line}**."
            + (_VERDICT_NOTE if self.verdict == INCOMPLETE else "")
        )


_VERDICT_NOTE = (
    " A claim `not enforced` is recorded without being held to its bound at this size "
    "(declared in `configs/sizes/smoke/<task>.yaml` for `debug=smoke`) or is a finding; "
    "a claim `not checked` is about something this run did not produce."
)


def claims_markdown(claims: list[dict[str, Any]], mode: str = "enforce") -> str:
    """The claim checks as a markdown table (for ``report.md``).

    ``|`` in names and values is escaped. The result column is the claim's verdict word
    (:data:`VERDICTS`); a failing enforced claim under ``claims=record`` reads ``FAILED
    (recorded, claims=record)``; a missing value reads ``n/a (<why>)``.
    """
    if not claims:
        return ""
    rows = []
    for c in claims:
        value, bound, verdict = _claim_cells(c, mode)
        rows.append([md_cell(c["name"]), md_cell(value), md_cell(bound), verdict])
    return "## Claim checks\n\n" + markdown_table(["claim", "value", "bound", "result"], rows)


class ClaimsFailed(RuntimeError):
    """Raised by ``transflow-run`` after the task when an enforced claim check failed.

    ``claims`` holds the failed claims (dicts as in ``summary.json``), ``run_dir`` the
    run directory; ``transflow-run`` prints one line per claim, not a traceback.
    """

    def __init__(self, message: str, claims: list | None = None, run_dir: Any = None):
        super().__init__(message)
        self.claims = list(claims or [])
        self.run_dir = run_dir


def summary_markdown(summary: dict[str, Any]) -> str:
    """A two-column markdown table of the headline numbers of a run."""
    rows = [[md_cell(k), md_cell(v)] for k, v in to_jsonable(summary).items()]
    return "## Summary\n\n" + markdown_table(["quantity", "value"], rows)


def _fmt_seconds(t: float) -> str:
    t = max(0.0, float(t))
    if t < 60:
        return f"{t:.0f} s"
    m, sec = divmod(int(round(t)), 60)
    return f"{m} min {sec:02d} s" if m < 60 else f"{m // 60} h {m % 60:02d} min"


class Progress:
    """An iterable that reports its progress: periodic log lines and, on a terminal, a bar.

    A line ``desc: 120/1500 (8%), 23.5 it/s, elapsed 5 s, ETA 59 s, loss=0.41`` is logged
    (logger ``transflow.run``: ``run.log`` and the console) every ``every`` seconds, also
    while a single iteration takes longer (a background thread), plus one when the loop
    starts and one when it ends. When stderr is a
    terminal, a tqdm bar is drawn on it and the periodic lines go to ``run.log`` only.
    ``set_postfix(**values)`` adds values to the lines (and to the bar), as with tqdm.

    Example:
        >>> list(Progress(range(3), total=3, desc="demo"))
        [0, 1, 2]
    """

    def __init__(self, iterable: Iterable, total: int | None = None, desc: str = "", every=5.0):
        self.iterable = iterable
        if total is None and isinstance(iterable, Sized):
            total = len(iterable)
        self.total = total
        self.desc = desc or "progress"
        self.every = float(every)
        self.postfix: dict[str, Any] = {}
        self.tty = bool(getattr(sys.stderr, "isatty", lambda: False)())
        self._bar = None
        if self.tty:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=self.total, desc=desc, file=sys.stderr, leave=False)
        self._log = logging.getLogger(LOGGER)

    def _say(self, text: str) -> None:
        # On a terminal the bar shows the progress: the lines go to run.log only.
        self._log.info("%s", text, extra={"console": not self.tty})
        _LAST_LINE[0] = time.perf_counter()

    def _line(self, n: int, elapsed: float) -> str:
        rate = n / elapsed if elapsed > 0 else float("nan")
        parts = [f"{self.desc}: {n}" + (f"/{self.total}" if self.total else "")]
        if self.total:
            parts[0] += f" ({100 * n / self.total:.0f}%)"
        parts.append(f"{rate:.3g} it/s")
        parts.append(f"elapsed {_fmt_seconds(elapsed)}")
        if self.total and rate > 0 and n < self.total:
            parts.append(f"ETA {_fmt_seconds((self.total - n) / rate)}")
        parts.extend(f"{k}={v}" for k, v in self.postfix.items())
        return ", ".join(parts)

    def __iter__(self) -> Iterator:
        t0 = time.perf_counter()
        state = {"n": 0, "last": t0}
        self._say(f"{self.desc}: started" + (f", {self.total} iterations" if self.total else ""))

        def heartbeat() -> None:
            # A line also while one iteration takes long (a compilation, a slow step).
            now = time.perf_counter()
            if now - state["last"] >= self.every:
                state["last"] = now
                self._say(self._line(state["n"], now - t0))

        stop_beat = _every(self.every, heartbeat, "transflow-progress") if self.every > 0 else None
        try:
            for item in self.iterable:
                yield item
                state["n"] += 1
                if self._bar is not None:
                    self._bar.update(1)
                now = time.perf_counter()
                n = state["n"]
                if now - state["last"] >= self.every and (self.total is None or n < self.total):
                    state["last"] = now
                    self._say(self._line(n, now - t0))
        finally:
            if stop_beat is not None:
                stop_beat()
            elapsed = time.perf_counter() - t0
            line = self._line(state["n"], elapsed)
            self._say(line.replace(f"{self.desc}: ", f"{self.desc}: done ", 1))
            self.close()

    def set_postfix(self, refresh: bool = False, **values: Any) -> None:
        self.postfix.update({k: str(v) for k, v in values.items()})
        if self._bar is not None:
            self._bar.set_postfix(refresh=refresh, **values)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def _every(seconds: float, tick: Callable[[], None], name: str) -> Callable[[], None]:
    """Call ``tick()`` every ``seconds`` in a daemon thread; returns the function that
    stops the thread (and waits for it)."""
    import threading

    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(seconds):
            tick()

    thread = threading.Thread(target=loop, name=name, daemon=True)
    thread.start()

    def stop_thread() -> None:
        stop.set()
        thread.join()

    return stop_thread


class _ConsoleFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return getattr(record, "console", True) and record.levelno < logging.ERROR


class _Tee:
    """stdout that also writes into ``run.log`` (so what a task prints is in the log)."""

    def __init__(self, stream: Any, path: pathlib.Path):
        self._stream = stream
        self._file = path.open("a", buffering=1)

    def write(self, text: str) -> int:
        self._file.write(text)
        return self._stream.write(text)

    def flush(self) -> None:
        self._file.flush()
        self._stream.flush()

    def close_file(self) -> None:
        self._file.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class RunLog:
    """The log of one run (a context manager used by ``transflow-run``).

    Inside the ``with`` block, the logger ``transflow.run`` (:attr:`logger`) writes
    timestamped lines into ``<run_dir>/run.log`` and ``transflow-run: <message>`` lines to
    the console (stdout; errors only into the file, the caller reports them), and what
    is printed to stdout is copied into ``run.log`` too. With ``heartbeat`` > 0 a line
    ``'<task>' running, elapsed ...`` is logged whenever no progress line
    (:class:`Progress`) came for that many seconds.

    Example:
        >>> import tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> with RunLog(d) as rl:
        ...     rl.logger.info("hello")
        transflow-run: hello
        >>> "hello" in (d / "run.log").read_text()
        True
    """

    def __init__(self, run_dir: pathlib.Path, *, task: str = "", heartbeat: float = 0.0):
        self.path = pathlib.Path(run_dir) / "run.log"
        self.logger = logging.getLogger(LOGGER)
        self.task = task
        self.heartbeat = float(heartbeat)

    def _beat(self, t0: float) -> None:
        # A "still running" line when no progress line came for `heartbeat` seconds (tasks
        # whose long steps are not a ctx.progress loop).
        now = time.perf_counter()
        if now - _LAST_LINE[0] >= self.heartbeat:
            _LAST_LINE[0] = now
            self.logger.info("'%s' running, elapsed %s", self.task, _fmt_seconds(now - t0))

    def __enter__(self) -> "RunLog":
        self._old = (self.logger.level, self.logger.propagate, list(self.logger.handlers))
        self.logger.setLevel(logging.INFO)
        self.logger.propagate = False
        self._file = logging.FileHandler(self.path, mode="a", encoding="utf-8")
        self._file.setFormatter(
            logging.Formatter("[%(asctime)s][%(levelname)s] %(message)s", "%Y-%m-%d %H:%M:%S")
        )
        self._console = logging.StreamHandler(sys.stdout)
        self._console.setFormatter(logging.Formatter("transflow-run: %(message)s"))
        self._console.addFilter(_ConsoleFilter())
        self.logger.handlers = [self._file, self._console]
        self._stdout = sys.stdout
        self._tee = _Tee(sys.stdout, self.path)
        sys.stdout = self._tee
        self._stop_beat = None
        if self.heartbeat > 0:
            t0 = _LAST_LINE[0] = time.perf_counter()
            beat = functools.partial(self._beat, t0)
            self._stop_beat = _every(min(self.heartbeat, 5.0), beat, "transflow-heartbeat")
        return self

    def __exit__(self, *exc: Any) -> bool:
        if self._stop_beat is not None:
            self._stop_beat()
        sys.stdout = self._stdout
        self._tee.close_file()
        self._file.close()
        level, propagate, handlers = self._old
        self.logger.setLevel(level)
        self.logger.propagate = propagate
        self.logger.handlers = handlers
        return False
