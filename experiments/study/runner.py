"""The one job loop of every seeded study: one record per (cell, seed) job, reused by digest.

A study task declares **what** a job is; :func:`run_jobs` does the rest (the loop, the
records, their reuse, the refinement levels, the progress lines, the log). The API:

- the **cells**: a list of :class:`~transflow.experiments.study.protocol.Cell` (name, the
  level of every factor, its seeds, its role). A factorial study takes them from its
  declared design (:func:`~transflow.experiments.study.protocol.design_cells`); any other
  study builds them itself, e.g. one cell per (task, scheme) trained::

      Cell(f"{task}-{scheme}", {"task": task, "scheme": scheme}, seeds, "trained")

  :func:`select_cells` keeps the cells a run asks for (``task.study.cells``; ``headline``
  names the headline cell): a **shard** of the study. Shards run as separate commands in
  the same run directory (``hydra.run.dir=...``), and a last pass over every cell reuses
  all their records and evaluates the claims.
- the **job function** ``measure(job) -> dict``: trains and/or evaluates one
  :class:`Job` (``job.cell``, ``job.seed``, ``job.level``, ``job.first``) and returns its
  metrics (JSON-able numbers; the names the claims use). It is called only for a job
  without a reusable record.
- the **record key** ``key(job) -> str``: a :func:`~transflow.experiments.study.protocol.
  digest` of everything a record depends on (the task's options that change a record, a
  record version, the job's level; the cell and seed where they change it). A record is
  reused only when its key, cell and seed match
  (:func:`~transflow.experiments.study.protocol.reusable_record`).
- optionally a :class:`Refinement`: a cell's first seed is measured again one level up
  while its record's ``metric`` exceeds ``bound`` (at most ``levels`` times); every other
  seed of the cell then runs at the first seed's level. The record keeps its level in
  ``field`` and the metric at the lower levels as ``<metric>.level<j>``.

Each job's record is written to ``<run_dir>/cells/<cell>/seed<k>/record.json``
(:func:`job_dir`; the job function may write its checkpoints there too) with the identity
fields ``cell``, ``levels``, ``seed``, ``key`` before the metrics, logged to
``metrics.jsonl`` (``kind: job``) and said in one line (``line(record)`` adds the task's
own numbers) with the ETA. :func:`run_jobs` returns :class:`Records`: ``records[cell][seed]``
(the metrics), the level of every cell, how many were reused, the seconds. The claims are
then :func:`~transflow.experiments.study.protocol.evaluate_claims` (or ``evaluate_claim``
per declared claim), recorded with ``ctx.record_verdicts``; ``report.py`` writes the shared
pieces of the report and the summary.

Example (a study of two cells, one seed each; the rerun reuses both records):
    >>> import tempfile, pathlib
    >>> from transflow.experiments.context import RunContext
    >>> from transflow.experiments.study.protocol import Cell
    >>> from transflow.experiments.study.runner import StudySpec, run_jobs
    >>> ctx = RunContext(pathlib.Path(tempfile.mkdtemp()))
    >>> cells = [Cell("a", {"x": 1}, [0], "headline"), Cell("b", {"x": 2}, [0], "crossed")]
    >>> spec = StudySpec("toy", cells, measure=lambda job: {"y": job.cell.levels["x"] ** 2},
    ...                  key=lambda job: "v1")
    >>> r = run_jobs(spec, ctx)
    >>> r.records, r.n_reused
    ({'a': {0: {'y': 1}}, 'b': {0: {'y': 4}}}, 0)
    >>> run_jobs(spec, ctx).n_reused
    2
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .protocol import Cell, reusable_record

__all__ = ["Job", "Records", "Refinement", "StudySpec", "job_dir", "run_jobs", "select_cells"]


@dataclass(frozen=True)
class Job:
    """One (cell, seed) job of a study at a refinement level (0 without refinement)."""

    cell: Cell
    seed: int
    level: int = 0

    @property
    def first(self) -> bool:
        """Whether this is the cell's first seed (the one that sets the cell's level)."""
        return self.seed == self.cell.seeds[0]


@dataclass(frozen=True)
class Refinement:
    """Measure a cell's first seed again one level up while its ``metric`` > ``bound``
    (at most ``levels`` levels above 0); ``field`` keeps the level in the record;
    ``describe(level)`` says a level in the console line (e.g. its tolerance)."""

    levels: int
    metric: str
    bound: float
    field: str = "level"
    describe: Callable[[int], str] = lambda level: f"level {level}"


@dataclass
class StudySpec:
    """What a study task declares for :func:`run_jobs` (see the module docstring)."""

    name: str  # in the console lines ("depth study")
    cells: list[Cell]
    measure: Callable[[Job], dict]
    key: Callable[[Job], str]
    line: Callable[[dict], str] = lambda record: ""  # the task's numbers of one job
    refine: Refinement | None = None
    # drop JAX's compiled programs after every job that ran (each training maps its
    # compiled code; hundreds of jobs exhaust vm.max_map_count): context.release_compiled
    release_compiled: bool = True


@dataclass
class Records:
    """The outcome of :func:`run_jobs`."""

    records: dict[str, dict[int, dict]] = field(default_factory=dict)  # cell → seed → metrics
    levels: dict[str, int] = field(default_factory=dict)  # cell → refinement level
    n_jobs: int = 0
    n_reused: int = 0
    seconds: float = 0.0

    def values(self) -> list[dict]:
        """Every job's record."""
        return [r for by_seed in self.records.values() for r in by_seed.values()]


