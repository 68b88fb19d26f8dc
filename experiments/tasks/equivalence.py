"""Task ``equivalence`` (the default experiment, ``make run``): random PyTorch encoder
layers reproduced by the split scheme, in float32 and float64.

For every configuration in the product ``norm_first × activation × nhead ×
dim_feedforward × bias × layer_norm_eps`` (the other fields come from the ``model``
group, the sequence length from ``grid.n_tokens``), a random
``torch.nn.TransformerEncoderLayer`` (:func:`transflow.experiments.builders.build_torch_reference`)
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
figure F1. The agreement heat map is F2. ``run`` writes both into the run directory.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import math
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Config",
    "agreement_rows",
    "plot_agreement",
    "plot_substeps",
    "run",
    "substep_rows",
]

AXES = ("norm_first", "activation", "nhead", "dim_feedforward", "bias", "layer_norm_eps")


@dataclass
class Config:
    """Parameters of the equivalence experiment (``task.<field>=...``)."""

    norm_first: list[bool] = field(default_factory=lambda: [False, True])
    activation: list[str] = field(default_factory=lambda: ["relu", "gelu"])
    nhead: list[int] = field(default_factory=lambda: [1, 4])
    # None: dim_feedforward = d_model (square FFN, the paper's residual form W_j = W̃_j − I).
    dim_feedforward: list[int | None] = field(default_factory=lambda: [None, 32])
    bias: list[bool] = field(default_factory=lambda: [True, False])
    layer_norm_eps: list[float] = field(default_factory=lambda: [1e-5, 0.0])
    encoder_layers: int = 3  # also compare TransformerEncoder stacks of this depth (0: off)
    batch: int = 2  # sequences per comparison
    tol_fp64: float = 1e-10  # on max |Δ| in float64
    tol_fp32: float = 1e-5  # on max |Δ| / max |torch| in float32


def _label(c: dict[str, Any]) -> str:
    ff = "d" if c["dim_feedforward"] is None else str(c["dim_feedforward"])
    return (
        f"{'pre' if c['norm_first'] else 'post'}-LN {c['activation']} h={c['nhead']} "
        f"ff={ff} bias={int(c['bias'])} eps={c['layer_norm_eps']:g}"
        + (
            f" L={c['num_layers']}" + ("+norm" if c.get("final_norm") else "")
            if c.get("num_layers", 1) > 1
            else ""
        )
    )


def configurations(
    cfg: Config, *, smoke: bool = False, num_layers: int = 1, final_norm: bool = False
) -> list[dict[str, Any]]:
    """The list of reference-layer configurations of the experiment.

    The product rows have ``num_layers``/``final_norm`` of the ``model`` group (one layer
    by default); ``cfg.encoder_layers > 0`` appends two stacks (post-/pre-LN) of that depth
    with a final LayerNorm (``stack=True``). In smoke mode only ``norm_first × activation``
    (the first value of the other axes) and one post-LN stack of two layers.
    """
    values = {ax: list(getattr(cfg, ax)) for ax in AXES}
    for ax, vals in values.items():
        if not vals:
            raise ValueError(f"`task.{ax}` must list at least one value, got [].")
    if smoke:
        values = {
            ax: (v if ax in ("norm_first", "activation") else v[:1]) for ax, v in values.items()
        }
    out = [
        dict(zip(AXES, combo), num_layers=int(num_layers), final_norm=bool(final_norm), stack=False)
        for combo in itertools.product(*values.values())
    ]
    depth = min(cfg.encoder_layers, 2) if smoke else cfg.encoder_layers
    if depth > 0:
        for nf in [False] if smoke else [False, True]:
            base = {ax: values[ax][0] for ax in AXES}
            out.append(dict(base, norm_first=nf, num_layers=depth, final_norm=True, stack=True))
    return out


@contextlib.contextmanager
def fast_eager():
    """Run many small, differently-structured models quickly: JAX op by op
    (``jax.disable_jit``: every primitive is compiled once per shape and reused, instead
    of one XLA compilation per configuration) and torch on one thread (tiny tensors)."""
    import jax
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with jax.disable_jit():
            yield
    finally:
        torch.set_num_threads(threads)


def _compare(
    ref_cfg, c: dict, x64, *, tol_fp64: float, tol_fp32: float, dtypes: tuple[str, ...]
) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch

    from transflow.interop import from_torch

    from ..builders import build_torch_reference, torch_slow_path

    fields = {k: c[k] for k in (*AXES, "num_layers", "final_norm")}
    row: dict[str, Any] = {"config": _label(c), **fields, "stack": bool(c.get("stack"))}
    row["max_abs_fp64"] = row["max_rel_fp32"] = row["max_abs_fp32"] = math.nan
    with torch_slow_path():
        ref32 = build_torch_reference(ref_cfg, dtype="float32", **fields)
        for dt in dtypes:
            ref = ref32 if dt == "float32" else copy.deepcopy(ref32).double()
            x = x64 if dt == "float64" else x64.float()
            with torch.no_grad():
                want = ref(x).numpy()
            model = from_torch(ref, dtype=getattr(jnp, dt))
            got = np.asarray(jax.vmap(model)(jnp.asarray(x.numpy())))
            if got.dtype != np.dtype(dt):
                raise RuntimeError(f"transflow returned {got.dtype}, expected {dt}.")
            err = float(np.max(np.abs(got - want)))
            if dt == "float64":
                row["max_abs_fp64"] = err
            else:
                row["max_abs_fp32"] = err
                row["max_rel_fp32"] = err / float(np.max(np.abs(want)))
    ok64 = math.isnan(row["max_abs_fp64"]) or row["max_abs_fp64"] <= tol_fp64
    ok32 = math.isnan(row["max_rel_fp32"]) or row["max_rel_fp32"] <= tol_fp32
    row["pass"] = bool(ok64 and ok32)
    return row


def agreement_rows(
    cfg: Config,
    model_cfg: Any,
    n_tokens: int,
    *,
    seed: int = 0,
    smoke: bool = False,
    dtypes: tuple[str, ...] = ("float32", "float64"),
    progress=None,
    log=None,
) -> list[dict[str, Any]]:
    """Compare transflow with torch for every configuration; one dict per configuration.

    Each row has the configuration's fields, ``config`` (a label), ``max_abs_fp64``,
    ``max_abs_fp32``, ``max_rel_fp32`` (NaN when that dtype is not run) and ``pass``.
    ``model_cfg`` is the ``model`` config node (d_model, init seed, ...). float64 needs
    x64 enabled.
    """
    import torch

    m = _with_seed(model_cfg)
    cfgs = configurations(
        cfg, smoke=smoke, num_layers=int(m["num_layers"]), final_norm=bool(m["final_norm"])
    )
    d_model = int(m["d_model"])
    gen = torch.Generator().manual_seed(int(seed))
    batch = 1 if smoke else int(cfg.batch)
    x64 = torch.randn(batch, int(n_tokens), d_model, generator=gen, dtype=torch.float64)
    it = progress(cfgs, total=len(cfgs), desc="equivalence") if progress else cfgs
    rows = []
    for i, c in enumerate(it):
        row = _compare(
            _with_seed(m, int(m["init_seed"]) * 1000 + i),
            c,
            x64,
            tol_fp64=cfg.tol_fp64,
            tol_fp32=cfg.tol_fp32,
            dtypes=dtypes,
        )
        rows.append(row)
        if log is not None:
            log(row)
    return rows


def _with_seed(model_cfg: Any, seed: int | None = None) -> dict[str, Any]:
    """``model_cfg`` as a plain dict, with ``init_seed`` replaced by ``seed`` if given."""
    from omegaconf import DictConfig, OmegaConf

    if isinstance(model_cfg, DictConfig):
        d = OmegaConf.to_container(model_cfg, resolve=True)
    elif isinstance(model_cfg, dict):
        d = dict(model_cfg)
    else:
        import dataclasses

        d = dataclasses.asdict(model_cfg)
    if seed is not None:
        d["init_seed"] = seed
    return d


def substep_rows(
    model_cfg: Any, n_tokens: int, *, seed: int = 0, dtype: str = "float64"
) -> list[dict[str, Any]]:
    """Sub-step states of one Lie step (first layer of ``model_cfg``) beside torch's.

    For each sub-step of :meth:`transflow.SplitTransformer.substeps` (post-LN:
    ``attention, ln1, ffn1..ffnJ, relax, ln2``; pre-LN: ``ln1, attention, ln2,
    ffn1..ffnJ, residual``) the row holds statistics of the transflow state (Frobenius
    norm ``fro``, mean and spread of the per-token means, mean of the per-token standard
    deviations) and of the torch intermediate it corresponds to (``torch_*``), and
    ``max_abs`` = max |transflow − torch|. The torch intermediates are computed with the
    layer's own modules (:func:`transflow.interop.torch_substeps`; ``ffn1`` =
    ``activation(linear1(·))``; ``relax`` ↔ ½(ln1 + ffn), half torch's residual sum).
    """
    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch

    from transflow.interop import from_torch, torch_substeps

    from ..builders import build_torch_reference, torch_slow_path

    d = _with_seed(model_cfg)
    d.update(num_layers=1, final_norm=False)
    with torch_slow_path():
        ref = build_torch_reference(d, dtype=dtype)
        gen = torch.Generator().manual_seed(int(seed))
        x = torch.randn(
            int(n_tokens), int(d["d_model"]), generator=gen, dtype=getattr(torch, dtype)
        )
        model = from_torch(ref, dtype=getattr(jnp, dtype))
        # vmap over a batch of one: the same primitive shapes as the smoke agreement run
        # (batch 1), so eager mode reuses their compilations.
        batched = jax.vmap(model.substeps)(jnp.asarray(x.numpy())[None])
        order = model.scheme.substep_names(model.layer(0))  # vmap sorts dict keys
        ours = {k: np.asarray(batched[k][0]) for k in order}
        theirs = {k: v.numpy() for k, v in torch_substeps(ref, x).items()}
        with torch.no_grad():
            pre_ffn = theirs["ln2" if ref.norm_first else "ln1"]
            theirs_ffn1 = ref.activation(ref.linear1(torch.as_tensor(pre_ffn))).numpy()
    names = list(ours)
    J = sum(n.startswith("ffn") for n in names)
    rows = []
    for name in names:
        if name == f"ffn{J}":
            ref_state = theirs["ffn"]
        elif name == "ffn1" and J > 1:
            ref_state = theirs_ffn1
        elif name.startswith("ffn"):
            ref_state = None  # intermediate FFN sub-steps have no torch counterpart
        elif name == "relax":
            ref_state = 0.5 * (theirs["ln1"] + theirs["ffn"])
        else:
            ref_state = theirs[name]
        row = {"substep": name, **_stats(ours[name])}
        if ref_state is not None:
            row.update({f"torch_{k}": v for k, v in _stats(ref_state).items()})
            row["max_abs"] = float(np.max(np.abs(ours[name] - ref_state)))
        else:
            row.update({f"torch_{k}": math.nan for k in _stats(ours[name])})
            row["max_abs"] = math.nan
        rows.append(row)
    return rows


def _stats(u) -> dict[str, float]:
    import numpy as np

    u = np.asarray(u, dtype=np.float64)
    means = u.mean(axis=-1)
    return {
        "fro": float(np.linalg.norm(u)),
        "token_mean": float(means.mean()),
        "token_mean_spread": float(means.std()),
        "token_std": float(u.std(axis=-1).mean()),
    }


# --------------------------------------------------------------------------- figures
def plot_substeps(rows: list[dict[str, Any]], *, title: str = ""):
    """F1: state statistics through the sub-steps of one step, transflow beside torch."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    names = [r["substep"] for r in rows]
    x = np.arange(len(rows))
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6), constrained_layout=True)
    ax = axes[0]
    ax.plot(x, [r["fro"] for r in rows], "o-", label="transflow (split scheme)")
    ax.plot(x, [r["torch_fro"] for r in rows], "x", ms=10, mew=2, label="torch layer")
    ax.set_ylabel(r"$\|u\|_F$")
    ax.set_title("Frobenius norm of the state")
    ax = axes[1]
    for key, lab, mk in (
        ("token_mean", "per-token mean", "o"),
        ("token_std", "per-token std", "s"),
    ):
        ax.plot(x, [r[key] for r in rows], mk + "-", label=f"{lab} (transflow)")
        ax.plot(x, [r["torch_" + key] for r in rows], "x", ms=9, mew=2, color="k")
    ax.errorbar(
        x,
        [r["token_mean"] for r in rows],
        yerr=[r["token_mean_spread"] for r in rows],
        fmt="none",
        ecolor="C0",
        alpha=0.5,
        capsize=3,
    )
    ax.set_title("per-token statistics (x: torch)")
    ax = axes[2]
    errs = np.array([r["max_abs"] for r in rows], dtype=float)
    tiny = np.finfo(np.float64).tiny
    ax.semilogy(x, np.where(np.isnan(errs), np.nan, np.maximum(errs, tiny)), "o-", color="C3")
    ax.axhline(np.finfo(np.float64).eps, color="gray", ls="--", lw=1, label="float64 eps")
    ax.legend(fontsize=8)
    ax.set_title(r"max $|$transflow $-$ torch$|$")
    for a in axes:
        a.set_xticks(x, names, rotation=45, ha="right")
        a.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    axes[1].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    return fig


