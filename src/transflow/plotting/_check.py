"""Inspect a drawn figure for the faults a reader sees: unlabelled axes, overlapping tick
labels or texts, a legend over the data, colours without a key, log axes without readable
ticks, error bars nobody explains, empty panels (used by the tests of every figure and by
the figure scripts)."""

from __future__ import annotations

import re

import numpy as np

from ._style import INTEGER_MARK, THRESHOLD_GID, figure_smoke

__all__ = ["FigureProblems", "check_figure", "figure_problems"]

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


def _ticks_in_view(axis):
    """``(location, labels)`` of every major and minor tick of ``axis`` within its view;
    ``labels``: the tick's visible labels that show text."""
    lo, hi = sorted(axis.get_view_interval())
    eps = 1e-9 * max(abs(hi - lo), abs(hi), 1e-300)
    for minor in (False, True):
        locs = axis.get_minorticklocs() if minor else axis.get_majorticklocs()
        ticks = axis.get_minor_ticks(len(locs)) if minor else axis.get_major_ticks(len(locs))
        for tick, loc in zip(ticks, locs):
            if lo - eps <= loc <= hi + eps:
                labels = [t for t in (tick.label1, tick.label2) if t.get_visible()]
                yield float(loc), [t for t in labels if t.get_text().strip()]


def _visible_tick_labels(axis) -> list:
    return [label for _, labels in _ticks_in_view(axis) for label in labels]


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


def _scale(axis):
    """Values of ``axis`` → its scale space (log10 on a log axis), elementwise."""
    tr = axis.get_transform()
    return lambda v: np.asarray(tr.transform(np.asarray(v, float).reshape(-1, 1))).ravel()


def _labelled_ticks(axis) -> list[tuple[float, str]]:
    """``(location, text)`` of the labelled ticks of ``axis`` within its view."""
    return [(loc, labels[0].get_text()) for loc, labels in _ticks_in_view(axis) if labels]


def _log_problems(fig) -> list[str]:
    """Log axes with fewer than two labelled ticks in the data range, and every axis
    whose data range has a labelled tick too far from one of its ends
    (:func:`transflow.plotting._style.tick_gaps`)."""
    from ._style import MAX_END_GAP, tick_gaps

    problems = []
    for i, ax in enumerate(_all_axes(fig)):
        if not ax.get_visible() or not ax.axison or getattr(ax, "_colorbar", None) is not None:
            continue
        for which, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            lim = ax.dataLim.intervalx if which == "x" else ax.dataLim.intervaly
            lo, hi = sorted(float(v) for v in lim)
            vlo, vhi = sorted(axis.get_view_interval())
            log = axis.get_scale() == "log"
            if not (np.isfinite(lo) and np.isfinite(hi)) or (log and lo <= 0):
                lo, hi = vlo, vhi
            lo, hi = max(lo, vlo), min(hi, vhi)
            if hi < lo:
                continue
            labelled = _labelled_ticks(axis)
            name = f"axes {i} ({ax.get_title() or 'no title'!r})"
            if log:
                slack = max(1.05, (hi / lo) ** 0.05)
                a, b = (vlo, vhi) if hi <= lo * slack else (lo, hi)  # one value: the view
                locs = [loc for loc, _ in labelled if a / slack <= loc <= b * slack]
                if len(locs) < 2:
                    problems.append(
                        f"{name}: log {which} axis has {len(locs)} labelled tick(s) within "
                        f"its data range [{lo:.3g}, {hi:.3g}]"
                    )
                    continue
            if not len(axis.get_majorticklocs()) or ax.images:
                continue  # ticks turned off on purpose; an image's pixels are indices
            if not labelled:
                group = ax.get_shared_x_axes() if which == "x" else ax.get_shared_y_axes()
                if len(group.get_siblings(ax)) > 1:
                    continue  # read on the axes it shares this axis with
                problems.append(f"{name}: {which} axis has no labelled tick in its view")
                continue
            if not all(_numeric(t) for _, t in labelled):
                continue  # categories (rows of a table, names): no scale to read
            locs = sorted(loc for loc, _ in labelled)
            gaps = tick_gaps(locs, lo, hi, _scale(axis))
            allowed = MAX_END_GAP
            if not log and len(locs) >= 2 and hi > lo:
                # evenly spaced ticks: a reader extends them by one step
                allowed = max(allowed, float(np.min(np.diff(locs))) / (hi - lo))
            if gaps is not None and max(gaps) > allowed:
                end = "upper" if gaps[1] >= gaps[0] else "lower"
                shown = ", ".join(_plain(t) for _, t in labelled)
                problems.append(
                    f"{name}: the {end} end of the {which} data range [{lo:.3g}, {hi:.3g}] "
                    f"is {100 * max(gaps):.0f}% of the range from a labelled tick (labels: "
                    f"{shown}); label ticks nearer the data (at most "
                    f"{100 * allowed:.0f}%)"
                )
    return problems


