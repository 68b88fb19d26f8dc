"""F13: the linear regions of a user's network on a plane through three data points.

A random ``torch.nn.Sequential`` ReLU network R^5 → R (3 hidden layers of width 16) is
converted with ``MaxoutNetwork.from_torch`` and restricted with
``transflow.expressivity.restrict`` to the plane ``p0 + t₁(p1 − p0) + t₂(p2 − p0)``
through three random points, t ∈ [0, 1]² (the triangle p0, p1, p2 is its lower-left
half). The partition is the exact polygon refinement of ``count_linear_regions``,
certified: computed in exact integer arithmetic (dyadic affine logits, integer lines,
homogeneous integer vertices; no tolerance). On the segment p0 → p1
the certified 1-D count equals an independent dense-sampling count (torch activation
patterns on 4·10⁵ points).
"""

from __future__ import annotations

import pathlib

FIGURE = {
    "id": "F13",
    "title": "Linear regions of a torch ReLU net on the plane through three points of R^5",
    "command": "make figures  (python paper_figures/make_all.py F13)",
    "config": "library call (transflow.expressivity.slice_study); "
    "also written by experiment=expressivity",
}


def make(out_dir: pathlib.Path) -> dict:
    import jax

    from transflow.expressivity import slice_study
    from transflow.plotting import figure_smoke, plot_slice, save_figure

    jax.config.update("jax_enable_x64", True)
    if figure_smoke():
        st = slice_study(0, width=6, depth=2, n_dense=20001)
    else:
        st = slice_study(0)
    r = st["plane_count"]
    data = {
        "line": st["line"],
        "plane": st["plane"],
        "points": st["points"],
        "labels": r.labels,
        "polygons": [P.tolist() for P in r.polygons],
    }
    save_figure(plot_slice(st), out_dir, FIGURE["id"], data)
    return {
        "plane_linear_regions": r.linear,
        "plane_certified": bool(r.certified),
        "plane_certificate_method": r.certificate["method"],
        "segment_regions": st["line"]["linear"],
        "segment_dense_count": st["line"]["dense_activation"],
    }
