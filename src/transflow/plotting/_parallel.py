"""Figures of the sharded evolution (F90): per-device memory against the device count."""

from __future__ import annotations

from typing import Any

from ._style import new_figure, smoke_note, styled

__all__ = ["plot_sharded_memory"]


@styled
def plot_sharded_memory(records: list[dict[str, Any]], *, title: str = ""):
    """F90: per-device temporaries of the token-sharded evolution against P, log-log.

    ``records``: the ``"memory"`` records of ``transflow.parallel`` (``method``,
    ``token_devices``, ``temp`` in bytes), as the task ``experiment=sharded`` logs them.
    One curve per method, and the ideal 1/P from the first gspmd (else first) method.
    """
    import matplotlib.ticker

    methods = list(dict.fromkeys(r["method"] for r in records))
    fig, ax = new_figure(3.0)
    markers = "osd^v<>"
    for i, m in enumerate(methods):
        rs = sorted((r for r in records if r["method"] == m), key=lambda r: r["token_devices"])
        ps = [r["token_devices"] for r in rs]
        ax.loglog(
            ps, [r["temp"] / 2**20 for r in rs], marker=markers[i % 7], label=f"{m}: temporaries"
        )
    base = "gspmd" if "gspmd" in methods else methods[0]
    g = sorted((r for r in records if r["method"] == base), key=lambda r: r["token_devices"])
    ps = [r["token_devices"] for r in g]
    ax.loglog(ps, [g[0]["temp"] / 2**20 * ps[0] / p for p in ps], "k--", lw=1, label="$1/P$")
    ax.set_xticks(ps, [str(p) for p in ps])
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("token devices $P$")
    ax.set_ylabel("per-device temporaries [MiB]")
    if title:
        ax.set_title(title)
    ax.legend(loc="center left", bbox_to_anchor=(1.02, 0.5))
    ax.grid(True, which="both")
    if len(ps) < 3:
        smoke_note(ax, f"smoke size: P = {', '.join(map(str, ps))} only")
    return fig
