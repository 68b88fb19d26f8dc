"""Task ``expressivity`` (issue #6; F7, F8, F9): transformers that realize maxout networks
and CPWL functions, softmax error, and exact linear-region counts
(spec ``maxout-expressivity.md`` §7, checks C1–C9, C12).

Records in ``metrics.jsonl`` (key ``check``):

- ``C1``/``C7``: hardmax Variant A/B transformer vs a random maxout net (d=3, widths
  (5,4,3), ranks (2,4,3)) on ``n_points`` random points: ``max_abs``, ``max_rel``.
- ``C2``: ReLU net 4→8→8→6→1; ``C3``: lattice CPWL on R² (7 pieces, 5 terms) and a
  hinging-hyperplane sum; ``C4``: error at radius R times the box (exact for R ≤ 1).
- ``C5``: one softmax max-unit, sup error·λ on a dense gap grid vs ``c_T = W((T−1)/e)``
  (``rows``), and a multi-layer net's error vs the §3.6 bound.
- ``C6``/``C7``/``C12``: exact region counts of the zigzag transformers vs depth, with
  the candidate bounds; ``C6_2d``: d = 2 polygon and grid counts.
- ``C8``: regions of a random 1-6-6-6-1 rank-3 net and of its transformer.
- ``C9``: parameter counts (worked example: P_N 181, nnz 341, dense 2144).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = [
    "Config",
    "run",
    "softmax_rows",
    "plot_softmax",
    "region_rows",
    "plot_regions",
    "partition_2d",
    "plot_partition",
]


@dataclass
class Config:
    """Parameters of the expressivity checks (``task.<field>=...``)."""

    n_points: int = 20000
    softmax_tokens: list[int] = field(default_factory=lambda: [2, 3, 4, 8])
    lambdas: list[float] = field(default_factory=lambda: [1.0, 3.0, 10.0, 30.0, 100.0, 1e3, 1e4])
    # zigzag depth sweep (1-D exact counts of the constructed transformers)
    tokens_a: list[int] = field(default_factory=lambda: [2, 3])
    tokens_b: list[int] = field(default_factory=lambda: [3, 4])
    max_regions: int = 20000  # deepest depth per T: the last whose count is <= this
    partition_tokens: int = 3  # F9: zigzag Variant A on [0,1]^2 with this T ...
    partition_depth: int = 3  # ... and this depth D
    grid_2d: int = 600


# ------------------------------------------------------------------------ helpers
def _random_maxout(rng, d, widths, ranks, d_out=1):
    from transflow.expressivity import MaxoutNetwork

    ws, bs, prev = [], [], d
    for n, k in zip(widths, ranks):
        ws.append(rng.normal(size=(n, k, prev)))
        bs.append(rng.normal(size=(n, k)))
        prev = n
    return MaxoutNetwork(ws, bs, rng.normal(size=(d_out, prev)), rng.normal(size=d_out))


_CALL = {}


def _batched(f, x):
    """``vmap(f)(x)`` as numpy, compiled once per model structure (f is an argument)."""
    import numpy as np

    if "fn" not in _CALL:
        import equinox as eqx
        import jax

        _CALL["fn"] = eqx.filter_jit(lambda f, x: jax.vmap(f)(x))
    return np.asarray(_CALL["fn"](f, x))


def _errors(a, b):
    import numpy as np

    d = np.abs(np.asarray(a) - np.asarray(b))
    return {"max_abs": float(d.max()), "max_rel": float(d.max() / max(1.0, np.abs(b).max()))}


def softmax_rows(tokens, lambdas, n_grid=20001, n_random=2000, seed=0) -> list[dict]:
    """F7 data: for one rank-T unit (pieces x, 0, …, 0 on [−1, 1]) and every λ: the sup of
    error·λ over a dense grid of gaps (≈ 1/λ) and over ``n_random`` uniform points."""
    import numpy as np

    from transflow.expressivity import MaxoutNetwork, maxout_to_transformer, softmax_max_constant

    rng = np.random.default_rng(seed)
    rows = []
    for T in tokens:
        w = np.zeros((1, T, 1))
        w[0, 0, 0] = 1.0
        net = MaxoutNetwork([w], [np.zeros((1, T))])
        xr = rng.uniform(-1, 1, size=(n_random, 1))
        for lam in lambdas:
            tf = maxout_to_transformer(net, -1.0, 1.0, attention=float(lam))
            xg = np.linspace(0.0, min(1.0, 10.0 / lam), n_grid)[:, None]
            eg = _batched(net, xg) - _batched(tf, xg)
            er = _batched(net, xr) - _batched(tf, xr)
            rows.append(
                {
                    "T": T,
                    "lambda": float(lam),
                    "err_lambda_grid": float(np.abs(eg).max() * lam),
                    "err_lambda_random": float(np.abs(er).max() * lam),
                    "c_T": softmax_max_constant(T),
                    "n_random": n_random,
                }
            )
    return rows


def plot_softmax(rows):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.2, 4.2))
    tokens = sorted({r["T"] for r in rows})
    for i, T in enumerate(tokens):
        rr = [r for r in rows if r["T"] == T]
        col = f"C{i}"
        lam = [r["lambda"] for r in rr]
        ax.semilogx(
            lam, [r["err_lambda_grid"] for r in rr], "o-", color=col, label=f"T={T}: dense gap grid"
        )
        ax.semilogx(
            lam,
            [r["err_lambda_random"] for r in rr],
            "x:",
            color=col,
            alpha=0.7,
            label=f"T={T}: {rr[0]['n_random']} random points",
        )
        ax.axhline(rr[0]["c_T"], color=col, lw=0.8, ls="--")
        ax.text(
            lam[-1],
            rr[0]["c_T"],
            f" W({T - 1}/e)={rr[0]['c_T']:.4f}",
            va="bottom",
            fontsize=7,
            color=col,
            ha="right",
        )
    ax.set_xlabel("softmax scale λ")
    ax.set_ylabel("sup |max − softmax-attention| · λ")
    ax.set_title("F7: softmax max-unit error × λ → c_T = W((T−1)/e)")
    ax.legend(fontsize=6.5, ncol=2)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    return fig


def _depths(T, variant, max_regions):
    out, D = [], (2 if variant == "A" else 3)
    while True:
        L = D - 1 if variant == "A" else D // 3
        k = T if variant == "A" else T - 1
        if (2 * k - 1) ** L > max_regions:
            return out
        out.append(D)
        D += 1 if variant == "A" else 3


def region_rows(tokens_a, tokens_b, max_regions, d=1) -> list[dict]:
    """F8 data: exact 1-D region counts of the zigzag transformers vs depth D, with the
    candidate bounds of spec §3.5 / C12 (d = 1: the q = 1 and q = d readings coincide)."""
    from transflow.expressivity import count_linear_regions, maxout_to_transformer, zigzag_maxout

    rows = []
    for variant, tokens in (("A", tokens_a), ("B", tokens_b)):
        for T in tokens:
            k = T if variant == "A" else T - 1
            for D in _depths(T, variant, max_regions):
                L = D - 1 if variant == "A" else D // 3
                tf = maxout_to_transformer(zigzag_maxout(k, L, d), 0.0, 1.0, variant=variant)
                r = count_linear_regions(tf, 0.0, 1.0)
                rows.append(
                    {
                        "variant": variant,
                        "T": T,
                        "D": D,
                        "rank": k,
                        "layers": L,
                        "regions": r.linear,
                        "activation_regions": r.activation,
                        "rc_exact": (2 * k - 1) ** (d * L),
                        "montufar": k ** (L - 1) * k**d,
                        "summary_q1": (T - 1) ** d * (T - 1) ** (1 * (D // 3 - 1)),
                        "summary_qd": (T - 1) ** d * (T - 1) ** (d * (D // 3 - 1)),
                    }
                )
    return rows


def plot_regions(rows):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), sharey=True)
    for ax, variant in zip(axes, ("A", "B")):
        rr = [r for r in rows if r["variant"] == variant]
        for i, T in enumerate(sorted({r["T"] for r in rr})):
            s = [r for r in rr if r["T"] == T]
            D = [r["D"] for r in s]
            col = f"C{i}"
            ax.semilogy(
                D, [r["regions"] for r in s], "o", color=col, ms=7, label=f"T={T}: counted (exact)"
            )
            form = "(2T−1)^{d(D−1)}" if variant == "A" else "(2T−3)^{dD/3}"
            ax.semilogy(
                D, [r["rc_exact"] for r in s], "-", color=col, lw=1, label=f"T={T}: RC exact {form}"
            )
            ax.semilogy(
                D,
                [r["montufar"] for r in s],
                "--",
                color=col,
                lw=0.8,
                label=f"T={T}: Montúfar k^(L−1)k^d",
            )
            if variant == "A":  # the summary's formula counts 3 blocks per layer (B layout)
                continue
            ax.semilogy(
                D,
                [max(r["summary_qd"], 1) for r in s],
                ":",
                color=col,
                lw=1.2,
                label=f"T={T}: (T−1)^d (T−1)^(q(⌊D/3⌋−1)), q∈{{1,d}}",
            )
        ax.set_xlabel("depth D (blocks)")
        ax.set_title(
            f"Variant {variant}"
            + (" (1 block/layer)" if variant == "A" else " (3 blocks/layer, reserved token)")
        )
        ax.grid(True, which="both", alpha=0.3)
        if rr:
            ax.legend(fontsize=6)
        else:
            ax.text(0.5, 0.5, "not run", transform=ax.transAxes, ha="center")
    axes[0].set_ylabel("linear regions on [0, 1] (d = 1)")
    fig.suptitle("F8: linear regions of the zigzag transformers vs depth")
    fig.tight_layout()
    return fig


def partition_2d(T=3, D=3, seed=0, relu=True):
    """F9 data: the exact partition of [0,1]² into linear regions of the Variant-A
    transformer of the zigzag net (T tokens, D blocks) plus a small random ReLU net's."""
    import numpy as np

    from transflow.expressivity import (
        MaxoutNetwork,
        count_linear_regions,
        maxout_to_transformer,
        zigzag_maxout,
    )

    out = {}
    tf = maxout_to_transformer(zigzag_maxout(T, D - 1, 2), 0.0, 1.0)
    out["zigzag"] = count_linear_regions(tf, [0.0, 0.0], [1.0, 1.0])
    if not relu:
        return out
    rng = np.random.default_rng(seed)
    Ws = [rng.normal(size=(6, 2)), rng.normal(size=(5, 6)), rng.normal(size=(1, 5))]
    bs = [rng.normal(size=6), rng.normal(size=5), rng.normal(size=1)]
    relu = maxout_to_transformer(MaxoutNetwork.from_relu(Ws, bs), -2.0, 2.0)
    out["relu"] = count_linear_regions(relu, [-2.0, -2.0], [2.0, 2.0])
    return out


