"""Task ``vit_equivalence``: HuggingFace ViT/CvT/GPT-2 and causal torch layers reproduced
by transflow, over random configurations, in float64 and float32.

The study is :func:`transflow.interop.hf_equivalence_rows` (families
:data:`transflow.interop.HF_FAMILIES`: ``vit_layer``, ``vit_model``, ``cvt_layer``,
``cvt_stage``, ``gpt2_block``, ``torch_causal``; random sizes and unit-scale weights, see
:func:`transflow.interop.hf_configurations`); this task wires the config to it and writes
the records (``metrics.jsonl``, ``report.md``). Reported: ``max_abs_fp64 = max
|transflow − reference|`` (must be ≤ ``tol_fp64``) and ``max_rel_fp32 = max |Δ| / max
|reference|`` (≤ ``tol_fp32``).

HF's eager ViT attention computes its softmax in float32 even for float64 inputs; with
``fp64_softmax=True`` (default) the float64 comparison runs HF's eager attention with the
softmax in float64 (:func:`transflow.interop.fp64_vit_softmax`). With False the float64
ViT gap is the float32 rounding of γ (~1e-8) and the ViT rows fail at 1e-10.

Claims (any failure marks the run FAILED), at every size (smoke: one ViTLayer
configuration): ``n_fail == 0``, ``max_abs_fp64 ≤ tol_fp64``, ``max_rel_fp32 ≤ tol_fp32``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from transflow.interop import HF_FAMILIES

from ..context import markdown_table

__all__ = ["CHOICES", "Config", "run"]

#: Names checked before any work, smoke runs included (transflow-run help vit_equivalence).
CHOICES = {"families": HF_FAMILIES}


@dataclass
class Config:
    """Parameters of the HF/causal equivalence experiment (``task.<field>=...``)."""

    families: list[str] = field(default_factory=lambda: list(HF_FAMILIES))
    n_configs: int = 4  # random configurations per family
    fp64_softmax: bool = True  # HF ViT eager attention with a float64 softmax (see above)
    tol_fp64: float = 1e-10  # on max |Δ| in float64
    tol_fp32: float = 1e-5  # on max |Δ| / max |reference| in float32


def run(cfg: Config, ctx) -> dict:
    """Run the ``vit_equivalence`` experiment (the module docstring says what it does)."""
    import jax

    from transflow.interop import hf_equivalence_rows

    jax.config.update("jax_enable_x64", True)
    families = list(cfg.families)
    rows = hf_equivalence_rows(
        families,
        int(cfg.n_configs),
        seed=ctx.seed,
        fp64_softmax=bool(cfg.fp64_softmax),
        tol_fp64=cfg.tol_fp64,
        tol_fp32=cfg.tol_fp32,
        progress=ctx.progress,
        log=ctx.log,
    )
    table = markdown_table(
        ["family", "configuration", "max abs fp64", "max rel fp32", "pass"],
        (
            [r["family"], r["config"], f"{r['max_abs_fp64']:.2e}", f"{r['max_rel_fp32']:.2e}"]
            + ["yes" if r["pass"] else "NO"]
            for r in rows
        ),
    )
    ctx.report(
        "## Results\n\nHF ViT/CvT/GPT-2 and causal torch layers vs transflow.\n\n" + table + "\n"
    )
    summary: dict[str, Any] = {
        "n_configs": len(rows),
        "n_pass": sum(r["pass"] for r in rows),
        "max_abs_fp64": max(r["max_abs_fp64"] for r in rows),
        "max_rel_fp32": max(r["max_rel_fp32"] for r in rows),
    }
    for fam in families:
        summary[f"{fam}_max_abs_fp64"] = max(r["max_abs_fp64"] for r in rows if r["family"] == fam)
    ctx.claim("n_fail", summary["n_configs"] - summary["n_pass"], 0, op="==")
    ctx.claim("max_abs_fp64", summary["max_abs_fp64"], cfg.tol_fp64)
    ctx.claim("max_rel_fp32", summary["max_rel_fp32"], cfg.tol_fp32)
    return summary
