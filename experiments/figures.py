"""Small helpers for the figure scripts in ``paper_figures/`` (see ``make_all.py``)."""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any

from .context import to_jsonable

__all__ = ["figure_smoke", "save_figure"]


def figure_smoke() -> bool:
    """True when ``make_all.py --smoke`` (``TRANSFLOW_SMOKE=1``) asks for tiny figures."""
    return os.environ.get("TRANSFLOW_SMOKE", "0") not in ("", "0", "false", "False")


def save_figure(
    fig: Any, out_dir: pathlib.Path, fid: str, data: Any, *, dpi: int = 150
) -> list[pathlib.Path]:
    """Save ``fig`` as ``<fid>.png`` and ``<fid>.pdf`` and ``data`` as ``<fid>.json``.

    Closes the figure; returns the three paths.
    """
    import matplotlib.pyplot as plt

    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{fid}.png", out_dir / f"{fid}.pdf", out_dir / f"{fid}.json"]
    fig.savefig(paths[0], dpi=dpi, bbox_inches="tight")
    fig.savefig(paths[1], bbox_inches="tight")
    plt.close(fig)
    paths[2].write_text(json.dumps(to_jsonable(data), indent=2, allow_nan=True) + "\n")
    return paths
