"""Task ``grid_refinement`` (F4): error vs grid size N_x = N_y = N of the discrete
operators and of the evolution, for smooth kernels on Ω_x = Ω_y = [0, 1] (midpoint rule).

The study is :func:`transflow.continuous.grid_refinement_study`: grids refined by factors
of 3 are nested, so the error is measured at the coarse nodes against the finest grid
``n_ref``. One record per quantity (``attention``: 𝒜u; ``linear``: 𝒲u + b;
``evolution``: u(T) of sub-model a by Strang at a fixed Δt) with ``quantity``, ``sizes``,
``errors``, ``slope``.

Claims (``summary.json``): every fitted slope within 2 ± 0.2 (second-order quadrature;
not enforced at smoke size, configs/sizes/smoke/grid_refinement.yaml: N = 4, 12 against 36,
where the coarse reference gives 2.27).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..context import markdown_table
from ..validate import Constraint

__all__ = ["CHOICES", "CONSTRAINTS", "Config", "run"]


def _nested(sizes, n_ref) -> bool:
    """Every grid N of ``sizes`` nests in the reference grid: n_ref / N is 3, 9, 27, ..."""
    for n in sizes:
        q, r = divmod(int(n_ref), int(n))
        if r or q < 3:
            return False
        while q % 3 == 0:
            q //= 3
        if q != 1:
            return False
    return True


#: Checked before any work (the ranges of each option: experiments/validate.py).
CHOICES = {"quantities": ("attention", "linear", "evolution")}
#: Cross-option constraints, checked before any work (experiments/validate.py).
CONSTRAINTS = (
    Constraint(
        ("task.sizes", "task.n_ref"),
        _nested,
        "task.n_ref / N = 3^k (k >= 1) for every N in task.sizes (nested midpoint grids), "
        "e.g. task.sizes=[4,12] task.n_ref=36",
    ),
)


@dataclass
class Config:
    """Parameters of the grid-refinement study (``task.<field>=...``)."""

    quantities: list[str] = field(default_factory=lambda: ["attention", "linear", "evolution"])
    sizes: list[int] = field(default_factory=lambda: [4, 12, 36])
    n_ref: int = 324
    t1: float = 0.5
    n_time_steps: int = 8


def run(cfg, ctx) -> dict:
    """Run the ``grid_refinement`` experiment (the module docstring says what it does)."""
    from transflow.continuous import grid_refinement_study
    from transflow.plotting import plot_grid

    quantities, sizes, n_ref = list(cfg.quantities), list(cfg.sizes), int(cfg.n_ref)
    records = []
    for q in ctx.progress(quantities, total=len(quantities), desc="quantities"):
        (rec,) = grid_refinement_study(
            [q], sizes, n_ref=n_ref, t1=cfg.t1, n_time_steps=cfg.n_time_steps
        )
        ctx.log(rec)
        records.append(rec)
    ctx.save_figure(plot_grid(records), "F4_grid_convergence")
    for r in records:
        ctx.claim(f"|slope - 2| {r['quantity']}", abs(r["slope"] - 2.0), 0.2)
    rows = [
        [r["quantity"], r["sizes"], ", ".join(f"{e:.2e}" for e in r["errors"]), f"{r['slope']:.3f}"]
        for r in records
    ]
    ctx.report("## Results\n\n" + markdown_table(["quantity", "sizes", "errors", "slope"], rows))
    return {f"slope_{r['quantity']}": r["slope"] for r in records}