def job_dir(run_dir, cell: str, seed: int) -> Path:
    """The folder of one job: ``<run_dir>/cells/<cell>/seed<k>`` (its ``record.json``)."""
    return Path(run_dir) / "cells" / cell / f"seed{seed}"


def select_cells(cells: list[Cell], wanted: list[str], key: str = "task.study.cells") -> list[Cell]:
    """The cells named in ``wanted`` (``headline``: the cell whose role is headline), in
    design order; every cell for ``[]``. An unknown name is refused naming ``key``.

    Example:
        >>> cs = [Cell("a", {}, [0], "headline"), Cell("b", {}, [0], "crossed")]
        >>> [c.name for c in select_cells(cs, ["headline"])], len(select_cells(cs, []))
        (['a'], 2)
    """
    if not wanted:
        return list(cells)
    head = [c.name for c in cells if c.role == "headline"]
    names = {head[0] if (w == "headline" and head) else w for w in wanted}
    unknown = sorted(names - {c.name for c in cells})
    if unknown:
        raise ValueError(
            f"{key}: {unknown[0]!r} is not a cell of the design; the cells are "
            f"{[c.name for c in cells]}."
        )
    return [c for c in cells if c.name in names]


def _record(spec: StudySpec, ctx, job: Job) -> tuple[dict, int, bool]:
    """One job's record: reused if written with its key (a first seed: at any level),
    else measured; a first seed is measured again one level up while ``spec.refine``
    asks. Returns (record, level, reused)."""
    path = job_dir(ctx.run_dir, job.cell.name, job.seed) / "record.json"
    r = spec.refine
    for lv in range(r.levels + 1) if (r and job.first) else [job.level]:
        rec = reusable_record(path, spec.key(Job(job.cell, job.seed, lv)), job.cell.name, job.seed)
        if rec is not None:
            job = Job(job.cell, job.seed, lv)
            break
    reused, history = rec is not None, {}
    while True:
        if rec is None:
            rec = dict(spec.measure(job))
            if r:
                rec[r.field] = job.level
                rec.update(history)  # the metric at the lower levels (first seed)
            path.parent.mkdir(parents=True, exist_ok=True)
            meta = {
                "cell": job.cell.name,
                "levels": job.cell.levels,
                "seed": job.seed,
                "key": spec.key(job),
            }
            path.write_text(json.dumps(meta | rec, indent=1, allow_nan=True) + "\n")
        value = rec.get(r.metric, 0.0) if r else 0.0
        if not (r and job.first and value > r.bound and job.level < r.levels):
            return rec, job.level, reused
        ctx.message(
            f"{job.cell.name} seed {job.seed}: {r.metric} {value:.3g} > {r.bound:g} at "
            f"{r.describe(job.level)}; measured again at {r.describe(job.level + 1)}"
        )
        history = {k: v for k, v in rec.items() if k.startswith(f"{r.metric}.level")}
        history[f"{r.metric}.level{job.level}"] = value
        job, rec, reused = Job(job.cell, job.seed, job.level + 1), None, False


def run_jobs(spec: StudySpec, ctx) -> Records:
    """Every (cell, seed) job of ``spec.cells``, in order: its record reused or measured
    (see the module docstring); one console line per job with the ETA."""
    from ..context import release_compiled

    jobs = [(c, s) for c in spec.cells for s in c.seeds]
    out = Records(n_jobs=len(jobs))
    t0 = time.perf_counter()
    for i, (cell, seed) in enumerate(jobs):
        t_job = time.perf_counter()
        rec, lv, reused = _record(spec, ctx, Job(cell, seed, out.levels.get(cell.name, 0)))
        if seed == cell.seeds[0]:
            out.levels[cell.name] = lv
        out.n_reused += reused
        out.records.setdefault(cell.name, {})[seed] = rec
        ctx.log(
            {"kind": "job", "study": spec.name, "cell": cell.name, "seed": seed}
            | {"reused": reused, **cell.levels, **rec}
        )
        done = time.perf_counter() - t0
        own = spec.line(rec)
        ctx.message(
            f"{spec.name} job {i + 1}/{len(jobs)} {cell.name} seed {seed}: "
            + (f"{own}; " if own else "")
            + ("record reused" if reused else f"{time.perf_counter() - t_job:.0f} s")
            + f"; ETA {done / (i + 1) * (len(jobs) - i - 1):.0f} s"
        )
        if spec.release_compiled and not reused:
            release_compiled()
    out.seconds = time.perf_counter() - t0
    return out
