"""The report and summary pieces every seeded study shares (see :mod:`.runner`).

- :func:`design_markdown`: the declared design (factors, headline, crossed, seeds, grid,
  windows) as the report's first section;
- :func:`claims_markdown`: the declared claims' verdict table with how to read it;
- :func:`write_tables`: ``<name>.md``, ``<name>.csv`` and ``<name>.json`` in the run dir;
- :func:`records_json`: the design, cells, aggregate and every record as plain data;
- :func:`study_summary`: the summary fields of every study (cells, jobs, reused records,
  seconds, the claim verdicts) and the headline cell's means;
- :func:`seeds_text`: a table entry of per-seed values (mean ± std, then each seed), for
  :func:`~transflow.experiments.context.markdown_table`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from .protocol import (
    Cell,
    StudyConfig,
    mean_std,
    mean_std_text,
    summarize_verdicts,
    verdicts_markdown,
)
from .runner import Records

__all__ = [
    "claims_markdown",
    "design_markdown",
    "records_json",
    "seeds_text",
    "study_summary",
    "write_tables",
]


def seeds_text(values: Sequence[float], fmt: str = ".3f", seed_fmt: str = "") -> str:
    """A table entry of per-seed values: their mean ± std
    (:func:`~.protocol.mean_std_text`, format ``fmt``), then every value (format
    ``seed_fmt``, default ``fmt``) in brackets; ``n/a`` for none.

    Example:
        >>> seeds_text([0.02, -0.01], ".3f", "+.3f"), seeds_text([])
        ('0.005 ± 0.021 [+0.020 -0.010]', 'n/a')
    """
    if not values:
        return "n/a"
    m, s = mean_std(list(values))
    each = " ".join(f"{v:{seed_fmt or fmt}}" for v in values)
    return mean_std_text({"mean": m, "std": s, "n": len(values)}, fmt) + f" [{each}]"


def design_markdown(study: StudyConfig, cells: list[Cell], *lines: str) -> str:
    """The design as declared before the run; ``lines``: the study's own (e.g. its
    training depth), after the factors."""
    head = [c for c in cells if c.role == "headline"]
    others = [c for c in cells if c.role != "headline"]
    return "\n".join(
        [
            "Factors: "
            + "; ".join(f"`{k}` ∈ {list(v)}" for k, v in study.factors.items())
            + f". Headline: {dict(study.headline)}. Crossed: {list(study.crossed)}; the "
            "others one at a time around the headline.",
            *lines,
            f"{len(cells)} cells, seeds "
            + ", ".join(f"{c.name}: {c.seeds}" for c in head)
            + f" (headline); others {others[-1].seeds if others else []} "
            f"(seed_offset {study.seed_offset}).",
        ]
    )


def claims_markdown(verdicts: list[dict], n_examples: int | None = None) -> str:
    """The verdict table of the declared claims and how to read it."""
    return (
        verdicts_markdown(verdicts)
        + "\n\nEach claim is checked in each cell it names; `worst seed`: every seed must "
        "satisfy it; `mean ∓ std`: the mean minus (or plus) one standard deviation."
        + (f" The test split holds {n_examples} examples per seed." if n_examples else "")
    )


def records_json(study: StudyConfig, cells: list[Cell], agg: dict, result: Records, **extra):
    """The design, the cells, the aggregate and every record as plain data."""
    return {
        "design": dataclasses.asdict(study),
        **extra,
        "cells": [dataclasses.asdict(c) for c in cells],
        "aggregate": agg,
        "records": {c: {str(s): r for s, r in by.items()} for c, by in result.records.items()},
    }


def write_tables(ctx, name: str, *, markdown: str, csv: str, data: dict) -> None:
    """``<name>.md``, ``<name>.csv`` and ``<name>.json`` in the run directory."""
    (ctx.run_dir / f"{name}.md").write_text(markdown + "\n")
    (ctx.run_dir / f"{name}.csv").write_text(csv)
    (ctx.run_dir / f"{name}.json").write_text(json.dumps(data, indent=1, allow_nan=True) + "\n")


def study_summary(
    cells: list[Cell], result: Records, verdicts: list[dict], agg: dict, headline: tuple = ()
) -> dict[str, Any]:
    """The summary fields of a study: ``n_cells``, ``n_jobs``, ``headline_cell``,
    ``seconds_study``, ``n_records_reused``, ``headline_<metric>`` (the mean over the
    headline cell's seeds of each metric in ``headline``) and ``claims_verdicts``."""
    head = cells[0].name if cells else ""
    ha = agg.get(head, {})
    return {
        "n_cells": len(cells),
        "n_jobs": result.n_jobs,
        "headline_cell": head,
        "seconds_study": result.seconds,
        "n_records_reused": result.n_reused,
        **{f"headline_{k}": ha[k]["mean"] for k in headline if k in ha},
        "claims_verdicts": summarize_verdicts(verdicts),
    }
