"""F9: the exact partition of a 2-D input box into the linear regions of constructed
transformers, regions coloured.

Left: the Variant-A hardmax transformer of the 2-D zigzag maxout net (T = 3 tokens,
D = 3 blocks) on [0, 1]²: (2T−1)^{2(D−1)} = 625 regions. Right: the transformer of a
random ReLU net 2→6→5→1 on [−2, 2]². Polygons from the exact polygon refinement of
``transflow.expressivity.count_linear_regions``, certified by exact integer arithmetic
(activation regions, merged into linear regions when adjacent with exactly equal affine
maps; one colour per linear region).
"""

from __future__ import annotations

import pathlib

FIGURE = {
    "id": "F9",
    "title": "2-D partition of the input box into linear regions of constructed transformers",
    "command": "make figures  (python paper_figures/make_all.py F9)",
    "config": "library call (transflow.expressivity.partition_2d); "
    "also written by experiment=expressivity",
}


def make(out_dir: pathlib.Path) -> dict:
    import jax

    from transflow.expressivity import partition_2d
    from transflow.plotting import figure_smoke, plot_partition, save_figure

    jax.config.update("jax_enable_x64", True)
    T, D = (2, 2) if figure_smoke() else (3, 3)
    parts = partition_2d(T, D)
    data = {
        name: {
            "linear": r.linear,
            "activation": r.activation,
            "labels": r.labels,
            "polygons": [P.tolist() for P in r.polygons],
        }
        for name, r in parts.items()
    }
    data["zigzag"]["rc_exact"] = (2 * T - 1) ** (2 * (D - 1))
    save_figure(plot_partition(parts, T, D), out_dir, FIGURE["id"], data)
    return {
        "zigzag_regions": parts["zigzag"].linear,
        "zigzag_rc_exact": data["zigzag"]["rc_exact"],
        "relu_linear_regions": parts["relu"].linear,
        "relu_activation_regions": parts["relu"].activation,
        "certified": all(bool(r.certified) for r in parts.values()),
    }
