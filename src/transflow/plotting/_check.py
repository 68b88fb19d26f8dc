"""Inspect a drawn figure for the faults a reader sees: unlabelled axes, overlapping tick
labels or texts, a legend over the data, colours without a key, log axes without readable
ticks, error bars nobody explains, empty panels (used by the tests of every figure and by
the figure scripts)."""

from __future__ import annotations

import re

import numpy as np

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


def _basic_problems(fig) -> list[str]:
    """Labels, tick-label overlaps, empty panels, raw TeX, figure ids in titles."""
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


# --------------------------------------------------------------------------- the artists


def _all_axes(fig) -> list:
    out = []
    for ax in fig.axes:
        out.append(ax)
        out.extend(getattr(ax, "child_axes", []))
    return out


def _plotted(artist) -> bool:
    alpha = artist.get_alpha()
    return artist.get_visible() and (alpha is None or alpha > 0)


def _legends(fig) -> list:
    """Every visible legend: of each axes (also those added with ``add_artist``), of the
    figure and of its subfigures."""
    from matplotlib.legend import Legend

    return [leg for leg in fig.findobj(Legend) if leg.get_visible()]


def _rgb(c) -> tuple[float, float, float] | None:
    from matplotlib.colors import to_rgba

    try:
        r, g, b, a = to_rgba(c)
    except (ValueError, TypeError):
        return None
    return None if a == 0 else (round(r, 3), round(g, 3), round(b, 3))


def _neutral(rgb) -> bool:
    return max(rgb) - min(rgb) < 0.02


def _line_colours(line) -> set:
    """The colours a reader sees of a Line2D: its line and its markers."""
    out = set()
    if line.get_linestyle() not in ("None", "none", " ", "") and line.get_linewidth() > 0:
        out.add(_rgb(line.get_color()))
    if line.get_marker() not in (None, "None", "none", " ", ""):
        mfc = line.get_markerfacecolor()
        if _rgb(mfc) is not None:
            out.add(_rgb(mfc))
        else:
            out.add(_rgb(line.get_markeredgecolor()))
    return {c for c in out if c is not None}


def _collection_colours(coll) -> set:
    out = set()
    for key in ("get_facecolor", "get_edgecolor"):
        cols = getattr(coll, key)()
        for c in np.atleast_2d(cols) if len(cols) else []:
            if len(c) == 4 and c[3] > 0:
                out.add((round(float(c[0]), 3), round(float(c[1]), 3), round(float(c[2]), 3)))
    return out


def _is_zero_rule(line, ax) -> bool:
    """An axhline/axvline at 0 (a coordinate axis drawn in the plot, not data)."""
    if line.get_transform() == ax.transData:
        return False
    x, y = (np.asarray(v, float) for v in line.get_data())
    return len(x) == 2 and ((x[0] == x[1] == 0) or (y[0] == y[1] == 0))


def _data_paths(ax):
    """``(path in display coordinates, filled, clip bbox)`` of every data artist of ``ax``."""
    from matplotlib.collections import Collection, PathCollection
    from matplotlib.lines import Line2D
    from matplotlib.path import Path

    out = []
    for art in ax.get_children():
        if not _plotted(art) or art in (ax.patch,) or art in ax.spines.values():
            continue
        clip = ax.bbox if art.get_clip_on() else None
        if isinstance(art, Line2D):
            xy = art.get_transform().transform(art.get_path().vertices)
            ok = np.all(np.isfinite(xy), axis=1)
            if art.get_linestyle() not in ("None", "none", " ", ""):
                # split at NaN gaps; each run a polyline
                idx = np.flatnonzero(~ok)
                for seg in np.split(np.arange(len(xy)), idx):
                    seg = seg[ok[seg]]
                    if len(seg) >= 2:
                        out.append((Path(xy[seg]), False, clip, 0.0))
            if art.get_marker() not in (None, "None", "none", " ", ""):
                r = art.get_markersize() * ax.figure.dpi / 72 / 2
                for pt in xy[ok]:
                    out.append((Path([pt]), False, clip, r))
        elif isinstance(art, PathCollection) and len(art.get_offsets()):
            xy = art.get_offset_transform().transform(np.asarray(art.get_offsets(), float))
            sizes = art.get_sizes()
            r = float(np.sqrt(sizes.max()) * ax.figure.dpi / 72 / 2) if len(sizes) else 2.0
            for pt in xy[np.all(np.isfinite(xy), axis=1)]:
                out.append((Path([pt]), False, clip, r))
        elif isinstance(art, Collection):
            trans = art.get_transform()
            filled = len(art.get_facecolor()) > 0
            for path in art.get_paths():
                out.append((trans.transform_path(path), filled, clip, 0.0))
        elif hasattr(art, "get_path") and hasattr(art, "get_patch_transform"):  # patches
            if art.get_fill() or art.get_edgecolor()[3] > 0:
                out.append(
                    (art.get_transform().transform_path(art.get_path()), art.get_fill(), clip, 0)
                )
        elif art.__class__.__name__ == "AxesImage":
            bb = art.get_window_extent()
            out.append((Path.unit_rectangle().transformed(_bbox_affine(bb)), True, clip, 0.0))
    return out


