"""Saving figures with the numbers they plot, and the smoke switch of ``make figures``."""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any

__all__ = ["figure_smoke", "save_figure"]


def figure_smoke() -> bool:
    """True when ``make_all.py --smoke`` (``TRANSFLOW_SMOKE=1``) asks for tiny figures.

    Example:
        >>> import os
        >>> os.environ.pop("TRANSFLOW_SMOKE", None) and None
        >>> figure_smoke()
        False
    """
    return os.environ.get("TRANSFLOW_SMOKE", "0") not in ("", "0", "false", "False")


def save_figure(
    fig: Any, out_dir: str | pathlib.Path, fid: str, data: Any, *, dpi: int = 150
) -> list[pathlib.Path]:
    """Save ``fig`` as ``<fid>.png`` and ``<fid>.pdf`` and ``data`` as ``<fid>.json``.

    Closes the figure; returns the three paths. ``data`` is made JSON-safe (arrays become
    lists, NaN stays NaN). Under :func:`figure_smoke` the figure says below everything it
    shows that it is smoke size (:data:`SMOKE_STAMP`), and ``data`` (a dict) gets
    ``"smoke": true``.
    """
    import matplotlib.pyplot as plt

    from .._records import to_jsonable

    if figure_smoke():
        smoke_stamp(fig)
        if isinstance(data, dict):
            data = {"smoke": True, **data}
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{fid}.png", out_dir / f"{fid}.pdf", out_dir / f"{fid}.json"]
    for path in paths[:2]:
        fig.savefig(path, dpi=dpi, bbox_inches="tight", pad_inches=0.03)
    plt.close(fig)
    paths[2].write_text(json.dumps(to_jsonable(data), indent=2, allow_nan=True) + "\n")
    return paths


#: The line under a smoke-size figure of ``make_all.py --smoke``.
SMOKE_STAMP = "SMOKE SIZE (make_all.py --smoke): tiny inputs, not the paper figure"


def smoke_stamp(fig: Any) -> Any:
    """Write :data:`SMOKE_STAMP` under everything ``fig`` draws (below its lowest text,
    legend or axis, so it overlaps nothing); returns the text artist."""
    renderer = fig.canvas.get_renderer()
    box = fig.get_tightbbox(renderer)  # inches
    width, height = fig.get_size_inches()
    return fig.text(
        (box.x0 + box.x1) / 2 / width,
        box.y0 / height - 0.02,
        SMOKE_STAMP,
        ha="center",
        va="top",
        fontsize=8,
        fontweight="bold",
        color="#b00000",
    )


def _pyplot():
    """``matplotlib.pyplot`` on the non-interactive Agg backend (figures are only saved)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
