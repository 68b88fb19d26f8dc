"""Inspect a drawn figure for the faults a reader sees: unlabelled axes, overlapping tick
labels, empty panels (used by the tests of every figure)."""

from __future__ import annotations

import re

__all__ = ["figure_problems"]

_MATH = re.compile(r"(?<!\\)\$.*?(?<!\\)\$")
_RAW_TEX = re.compile(r"\^|_\{|\\[A-Za-z]+")
_FIGURE_ID = re.compile(r"^\s*F(?:\d+|[A-Z]+|-[A-Za-z]+):")


def _has_data(ax) -> bool:
    return bool(ax.lines or ax.collections or ax.images or ax.patches)


def _shared_label(ax, which: str) -> str:
    """The axis label of ``ax`` or, when empty, of an axes sharing that axis with it."""
    get = (lambda a: a.get_xlabel()) if which == "x" else (lambda a: a.get_ylabel())
    if get(ax).strip():
        return get(ax)
    group = ax.get_shared_x_axes() if which == "x" else ax.get_shared_y_axes()
    for other in group.get_siblings(ax):
        if get(other).strip():
            return get(other)
    return ""


def _visible_tick_labels(axis) -> list:
    lo, hi = sorted(axis.get_view_interval())
    eps = 1e-9 * max(abs(hi - lo), abs(hi), 1e-300)
    out = []
    for minor in (False, True):
        locs = axis.get_minorticklocs() if minor else axis.get_majorticklocs()
        ticks = axis.get_minor_ticks(len(locs)) if minor else axis.get_major_ticks(len(locs))
        for tick, loc in zip(ticks, locs):
            if not (lo - eps <= loc <= hi + eps):
                continue
            for label in (tick.label1, tick.label2):
                if label.get_visible() and label.get_text().strip():
                    out.append(label)
    return out


def _overlaps(a, b, slack: float = 0.5) -> bool:
    return (
        a.x0 + slack < b.x1 - slack
        and b.x0 + slack < a.x1 - slack
        and a.y0 + slack < b.y1 - slack
        and b.y0 + slack < a.y1 - slack
    )


def figure_problems(fig) -> list[str]:
    """The reader-visible faults of ``fig`` (empty when none), after drawing it.

    For every axes: it has data (lines, collections, images or patches) or is turned off
    (``ax.set_axis_off()``); with data, its x and y axis labels are non-empty (a label on
    an axes sharing that axis counts; a colorbar needs a label on its long axis); on each
    axis the visible tick labels do not overlap. In every text of the figure: no raw
    pseudo-LaTeX outside ``$…$`` (``^``, ``_{``, ``\\name``: write mathtext), and no title
    starting with a figure id (``F7:``; the id is the file name and the caption's).

    Example:
        >>> from transflow.plotting import figure_problems, new_figure
        >>> fig, (ax, bx) = new_figure(2.0, 1, 2)
        >>> _ = ax.plot([1, 2], [3, 4]); _ = ax.set_xlabel("t")
        >>> figure_problems(fig)  # doctest: +NORMALIZE_WHITESPACE
        ['axes 0 (no title): no y label', 'axes 1 (no title): empty panel (no data; turn it
        off or say why it is empty)']
    """
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    problems: list[str] = []
    axes = []
    for ax in fig.axes:
        axes.append(ax)
        axes.extend(getattr(ax, "child_axes", []))
    for i, ax in enumerate(axes):
        if not ax.get_visible() or not ax.axison:
            continue
        name = f"axes {i} ({ax.get_title()!r})" if ax.get_title() else f"axes {i} (no title)"
        cbar = getattr(ax, "_colorbar", None)
        if not _has_data(ax):
            problems.append(f"{name}: empty panel (no data; turn it off or say why it is empty)")
            continue
        if cbar is not None:
            long = "y" if cbar.orientation == "vertical" else "x"
            if not (ax.get_ylabel() if long == "y" else ax.get_xlabel()).strip():
                problems.append(f"{name}: colorbar without a label")
        else:
            for which in ("x", "y"):
                if not _shared_label(ax, which).strip():
                    problems.append(f"{name}: no {which} label")
        for which, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            labels = _visible_tick_labels(axis)
            boxes = [(lab.get_text(), lab.get_window_extent(renderer)) for lab in labels]
            for j in range(len(boxes)):
                for k in range(j + 1, len(boxes)):
                    if _overlaps(boxes[j][1], boxes[k][1]):
                        problems.append(
                            f"{name}: {which} tick labels {boxes[j][0]!r} and {boxes[k][0]!r} "
                            "overlap"
                        )
    from matplotlib.text import Text

    titles = {id(fig._suptitle)} if fig._suptitle is not None else set()
    for ax in axes:
        titles |= {id(ax.title), id(ax._left_title), id(ax._right_title)}
    for text in fig.findobj(Text):
        content = text.get_text()
        if not (text.get_visible() and content.strip()):
            continue
        if _RAW_TEX.search(_MATH.sub("", content)):
            problems.append(f"text {content!r}: raw TeX outside $...$ (write mathtext)")
        if id(text) in titles and _FIGURE_ID.match(content):
            problems.append(f"title {content!r} starts with a figure id")
    return problems