def _bbox_affine(bb):
    from matplotlib.transforms import Affine2D

    return Affine2D().scale(bb.width, bb.height).translate(bb.x0, bb.y0)


def _covers(path, filled: bool, radius: float, box) -> bool:
    """Does ``path`` (display coordinates) reach into ``box``?"""
    v = path.vertices
    if len(v) == 1:  # a marker of radius ``radius``
        x, y = v[0]
        return box.x0 - radius < x < box.x1 + radius and box.y0 - radius < y < box.y1 + radius
    if path.intersects_bbox(box, filled=filled):
        return True
    inside = (v[:, 0] > box.x0) & (v[:, 0] < box.x1) & (v[:, 1] > box.y0) & (v[:, 1] < box.y1)
    return bool(inside.any())


def _legend_problems(fig, renderer) -> list[str]:
    from matplotlib.transforms import Bbox

    problems = []
    for k, leg in enumerate(_legends(fig)):
        box = leg.get_window_extent(renderer)
        box = Bbox.from_extents(box.x0 + 1, box.y0 + 1, box.x1 - 1, box.y1 - 1)
        for i, ax in enumerate(_all_axes(fig)):
            if not ax.get_visible() or getattr(ax, "_colorbar", None) is not None:
                continue
            for path, filled, clip, radius in _data_paths(ax):
                region = box if clip is None else Bbox.intersection(box, clip)
                if region is None or region.width <= 0 or region.height <= 0:
                    continue
                if _covers(path, filled, radius, region):
                    title = ax.get_title() or "no title"
                    problems.append(f"legend {k} covers plotted data of axes {i} ({title!r})")
                    break
    return problems


def _texts(fig, renderer) -> list[tuple[str, object]]:
    """``(text, window extent)`` of every text a reader sees, legends as one box each."""
    from matplotlib.text import Text

    tick_ids, legend_ids = set(), set()
    boxes = []
    for ax in _all_axes(fig):
        for axis in (ax.xaxis, ax.yaxis):
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                tick_ids |= {id(tick.label1), id(tick.label2)}
        if ax.get_visible() and ax.axison:
            for axis in (ax.xaxis, ax.yaxis):
                for label in _visible_tick_labels(axis):
                    boxes.append((label.get_text(), label.get_window_extent(renderer)))
    for leg in _legends(fig):
        legend_ids |= {id(t) for t in leg.findobj(Text)}
        boxes.append(("<legend>", leg.get_window_extent(renderer)))
    for text in fig.findobj(Text):
        if id(text) in tick_ids or id(text) in legend_ids:
            continue
        if not (text.get_visible() and text.get_text().strip()):
            continue
        ax = text.axes
        if ax is not None:
            if not ax.get_visible():
                continue
            drawn_without_axis = (ax.title, ax._left_title, ax._right_title, *ax.texts)
            if not ax.axison and not any(text is t for t in drawn_without_axis):
                continue  # an axis label or tick label of an axes turned off
        boxes.append((text.get_text(), text.get_window_extent(renderer)))
    return boxes


def _text_problems(fig, renderer) -> list[str]:
    boxes = _texts(fig, renderer)
    problems = []
    for j in range(len(boxes)):
        for k in range(j + 1, len(boxes)):
            (a, ba), (b, bb) = boxes[j], boxes[k]
            if a == b == "<legend>" or ba.width == 0 or bb.width == 0:
                continue
            if _overlaps(ba, bb, slack=1.0):
                problems.append(f"texts {a!r} and {b!r} overlap")
    return problems


def _keys(fig) -> tuple[set, list, set]:
    """The colours keyed by legends, the colour maps of colour bars, and the colours of
    texts (direct labels)."""
    from matplotlib.collections import Collection
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.text import Text

    keyed: set = set()
    for leg in _legends(fig):
        for h in leg.legend_handles:
            if isinstance(h, Line2D):
                keyed |= _line_colours(h) | {_rgb(h.get_color())}
            elif isinstance(h, Patch):
                keyed |= {_rgb(h.get_facecolor()), _rgb(h.get_edgecolor())}
            elif isinstance(h, Collection):
                keyed |= _collection_colours(h)
    cmaps = []
    for ax in _all_axes(fig):
        cbar = getattr(ax, "_colorbar", None)
        if cbar is not None:
            cmaps.append(np.asarray(cbar.cmap(np.linspace(0, 1, 256)))[:, :3])
    direct = {
        _rgb(t.get_color()) for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()
    }
    return {c for c in keyed if c is not None}, cmaps, {c for c in direct if c and not _neutral(c)}


