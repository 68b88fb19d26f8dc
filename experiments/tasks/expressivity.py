"""Task ``expressivity`` (issues #6, #14; F7, F8, F9, F13): transformers that realize
maxout networks and CPWL functions, softmax error, and certified exact linear-region counts
(docs/spec/maxout-expressivity.md §7, checks C1–C12).

The studies are library functions of :mod:`transflow.expressivity` that return records;
this task only wires the config to them, writes the records (``metrics.jsonl``, key
``check``), states every check as a claim (``ctx.claim``: a failing claim marks the run
FAILED) and draws the figures with :mod:`transflow.plotting`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["CHOICES", "Config", "run"]


def _section_names() -> tuple[str, ...]:
    return tuple(_SECTIONS)


#: Section names of ``task.only`` (the keys of ``_SECTIONS``, in the order they run) and
#: the variants, checked before any work (transflow-run help expressivity).
CHOICES = {"only": _section_names, "variants": ("A", "B")}


@dataclass
class Config:
    """Parameters of the expressivity checks (``task.<field>=...``)."""

    n_points: int = 20000
    variants: list[str] = field(default_factory=lambda: ["A", "B"])  # C1/C7 constructions
    softmax_grid: int = 20001  # C5: grid points of the sup over the input
    softmax_multilayer: bool = True  # C5: also the multi-layer error vs the §3.6 bound
    softmax_tokens: list[int] = field(default_factory=lambda: [2, 3, 4, 8])
    lambdas: list[float] = field(default_factory=lambda: [1.0, 3.0, 10.0, 30.0, 100.0, 1e3, 1e4])
    # zigzag depth sweep (certified 1-D counts of the constructed transformers)
    tokens_a: list[int] = field(default_factory=lambda: [2, 3, 4])
    tokens_b: list[int] = field(default_factory=lambda: [3, 4, 5])
    max_regions: int = 20000  # every depth whose count is <= this ...
    # ... and the deepest whose count is <= this (>= 1e5; 0: none, the C6/C7 >= 1e5
    # claims then fail)
    large_regions: int = 200000
    partition_tokens: int = 3  # F9: zigzag Variant A on [0,1]^2 with this T ...
    partition_depth: int = 3  # ... and this depth D
    partition_relu: bool = True  # F9: also the ReLU-net transformer's certified count
    grid_2d: int = 600
    precision_rank: int = 3  # C10: zigzag rank and depths of the precision rows
    precision_depths: list[int] = field(default_factory=lambda: [1, 2, 3, 4])
    precision_grid: int = 20001  # C10: points on [0, 1]
    slice_width: int = 16  # F13: torch ReLU net R^5 -> R, depth x width
    slice_depth: int = 3
    slice_dense: int = 400001  # dense-sampling points on the segment
    slice_figure: bool = True  # F13
    # run only these sections (empty: all): construction, cpwl, outside_box, softmax,
    # regions, partition, c8, precision, slice
    only: list[str] = field(default_factory=list)


# Every section: ``(cfg, ctx, rng, summary)``; logs its records, states its checks as
# claims, adds its numbers to ``summary`` and draws its figure.
def _construction(cfg, ctx, rng, summary) -> None:
    """C1 / C7 / C9: hardmax = maxout for the constructions, the parameter counts."""
    from transflow import expressivity as ex

    for row in ex.construction_checks(rng, int(cfg.n_points), tuple(cfg.variants)):
        v = row["variant"]
        ctx.log({"check": "C1" if v == "A" else "C7", **row})
        summary[f"C1_hardmax_max_rel_{v}"] = row["max_rel"]
        ctx.claim(f"C1/C7 hardmax = maxout, Variant {v} (max rel)", row["max_rel"], 1e-12)
        summary[f"C9_params_{v}"] = {k: row[k] for k in ("maxout", "nnz", "dense")}
        if v == "A":
            ctx.claim("C9 P_N of the worked example", row["maxout"], 181, op="==")
            ctx.claim("C9 nnz (Variant A)", row["nnz"], 341, op="==")
            ctx.claim("C9 dense (Variant A)", row["dense"], 2144, op="==")


def _cpwl(cfg, ctx, rng, summary) -> None:
    """C2, C3: ReLU nets and CPWL functions through the constructions."""
    from transflow import expressivity as ex

    for row in ex.relu_and_cpwl_checks(rng, int(cfg.n_points)):
        ctx.log(row)
        summary[f"{row['check']}_{row['route']}_max_rel"] = row["max_rel"]
        ctx.claim(f"{row['check']} {row['route']} = target (max rel)", row["max_rel"], 1e-12)


def _outside_box(cfg, ctx, rng, summary) -> None:
    """C4: exact inside the box, wrong far outside it."""
    from transflow import expressivity as ex

    c4 = ex.outside_box_errors(rng, int(cfg.n_points))
    ctx.log({"check": "C4", **c4})
    errs = c4["max_abs_by_radius"]
    summary["C4_err_inside_R1"] = errs[1.0]
    summary["C4_err_R100"] = errs[100.0]
    ctx.claim("C4 exact inside the box (R <= 1)", max(errs[0.5], errs[1.0]), 1e-12)
    ctx.claim("C4 fails outside the box (R = 100)", errs[100.0], 1e-3, op=">")


def _softmax(cfg, ctx, rng, summary) -> None:
    """C5 and F7: the softmax error against λ, and the multi-layer bound."""
    from transflow import expressivity as ex, plotting

    lambdas = [float(v) for v in cfg.lambdas]
    rows = ex.softmax_rows(list(cfg.softmax_tokens), lambdas, n_grid=int(cfg.softmax_grid))
    ctx.log({"check": "C5", "rows": rows})
    dev = max(abs(r["err_lambda_grid"] - r["c_T"]) / r["c_T"] for r in rows if r["lambda"] >= 10)
    summary["C5_max_rel_dev_err_lambda_vs_cT"] = dev
    ctx.claim("C5 sup err·λ = W((T−1)/e) (max rel dev, λ >= 10)", dev, 1e-6)
    if cfg.softmax_multilayer:
        multi = ex.softmax_multilayer_rows(rng, int(cfg.n_points))
        ctx.log({"check": "C5_multilayer", "rows": multi})
        worst = max(m["max_abs"] / m["bound"] for m in multi)
        summary["C5_multilayer_error_over_bound"] = worst
        ctx.claim("C5 multi-layer error / §3.6 bound", worst, 1.0)
    ctx.save_figure(plotting.plot_softmax(rows), "F7_softmax_error")


def _regions(cfg, ctx, rng, summary) -> None:
    """C6 / C7 / C12 and F8: certified exact counts against depth, candidate bounds."""
    from transflow import expressivity as ex, plotting

    rrows = ex.region_rows(
        list(cfg.tokens_a),
        list(cfg.tokens_b),
        int(cfg.max_regions),
        large=int(cfg.large_regions) or None,
    )
    for r in rrows:
        ctx.log({"check": "C6" if r["variant"] == "A" else "C7", **r})
    wrong = sum(r["regions"] != r["rc_exact"] for r in rrows)
    summary["C6_C7_counts_equal_rc_exact"] = wrong == 0
    summary["C6_C7_largest_count"] = max(r["regions"] for r in rrows)
    largest_b = max((r["regions"] for r in rrows if r["variant"] == "B"), default=0)
    summary["C6_C7_largest_count_B"] = largest_b
    ctx.claim("C6/C7 counts different from (2T−1)^{D−1} / (2T−3)^{D/3}", wrong, 0, op="==")
    ctx.claim("C6/C7 counts certified", sum(not r["certified"] for r in rrows), 0, op="==")
    largest_a = max(r["regions"] for r in rrows if r["variant"] == "A")
    ctx.claim("C6 largest certified transformer count (Variant A)", largest_a, 100000, op=">=")
    ctx.claim("C7 largest certified transformer count (Variant B)", largest_b, 100000, op=">=")
    below = sum(r["regions"] < r["montufar"] for r in rrows)
    ctx.claim("C12 counts below Montúfar's k^(L−1) k^d", below, 0, op="==")
    below_s = sum(
        r["regions"] < max(r["summary_q1"], r["summary_qd"]) for r in rrows if r["variant"] == "B"
    )
    ctx.claim(
        "C12 Variant B counts below (T−1)^d (T−1)^(q(⌊D/3⌋−1)), q ∈ {1, d}", below_s, 0, op="=="
    )
    ctx.save_figure(plotting.plot_regions(rrows), "F8_regions_depth")


def _exact_integer(count) -> bool:
    return bool(count.certified and count.certificate["method"].startswith("exact integer"))


def _partition(cfg, ctx, rng, summary) -> None:
    """C6 in 2-D and F9: the zigzag transformer's partition of [0, 1]²."""
    from transflow import expressivity as ex, plotting

    T2, D2 = int(cfg.partition_tokens), int(cfg.partition_depth)
    parts = ex.partition_2d(T2, D2, seed=ctx.seed, relu=bool(cfg.partition_relu))
    z = parts["zigzag"]
    g = ex.grid_region_count(
        ex.maxout_to_transformer(ex.zigzag_maxout(T2, D2 - 1, 2), 0.0, 1.0),
        [0.0, 0.0],
        [1.0, 1.0],
        int(cfg.grid_2d),
    )
    rc = (2 * T2 - 1) ** (2 * (D2 - 1))
    ctx.log(
        {
            "check": "C6_2d",
            "T": T2,
            "D": D2,
            "polygon_linear": z.linear,
            "polygon_activation": z.activation,
            "certified": z.certified,
            "grid": g,
            "rc_exact": rc,
        }
    )
    summary["C6_2d_polygon_grid_formula"] = [z.linear, g["patterns"], rc]
    ctx.claim("C6 2-D polygon count = (2T−1)^{2(D−1)}", z.linear, rc, op="==")
    ctx.claim("C6 2-D grid patterns = (2T−1)^{2(D−1)}", g["patterns"], rc, op="==")
    ctx.claim("C6 2-D count certified (exact integer arithmetic)", _exact_integer(z), True, op="==")
    if cfg.partition_relu:
        ctx.claim(
            "C6 2-D ReLU-net transformer count certified (exact integer arithmetic)",
            _exact_integer(parts["relu"]),
            True,
            op="==",
        )
    ctx.save_figure(plotting.plot_partition(parts, T2, D2), "F9_partition")