# --------------------------------------------------------------------------- integer data


def _axis_values(ax, which: str) -> tuple[np.ndarray, bool]:
    """The data values drawn on ``ax``'s ``which`` axis by lines, markers and collections
    (threshold lines and images aside), and whether any of them is a marker."""
    from matplotlib.collections import Collection, PathCollection
    from matplotlib.lines import Line2D

    k = 0 if which == "x" else 1
    out, markers = [], False
    for art in ax.get_children():
        if not _plotted(art):
            continue
        if isinstance(art, Line2D):
            if str(art.get_gid() or "").startswith(THRESHOLD_GID):
                continue
            branch = art.get_transform().contains_branch_seperately(ax.transData)
            if branch[k]:
                v = np.asarray(art.get_xdata() if k == 0 else art.get_ydata(), float)
                out.append(v)
                markers = markers or (_has_marker(art) and bool(np.isfinite(v).any()))
        elif isinstance(art, PathCollection) and len(art.get_offsets()):
            branch = art.get_offset_transform().contains_branch_seperately(ax.transData)
            if branch[k]:
                out.append(np.asarray(art.get_offsets(), float)[:, k])
                markers = True
        elif isinstance(art, Collection) and not isinstance(art, PathCollection):
            branch = art.get_transform().contains_branch_seperately(ax.transData)
            if branch[k]:
                out += [np.asarray(p.vertices, float)[:, k] for p in art.get_paths()]
    v = np.concatenate(out) if out else np.array([])
    return v[np.isfinite(v)], markers


def _plain(label: str) -> str:
    """A tick label as a reader reads it (``$\\mathdefault{0.5}$`` → ``0.5``)."""
    return re.sub(r"\$\\mathdefault\{(.*?)\}\$", r"\1", label)


def _numeric(label: str) -> bool:
    """Whether a tick label is a number (``0.5``, ``−3``, ``$10^{-3}$``, ``2×10^{4}``)."""
    t = re.sub(r"\\mathdefault|\\times|[${}^\s×]", "", label).replace("−", "-")
    return bool(t) and re.fullmatch(r"[-+0-9.eE]+", t) is not None


def _integers(v) -> bool:
    v = np.asarray(v, float)
    return bool(len(v)) and bool(np.all(np.abs(v - np.round(v)) <= 1e-9 * np.maximum(1, np.abs(v))))


def _colorbar_integer(fig, cbar) -> bool:
    """Whether every value a colour bar keys is an integer: its mappable's data, else
    the values of the marker colours of the figure that lie on its colour map (each
    colour read back as the interval of values drawn in it)."""
    arr = cbar.mappable.get_array()
    if arr is not None and np.size(arr):
        return _integers(
            np.asarray(arr, float).ravel()[np.isfinite(np.asarray(arr, float).ravel())]
        )
    vmin, vmax = float(cbar.vmin), float(cbar.vmax)
    if not (np.isfinite(vmin) and np.isfinite(vmax)) or vmax <= vmin:
        return False
    from matplotlib.collections import PathCollection

    grid = np.linspace(vmin, vmax, 4001)
    table = np.asarray(cbar.cmap(cbar.norm(grid)))[:, :3]
    found = []
    for ax in _all_axes(fig):
        if getattr(ax, "_colorbar", None) is not None:
            continue
        for coll in ax.collections:
            if not isinstance(coll, PathCollection) or coll.get_array() is not None:
                continue
            for c in np.atleast_2d(coll.get_facecolor()):
                if len(c) < 3 or _neutral(c[:3]):
                    continue
                d = np.abs(table - np.asarray(c[:3])).max(axis=1)
                if d.min() > 0.004:
                    continue  # not a colour of this map
                vals = grid[d <= d.min() + 1e-9]
                lo, hi = vals.min() - 1e-9, vals.max() + 1e-9
                found.append((np.floor(hi) >= lo, round(float(vals.mean()), 6)))
    return len({v for _, v in found}) >= 2 and all(ok for ok, _ in found)


