"""The one figure style of transflow: rc settings, figure sizes, log-axis ticks, smoke notes.

Every figure function of :mod:`transflow.plotting` is decorated with :func:`styled`: it
draws inside :func:`figure_style` (the rc settings :data:`STYLE`), on a figure
:data:`FIGURE_WIDTH` inches wide with constrained layout (:func:`new_figure`), and
:func:`finish` gives every log axis readable ticks (:class:`LogTicks`) before the figure
leaves the style context (so a caller that saves it later, e.g.
``RunContext.save_figure``, gets the same figure).
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

__all__ = [
    "FIGURE_WIDTH",
    "MAX_END_GAP",
    "STYLE",
    "LogTicks",
    "figure_style",
    "finish",
    "integer_axis",
    "new_figure",
    "smoke_mark",
    "smoke_note",
    "styled",
    "threshold_line",
    "tick_gaps",
]

#: The farthest an end of an axis's data range may lie from its nearest labelled tick, as
#: a fraction of the range in the axis's scale (log10 on a log axis): the figure checker
#: reports more, and :class:`LogTicks` picks ticks that keep within it.
MAX_END_GAP = 0.3

#: The gid prefix of a line drawn by :func:`threshold_line` (``threshold:<claim>=<value>``).
THRESHOLD_GID = "threshold:"

#: The attribute :func:`integer_axis` sets on an axis (the checker reads it).
INTEGER_MARK = "_transflow_integer"


def tick_gaps(ticks, lo: float, hi: float, scale=None) -> tuple[float, float] | None:
    """``(lower, upper)``: how far each end of the data range ``[lo, hi]`` lies from its
    nearest tick in ``ticks``, as fractions of the range measured in ``scale`` (a
    function on arrays; e.g. ``np.log10``; default: the identity). None when the range
    is a point or there are no ticks.

    Example:
        >>> import numpy as np
        >>> from transflow.plotting import tick_gaps
        >>> tick_gaps([1, 4], 1, 8, np.log2)  # the depth axis labelled 1 and 4 only
        (0.0, 0.3333333333333333)
    """
    f = scale or (lambda v: np.asarray(v, float))
    t = np.asarray(f(np.asarray(ticks, float)), float)
    t = t[np.isfinite(t)]
    a, b = (float(v) for v in np.asarray(f(np.asarray([lo, hi], float)), float))
    span = abs(b - a)
    if not len(t) or not (np.isfinite(span) and span > 0):
        return None
    return float(np.min(np.abs(t - a)) / span), float(np.min(np.abs(t - b)) / span)


#: The width of every figure in inches (the docs gallery shows all figures at one scale).
FIGURE_WIDTH = 7.0

#: The rc settings of every transflow figure (:func:`figure_style` applies them).
STYLE: dict[str, Any] = {
    "figure.figsize": (FIGURE_WIDTH, 3.0),
    "figure.dpi": 100,
    "savefig.dpi": 150,
    "font.size": 8.5,
    "axes.titlesize": 8.5,
    "axes.labelsize": 8.5,
    "xtick.labelsize": 7.5,
    "ytick.labelsize": 7.5,
    "legend.fontsize": 7,
    "legend.title_fontsize": 7,
    "legend.framealpha": 0.85,
    "legend.borderaxespad": 0.4,
    "figure.titlesize": 9.5,
    "figure.labelsize": 8.5,
    "mathtext.fontset": "dejavusans",
    "axes.formatter.use_mathtext": True,
    "axes.formatter.limits": (-3, 4),
    "axes.linewidth": 0.8,
    "axes.titlepad": 4.0,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.6,
    "lines.linewidth": 1.3,
    "lines.markersize": 4.5,
    "xtick.major.size": 3.0,
    "ytick.major.size": 3.0,
    "xtick.minor.size": 1.8,
    "ytick.minor.size": 1.8,
    "image.cmap": "viridis",
    "figure.constrained_layout.h_pad": 0.03,
    "figure.constrained_layout.w_pad": 0.03,
    "savefig.bbox": "tight",
    "savefig.pad_inches": 0.03,
}


@contextlib.contextmanager
def figure_style() -> Iterator[None]:
    """Context manager: matplotlib's rc settings are :data:`STYLE` inside the block.

    Use it for a figure drawn by hand that should look like transflow's own.

    Example:
        >>> import matplotlib
        >>> from transflow.plotting import figure_style
        >>> with figure_style():
        ...     matplotlib.rcParams["mathtext.fontset"]
        'dejavusans'
    """
    import matplotlib

    with matplotlib.rc_context(STYLE):
        yield


def new_figure(
    height: float = 3.0,
    nrows: int = 1,
    ncols: int = 1,
    *,
    squeeze: bool = True,
    **subplots_kw: Any,
):
    """``(fig, axes)``: a :data:`FIGURE_WIDTH`-wide figure with constrained layout.

    ``height`` in inches; the rest as :func:`matplotlib.pyplot.subplots`.

    Example:
        >>> from transflow.plotting import FIGURE_WIDTH, new_figure
        >>> fig, axes = new_figure(2.5, 1, 2)
        >>> tuple(fig.get_size_inches()) == (FIGURE_WIDTH, 2.5), len(axes)
        (True, 2)
    """

    plt = _pyplot()
    return plt.subplots(
        nrows,
        ncols,
        figsize=(FIGURE_WIDTH, height),
        layout="constrained",
        squeeze=squeeze,
        **subplots_kw,
    )


def _decade(x: float) -> int:
    return math.floor(math.log10(x) + 1e-9)


class LogTicks:
    """Tick positions and labels of a log axis that stay readable for any span.

    Of these, with two to ``max_ticks`` ticks, the first that leaves neither end of the
    span farther than :data:`MAX_END_GAP` of it (in decades) from a tick (else the one
    that comes closest): the decades (thinned to at most ``max_ticks``), labelled
    ``10^k``; 1–2–5 × 10^k; 1–3 × 10^k, labelled as plain numbers (``0.02``, ``20``) between 10⁻³
    and 10⁴ and ``m×10^k`` outside; evenly spaced round numbers (about 4, then 6; the
    top ones of 1…9 × 10^k would crowd). Minor ticks stay, unlabelled.

    Example:
        >>> from transflow.plotting import LogTicks
        >>> [float(t) for t in LogTicks.ticks(0.015, 0.26)]
        [0.02, 0.05, 0.1, 0.2]
        >>> LogTicks.label(0.05, decades=False), LogTicks.label(1e-5, decades=True)
        ('0.05', '$10^{-5}$')
    """

    max_ticks = 7

    @classmethod
    def ticks(cls, vmin: float, vmax: float) -> np.ndarray:
        """The labelled tick positions in ``[vmin, vmax]`` (both > 0)."""
        lo, hi = sorted((float(vmin), float(vmax)))
        if not (lo > 0 and math.isfinite(hi)):
            return np.array([])
        k0, k1 = _decade(lo), _decade(hi) + 1
        tol = 1e-9
        inside = lambda ts: [t for t in ts if lo * (1 - tol) <= t <= hi * (1 + tol)]  # noqa: E731

        def worst_gap(ts) -> float:
            gaps = tick_gaps(ts, lo, hi, np.log10)
            return 0.0 if gaps is None else max(gaps)

        import matplotlib.ticker as mticker

        candidates = []
        for subs in ((1,), (1, 2, 5), (1, 3)):
            ts = inside([m * 10.0**k for k in range(k0, k1 + 1) for m in subs])
            if subs == (1,) and len(ts) > cls.max_ticks:
                stride = math.ceil(len(ts) / cls.max_ticks)
                ts = [t for t in ts if _decade(t) % stride == 0]
            candidates.append(ts)
        for n in (4, 6):  # a short span: evenly spaced round numbers
            candidates.append(inside(mticker.MaxNLocator(n).tick_values(lo, hi)))
        fit = [ts for ts in candidates if 2 <= len(ts) <= cls.max_ticks] or [candidates[0]]
        ts = next((t for t in fit if worst_gap(t) <= MAX_END_GAP), None)
        if ts is None:  # none keeps both ends near a label: the one that comes closest
            ts = min(fit, key=worst_gap)
        return np.array(ts, dtype=float)

    @staticmethod
    def label(x: float, *, decades: bool) -> str:
        """The label of tick ``x``: ``$10^{k}$`` in decade mode, else plain or ``m×10^k``."""
        if not (x > 0 and math.isfinite(x)):
            return ""
        k = _decade(x)
        m = round(x / 10.0**k, 6)
        if decades and m == 1:
            return f"$10^{{{k}}}$"
        if -3 <= k < 4:
            return f"{x:.4g}"
        return f"$10^{{{k}}}$" if m == 1 else f"${m:.3g}\\times10^{{{k}}}$"

    @classmethod
    def apply(cls, axis) -> None:
        """Give ``axis`` (an ``XAxis``/``YAxis`` on log scale) these ticks and labels."""
        import matplotlib.ticker as mticker

        class _Locator(mticker.Locator):
            def __call__(self):
                vmin, vmax = self.axis.get_view_interval()
                return self.tick_values(vmin, vmax)

            def tick_values(self, vmin, vmax):
                ts = cls.ticks(vmin, vmax)
                if getattr(self.axis, INTEGER_MARK, False):  # integer data: integer ticks
                    ts = ts[np.abs(ts - np.round(ts)) < 1e-9 * np.maximum(1, ts)]
                    if len(ts) < 2:
                        lo, hi = sorted((vmin, vmax))
                        ts = mticker.MaxNLocator(integer=True, min_n_ticks=1).tick_values(lo, hi)
                        ts = ts[(ts >= lo) & (ts <= hi)]
                return ts

        class _Formatter(mticker.Formatter):
            ticks: list = []

            def set_locs(self, locs):
                self.ticks = [float(t) for t in locs]

            def __call__(self, x, pos=None):
                decades = len(self.ticks) >= 2 and all(
                    round(t / 10.0 ** _decade(t), 6) == 1 for t in self.ticks if t > 0
                )
                return cls.label(x, decades=decades)

        axis.set_major_locator(_Locator())
        axis.set_major_formatter(_Formatter())
        axis.set_minor_locator(mticker.LogLocator(base=10, subs="auto", numticks=12))
        axis.set_minor_formatter(mticker.NullFormatter())


def _axes_of(fig) -> list:
    out = []
    for ax in fig.axes:
        out.append(ax)
        out.extend(getattr(ax, "child_axes", []))
    return out


def finish(fig):
    """Readable log-axis ticks on every axes of ``fig`` (unless the ticks were set by
    hand); the first tick of every axis is made inside the style (the later ones copy
    it, so a figure drawn after the style context still carries its fonts). Returns
    ``fig``."""
    import matplotlib.ticker as mticker

    for ax in _axes_of(fig):
        for axis in (ax.xaxis, ax.yaxis):
            if axis.get_scale() != "log":
                continue
            if isinstance(axis.get_major_locator(), mticker.FixedLocator):
                axis.set_minor_formatter(mticker.NullFormatter())
                continue  # ticks set by hand (set_xticks)
            LogTicks.apply(axis)
        for axis in (ax.xaxis, ax.yaxis):
            axis.get_major_ticks(1)
            axis.get_minor_ticks(1)
    return fig


def styled(fn: Callable) -> Callable:
    """Decorator of a figure function: it runs inside :func:`figure_style` and its figure
    goes through :func:`finish` before it is returned."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any):
        _pyplot()
        with figure_style():
            fig = fn(*args, **kwargs)
            finish(fig)
        return fig

    return wrapper


