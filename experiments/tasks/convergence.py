"""Task ``convergence`` (F3): error vs Δt of splitting schemes on the well-posed
sub-models (docs/spec/continuous-model.md §8.10), against diffrax references, with fitted log–log
slopes.

The study is :func:`transflow.continuous.convergence_study`: for every sub-model in
``submodels`` (``a``: attention + linear; ``b``: + S1 as the tangent-space projected ODE;
``c``: + S2 with the constraint *active* on a measured fraction of the horizon;
``c_invariant``: + S2 with S2 forward invariant, i.e. never active) and every scheme in
``schemes`` (see :data:`transflow.continuous.SCHEMES`), the max-abs error at T = ``t1``
for Δt = T/N, N in ``n_steps``, against a Dopri8 solve at tol 1e-12 (whose own error is
estimated against tol 1e-14). Sub-model b is split with the tangent part of F, the full
F, or both (``b_splitting``). One record per (sub-model, splitting, scheme) goes to
``metrics.jsonl`` (:class:`transflow.continuous.ConvergenceResult`).

Claims (``summary.json``): each fitted slope within ±0.2 of the order expected for it
(:func:`transflow.continuous.expected_order`: Lie 1; Strang 2 on a, b-tangent and
c_invariant, 1 on b-full and on c), the reference error ≤ 1e-3 × the smallest error, the
S2 constraint of c active on ≥ 50% of the horizon, and the paper-literal ``hybrid-dt``
stalling on a and c_invariant (docs/spec/continuous-model.md Q10). Slope claims are not enforced at
smoke size (two step sizes; configs/sizes/smoke/convergence.yaml).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..context import markdown_table
from ..validate import Constraint

__all__ = ["CHOICES", "CONSTRAINTS", "Config", "run"]


def _names(attr: str):
    import transflow.continuous

    return getattr(transflow.continuous, attr)


#: Names checked before any work, smoke runs included (transflow-run help convergence).
CHOICES = {
    "submodels": lambda: _names("SUBMODELS"),
    "schemes": lambda: _names("SCHEMES"),
    "b_splitting": ("tangent", "full", "both"),
}
#: Cross-option constraints, checked before any work (experiments/validate.py).
CONSTRAINTS = (
    Constraint(
        ("precision",), lambda p: p != "fp32", "precision fp64 or both (the study needs float64)"
    ),
)


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
    # sub-model b: "tangent" (P_T F, Strang order 2), "full" (F itself, order 1) or "both"
    b_splitting: str = "both"


def run(cfg, ctx) -> dict:
    """Run the ``convergence`` experiment (the module docstring says what it does)."""
    from transflow.continuous import convergence_study, expected_order
    from transflow.plotting import plot_convergence

    splittings = ["tangent", "full"] if cfg.b_splitting == "both" else [cfg.b_splitting]
    submodels, schemes, n_steps = list(cfg.submodels), list(cfg.schemes), list(cfg.n_steps)
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
            b_splitting=splittings,
        ):
            rec = res.record()
            ctx.log(rec)
            records.append(rec)
    ctx.save_figure(plot_convergence(records), "F3_dt_convergence")

    def label(r):
        return r["submodel"] + (f"-{r['b_splitting']}" if r["b_splitting"] else "")

    rows = []  # of the report's table
    for r in records:
        name = f"{label(r)}/{r['scheme']}"
        p = expected_order(r["submodel"], r["scheme"], r["b_splitting"] or "tangent")
        if p is not None:
            ctx.claim(f"|slope - {p}| {name}", abs(r["slope"] - p), 0.2)
        if r["scheme"] == "hybrid-dt" and r["submodel"] in ("a", "c_invariant"):
            stall = min(r["errors"]) / max(r["errors"])
            ctx.claim(f"min/max error {name} (stalls)", stall, 0.5, op=">=")
        ctx.claim(
            f"reference error / smallest error {name}",
            r["reference_error"] / min(r["errors"]),
            1e-3,
        )
        rows.append(
            [label(r), r["scheme"], r["declared_order"], p if p else "–", f"{r['slope']:.3f}"]
            + [f"{min(r['errors']):.2e}", f"{r['reference_error']:.1e}"]
        )
    fracs = {r["submodel"]: r["active_fraction"] for r in records if r["submodel"] == "c"}
    for sub, frac in fracs.items():
        ctx.claim(f"S2 active fraction of the horizon ({sub})", frac, 0.5, op=">=")
    header = ["sub-model", "scheme", "declared order", "expected", "fitted slope"]
    lines = [markdown_table(header + ["smallest error", "reference error"], rows)]
    if fracs:
        lines.append("")
        lines += [
            f"S2 constraint of ({s}) active on {100 * f:.1f}% of [0, T]." for s, f in fracs.items()
        ]
    ctx.report("## Results\n\n" + "\n".join(lines))
    out = {f"slope_{label(r)}_{r['scheme']}": r["slope"] for r in records}
    out.update({f"active_fraction_{s}": f for s, f in fracs.items()})
    return out