def _integer_problems(fig) -> list[str]:
    """Fractional labelled ticks on an axis or colour bar whose data are all integers
    (or that the plotting code marked as integer with :func:`integer_axis`)."""
    problems = []
    for i, ax in enumerate(_all_axes(fig)):
        if not ax.get_visible() or not ax.axison:
            continue
        name = f"axes {i} ({ax.get_title() or 'no title'!r})"
        cbar = getattr(ax, "_colorbar", None)
        for which, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            if cbar is not None:
                long = "y" if cbar.orientation == "vertical" else "x"
                if which != long:
                    continue
                integer = _colorbar_integer(fig, cbar)
                what = "colour bar"
            else:
                values, markers = _axis_values(ax, which)
                integer = markers and _integers(values)
                what = f"{which} axis"
            integer = integer or bool(getattr(axis, INTEGER_MARK, False))
            if not integer:
                continue
            frac = [_plain(t) for loc, t in _labelled_ticks(axis) if not _integers([loc])]
            if frac:
                problems.append(
                    f"{name}: {what} of integer data has fractional tick labels "
                    f"({', '.join(frac[:4])}{', ...' if len(frac) > 4 else ''}); tick the "
                    "integers only (transflow.plotting.integer_axis)"
                )
    return problems


# --------------------------------------------------------------------------- covering texts


def _text_boxes(fig, renderer) -> list[tuple[str, object]]:
    """``(text, window extent)`` of every text drawn over axes: the axes' texts and
    annotations (their box when they have one) and the figure's texts."""
    from matplotlib.transforms import Bbox

    out = []
    texts = list(fig.texts)
    for ax in _all_axes(fig):
        if ax.get_visible():
            texts += list(ax.texts)
    for t in texts:
        if not (t.get_visible() and t.get_text().strip()):
            continue
        box = t.get_window_extent(renderer)
        patch = t.get_bbox_patch()
        if patch is not None and patch.get_visible():
            box = Bbox.union([box, patch.get_window_extent(renderer)])
        out.append((t.get_text(), box))
    return out


def _cover_problems(fig, renderer) -> list[str]:
    """Legends that cover a line, marker, bar, filled area or image; texts and
    annotation boxes that cover a line or a marker (a value written on its own bar or
    image cell is a label, not a cover)."""
    from matplotlib.transforms import Bbox

    boxes = [
        (f"legend {k}", leg.get_window_extent(renderer), True)
        for k, leg in enumerate(_legends(fig))
    ]
    boxes += [(f"text {t!r}", b, False) for t, b in _text_boxes(fig, renderer)]
    axes = [
        (i, ax, _data_paths(ax))
        for i, ax in enumerate(_all_axes(fig))
        if ax.get_visible() and getattr(ax, "_colorbar", None) is None
    ]
    problems = []
    for what, box, areas in boxes:
        box = Bbox.from_extents(box.x0 + 1, box.y0 + 1, box.x1 - 1, box.y1 - 1)
        if box.width <= 0 or box.height <= 0:
            continue
        for i, ax, paths in axes:
            for path, filled, clip, radius in paths:
                if filled and not areas:
                    continue
                region = box if clip is None else Bbox.intersection(box, clip)
                if region is None or region.width <= 0 or region.height <= 0:
                    continue
                if _covers(path, filled, radius, region):
                    title = ax.get_title() or "no title"
                    problems.append(f"{what} covers plotted data of axes {i} ({title!r})")
                    break
    return list(dict.fromkeys(problems))


# --------------------------------------------------------------------------- legend entries


def _dashes(line):
    offset, seq = line._unscaled_dash_pattern
    return None if seq is None else tuple(round(float(x), 3) for x in seq)


