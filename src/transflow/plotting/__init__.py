"""Plotting: the one home of every figure function, used by tasks and ``paper_figures``.

Each function takes the records a study returns (lists of dicts or dicts of arrays) and
returns a matplotlib ``Figure``; saving is the caller's job
(:meth:`transflow.experiments.context.RunContext.save_figure` in a task,
:func:`transflow.plotting.save_figure` in a figure script). One private module per area:
``_continuous`` (Δt/grid convergence, clustering, non-convergence), ``_equivalence``
(sub-steps and agreement tables, ViT), ``_expressivity`` (regions, partitions, softmax
error), ``_analysis`` (trajectories, budgets, refinement), ``_common`` (saving, smoke mode).

matplotlib is imported inside the functions, so importing this package is cheap.
"""

from ._common import figure_smoke, save_figure
from ._continuous import plot_clustering, plot_convergence, plot_grid, plot_nonconvergence

__all__ = [
    "figure_smoke",
    "save_figure",
    "plot_convergence",
    "plot_grid",
    "plot_nonconvergence",
    "plot_clustering",
]
