"""F8: linear regions of the zigzag transformers against depth (log scale), Variants A
and B, with the candidate lower bounds of docs/spec/maxout-expressivity.md §3.5 / C12.

Counts are exact and certified (the 1-D counter of
``transflow.expressivity.count_linear_regions`` on the hardmax transformers built by
``maxout_to_transformer`` from ``zigzag_maxout``). Drawn beside them: the RC-exact
formulas (2T−1)^{d(D−1)} (A) and (2T−3)^{dD/3} (B), Montúfar's k^{L−1}k^d, and the
summary's C·(T−1)^{q(⌊D/3⌋−1)} with C = (T−1)^d (d = 1, where the q = 1 and q = d
readings coincide).
"""

from __future__ import annotations

import pathlib

FIGURE = {
    "id": "F8",
    "title": "Linear regions vs depth (Variants A and B) with candidate bounds",
    "command": "make figures  (python paper_figures/make_all.py F8)",
    "config": "library call (transflow.expressivity.region_rows); "
    "also written by experiment=expressivity",
}


def make(out_dir: pathlib.Path) -> dict:
    import jax

    from transflow.expressivity import region_rows
    from transflow.plotting import figure_smoke, plot_regions, save_figure

    jax.config.update("jax_enable_x64", True)
    if figure_smoke():
        rows = region_rows([2], [3], 10)
    else:
        rows = region_rows([2, 3], [3, 4], 125)
    save_figure(plot_regions(rows), out_dir, FIGURE["id"], {"rows": rows})
    return {
        "all_counts_equal_rc_exact": all(r["regions"] == r["rc_exact"] for r in rows),
        "all_certified": all(r["certified"] for r in rows),
        "largest_count": max(r["regions"] for r in rows),
        "n_models": len(rows),
    }