def _has_marker(line) -> bool:
    return line.get_marker() not in (None, "None", "none", " ", "")


def _has_stroke(line) -> bool:
    return line.get_linestyle() not in ("None", "none", " ", "") and line.get_linewidth() > 0


def _drawn_lines(fig) -> list:
    """Every Line2D drawn in an axes with something to show: a segment between two finite
    points (a line) or a finite point (a marker)."""
    from matplotlib.lines import Line2D

    out = []
    for ax in _all_axes(fig):
        if not ax.get_visible() or getattr(ax, "_colorbar", None) is not None:
            continue
        for art in ax.get_children():
            if not isinstance(art, Line2D) or not _plotted(art):
                continue
            xy = np.column_stack([art.get_xdata(orig=False), art.get_ydata(orig=False)])
            try:
                ok = np.all(np.isfinite(np.asarray(xy, float)), axis=1)
            except (TypeError, ValueError):
                ok = np.ones(len(xy), bool)
            segment = bool(np.any(ok[1:] & ok[:-1])) if len(ok) > 1 else False
            out.append((art, segment, bool(ok.any())))
    return out


def _entry_drawn(handle, label: str, lines, others) -> bool:
    """Whether a legend entry stands for something drawn: an artist with its label and
    data, or (a key of styles) a drawn artist with the handle's look."""
    from matplotlib.collections import Collection, PathCollection
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    if isinstance(handle, Line2D):
        want_stroke, want_marker = _has_stroke(handle), _has_marker(handle)
        colour = _rgb(handle.get_color())
        for art, segment, point in lines:
            if art.get_label() == label and (segment or (_has_marker(art) and point)):
                return True
            if (want_stroke and not segment) or (want_marker and not point):
                continue
            if want_stroke and not (_has_stroke(art) and _dashes(art) == _dashes(handle)):
                continue
            if want_marker and art.get_marker() != handle.get_marker():
                continue
            if colour is not None and not _neutral(colour) and colour not in _line_colours(art):
                continue
            return True
        if want_stroke and not want_marker and colour is not None and not _neutral(colour):
            # a line key of contour lines or a line collection of that colour
            if any(
                colour in _collection_colours(c)
                for c in others
                if isinstance(c, Collection) and not isinstance(c, PathCollection)
            ):
                return True
        if want_marker and not want_stroke and handle.get_marker() in ("|", "_"):
            # the key of error bars: drawn as line collections
            if any(isinstance(c, Collection) and not isinstance(c, PathCollection) for c in others):
                return True
        if want_marker and not want_stroke:  # a marker key: scatter markers count too
            return any(
                label == c.get_label()
                or (colour is None or _neutral(colour))
                or colour in _collection_colours(c)
                for c in others
                if isinstance(c, PathCollection) and len(c.get_offsets())
            )
        return False
    if isinstance(handle, Patch | Collection):
        colours = (
            {_rgb(handle.get_facecolor()), _rgb(handle.get_edgecolor())}
            if isinstance(handle, Patch)
            else _collection_colours(handle)
        ) - {None}
        for art in others:
            if getattr(art, "get_label", lambda: None)() == label:
                return True
            got = (
                _collection_colours(art)
                if isinstance(art, Collection)
                else {_rgb(art.get_facecolor()), _rgb(art.get_edgecolor())}
            )
            if colours & got:
                return True
        return any(colours & _line_colours(a) for a, _, point in lines if point)
    return True


def _legend_entry_problems(fig) -> list[str]:
    """Legend entries that stand for nothing drawn (no artist with data, or none with
    their look)."""
    from matplotlib.collections import Collection
    from matplotlib.patches import Patch

    lines = _drawn_lines(fig)
    others = [
        art
        for ax in _all_axes(fig)
        if ax.get_visible() and getattr(ax, "_colorbar", None) is None
        for art in ax.get_children()
        if isinstance(art, Patch | Collection)
        and _plotted(art)
        and art is not ax.patch
        and art not in ax.spines.values()
        and (not isinstance(art, Collection) or len(art.get_paths()) or len(art.get_offsets()))
    ]
    problems = []
    for k, leg in enumerate(_legends(fig)):
        for handle, text in zip(leg.legend_handles, leg.texts):
            if handle is None or not text.get_text().strip():
                continue
            if not _entry_drawn(handle, text.get_text(), lines, others):
                problems.append(
                    f"legend {k}: entry {text.get_text()!r} stands for nothing drawn (no "
                    "artist with its label and data, and none with its look); drop it or "
                    "draw it"
                )
    return problems


