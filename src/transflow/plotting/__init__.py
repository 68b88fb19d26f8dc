"""Plotting: the one home of every figure function, used by tasks and ``paper_figures``.

Each function takes the records a study returns (lists of dicts or dicts of arrays) and
returns a matplotlib ``Figure`` in the one figure style of the project (``_style``: the rc
settings :data:`STYLE` applied by :func:`figure_style`, every figure :data:`FIGURE_WIDTH`
inches wide with constrained layout, mathtext labels, readable log-axis ticks
(:class:`LogTicks`), "smoke size" written on a panel whose data are too small and
under every smoke-size figure (:func:`smoke_mark`), integer axes ticked at integers
(:func:`integer_axis`), claim thresholds drawn from the claim (:func:`threshold_line`));
:func:`figure_problems` lists what a reader would see wrong in a figure (unlabelled axes,
overlapping tick labels, empty panels, texts over data, unreadable or fractional ticks,
legend entries for nothing drawn, thresholds that differ from their claim, smoke figures
without a mark). Saving is the caller's job
(:meth:`transflow.experiments.context.RunContext.save_figure` in a task,
:func:`transflow.plotting.save_figure` in a figure script). One private module per area:
``_continuous`` (Δt/grid convergence, clustering, non-convergence), ``_equivalence``
(sub-steps and agreement tables, ViT), ``_training`` (training curves), ``_parallel``
(sharded memory), ``_benchmarks`` (F-perf), ``_expressivity`` (regions, partitions, softmax
error), ``_analysis`` (trajectories, budgets, refinement), ``_depth_study`` (the factorial
figure of ``experiment=depth``), ``_experiments`` (the scheme comparison of
``experiment=schemes``), ``_common`` (saving, smoke mode), ``_style`` (the style),
``_check`` (the inspection).

matplotlib is imported inside the functions, so importing this package is cheap.
"""

from ._analysis import (
    plot_control_smoothness as plot_control_smoothness,
    plot_cosine_matrices as plot_cosine_matrices,
    plot_flow_clustering as plot_flow_clustering,
    plot_refinement as plot_refinement,
    plot_substep_budgets as plot_substep_budgets,
    plot_token_geometry as plot_token_geometry,
    plot_token_trajectories as plot_token_trajectories,
)
from ._benchmarks import BENCHMARK_PARTS, plot_benchmarks
from ._check import figure_problems
from ._common import FigureProblems, check_figure, figure_smoke, save_figure
from ._continuous import plot_clustering, plot_convergence, plot_grid, plot_nonconvergence
from ._depth_study import plot_depth_factorial
from ._equivalence import plot_agreement, plot_substeps, plot_vit_attention
from ._experiments import plot_schemes as plot_schemes
from ._expressivity import plot_partition, plot_regions, plot_slice, plot_softmax
from ._parallel import plot_sharded_memory
from ._style import (
    FIGURE_WIDTH,
    MAX_END_GAP,
    STYLE,
    LogTicks,
    figure_style,
    integer_axis,
    new_figure,
    smoke_mark,
    smoke_note,
    threshold_line,
    tick_gaps,
)
from ._trained import plot_trained_partition, plot_trained_regions
from ._training import plot_training_curves

__all__ = [
    "figure_smoke",
    "save_figure",
    "check_figure",
    "FigureProblems",
    # _style, _check
    "FIGURE_WIDTH",
    "MAX_END_GAP",
    "STYLE",
    "LogTicks",
    "figure_problems",
    "figure_style",
    "integer_axis",
    "new_figure",
    "smoke_mark",
    "smoke_note",
    "threshold_line",
    "tick_gaps",
    # _continuous
    "plot_convergence",
    "plot_grid",
    "plot_nonconvergence",
    "plot_clustering",
    # _expressivity
    "plot_partition",
    "plot_regions",
    "plot_slice",
    "plot_softmax",
    "plot_trained_partition",
    "plot_trained_regions",
    # _benchmarks
    "BENCHMARK_PARTS",
    "plot_benchmarks",
    # _equivalence
    "plot_agreement",
    "plot_substeps",
    "plot_vit_attention",
    # _parallel
    "plot_sharded_memory",
    # _training
    "plot_training_curves",
    # _depth_study (experiment=depth), _experiments (experiment=schemes)
    "plot_depth_factorial",
    "plot_schemes",
    # _analysis
    "plot_control_smoothness",
    "plot_cosine_matrices",
    "plot_flow_clustering",
    "plot_refinement",
    "plot_substep_budgets",
    "plot_token_geometry",
    "plot_token_trajectories",
]
