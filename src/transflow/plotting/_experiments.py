"""The figure of the ``experiment=schemes`` run (written into its run directory): the
scheme comparison with its stability regions. Same style as every other figure
(:func:`transflow.plotting.figure_style`); the figure of ``experiment=depth`` is
:func:`transflow.plotting.plot_depth_factorial` (``_depth_study``)."""

from __future__ import annotations

from typing import Any

from ._style import new_figure, styled

__all__ = ["plot_schemes"]


#: Per task: (record key, y label, chance level or None).
_METRIC = {
    "digits": ("accuracy", "test accuracy", 0.1),
    "sequence": ("accuracy", "test accuracy", None),
    "text": ("bpc", "validation bits/char (lower is better)", None),
}


@styled
def plot_schemes(
    rows: dict[tuple[str, str], dict[str, Any]],
    *,
    tasks: list[str],
    schemes: list[str],
    stable: dict[str, Any],
    chance: dict[str, float] | None = None,
):
    """The scheme comparison: per task, the metric at Δt/2, Δt (trained) and 2Δt per
    scheme (bars: mean over seeds, error bars: ± the sample std over seeds, n − 1; none
    for one seed), with the chance level where known; and the boundaries
    |R(z/2, z/2)| = 1 of the stability regions of the schemes in ``stable``, with a note
    naming the schemes not drawn and why.

    The y range of a panel is set by the Δt/2 and Δt bars; a 2Δt bar beyond it is cut at
    the top and its value written above it (so a 12-bit bar does not squash 3.1 vs 3.3).
    ``chance``: task → chance level (default: digits 0.1; pass the sequence task's
    ``1/vocab``).
    """
    import numpy as np

    from transflow import make_scheme, stability_function

    chance = {**{t: m[2] for t, m in _METRIC.items() if m[2] is not None}, **(chance or {})}
    # Top row: one bar panel per task (scheme names upright under their bars, so eleven
    # schemes fit); bottom row: the stability panel with its legend beside it.
    ncols = max(len(tasks), 2)
    fig, grid = new_figure(3.0 + 2.6 + 0.12 * max(map(len, schemes)), 2, ncols, squeeze=False)
    for a in grid[1, 1:]:
        a.remove()
    axes = [*grid[0, : len(tasks)], grid[1, 0]]
    for a in grid[0, len(tasks) :]:
        a.remove()
    width = 0.27
    x = np.arange(len(schemes))
    variants = [
        ("_half_dt", r"$\Delta t/2$"),
        ("", r"$\Delta t$ (trained)"),
        ("_double_dt", r"$2\Delta t$"),
    ]
    n_seeds = 0
    for ax, task in zip(axes, tasks):
        metric, label, _ = _METRIC.get(task, ("accuracy", "test accuracy", None))
        stats = {}
        for suffix, _lab in variants:
            vals = [np.asarray(rows[(task, s)][metric + suffix], float) for s in schemes]
            n_seeds = max(n_seeds, max(len(v) for v in vals))
            stats[suffix] = (
                np.array([v.mean() for v in vals]),
                # the sample std (n − 1) as in the report's tables; 0 for one seed
                np.array([v.std(ddof=1) if len(v) > 1 else 0.0 for v in vals]),
            )
        core = np.concatenate(
            [stats[k][0] + sgn * stats[k][1] for k in ("_half_dt", "") for sgn in (-1, 1)]
        )
        if metric == "accuracy":
            lo, hi = 0.0, 1.0
        else:
            span = max(float(core.max() - core.min()), 1e-3)
            lo, hi = float(core.min() - 0.6 * span), float(core.max() + 1.2 * span)
        for j, (suffix, lab) in enumerate(variants):
            m, e = stats[suffix]
            shown = np.minimum(m, hi)
            ax.bar(
                x + (j - 1) * width,
                shown - lo,
                width,
                bottom=lo,
                yerr=np.where(m > hi, 0.0, e),
                color=f"C{j}",
                capsize=2,
                error_kw={"ecolor": "k", "lw": 0.8},
                label=lab,
            )
            for xi, mi in zip(x + (j - 1) * width, m):
                if mi > hi:  # cut: say the value inside the bar's top
                    ax.text(
                        xi,
                        hi - 0.02 * (hi - lo),
                        f"{mi:.1f}↑",
                        ha="center",
                        va="top",
                        fontsize=6,
                        rotation=90,
                        color="white",
                    )
        if task in chance:
            ax.axhline(chance[task], color="0.3", ls=(0, (4, 2)), lw=1, label="chance level")
        ax.set_ylim(lo, hi)
        ax.set_xticks(x, schemes, rotation=90, fontsize=7)
        ax.set_xlabel("scheme")
        ax.set_ylabel(label)
        ax.set_title(task)
    ax = axes[-1]
    re, im = np.meshgrid(np.linspace(-5, 1, 241), np.linspace(-3.5, 3.5, 241))
    z = re + 1j * im
    drawn, flat = [], []
    for i, s in enumerate([s for s in schemes if s in stable]):
        sch = make_scheme(s, ffn_branch_dt="2dt") if s == "imex" else make_scheme(s)
        r = np.abs(np.asarray(stability_function(sch, z / 2, z / 2)))
        if not (r.min() < 1.0 < r.max()):
            flat.append(f"{s}: |R| {'<' if r.max() < 1 else '>'} 1 in the whole window")
            continue
        ax.contour(re, im, r, levels=[1.0], linewidths=1.2, colors=[f"C{i + 3}"])
        ax.plot([], [], color=f"C{i + 3}", label=f"{s}: |R| = 1")
        drawn.append(s)
    missing = [s for s in schemes if s not in stable]
    note = flat + ([f"not analysed: {', '.join(missing)}"] if missing else [])
    ax.axhline(0, color="k", lw=0.5)
    ax.axvline(0, color="k", lw=0.5)
    ax.set_xlabel(r"Re $\Delta t\lambda$")
    ax.set_ylabel(r"Im $\Delta t\lambda$")
    ax.set_title("stability: |R| = 1\n(Δtλ split equally)")
    if drawn or note:  # beside the panel: a note inside would cover the contours
        ax.legend(
            handles=ax.get_legend_handles_labels()[0],
            title="\n".join(note) or None,
            loc="center left",
            bbox_to_anchor=(1.05, 0.5),
            fontsize=6,
            title_fontsize=6,
            ncol=2,
        )
    keyed: dict[str, Any] = {}
    for a in axes[:-1]:
        for h, lab in zip(*a.get_legend_handles_labels()):
            keyed.setdefault(lab, h)
    from matplotlib.lines import Line2D

    keyed[f"± std over {n_seeds} seed(s)"] = Line2D([], [], color="k", marker="|", ms=8, ls="")
    handles, labels = list(keyed.values()), list(keyed)
    fig.legend(
        handles,
        labels,
        loc="outside lower center",
        ncol=len(handles),
        title=f"bars: mean over {n_seeds} seed(s); error bars: ± std over the seeds; "
        "a bar cut at the top says its value",
    )
    return fig