# --------------------------------------------------------------------------- thresholds

_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?![\w.])")


def _constant_position(line, ax) -> tuple[str, float] | None:
    """``("y", value)`` for a horizontal reference line across the axes (axhline),
    ``("x", value)`` for a vertical one; None otherwise."""
    bx, by = line.get_transform().contains_branch_seperately(ax.transData)
    x, y = (np.asarray(v, float) for v in (line.get_xdata(), line.get_ydata()))
    if len(x) < 2 or len(y) < 2:
        return None
    if by and not bx and np.all(y == y[0]):
        return ("y", float(y[0]))
    if bx and not by and np.all(x == x[0]):
        return ("x", float(x[0]))
    return None


def _numbers(text: str) -> list[tuple[float, float]]:
    """``(value, half the last printed digit)`` of every number written in ``text``."""
    out = []
    for m in _NUMBER.finditer(text.replace("−", "-")):
        s = m.group(0)
        mant = s.lower().split("e")[0]
        digits = len(mant.split(".")[1]) if "." in mant else 0
        exp = int(s.lower().split("e")[1]) if "e" in s.lower() else 0
        out.append((float(s), 0.5 * 10.0 ** (exp - digits)))
    return out


def _threshold_problems(fig, claims) -> list[str]:
    """Threshold lines: a line drawn by :func:`threshold_line` sits at the value stored
    on it, its label states that value, and (``claims`` given) it is the value of the
    claim it names; a labelled reference line stating a number not drawn that way is
    reported (its value is typed in, not taken from the claim)."""
    from ._style import parse_threshold

    problems = []
    for i, ax in enumerate(_all_axes(fig)):
        if not ax.get_visible() or getattr(ax, "_colorbar", None) is not None:
            continue
        for line in ax.lines:
            pos = _constant_position(line, ax)
            label = line.get_label() if not line.get_label().startswith("_") else ""
            marked = parse_threshold(line.get_gid())
            where = f"axes {i} ({ax.get_title() or 'no title'!r})"
            if marked is None:
                if pos is not None and label and _numbers(label):
                    hint = ""
                    if claims:
                        hint = (
                            " (claims: " + ", ".join(f"{k} {v:g}" for k, v in claims.items()) + ")"
                        )
                    problems.append(
                        f"{where}: reference line {label!r} at {pos[1]:g} is not drawn from a "
                        f"claim{hint}; draw it with transflow.plotting.threshold_line(ax, "
                        "claim name, claim value)"
                    )
                continue
            claim, value = marked
            if pos is None or abs(pos[1] - value) > 1e-9 * max(1.0, abs(value)):
                got = "not a constant line" if pos is None else f"at {pos[1]:g}"
                problems.append(f"{where}: threshold of {claim!r} is {got}, its claim is {value:g}")
            nums = _numbers(label)
            if label and nums and not any(abs(v - value) <= h for v, h in nums):
                problems.append(
                    f"{where}: threshold label {label!r} does not state the claim's value {value:g}"
                )
            if claims is not None:
                if claim not in claims:
                    problems.append(
                        f"{where}: threshold of {claim!r} illustrates no claim of this run "
                        f"({', '.join(claims) or 'none'})"
                    )
                elif abs(float(claims[claim]) - value) > 1e-9 * max(1.0, abs(value)):
                    problems.append(
                        f"{where}: threshold of {claim!r} drawn at {value:g}, the claim is "
                        f"{float(claims[claim]):g}"
                    )
    return problems


def _smoke_problems(fig, smoke: bool) -> list[str]:
    from matplotlib.text import Text

    if not smoke:
        return []
    for t in fig.findobj(Text):
        if t.get_visible() and "smoke" in t.get_text().lower():
            return []
    return [
        "a smoke-size figure without a smoke mark (no text says 'smoke'; "
        "transflow.plotting.smoke_mark(fig))"
    ]


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


