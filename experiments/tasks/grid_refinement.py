"""Task ``grid_refinement`` (F4): error vs grid size N_x = N_y = N of the discrete
operators and of the evolution, for smooth kernels on Ω_x = Ω_y = [0, 1] (midpoint rule).

Grids refined by factors of 3 are nested, so the error is measured at the coarse nodes
against the finest grid ``n_ref`` (:func:`transflow.continuous.grid_convergence`). One
record per quantity (``attention``: 𝒜u; ``linear``: 𝒲u + b; ``evolution``: u(T) of
sub-model a by Strang at a fixed Δt) with ``quantity``, ``sizes``, ``errors``, ``slope``
(expected 2 for the midpoint rule).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Config", "run", "plot_grid"]


@dataclass
class Config:
    """Parameters of the grid-refinement study (``task.<field>=...``)."""

    quantities: list[str] = field(default_factory=lambda: ["attention", "linear", "evolution"])
    sizes: list[int] = field(default_factory=lambda: [4, 12, 36])
    n_ref: int = 324
    t1: float = 0.5
    n_time_steps: int = 8


def plot_grid(records: list[dict]):
    """Log–log error vs N with the O(N^-2) reference line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(4.8, 3.8))
    for r in records:
        ax.loglog(r["sizes"], r["errors"], "o-", label=f"{r['quantity']} (slope {r['slope']:.2f})")
    n = np.asarray(records[0]["sizes"], float)
    e0 = max(r["errors"][0] for r in records)
    ax.loglog(n, e0 * (n / n[0]) ** -2.0, "k--", lw=0.8, label="O(N^-2)")
    ax.set_xlabel("N = N_x = N_y")
    ax.set_ylabel("max error at coarse nodes")
    ax.set_title("grid refinement, midpoint rule")
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    return fig


def run(cfg, ctx) -> dict:
    from transflow.continuous import grid_convergence

    quantities, sizes, n_ref = list(cfg.quantities), list(cfg.sizes), int(cfg.n_ref)
    if ctx.smoke:
        quantities, sizes, n_ref = ["attention"], [4, 12], 36
    records = []
    for q in ctx.progress(quantities, total=len(quantities), desc="quantities"):
        res = grid_convergence(
            sizes, n_ref=n_ref, quantity=q, t1=cfg.t1, n_time_steps=cfg.n_time_steps
        )
        rec = {"quantity": q, "n_ref": n_ref, **res}
        ctx.log(rec)
        records.append(rec)
    ctx.save_figure(plot_grid(records), "F4_grid_convergence")
    ctx.report(
        "\n".join(
            ["| quantity | sizes | errors | slope |", "|---|---|---|---|"]
            + [
                f"| {r['quantity']} | {r['sizes']} | {', '.join(f'{e:.2e}' for e in r['errors'])} "
                f"| {r['slope']:.3f} |"
                for r in records
            ]
        )
    )
    return {f"slope_{r['quantity']}": r["slope"] for r in records}