def smoke_note(ax, text: str, *, empty: bool = False) -> None:
    """Say on ``ax`` that its data are too small to show (a smoke-size run).

    ``empty=True``: the panel has nothing to show; its frame is turned off and the note
    stands in its middle. Otherwise the note is a second line of the panel's title (in
    grey), where it covers no data.
    """
    if empty:
        ax.set_axis_off()
        ax.text(
            0.5,
            0.5,
            text,
            transform=ax.transAxes,
            ha="center",
            va="center",
            fontsize=8,
            color="0.3",
            wrap=True,
        )
        return
    ax.set_title(f"{ax.get_title()}\n({text})" if ax.get_title() else f"({text})")


def integer_axis(axis):
    """Tick ``axis`` (an ``XAxis``/``YAxis``, or a colour bar's long axis) at integers
    only and mark it integer for the figure checker (a log axis keeps :class:`LogTicks`,
    which then drops fractional ticks). Returns ``axis``.

    Example:
        >>> from transflow.plotting import integer_axis, new_figure
        >>> fig, ax = new_figure(2.0)
        >>> _ = ax.plot([2], [3], "o"); _ = integer_axis(ax.xaxis)
        >>> fig.draw_without_rendering(); [float(t) for t in ax.get_xticks()]
        [1.0, 2.0, 3.0]
    """
    import matplotlib.ticker as mticker

    if axis.get_scale() != "log":
        axis.set_major_locator(mticker.MaxNLocator(integer=True, min_n_ticks=1))
    setattr(axis, INTEGER_MARK, True)
    return axis