def figure_problems(fig, *, smoke: bool | None = None, claims=None) -> list[str]:
    """The reader-visible faults of ``fig`` (empty when none), after drawing it.

    For every axes: it has data (lines, collections, images or patches) or is turned off
    (``ax.set_axis_off()``); with data, its x and y axis labels are non-empty (a label on
    an axes sharing that axis counts; a colorbar needs a label on its long axis); on each
    axis the visible tick labels do not overlap. In every text of the figure: no raw
    pseudo-LaTeX outside ``$…$`` (``^``, ``_{``, ``\\name``: write mathtext), and no title
    starting with a figure id (``F7:``; the id is the file name and the caption's).

    On the drawn artists (window extents in pixels, display coordinates): no legend, text
    or annotation box covers a line, marker, bar, filled area or image of any axes
    (within the axes' clip box); no two texts (titles, axis and tick labels, annotations,
    legends as one box) overlap; every colour of a line, marker or error bar is in a
    legend, on a colour bar's map, or the colour of a text (a direct label) -- an
    ``axhline``/``axvline`` at 0 is exempt; colour-mapped markers have a colour bar;
    error bars are explained by some text ("error bar", "±", "bars: ...").

    Ticks: every log axis has at least two labelled ticks within its data range; on every
    axis each end of the data range lies within :data:`~transflow.plotting._style.MAX_END_GAP`
    of the range (in the axis's scale, log10 on a log axis) from a labelled tick; an axis
    whose data are all integers (lines and markers; or marked by :func:`integer_axis`)
    and a colour bar whose values are all integers (its mappable's data, or the marker
    colours on its map) have integer tick labels only.

    Keys and claims: every legend entry stands for something drawn (an artist with its
    label and data, or one with the entry's line style, marker and colour); a line drawn
    by :func:`threshold_line` sits at the claim value stored on it and its label states
    that value; with ``claims`` (``{name: value}``, the run's claims) it names one of them
    and has its value; a labelled reference line across the axes stating a number that
    was not drawn by :func:`threshold_line` is reported. ``smoke`` (default:
    :func:`figure_smoke`, i.e. ``make_all.py --smoke``): the figure carries a smoke mark
    (a visible text saying "smoke", e.g. :func:`smoke_mark`).

    Example:
        >>> from transflow.plotting import figure_problems, new_figure
        >>> fig, (ax, bx) = new_figure(2.0, 1, 2)
        >>> _ = ax.plot([1, 2], [3, 4]); _ = ax.set_xlabel("t")
        >>> figure_problems(fig, smoke=False)  # doctest: +NORMALIZE_WHITESPACE
        ['axes 0 (no title): no y label', 'axes 1 (no title): empty panel (no data; turn it
        off or say why it is empty)', "axes 0 ('no title'): colour #1f77b4 is in no legend
        or colour bar"]
    """
    problems = _basic_problems(fig)
    renderer = fig.canvas.get_renderer()
    problems += _cover_problems(fig, renderer)
    problems += _text_problems(fig, renderer)
    problems += _colour_problems(fig)
    problems += _log_problems(fig)
    problems += _integer_problems(fig)
    problems += _legend_entry_problems(fig)
    problems += _threshold_problems(fig, claims)
    problems += _errorbar_problems(fig)
    problems += _smoke_problems(fig, figure_smoke() if smoke is None else bool(smoke))
    return problems


class FigureProblems(ValueError):
    """A saved figure that :func:`~transflow.plotting.figure_problems` finds fault with
    (its files are written, for a reader to look at, before this is raised)."""


def check_figure(fig, where: str, *, smoke: bool | None = None) -> None:
    """Raise :class:`FigureProblems` naming ``where`` and every problem
    :func:`~transflow.plotting.figure_problems` finds in ``fig`` (``smoke``: whether the
    figure must carry a smoke mark; None: :func:`figure_smoke`)."""
    problems = figure_problems(fig, smoke=smoke)
    if problems:
        raise FigureProblems(
            f"{where}: the figure checker found {len(problems)} problem(s): "
            + "; ".join(problems)
            + " (the files are saved; fix the plot function, not the checker)."
        )
