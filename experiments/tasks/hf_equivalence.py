"""Task ``hf_equivalence``: the HuggingFace model zoo reproduced by transflow, one table
over all families (:data:`transflow.interop.HF_ZOO_FAMILIES`: ViT, CvT, GPT-2, BERT,
RoBERTa, DistilBERT, Llama, Mistral, Qwen2, the scaled rotary embeddings, the task heads,
the activations, T5), with and without padding masks, in float64 and float32: the rows of
:func:`transflow.interop.hf_zoo_rows` (its module docstring describes every family and
the padded batches).

Reported per row: ``err_fp64 = max |transflow − HF| / max(1, max |HF|)`` (claim ≤
``tol_fp64``; HF run through :func:`transflow.interop.hf_float64_reference`, its float64-
exact path) and ``err_fp32 = max |Δ| / max |HF|`` (claim ≤ ``tol_fp32``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..context import markdown_table

__all__ = ["CHOICES", "Config", "run"]


def _families() -> tuple[str, ...]:
    from transflow.interop import HF_ZOO_FAMILIES

    return tuple(HF_ZOO_FAMILIES)


#: Names checked before any work, smoke runs included (transflow-run help hf_equivalence).
CHOICES = {"families": _families}


@dataclass
class Config:
    """Parameters of the HF model-zoo equivalence experiment (``task.<field>=...``)."""

    families: list[str] = field(default_factory=lambda: list(_families()))
    n_configs: int = 2  # random configurations per family (each with and without mask)
    masks: bool = True  # also run every maskable family with a padded batch
    # keep the first this many configurations of each family (0: all of them)
    first_configs: int = 0
    unmasked: bool = True  # with masks: also the unpadded row of a maskable family
    tol_fp64: float = 1e-10  # on max |Δ| / max(1, max |HF|) in float64
    tol_fp32: float = 1e-5  # on max |Δ| / max |HF| in float32


def run(cfg, ctx) -> dict:
    """Run the ``hf_equivalence`` experiment (the module docstring says what it does)."""
    import jax

    jax.config.update("jax_enable_x64", True)
    from transflow.interop import hf_zoo_rows

    families = list(cfg.families)
    rows = hf_zoo_rows(
        families, int(cfg.n_configs), seed=ctx.seed, masks=bool(cfg.masks),
        first_configs=int(cfg.first_configs), unmasked=bool(cfg.unmasked), progress=ctx.progress,
    )  # fmt: skip
    for row in rows:
        ok = row["err_fp64"] <= cfg.tol_fp64 and row["err_fp32"] <= cfg.tol_fp32
        row["pass"] = bool(ok)
        ctx.log(row)
    table = markdown_table(
        ["family", "mask", "configuration", "err fp64", "err fp32", "pass"],
        (
            [r["family"], r["mask"], r["config"], f"{r['err_fp64']:.2e}", f"{r['err_fp32']:.2e}"]
            + ["yes" if r["pass"] else "NO"]
            for r in rows
        ),
    )
    print(table)
    ctx.report("## Results\n\nHuggingFace model zoo vs transflow.\n\n" + table + "\n")
    err64 = max(r["err_fp64"] for r in rows)
    err32 = max(r["err_fp32"] for r in rows)
    ctx.claim("max_err_fp64", err64, cfg.tol_fp64)
    ctx.claim("max_err_fp32", err32, cfg.tol_fp32)
    masked_rows = [r for r in rows if r["mask"] == "padded"]
    if masked_rows:
        ctx.claim("max_err_fp64_masked", max(r["err_fp64"] for r in masked_rows), cfg.tol_fp64)
    summary: dict[str, Any] = {
        "n_rows": len(rows),
        "n_pass": sum(r["pass"] for r in rows),
        "max_err_fp64": err64,
        "max_err_fp32": err32,
    }
    for fam in families:
        summary[f"{fam}_err_fp64"] = max(r["err_fp64"] for r in rows if r["family"] == fam)
    return summary