def threshold_line(ax, claim: str, value: float, *, label: str | None = None, axis: str = "y",
                   **style: Any):  # fmt: skip
    """Draw the threshold of claim ``claim`` at its ``value`` across ``ax`` (horizontal
    for ``axis="y"``, vertical for ``"x"``) and store both on the line, so the figure
    checker can compare the line with the claim. ``label`` (default ``"<claim> <value>"``)
    must state the value. Returns the ``Line2D``.

    Pass the value from the claim the figure illustrates (the run's claim dict, the
    config's bound), never a typed-in number.

    Example:
        >>> from transflow.plotting import new_figure, threshold_line
        >>> fig, ax = new_figure(2.0)
        >>> line = threshold_line(ax, "test_accuracy", 0.99, label="claim: accuracy ≥ 0.99")
        >>> line.get_gid(), float(line.get_ydata()[0])
        ('threshold:test_accuracy=0.99', 0.99)
    """
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(
            f"threshold_line: `value` of claim {claim!r} must be finite, got {value!r}; "
            "pass the claim's bound."
        )
    if axis not in ("x", "y"):
        raise ValueError(f"threshold_line: `axis` must be 'x' or 'y', got {axis!r}.")
    style.setdefault("label", label if label is not None else f"{claim} {value:g}")
    line = (ax.axhline if axis == "y" else ax.axvline)(value, **style)
    line.set_gid(f"{THRESHOLD_GID}{claim}={value!r}")
    return line