def plot_partition(parts, T=3, D=3):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.collections import PolyCollection

    fig, axes = plt.subplots(1, 2, figsize=(10, 4.9))
    titles = {
        "zigzag": f"zigzag transformer, Variant A, T={T}, D={D}",
        "relu": "transformer of a random ReLU net 2→6→5→1",
    }
    for ax, (name, r) in zip(axes, parts.items()):
        rng = np.random.default_rng(1)
        colours = plt.get_cmap("tab20")(rng.permutation(max(r.linear, 1)) % 20)
        pc = PolyCollection(
            r.polygons, facecolors=colours[r.labels], edgecolors="k", linewidths=0.15
        )
        ax.add_collection(pc)
        allv = np.concatenate(r.polygons)
        ax.set_xlim(allv[:, 0].min(), allv[:, 0].max())
        ax.set_ylim(allv[:, 1].min(), allv[:, 1].max())
        ax.set_aspect("equal")
        ax.set_title(
            f"{titles[name]}\n{r.linear} linear / {r.activation} activation regions", fontsize=9
        )
        ax.set_xlabel("x₁")
        ax.set_ylabel("x₂")
    fig.suptitle("F9: exact partition of the input box into linear regions (hardmax)")
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------ run
def _relu_and_cpwl(rng, n, ctx) -> dict:
    """Checks C2 (ReLU net 4→8→8→6→1) and C3 (lattice and hinging-hyperplane CPWL)."""
    import numpy as np

    from transflow.expressivity import (
        MaxoutNetwork,
        hinging_cpwl,
        lattice_cpwl,
        lattice_eval,
        maxout_to_transformer,
    )

    summary = {}
    sizes = (4, 8, 8, 6, 1)
    Ws = [rng.normal(size=(o, i)) / np.sqrt(i) for i, o in zip(sizes[:-1], sizes[1:])]
    bs = [0.3 * rng.normal(size=o) for o in sizes[1:]]
    tf = maxout_to_transformer(MaxoutNetwork.from_relu(Ws, bs), -1.0, 1.0)
    x4 = rng.uniform(-1, 1, size=(n, 4))
    h = x4
    for w, b in zip(Ws[:-1], bs[:-1]):
        h = np.maximum(h @ w.T + b, 0)
    e = _errors(_batched(tf, x4), h @ Ws[-1].T + bs[-1])
    ctx.log({"check": "C2", "T": tf.n_tokens, "D": tf.depth, **e})
    summary["C2_relu_max_rel"] = e["max_rel"]

    A, c = rng.normal(size=(7, 2)), rng.normal(size=7)
    sets = [[0, 1, 2], [2, 3], [3, 4, 5], [5, 6, 0], [1, 4, 6]]
    tf = maxout_to_transformer(lattice_cpwl(A, c, sets), -2.0, 2.0)
    x2 = rng.uniform(-2, 2, size=(n, 2))
    e = _errors(_batched(tf, x2)[:, 0], lattice_eval(A, c, sets, x2))
    ctx.log({"check": "C3", "route": "lattice", "T": tf.n_tokens, "D": tf.depth, **e})
    summary["C3_lattice_max_rel"] = e["max_rel"]
    W, b, s = rng.normal(size=(4, 3, 2)), rng.normal(size=(4, 3)), np.array([1.0, -1, 1, -1])
    tf = maxout_to_transformer(hinging_cpwl(W, b, s), -2.0, 2.0)
    ref = (np.max(np.einsum("pkd,nd->npk", W, x2) + b, -1) * s).sum(-1)
    e = _errors(_batched(tf, x2)[:, 0], ref)
    ctx.log({"check": "C3", "route": "hinging", "T": tf.n_tokens, "D": tf.depth, **e})
    summary["C3_hinging_max_rel"] = e["max_rel"]
    return summary


