"""Task ``equivalence`` (the default experiment, ``make run``): random PyTorch encoder
layers reproduced by the split scheme, in float32 and float64.

The study is :mod:`transflow.interop`'s (:func:`~transflow.interop.agreement_rows`,
:func:`~transflow.interop.substep_rows`); this task wires the config to it, writes the
records and draws F1/F2 (:func:`transflow.plotting.plot_substeps`,
:func:`transflow.plotting.plot_agreement`).

For every configuration in the product ``norm_first × activation × nhead ×
dim_feedforward × bias × layer_norm_eps`` (the other fields come from the ``model``
group, the sequence length from ``grid.n_tokens``), a random
``torch.nn.TransformerEncoderLayer`` (:func:`transflow.interop.build_torch_reference`)
is loaded with :func:`transflow.interop.from_torch` and both are applied to the same
random batch, on torch's slow (Python) path in eval mode:

- float64: the layer cast to float64; ``max_abs_fp64 = max |transflow − torch|``, which
  must be ≤ ``tol_fp64`` (1e-10): the two compute the same function.
- float32: the float32 layer; ``max_rel_fp32 = max |transflow − torch| / max |torch|``,
  ≤ ``tol_fp32`` (1e-5): round-off only.

``encoder_layers > 0`` adds two ``torch.nn.TransformerEncoder`` stacks (post-LN and
pre-LN, with a final LayerNorm). The sub-step comparison takes one layer of the ``model``
group and compares every sub-step state of one Lie step (:meth:`SplitTransformer.substeps`)
with the torch layer's intermediates (:func:`transflow.interop.torch_substeps`); it is
figure F1. The agreement heat map is F2.

Claims (``summary.json``, ``claims``; any failure marks the run FAILED), at every size
(smoke included; its sizes: configs/sizes/smoke/equivalence.yaml): ``n_fail == 0``,
``max_abs_fp64 ≤ tol_fp64``, ``max_rel_fp32 ≤ tol_fp32`` (each when that dtype runs) and
``substep_max_abs ≤ tol_fp64`` (enforced when the sub-steps run in float64).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from transflow.interop import EquivalenceConfig

from ..context import markdown_table

__all__ = ["Config", "READS", "run"]

#: The top-level config it reads: the sequence length and width (grid.n_tokens,
#: grid.n_features = model.d_model) and the reference layer (model); the layers are
#: compared on the index grid with the Lie/pre-norm step torch's layer defines, so the
#: grid kind and the scheme group mean nothing here.
READS = ("grid.n_tokens", "grid.n_features", "model")


@dataclass
class Config(EquivalenceConfig):
    """Parameters of the equivalence experiment (``task.<field>=...``); the fields are
    those of :class:`transflow.interop.EquivalenceConfig`."""


# --------------------------------------------------------------------------- the task
def _nanmax(rows: list[dict[str, Any]], key: str) -> float:
    """The largest ``key`` of ``rows`` that is not NaN (a dtype not run); NaN if none."""
    return max((r[key] for r in rows if not math.isnan(r[key])), default=math.nan)


def _cells(r: dict[str, Any]) -> list[str]:
    """One row of the agreement table (console and report.md)."""
    verdict = "PASS" if r["pass"] else "FAIL"
    return [r["config"], f"{r['max_abs_fp64']:.2e}", f"{r['max_rel_fp32']:.2e}", verdict]


def _text_table(rows: list[dict[str, Any]], tol_fp64: float, tol_fp32: float) -> str:
    w = max(len(r["config"]) for r in rows)
    head = (
        f"{'config':<{w}}  {'fp64 max abs':>12}  {'fp32 max rel':>12}  pass   "
        f"(tolerances {tol_fp64:g} / {tol_fp32:g})"
    )
    cells = map(_cells, rows)
    return "\n".join(
        [head, "-" * len(head)] + [f"{c:<{w}}  {a:>12}  {b:>12}  {v}" for c, a, b, v in cells]
    )


def run(cfg: Config, ctx) -> dict[str, Any]:
    """Run the equivalence experiment; returns the headline numbers."""
    import numpy as np

    from transflow.interop import agreement_rows, fast_eager, substep_rows
    from transflow.plotting import plot_agreement, plot_substeps

    full = ctx.cfg
    if full is None:
        from ..config import GridConfig, ModelConfig

        n_tokens, d_model = GridConfig().n_tokens, GridConfig().n_features
        model_cfg = ModelConfig(d_model=d_model, init_seed=ctx.seed)
    else:
        n_tokens, model_cfg = int(full.grid.n_tokens), full.model
        d_model = int(model_cfg.d_model)
    dtypes = tuple(ctx.dtypes)
    sub_dtype = "float64" if "float64" in dtypes else "float32"
    with fast_eager():
        rows = agreement_rows(
            cfg,
            model_cfg,
            n_tokens,
            seed=ctx.seed,
            dtypes=dtypes,
            progress=ctx.progress,
            log=lambda r: ctx.log({"kind": "agreement", **r}),
        )
        subs = substep_rows(model_cfg, n_tokens, seed=ctx.seed, dtype=sub_dtype)
    print(_text_table(rows, cfg.tol_fp64, cfg.tol_fp32))
    for r in subs:
        ctx.log({"kind": "substep", "dtype": sub_dtype, **r})
    ctx.save_arrays(
        "agreement",
        max_abs_fp64=np.array([r["max_abs_fp64"] for r in rows]),
        max_rel_fp32=np.array([r["max_rel_fp32"] for r in rows]),
        passed=np.array([r["pass"] for r in rows]),
        config=np.array([r["config"] for r in rows]),
    )
    ctx.save_arrays("substeps", **{k: np.array([r[k] for r in subs]) for k in subs[0]})
    ctx.save_figure(plot_substeps(subs, title=f"one step, {sub_dtype}"), "F1_substeps")
    ctx.save_figure(
        plot_agreement(rows, tol_fp64=cfg.tol_fp64, tol_fp32=cfg.tol_fp32), "F2_agreement"
    )
    ctx.report(
        "## Results\n\ntransflow vs torch.nn.TransformerEncoderLayer: "
        f"{len(rows)} configurations, {n_tokens} tokens, d_model={d_model}; tolerances "
        f"{cfg.tol_fp64:g} (fp64, abs) and {cfg.tol_fp32:g} (fp32, rel). "
        "Figures: F1_substeps.png, F2_agreement.png.\n\n"
        + markdown_table(
            ["config", "max abs diff fp64", "max rel diff fp32", "pass"], map(_cells, rows)
        )
    )
    summary = {
        "n_configs": len(rows),
        "n_pass": sum(r["pass"] for r in rows),
        "all_pass": all(r["pass"] for r in rows),
        "max_abs_fp64": _nanmax(rows, "max_abs_fp64"),
        "max_rel_fp32": _nanmax(rows, "max_rel_fp32"),
        "substep_max_abs": _nanmax(subs, "max_abs"),
        "substep_dtype": sub_dtype,
    }
    # The claims hold at every size (smoke included): the same function, round-off only
    # (each when its dtype ran).
    ctx.claim("n_fail", summary["n_configs"] - summary["n_pass"], 0, op="==")
    for key, tol in (("max_abs_fp64", cfg.tol_fp64), ("max_rel_fp32", cfg.tol_fp32)):
        if not math.isnan(summary[key]):
            ctx.claim(key, summary[key], tol)
    # Sub-steps: absolute differences, held to the float64 tolerance (recorded, not
    # enforced, when the job runs in float32 only).
    ctx.claim(
        "substep_max_abs",
        summary["substep_max_abs"],
        cfg.tol_fp64,
        enforce=sub_dtype == "float64",
    )
    return summary
