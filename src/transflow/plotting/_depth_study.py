"""The figure of the ``experiment=depth`` factorial study: accuracy or distance to the
continuous limit against the evaluation depth, one panel per (horizon T, training depth),
one line per control parameterization (and per scheme variant), mean ± std over seeds."""

from __future__ import annotations

import math
from typing import Any

from ._style import new_figure, styled

__all__ = ["plot_depth_factorial"]

_COLOURS = ("C0", "C1", "C2", "C3", "C4", "C5", "C6", "C8", "C9")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


@styled
def plot_depth_factorial(
    grid: list[int],
    cells: list[tuple[str, dict[str, Any], str]],
    agg: dict[str, dict[str, dict]],
    *,
    what: str = "accuracy",
):
    """Mean ± std over seeds against the evaluation depth N, one panel per (T, training
    depth) present in ``cells`` (rows: T, columns: fixed / random), one line per
    parameterization; a cell whose scheme differs from the most common one is drawn
    dashed with its scheme in the label. ``what``: ``"accuracy"`` (the own scheme's test
    accuracy, ``acc.<scheme>.<N>``) or ``"distance"`` (‖z_N − z_ref‖/‖z_ref‖ to the
    continuous limit, log scale, ``dist.<scheme>.<N>``).

    ``cells``: ``(name, levels, role)`` with levels ``path``, ``T``, ``train``, ``scheme``;
    ``agg``: cell → metric → ``{"mean", "std", "n"}``
    (:func:`transflow.experiments.study.protocol.aggregate`).

    Example:
        >>> from transflow.plotting import plot_depth_factorial
        >>> lv = {"path": "legendre", "T": 0.2, "train": "random", "scheme": "prenorm"}
        >>> agg = {"c": {f"acc.prenorm.{n}": {"mean": 0.9, "std": 0.01, "n": 2}
        ...              for n in (1, 2, 4)}}
        >>> len(plot_depth_factorial([1, 2, 4], [("c", lv, "headline")], agg).axes)
        1
    """
    import matplotlib.ticker as mticker

    if what not in ("accuracy", "distance"):
        raise ValueError(f"`what` must be 'accuracy' or 'distance', got {what!r}.")
    key = "acc" if what == "accuracy" else "dist"
    schemes = [lv["scheme"] for _, lv, _ in cells]
    main = max(set(schemes), key=schemes.count) if schemes else ""
    ts = sorted({float(lv["T"]) for _, lv, _ in cells})
    trains = [t for t in ("fixed", "random") if any(lv["train"] == t for _, lv, _ in cells)]
    paths: list[str] = []
    for _, lv, _ in cells:
        if lv["path"] not in paths:
            paths.append(lv["path"])
    fig, axes = new_figure(1.9 * len(ts) + 0.9, len(ts), len(trains), squeeze=False)
    handles: dict[str, Any] = {}
    for i, t in enumerate(ts):
        for j, tr in enumerate(trains):
            ax = axes[i][j]
            drawn = False
            for name, lv, _ in cells:
                if float(lv["T"]) != t or lv["train"] != tr:
                    continue
                a = agg.get(name, {})
                pts = [
                    (n, a[k]["mean"], a[k]["std"])
                    for n in grid
                    if (k := f"{key}.{lv['scheme']}.{n}") in a and not math.isnan(a[k]["mean"])
                ]
                if not pts:
                    continue
                xs, ys, es = zip(*pts)
                es = [0.0 if math.isnan(e) else e for e in es]
                if key == "dist":  # a log axis: the lower bar stops above 0
                    es = [[min(e, 0.9 * y) for e, y in zip(es, ys)], es]
                p = paths.index(lv["path"])
                other = lv["scheme"] != main
                label = lv["path"].replace("_", "-") + (f", {lv['scheme']}" if other else "")
                h = ax.errorbar(
                    xs,
                    ys,
                    yerr=es,
                    color=_COLOURS[p % len(_COLOURS)],
                    marker=_MARKERS[(p + (3 if other else 0)) % len(_MARKERS)],
                    ms=4,
                    lw=1.1,
                    ls=(0, (4, 2)) if other else "-",
                    capsize=2,
                    label=label,
                )
                handles.setdefault(label, h)
                drawn = True
            if not drawn:
                ax.set_axis_off()
                ax.text(
                    0.5,
                    0.5,
                    f"T = {t:g}, {tr}: no cell",
                    ha="center",
                    va="center",
                    transform=ax.transAxes,
                    color="0.4",
                )
                continue
            ax.set_xscale("log", base=2)
            # every depth of a short grid; of a long one every other power of 2, with
            # both ends (so neither end of the data is far from a label)
            ticks = (
                list(grid)
                if len(grid) <= 6
                else sorted(
                    {n for n in grid if n in (1, 4, 16, 64, 256, 1024)} | {grid[0], grid[-1]}
                )
            )
            ax.xaxis.set_major_locator(mticker.FixedLocator(ticks))
            ax.xaxis.set_major_formatter(mticker.FixedFormatter([str(n) for n in ticks]))
            ax.xaxis.set_minor_formatter(mticker.NullFormatter())
            if key == "dist":
                ax.set_yscale("log")
            ax.set_title(f"T = {t:g}, training depth {tr}")
            ax.set_xlabel(r"evaluation depth $N$")
            ax.set_ylabel(
                "test accuracy"
                if key == "acc"
                else r"$\|z_N - z_\mathrm{ref}\|/\|z_\mathrm{ref}\|$"
            )
            ax.grid(True, which="major")
    fig.suptitle(
        (
            "digits: test accuracy"
            if key == "acc"
            else "digits: distance of the logits to the continuous limit"
        )
        + " against the evaluation depth\n(mean over seeds; bars: ± std over seeds)"
    )
    if handles:
        fig.legend(
            list(handles.values()),
            list(handles),
            loc="outside lower center",
            ncols=min(len(handles), 4),
        )
    return fig
