"""Figure helpers for ``paper_figures/`` scripts: re-exported from :mod:`transflow.plotting`."""

from transflow.plotting import figure_smoke, save_figure

__all__ = ["figure_smoke", "save_figure"]
