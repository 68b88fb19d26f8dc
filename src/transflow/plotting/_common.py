"""Saving figures with the numbers they plot, and the smoke switch of ``make figures``."""

from __future__ import annotations

import json
import pathlib
from typing import Any

from ._check import FigureProblems, check_figure
from ._style import figure_smoke

__all__ = ["FigureProblems", "check_figure", "figure_smoke", "save_figure"]


def save_figure(
    fig: Any,
    out_dir: str | pathlib.Path,
    fid: str,
    data: Any,
    *,
    dpi: int = 150,
    check: bool = True,
) -> list[pathlib.Path]:
    """Save ``fig`` as ``<fid>.png`` and ``<fid>.pdf`` and ``data`` as ``<fid>.json``.

    Closes the figure; returns the three paths. ``data`` is made JSON-safe (arrays become
    lists, NaN stays NaN). Under ``make_all.py --smoke`` (:func:`figure_smoke`) the figure
    gets its smoke mark first (:func:`transflow.plotting.smoke_mark`: the red ``SMOKE
    SIZE`` line below everything it shows), and ``data`` (a dict) gets ``"smoke": true``.
    ``check`` (default): after saving, the figure goes through
    :func:`~transflow.plotting.figure_problems`, and any problem raises
    :class:`FigureProblems` naming it, so ``make figures`` marks that figure FAILED.
    """
    import matplotlib.pyplot as plt

    from .._records import to_jsonable
    from ._style import smoke_mark

    smoke = figure_smoke()
    if smoke:
        smoke_mark(fig)
        if isinstance(data, dict):
            data = {"smoke": True, **data}
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{fid}.png", out_dir / f"{fid}.pdf", out_dir / f"{fid}.json"]
    for path in paths[:2]:
        fig.savefig(path, dpi=dpi, bbox_inches="tight", pad_inches=0.03)
    paths[2].write_text(json.dumps(to_jsonable(data), indent=2, allow_nan=True) + "\n")
    try:
        if check:
            check_figure(fig, f"{fid} ({paths[0]})", smoke=smoke)
    finally:
        plt.close(fig)
    return paths