def _c8(cfg, ctx, rng, summary) -> None:
    """C8: the transformer's regions are the maxout net's; grid hashing agrees."""
    from transflow import expressivity as ex

    c8 = ex.c8_regions(rng)
    ctx.log({"check": "C8", **c8})
    net, tf, grid = c8["net"][0], c8["transformer"][0], c8["grid"]["linear"]
    summary["C8_regions_net_tf_grid"] = [net, tf, grid]
    ctx.claim("C8 transformer regions = maxout-net regions", tf, net, op="==")
    ctx.claim("C8 grid hashing = exact count", grid, net, op="==")


def _precision(cfg, ctx, rng, summary) -> None:
    """C10: float64 round-off against the running bound, by depth."""
    from transflow import expressivity as ex

    prows = ex.precision_rows(
        int(cfg.precision_rank),
        [int(v) for v in cfg.precision_depths],
        n=int(cfg.precision_grid),
    )
    for r in prows:
        ctx.log({"check": "C10", **r})
    ratio = max(r["max_abs_error"] / r["running_bound"] for r in prows)
    summary["C10_errors_by_depth"] = [r["max_abs_error"] for r in prows]
    ctx.claim("C10 float64 error / running round-off bound (every depth)", ratio, 1.0)
    ctx.claim(
        "C10 error grows with depth (last / first)",
        prows[-1]["max_abs_error"] / max(prows[0]["max_abs_error"], 1e-300),
        1.0,
        op=">",
    )