def _grid_layout(rows: list[dict[str, Any]]):
    """Split the product configurations into a matrix: rows (norm_first, activation,
    bias) × columns (nhead, dim_feedforward, layer_norm_eps)."""
    single = [r for r in rows if not r.get("stack", False)]
    rkeys = ("norm_first", "activation", "bias")
    ckeys = ("nhead", "dim_feedforward", "layer_norm_eps")

    def uniq(keys):
        seen = []
        for r in single:
            k = tuple(r[key] for key in keys)
            if k not in seen:
                seen.append(k)
        return seen

    return single, uniq(rkeys), uniq(ckeys), rkeys, ckeys


def plot_agreement(rows: list[dict[str, Any]], *, tol_fp64: float = 1e-10, tol_fp32: float = 1e-5):
    """F2: heat maps of log10 of the errors, configurations × {float64 abs, float32 rel}."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    single, rk, ck, rkeys, ckeys = _grid_layout(rows)
    panels = [
        ("max_abs_fp64", "float64: log10 max |Δ|", tol_fp64),
        ("max_rel_fp32", "float32: log10 max |Δ| / max |torch|", tol_fp32),
    ]
    fig, axes = plt.subplots(
        1, 2, figsize=(3.2 + 0.75 * len(ck) * 2, 1.6 + 0.38 * len(rk)), constrained_layout=True
    )
    for ax, (key, title, tol) in zip(axes, panels):
        m = np.full((len(rk), len(ck)), np.nan)
        for r in single:
            i = rk.index(tuple(r[k] for k in rkeys))
            j = ck.index(tuple(r[k] for k in ckeys))
            m[i, j] = r[key]
        with np.errstate(divide="ignore"):
            lm = np.log10(np.maximum(m, 1e-17))
        im = ax.imshow(lm, cmap="viridis", vmin=-17, vmax=max(-4, np.log10(tol) + 2), aspect="auto")
        for i in range(len(rk)):
            for j in range(len(ck)):
                if np.isfinite(m[i, j]):
                    ax.text(
                        j,
                        i,
                        f"{lm[i, j]:.0f}",
                        ha="center",
                        va="center",
                        fontsize=7,
                        color="w" if lm[i, j] < -9 else "k",
                    )
        ax.set_xticks(
            range(len(ck)),
            [f"h={h}\nff={'d' if f is None else f}\nε={e:g}" for h, f, e in ck],
            fontsize=7,
        )
        ax.set_yticks(
            range(len(rk)),
            [f"{'pre' if nf else 'post'}-LN {a} b={int(b)}" for nf, a, b in rk],
            fontsize=7,
        )
        ax.set_title(f"{title}\n(tolerance 1e{np.log10(tol):.0f})", fontsize=9)
        fig.colorbar(im, ax=ax, shrink=0.8)
    return fig


# --------------------------------------------------------------------------- the task
def _markdown_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| config | max abs diff fp64 | max rel diff fp32 | pass |", "|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['config']} | {r['max_abs_fp64']:.2e} | {r['max_rel_fp32']:.2e} | "
            f"{'PASS' if r['pass'] else 'FAIL'} |"
        )
    return "\n".join(lines)


def _text_table(rows: list[dict[str, Any]], tol_fp64: float, tol_fp32: float) -> str:
    w = max(len(r["config"]) for r in rows)
    head = (
        f"{'config':<{w}}  {'fp64 max abs':>12}  {'fp32 max rel':>12}  pass   "
        f"(tolerances {tol_fp64:g} / {tol_fp32:g})"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['config']:<{w}}  {r['max_abs_fp64']:>12.2e}  "
            f"{r['max_rel_fp32']:>12.2e}  {'PASS' if r['pass'] else 'FAIL'}"
        )
    return "\n".join(lines)


def run(cfg: Config, ctx) -> dict[str, Any]:
    """Run the equivalence experiment; returns the headline numbers."""
    import numpy as np

    full = ctx.cfg
    if full is None:
        from ..config import GridConfig, ModelConfig

        n_tokens = GridConfig().n_tokens
        model_cfg = _with_seed(
            ModelConfig(d_model=GridConfig().n_features, init_seed=ctx.seed), ctx.seed
        )
    else:
        n_tokens, model_cfg = int(full.grid.n_tokens), full.model
    if ctx.smoke:
        n_tokens = min(n_tokens, 4)
    dtypes = tuple(ctx.dtypes)
    sub_dtype = "float64" if "float64" in dtypes else "float32"
    with fast_eager():
        rows = agreement_rows(
            cfg,
            model_cfg,
            n_tokens,
            seed=ctx.seed,
            smoke=ctx.smoke,
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
        "# Equivalence: transflow vs torch.nn.TransformerEncoderLayer\n\n"
        f"{len(rows)} configurations, {n_tokens} tokens, d_model={model_cfg['d_model']}; "
        f"tolerances {cfg.tol_fp64:g} (fp64, abs) and {cfg.tol_fp32:g} (fp32, rel). "
        "Figures: F1_substeps.png, F2_agreement.png.\n\n" + _markdown_table(rows)
    )
    sub_err = [r["max_abs"] for r in subs if not math.isnan(r["max_abs"])]
    fp64 = [r["max_abs_fp64"] for r in rows if not math.isnan(r["max_abs_fp64"])]
    fp32 = [r["max_rel_fp32"] for r in rows if not math.isnan(r["max_rel_fp32"])]
    return {
        "n_configs": len(rows),
        "n_pass": sum(r["pass"] for r in rows),
        "all_pass": all(r["pass"] for r in rows),
        "max_abs_fp64": max(fp64) if fp64 else math.nan,
        "max_rel_fp32": max(fp32) if fp32 else math.nan,
        "substep_max_abs": max(sub_err) if sub_err else math.nan,
        "substep_dtype": sub_dtype,
    }