def _c8(rng, ctx) -> list[int]:
    """Check C8: regions of a random 1-6-6-6-1 rank-3 net on [−3, 3], of its transformer,
    and of grid hashing (2·10^5 points)."""
    import numpy as np

    from transflow.expressivity import (
        MaxoutNetwork,
        count_linear_regions,
        grid_region_count,
        maxout_to_transformer,
    )

    Wc = [rng.normal(size=(6, 3, 1)), rng.normal(size=(6, 3, 6)), rng.normal(size=(6, 3, 6))]
    net = MaxoutNetwork(
        Wc, [rng.normal(size=(6, 3)) for _ in range(3)], rng.normal(size=(1, 6)), np.zeros(1)
    )
    r_net = count_linear_regions(net, -3.0, 3.0)
    r_tf = count_linear_regions(maxout_to_transformer(net, -3.0, 3.0), -3.0, 3.0)
    g = grid_region_count(net, -3.0, 3.0, 200_000)
    ctx.log(
        {
            "check": "C8",
            "net": [r_net.linear, r_net.activation],
            "transformer": [r_tf.linear, r_tf.activation],
            "grid": g,
        }
    )
    return [r_net.linear, r_tf.linear, g["linear"]]


def run(cfg, ctx) -> dict:
    """All checks; ``debug=smoke`` keeps C1 (A), C4, one softmax unit, three tiny region
    counts and a tiny 2-D partition."""
    import jax

    jax.config.update("jax_enable_x64", True)
    import numpy as np

    from transflow.expressivity import grid_region_count, maxout_to_transformer, zigzag_maxout

    smoke = ctx.smoke
    n = 2000 if smoke else int(cfg.n_points)
    rng = np.random.default_rng(ctx.seed)
    summary: dict = {}

    # C1 / C7 / C9
    net = _random_maxout(rng, 3, (5, 4, 3), (2, 4, 3), d_out=2)
    x = rng.uniform(-1, 1, size=(n, 3))
    y = _batched(net, x)
    for variant in ("A",) if smoke else ("A", "B"):
        tf = maxout_to_transformer(net, -1.0, 1.0, variant=variant)
        e = _errors(_batched(tf, x), y)
        pc = tf.param_counts()
        ctx.log({"check": "C1" if variant == "A" else "C7", "variant": variant, **e, **pc})
        summary[f"C1_hardmax_max_rel_{variant}"] = e["max_rel"]
        summary[f"C9_params_{variant}"] = {k: pc[k] for k in ("maxout", "nnz", "dense")}

    # C2, C3
    if not smoke:
        summary.update(_relu_and_cpwl(rng, n, ctx))

    # C4
    small = _random_maxout(rng, 2, (4, 3), (3, 2))
    tf = maxout_to_transformer(small, -1.0, 1.0, margin=0.0)
    u = rng.normal(size=(n, 2))
    u /= np.abs(u).max(-1, keepdims=True)
    c4 = {}
    for R in (0.5, 1.0, 3.0, 10.0, 30.0, 100.0):
        c4[R] = _errors(_batched(tf, R * u), _batched(small, R * u))["max_abs"]
    ctx.log({"check": "C4", "B": [float(v) for v in tf.bounds], "max_abs_by_radius": c4})
    summary["C4_err_inside_R1"] = c4[1.0]
    summary["C4_err_R100"] = c4[100.0]

    # C5
    tokens = [2] if smoke else list(cfg.softmax_tokens)
    lambdas = [10.0, 1e3] if smoke else [float(v) for v in cfg.lambdas]
    rows = softmax_rows(tokens, lambdas, n_grid=2001 if smoke else 20001)
    ctx.log({"check": "C5", "rows": rows})
    summary["C5_max_rel_dev_err_lambda_vs_cT"] = max(
        abs(r["err_lambda_grid"] - r["c_T"]) / r["c_T"] for r in rows if r["lambda"] >= 10
    )
    if not smoke:
        deep = _random_maxout(rng, 2, (3, 3, 2), (3, 2, 3))
        xs = rng.uniform(-1, 1, size=(n, 2))
        yd = _batched(deep, xs)
        multi = []
        for lam in (1e2, 1e3, 1e4):
            tf = maxout_to_transformer(deep, -1.0, 1.0, attention=lam)
            err = _errors(_batched(tf, xs), yd)["max_abs"]
            multi.append({"lambda": lam, "max_abs": err, "bound": tf.softmax_error_bound()})
        ctx.log({"check": "C5_multilayer", "rows": multi})
        summary["C5_multilayer_within_bound"] = all(m["max_abs"] <= m["bound"] for m in multi)
    ctx.save_figure(plot_softmax(rows), "F7_softmax_error")

    # C6 / C7 / C12
    max_regions = 9 if smoke else int(cfg.max_regions)
    tok_b = [] if smoke else list(cfg.tokens_b)
    rrows = region_rows([2] if smoke else list(cfg.tokens_a), tok_b, max_regions)
    for r in rrows:
        ctx.log({"check": "C6" if r["variant"] == "A" else "C7", **r})
    summary["C6_C7_counts_equal_rc_exact"] = all(r["regions"] == r["rc_exact"] for r in rrows)
    summary["C6_C7_largest_count"] = max(r["regions"] for r in rrows)
    ctx.save_figure(plot_regions(rrows), "F8_regions_depth")

    # C6 in 2-D, F9
    T2, D2 = (2, 2) if smoke else (int(cfg.partition_tokens), int(cfg.partition_depth))
    parts = partition_2d(T2, D2, seed=ctx.seed, relu=not smoke)
    z = parts["zigzag"]
    g = grid_region_count(
        maxout_to_transformer(zigzag_maxout(T2, D2 - 1, 2), 0.0, 1.0),
        [0.0, 0.0],
        [1.0, 1.0],
        100 if smoke else int(cfg.grid_2d),
    )
    rc = (2 * T2 - 1) ** (2 * (D2 - 1))
    ctx.log(
        {
            "check": "C6_2d",
            "T": T2,
            "D": D2,
            "polygon_linear": z.linear,
            "polygon_activation": z.activation,
            "grid": g,
            "rc_exact": rc,
        }
    )
    summary["C6_2d_polygon_grid_formula"] = [z.linear, g["patterns"], rc]
    ctx.save_figure(plot_partition(parts, T2, D2), "F9_partition")

    # C8
    if not smoke:
        summary["C8_regions_net_tf_grid"] = _c8(rng, ctx)

    ctx.report(
        "# Expressivity checks (spec maxout-expressivity.md §7)\n\n"
        + "\n".join(f"- {k}: {v}" for k, v in summary.items())
    )
    if not math.isfinite(summary["C1_hardmax_max_rel_A"]):
        raise FloatingPointError("C1 produced a non-finite error")
    return summary