def _colour_problems(fig) -> list[str]:
    from matplotlib.collections import LineCollection, PathCollection
    from matplotlib.lines import Line2D

    keyed, cmaps, direct = _keys(fig)

    def is_keyed(c) -> bool:
        if c in keyed or c in direct:
            return True
        return any(np.min(np.abs(cm - np.asarray(c)).max(axis=1)) < 0.02 for cm in cmaps)

    problems = []
    for i, ax in enumerate(_all_axes(fig)):
        if getattr(ax, "_colorbar", None) is not None or not ax.get_visible():
            continue
        used = set()
        for art in ax.get_children():
            if not _plotted(art):
                continue
            if isinstance(art, Line2D) and len(art.get_xdata()) and not _is_zero_rule(art, ax):
                used |= _line_colours(art)
            elif isinstance(art, PathCollection | LineCollection) and len(art.get_paths()):
                if art.get_array() is not None:
                    continue  # colour-mapped: keyed by its colour bar (checked below)
                used |= _collection_colours(art)
            if isinstance(art, PathCollection) and art.get_array() is not None and not cmaps:
                problems.append(
                    f"axes {i} ({ax.get_title() or 'no title'!r}): colour-mapped markers "
                    "without a colour bar"
                )
        for c in sorted(used):
            if not is_keyed(c):
                hexc = "#{:02x}{:02x}{:02x}".format(*(round(255 * v) for v in c))
                problems.append(
                    f"axes {i} ({ax.get_title() or 'no title'!r}): colour {hexc} is in no "
                    "legend or colour bar"
                )
    return problems


def _log_problems(fig) -> list[str]:
    problems = []
    for i, ax in enumerate(_all_axes(fig)):
        if not ax.get_visible() or not ax.axison:
            continue
        for which, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            if axis.get_scale() != "log":
                continue
            lim = ax.dataLim.intervalx if which == "x" else ax.dataLim.intervaly
            lo, hi = sorted(float(v) for v in lim)
            vlo, vhi = sorted(axis.get_view_interval())
            if not (np.isfinite(lo) and np.isfinite(hi) and lo > 0):
                lo, hi = vlo, vhi
            lo, hi = max(lo, vlo), min(hi, vhi)
            if hi < lo:
                continue
            slack = max(1.05, (hi / lo) ** 0.05)
            locs = [
                loc
                for loc, lab in zip(axis.get_majorticklocs(), axis.get_majorticklabels())
                if lab.get_visible() and lab.get_text().strip() and lo / slack <= loc <= hi * slack
            ]
            if len(locs) < 2:
                problems.append(
                    f"axes {i} ({ax.get_title() or 'no title'!r}): log {which} axis has "
                    f"{len(locs)} labelled tick(s) within its data range [{lo:.3g}, {hi:.3g}]"
                )
    return problems


_ERROR_WORDS = re.compile(r"error bar|errorbar|±|whisker|bars?:|bars show|bar =|shaded", re.I)


def _errorbar_problems(fig) -> list[str]:
    from matplotlib.container import ErrorbarContainer
    from matplotlib.text import Text

    has = [
        i
        for i, ax in enumerate(_all_axes(fig))
        if any(isinstance(c, ErrorbarContainer) for c in ax.containers)
        or any(getattr(c, "errorbar", None) is not None for c in ax.containers)
    ]
    if not has:
        return []
    texts = " ".join(t.get_text() for t in fig.findobj(Text) if t.get_visible())
    if _ERROR_WORDS.search(texts):
        return []
    return [f"axes {has}: error bars that no text explains (say what they are, e.g. ± std)"]


def figure_problems(fig) -> list[str]:
    """The reader-visible faults of ``fig`` (empty when none), after drawing it.

    For every axes: it has data (lines, collections, images or patches) or is turned off
    (``ax.set_axis_off()``); with data, its x and y axis labels are non-empty (a label on
    an axes sharing that axis counts; a colorbar needs a label on its long axis); on each
    axis the visible tick labels do not overlap. In every text of the figure: no raw
    pseudo-LaTeX outside ``$…$`` (``^``, ``_{``, ``\\name``: write mathtext), and no title
    starting with a figure id (``F7:``; the id is the file name and the caption's).

    On the drawn artists (window extents in pixels): no legend covers a line, marker,
    bar, filled area or image of any axes (within the axes' clip box); no two texts
    (titles, axis and tick labels, annotations, legends as one box) overlap; every colour
    of a line, marker or error bar is in a legend, on a colour bar's map, or the colour of
    a text (a direct label) -- an ``axhline``/``axvline`` at 0 is exempt; colour-mapped
    markers have a colour bar; every log axis has at least two labelled ticks within its
    data range; error bars are explained by some text ("error bar", "±", "bars: ...").

    Example:
        >>> from transflow.plotting import figure_problems, new_figure
        >>> fig, (ax, bx) = new_figure(2.0, 1, 2)
        >>> _ = ax.plot([1, 2], [3, 4]); _ = ax.set_xlabel("t")
        >>> figure_problems(fig)  # doctest: +NORMALIZE_WHITESPACE
        ['axes 0 (no title): no y label', 'axes 1 (no title): empty panel (no data; turn it
        off or say why it is empty)', "axes 0 ('no title'): colour #1f77b4 is in no legend
        or colour bar"]
    """
    problems = _basic_problems(fig)
    renderer = fig.canvas.get_renderer()
    problems += _legend_problems(fig, renderer)
    problems += _text_problems(fig, renderer)
    problems += _colour_problems(fig)
    problems += _log_problems(fig)
    problems += _errorbar_problems(fig)
    return problems