def _slice(cfg, ctx, rng, summary) -> None:
    """F13: a segment and a plane through a torch ReLU net on R^5, certified counts."""
    from transflow import expressivity as ex, plotting

    st = ex.slice_study(
        ctx.seed,
        width=int(cfg.slice_width),
        depth=int(cfg.slice_depth),
        n_dense=int(cfg.slice_dense),
        plane=True,
    )
    line = st["line"]
    ctx.log({"check": "slice", "line": line, "plane": st.get("plane")})
    summary["slice_line_count_dense"] = [line["linear"], line["dense_activation"]]
    ctx.claim(
        "slice: segment count = dense-sampling count",
        line["activation"],
        line["dense_activation"],
        op="==",
    )
    ctx.claim("slice: segment count certified", bool(line["certified"]), True, op="==")
    summary["slice_plane_regions"] = st["plane"]["linear"]
    ctx.claim(
        "slice: plane count certified (exact integer arithmetic)",
        _exact_integer(st["plane_count"]),
        True,
        op="==",
    )
    if cfg.slice_figure:
        ctx.save_figure(plotting.plot_slice(st), "F13_slice")


#: The sections of ``task.only``, in the order they run.
_SECTIONS = {
    "construction": _construction,
    "cpwl": _cpwl,
    "outside_box": _outside_box,
    "softmax": _softmax,
    "regions": _regions,
    "partition": _partition,
    "c8": _c8,
    "precision": _precision,
    "slice": _slice,
}


def run(cfg, ctx) -> dict:
    """Every section of ``task.only`` (empty: all), in float64."""
    import jax

    jax.config.update("jax_enable_x64", True)
    import numpy as np

    rng = np.random.default_rng(ctx.seed)
    summary: dict = {}
    for name, section in _SECTIONS.items():
        if not cfg.only or name in cfg.only:
            section(cfg, ctx, rng, summary)
    checks = sorted(
        {k.split("_")[0] for k in summary if k[:1] == "C" and k.split("_")[0][1:].isdigit()},
        key=lambda c: int(c[1:]),
    )
    ctx.report(
        "## Results\n\n"
        f"Checks {', '.join(checks)} in float64 at the sizes of this run's configuration; "
        "every check is a claim (table below), the numbers are in the summary table and "
        "metrics.jsonl, the figures (F7, F8, F9, F13) of the sections run in this directory."
    )
    return summary
