"""Task ``nonconvergence`` (F6): the expected negative of spec Q9. The full model with
σ1 = 0 (S1 ∩ S2 = ∅) has no solution; its Lie discretization applies the O(1) map
g(u) = P_S1(½(u + ReLU u)) at every step, whatever Δt.

The paper's Lie scheme with piecewise-constant controls (2 layers, J = 2) is run with each
layer split into m sub-steps (Δt = 1/m). For σ1 = 0 and for a contrast case with
S1 ∩ S2 ≠ ∅ (σ1 = 1, σ2 = 0.3) it logs, per m: the successive-refinement difference,
its ratio, the sensitivity of u(T) to the controls of the last layer and the residual
|g(u) − u| (records with ``case``, ``m``, ``dt``, ``diff``, ``sensitivity``,
``fixed_point_residual``).

Criterion (also tests/test_continuous.py): for σ1 = 0 the differences are not monotone
for Δt ≥ 1/32, and as Δt → 0 the state collapses onto a fixed point of g while its
sensitivity to the controls vanishes: the limit forgets the dynamics; for σ1 = 1 the
ratios tend to ½ (first order) and the sensitivity stays O(1).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Config", "run", "plot_nonconvergence", "CASES"]

CASES = {"sigma1=0 (S1∩S2=∅)": (0.0, 1.0), "sigma1=1, sigma2=0.3 (S1∩S2≠∅)": (1.0, 0.3)}


@dataclass
class Config:
    """Parameters of the refinement study of the full model (``task.<field>=...``)."""

    refinements: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512])
    n_layers: int = 2
    n_tokens: int = 5
    d: int = 4
    ffn_branch_dt: str = "dt"


def plot_nonconvergence(results: dict):
    """Successive differences and control sensitivity vs Δt, both cases."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(9, 3.8))
    for name, r in results.items():
        ax.loglog(r["dts"][1:], r["diffs"], "o-", label=name)
        bx.loglog(r["dts"], r["sensitivity"], "s-", label=name)
    ax.set_xlabel("Δt")
    ax.set_ylabel("max |u_{Δt/2}(T) − u_{Δt}(T)|")
    ax.set_title("successive refinements")
    bx.set_xlabel("Δt")
    bx.set_ylabel("max |u_T(θ) − u_T(θ')|")
    bx.set_title("sensitivity to the last layer's controls")
    for a in (ax, bx):
        a.grid(True, which="both", alpha=0.3)
        a.legend(fontsize=7)
        a.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    fig.tight_layout()
    return fig


def run(cfg, ctx) -> dict:
    from transflow.continuous import full_model_refinement

    refs = [1, 2, 4, 8] if ctx.smoke else list(cfg.refinements)
    results = {}
    for name, (s1, s2) in ctx.progress(CASES.items(), total=len(CASES), desc="cases"):
        r = full_model_refinement(
            sigma1=s1,
            sigma2=s2,
            refinements=refs,
            n_layers=cfg.n_layers,
            n_tokens=cfg.n_tokens,
            d=cfg.d,
            ffn_branch_dt=cfg.ffn_branch_dt,
            seed=ctx.seed,
        )
        r.pop("states")
        results[name] = r
        for i, m in enumerate(r["m"]):
            ctx.log(
                {
                    "case": name,
                    "sigma1": s1,
                    "sigma2": s2,
                    "m": m,
                    "dt": r["dts"][i],
                    "diff": r["diffs"][i - 1] if i else None,
                    "sensitivity": r["sensitivity"][i],
                    "fixed_point_residual": r["fixed_point_residual"][i],
                }
            )
    ctx.save_figure(plot_nonconvergence(results), "F6_nonconvergence")
    lines = ["| case | Δt | successive diff | sensitivity | |g(u)−u| |", "|---|---|---|---|---|"]
    for name, r in results.items():
        for i, m in enumerate(r["m"]):
            diff = f"{r['diffs'][i - 1]:.2e}" if i else "–"
            lines.append(
                f"| {name} | 1/{m} | {diff} | {r['sensitivity'][i]:.2e} | "
                f"{r['fixed_point_residual'][i]:.2e} |"
            )
    ctx.report("\n".join(lines))
    r0, r1 = results.values()
    return {
        "sigma1_0_final_sensitivity": r0["sensitivity"][-1],
        "sigma1_0_final_residual": r0["fixed_point_residual"][-1],
        "sigma1_1_final_sensitivity": r1["sensitivity"][-1],
        "sigma1_1_final_ratio": r1["ratios"][-1] if r1["ratios"] else None,
    }