def parse_threshold(gid) -> tuple[str, float] | None:
    """``(claim, value)`` stored by :func:`threshold_line` in a line's gid, else None."""
    if not gid or not str(gid).startswith(THRESHOLD_GID):
        return None
    claim, _, value = str(gid)[len(THRESHOLD_GID) :].rpartition("=")
    try:
        return claim, float(value)
    except ValueError:
        return None


#: The line under every smoke-size figure (:func:`smoke_mark`).
SMOKE_MARK = "SMOKE SIZE: tiny inputs, a wiring check, not the study's numbers"


def smoke_mark(fig, text: str = SMOKE_MARK):
    """Mark ``fig`` as a smoke-size figure: a red line of text (:data:`SMOKE_MARK`)
    centred below everything the figure draws (its lowest axis, text or legend), so it
    overlaps nothing. Idempotent; returns ``fig``. The one mark of a smoke figure:
    :func:`transflow.plotting.save_figure` calls it under ``make_all.py --smoke`` and
    ``RunContext.save_figure`` in a ``debug=smoke`` run.

    Example:
        >>> from transflow.plotting import new_figure, smoke_mark
        >>> fig, ax = new_figure(2.0)
        >>> _ = smoke_mark(smoke_mark(fig)); [t.get_gid() for t in fig.texts]
        ['smoke-mark']
    """
    if any(t.get_gid() == "smoke-mark" for t in fig.texts):
        return fig
    fig.canvas.draw()  # run the layout engine first: the mark goes below the final layout
    renderer = fig.canvas.get_renderer()
    box = fig.get_tightbbox(renderer)  # inches
    if not fig.axes:  # nothing to anchor to: figure fractions
        anchor, at = fig.transFigure, ((box.x0 + box.x1) / 2, box.y0 - 0.06)
        at = (at[0] / fig.get_size_inches()[0], at[1] / fig.get_size_inches()[1])
    else:
        # A tight save (bbox_inches="tight") moves what is anchored to the figure's box
        # (figure legends, the suptitle, figure-fraction text) onto the grown box, so a
        # bottom legend would slide onto a mark below it. Freeze the layout just drawn
        # and anchor those and the mark to the first axes, which a tight save keeps put.
        anchor = fig.axes[0].transAxes
        to_axes = anchor.inverted().transform
        fig.set_layout_engine("none")
        for legend in fig.legends:
            ((x0, y0),) = to_axes([legend.get_window_extent(renderer).p0])
            legend.set_loc("lower left")
            legend.set_bbox_to_anchor((x0, y0), transform=anchor)
            legend.borderaxespad = 0.0
        if fig._suptitle is not None:
            t = fig._suptitle
            bb = t.get_window_extent(renderer)
            ((x, y),) = to_axes([((bb.x0 + bb.x1) / 2, bb.y0)])
            t.set(transform=anchor, position=(x, y), ha="center", va="bottom")
        dpi = fig.dpi
        (at,) = to_axes([((box.x0 + box.x1) / 2 * dpi, (box.y0 - 0.06) * dpi)])
    fig.text(
        *at,
        text,
        transform=anchor,
        ha="center",
        va="top",
        fontsize=8,
        fontweight="bold",
        color="#b00000",
        gid="smoke-mark",
    )
    return fig


def _pyplot():
    """``matplotlib.pyplot`` on the non-interactive Agg backend (figures are only saved)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure_smoke() -> bool:
    """True when ``make_all.py --smoke`` (``TRANSFLOW_SMOKE=1``) asks for tiny figures.

    Example:
        >>> import os
        >>> os.environ.pop("TRANSFLOW_SMOKE", None) and None
        >>> figure_smoke()
        False
    """
    return os.environ.get("TRANSFLOW_SMOKE", "0") not in ("", "0", "false", "False")
