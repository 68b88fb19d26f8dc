"""Figures of the equivalence studies: sub-steps (F1), agreement tables (F2), ViT attention
kernels (F-ViT), from the records of :mod:`transflow.interop`'s studies."""

from __future__ import annotations

from typing import Any

from ._common import _pyplot

__all__ = ["plot_agreement", "plot_substeps", "plot_vit_attention"]


def plot_substeps(rows: list[dict[str, Any]], *, title: str = ""):
    """F1: state statistics through the sub-steps of one step, transflow beside torch.

    ``rows``: the records of :func:`transflow.interop.substep_rows`. Three panels:
    Frobenius norm, per-token mean/std, and max |transflow − torch| per sub-step.
    """
    import numpy as np

    plt = _pyplot()

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
    """F2: heat maps of log10 of the errors, configurations × {float64 abs, float32 rel}.

    ``rows``: the records of :func:`transflow.interop.agreement_rows` (encoder stacks,
    ``stack=True``, are left out of the matrix).
    """
    import numpy as np

    plt = _pyplot()

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


def plot_vit_attention(
    heads: list[dict[str, Any]],
    *,
    grid_shape: tuple[int, int],
    query_patch: tuple[int, int],
    title: str = "",
):
    """F-ViT: the attention kernel of one query patch over the 2-D patch grid, per head.

    ``heads``: one record per head with ``transflow`` and ``hf`` (the kernel γ(x*, ·) on
    the grid, shape ``grid_shape``), ``cls_weight`` (γ(x*, x_cls)) and ``head``. Columns:
    transflow, the reference, log10 |difference|; the query patch is marked.
    """
    import numpy as np

    plt = _pyplot()

    q_r, q_c = query_patch
    fig, axes = plt.subplots(len(heads), 3, figsize=(11, 3.2 * len(heads)), squeeze=False)
    for row, rec in zip(axes, heads):
        h = rec["head"]
        ours, theirs = np.asarray(rec["transflow"]), np.asarray(rec["hf"])
        diff = np.abs(ours - theirs)
        vmax = float(max(ours.max(), theirs.max()))
        for j, (arr, name) in enumerate(((ours, "transflow γ(x*, x̃)"), (theirs, "HF ViTLayer"))):
            ax = row[j]
            im = ax.imshow(arr, cmap="viridis", vmin=0, vmax=vmax)
            ax.plot(q_c, q_r, marker="x", color="red", ms=10, mew=2)
            ax.set_title(
                f"head {h}: {name}\nγ(x*, x_cls) = {rec['cls_weight']:.3f}"
                if j == 0
                else f"head {h}: {name}"
            )
            fig.colorbar(im, ax=ax, fraction=0.035)
        ax = row[2]
        im = ax.imshow(np.log10(diff + 1e-18), cmap="magma", vmin=-18, vmax=-14)
        ax.set_title(f"head {h}: log10 |difference| (max {diff.max():.1e})")
        fig.colorbar(im, ax=ax, fraction=0.035)
        for ax in row:
            ax.set_xlabel("patch column")
            ax.set_ylabel("patch row")
    gh, gw = grid_shape
    fig.suptitle(
        title
        or f"attention kernel of query patch x* = ({q_r}, {q_c}) (red x) on the {gh}×{gw} "
        "patch grid Ω_x"
    )
    fig.tight_layout()
    return fig
