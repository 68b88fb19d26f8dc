"""Task ``nonconvergence`` (F6): the expected negative of docs/spec/continuous-model.md Q9. The full
model with σ1 = 0 (S1 ∩ S2 = ∅) has no solution; its Lie discretization applies the O(1) map
g(u) = P_S1(½(u + ReLU u)) at every step, whatever Δt.

The study is :func:`transflow.continuous.nonconvergence_study`: the paper's Lie scheme
with piecewise-constant controls (2 layers, J = 2) is run with each layer split into m
sub-steps (Δt = 1/m), for σ1 = 0 and for a contrast case with S1 ∩ S2 ≠ ∅ (σ1 = 1,
σ2 = 0.3). Records per (case, m): ``case``, ``m``, ``dt``, ``diff`` (successive
refinement difference), ``sensitivity`` (to the controls of the last layer),
``fixed_point_residual`` |g(u) − u|.

Claims (``summary.json``, as in tests/test_continuous.py; not enforced at smoke size,
m ≤ 8, configs/sizes/smoke/nonconvergence.yaml): for σ1 = 0 some successive difference
grows by > 2× for Δt ≥ 1/32, at the finest Δt the state is a fixed point of g
(|g(u) − u| < 0.02) and its sensitivity is < 2% of that at Δt = 1 (the limit forgets the
controls); for σ1 = 1 the last ratios lie in (0.3, 0.7) (first order) and the
sensitivity stays > 0.3.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..context import markdown_table

__all__ = ["Config", "run"]


@dataclass
class Config:
    """Parameters of the refinement study of the full model (``task.<field>=...``)."""

    refinements: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512])
    n_layers: int = 2
    n_tokens: int = 5
    d: int = 4
    ffn_branch_dt: str = "dt"


def run(cfg, ctx) -> dict:
    """Run the ``nonconvergence`` experiment (the module docstring says what it does)."""
    from transflow.continuous import nonconvergence_study
    from transflow.plotting import plot_nonconvergence

    refs = list(cfg.refinements)
    results = nonconvergence_study(
        refs,
        n_layers=cfg.n_layers,
        n_tokens=cfg.n_tokens,
        d=cfg.d,
        ffn_branch_dt=cfg.ffn_branch_dt,
        seed=ctx.seed,
    )
    rows = []  # of the report's table
    for name, r in results.items():
        for i, m in enumerate(r["m"]):
            diff = r["diffs"][i - 1] if i else None
            sens, res = r["sensitivity"][i], r["fixed_point_residual"][i]
            ctx.log(
                {"case": name, "sigma1": r["sigma1"], "sigma2": r["sigma2"], "m": m}
                | {"dt": r["dts"][i], "diff": diff, "sensitivity": sens}
                | {"fixed_point_residual": res}
            )
            diff_text = "–" if diff is None else f"{diff:.2e}"
            rows.append([name, f"1/{m}", diff_text, f"{sens:.2e}", f"{res:.2e}"])
    ctx.save_figure(plot_nonconvergence(results), "F6_nonconvergence")
    header = ["case", "Δt", "successive diff", "sensitivity", "\\|g(u)−u\\|"]
    ctx.report("## Results\n\n" + markdown_table(header, rows))
    r0, r1 = results.values()
    ratio0, residual0, sens0 = r0["ratios"], r0["fixed_point_residual"], r0["sensitivity"]
    ctx.claim("sigma1=0: max successive ratio, dt >= 1/32", max(ratio0[:5]), 2.0, op=">")
    ctx.claim("sigma1=0: |g(u) - u| at the finest dt", residual0[-1], 0.02, op="<")
    ctx.claim(
        "sigma1=0: sensitivity(finest dt) / sensitivity(dt=1)", sens0[-1] / sens0[0], 0.02, op="<"
    )
    last = r1["ratios"][-4:]
    ctx.claim("sigma1=1: min of the last successive ratios", min(last), 0.3, op=">")
    ctx.claim("sigma1=1: max of the last successive ratios", max(last), 0.7, op="<")
    ctx.claim("sigma1=1: sensitivity at the finest dt", r1["sensitivity"][-1], 0.3, op=">")
    return {
        "sigma1_0_final_sensitivity": r0["sensitivity"][-1],
        "sigma1_0_final_residual": r0["fixed_point_residual"][-1],
        "sigma1_1_final_sensitivity": r1["sensitivity"][-1],
        "sigma1_1_final_ratio": r1["ratios"][-1] if r1["ratios"] else None,
    }
