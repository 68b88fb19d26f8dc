"""Task ``convergence`` (F3): error vs Δt of splitting schemes on the well-posed
sub-models (spec §8.10), against diffrax references, with fitted log–log slopes.

For every sub-model in ``submodels`` (``a``: attention + linear; ``b``: + S1 as the
tangent-space projected ODE; ``c``: + S2 with S2 forward invariant; ``c_active``: + S2
with an active constraint) and every scheme in ``schemes`` (see
:data:`transflow.continuous.SCHEMES`), the max-abs error at T = ``t1`` for Δt = T/N,
N in ``n_steps``, against a Dopri8 solve at tol 1e-12 (checked against 1e-14). One record
per (sub-model, scheme) goes to ``metrics.jsonl`` with the keys ``submodel``, ``scheme``,
``slope`` (fitted order), ``declared_order``, ``dts``, ``errors``, ``reference_error``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Config", "run", "plot_convergence"]


@dataclass
class Config:
    """Parameters of the Δt-convergence study (``task.<field>=...``)."""

    submodels: list[str] = field(default_factory=lambda: ["a", "b", "c"])
    # also available: "lie-paper", "parallel", "hybrid-2dt", "hybrid-dt" (SCHEMES)
    schemes: list[str] = field(default_factory=lambda: ["lie", "strang"])
    n_steps: list[int] = field(default_factory=lambda: [4, 8, 16, 32, 64])
    t1: float = 1.0
    n_tokens: int = 5
    n_features: int = 4


def plot_convergence(records: list[dict]):
    """Log–log error vs Δt, one panel per sub-model, with reference slopes 1 and 2."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    subs = list(dict.fromkeys(r["submodel"] for r in records))
    fig, axes = plt.subplots(1, len(subs), figsize=(4.2 * len(subs), 3.8), squeeze=False)
    for ax, sub in zip(axes[0], subs):
        for r in (r for r in records if r["submodel"] == sub):
            ax.loglog(r["dts"], r["errors"], "o-", label=f"{r['scheme']} (slope {r['slope']:.2f})")
        dts = np.asarray(records[0]["dts"])
        e0 = min(r["errors"][0] for r in records if r["submodel"] == sub)
        for p, ls in ((1, ":"), (2, "--")):
            ax.loglog(dts, e0 * (dts / dts[0]) ** p, "k" + ls, lw=0.8, label=f"O(Δt^{p})")
        ax.set_title(f"sub-model ({sub})")
        ax.set_xlabel("Δt")
        ax.set_ylabel("max |u(T) − u_ref(T)|")
        ax.legend(fontsize=7)
        ax.grid(True, which="both", alpha=0.3)
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    fig.tight_layout()
    return fig


def run(cfg, ctx) -> dict:
    import jax

    from transflow.continuous import convergence_study

    if not jax.config.jax_enable_x64:
        raise ValueError("experiment=convergence needs float64: run with precision=fp64/both.")
    submodels, schemes, n_steps = list(cfg.submodels), list(cfg.schemes), list(cfg.n_steps)
    if ctx.smoke:
        submodels, schemes, n_steps = submodels[:1], schemes[:2], [4, 8]
    records = []
    for sub in ctx.progress(submodels, total=len(submodels), desc="sub-models"):
        for res in convergence_study(
            (sub,),
            schemes,
            n_steps=n_steps,
            t1=cfg.t1,
            seed=ctx.seed,
            n_tokens=cfg.n_tokens,
            n_features=cfg.n_features,
        ):
            rec = res.record()
            ctx.log(rec)
            records.append(rec)
    ctx.save_figure(plot_convergence(records), "F3_dt_convergence")
    lines = [
        "| sub-model | scheme | declared order | fitted slope | smallest error |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['submodel']} | {r['scheme']} | {r['declared_order']} | {r['slope']:.3f} "
        f"| {min(r['errors']):.2e} |"
        for r in records
    ]
    ctx.report("\n".join(lines))
    return {f"slope_{r['submodel']}_{r['scheme']}": r["slope"] for r in records}
