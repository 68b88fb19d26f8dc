"""Figures of the equivalence studies: sub-steps (F1), agreement tables (F2), ViT attention
kernels (F-ViT), from the records of :mod:`transflow.interop`'s studies."""

from __future__ import annotations

from typing import Any

from ._style import FIGURE_WIDTH, new_figure, styled

__all__ = ["plot_agreement", "plot_substeps", "plot_vit_attention"]


@styled
def plot_substeps(rows: list[dict[str, Any]], *, title: str = ""):
    """F1: state statistics through the sub-steps of one step, transflow beside torch.

    ``rows``: the records of :func:`transflow.interop.substep_rows`. Three panels:
    Frobenius norm, per-token mean/std, and max |transflow − torch| per sub-step. The
    sub-steps are categories (markers, no joining lines); torch's values are open black
    markers drawn on top, so a coinciding value stays visible; one key below the panels.
    """
    import numpy as np
    from matplotlib.lines import Line2D

    names = [r["substep"] for r in rows]
    x = np.arange(len(rows))
    fig, axes = new_figure(3.3, 1, 3)
    torch_kw = dict(ls="", marker="o", ms=8, mfc="none", mec="k", mew=1.0, zorder=4)
    ax = axes[0]
    ax.plot(x, [r["fro"] for r in rows], "o", color="C0", ms=4, zorder=3)
    ax.plot(x, [r["torch_fro"] for r in rows], **torch_kw)
    ax.set_ylabel(r"$\|u\|_F$")
    ax.set_title("Frobenius norm of the state")
    ax = axes[1]
    ax.errorbar(
        x,
        [r["token_mean"] for r in rows],
        yerr=[r["token_mean_spread"] for r in rows],
        fmt="s",
        color="C1",
        ms=4,
        capsize=3,
        zorder=3,
    )
    ax.plot(x, [r["token_std"] for r in rows], "^", color="C2", ms=4, zorder=3)
    for key in ("token_mean", "token_std"):
        ax.plot(x, [r["torch_" + key] for r in rows], **torch_kw)
    ax.set_ylabel("per-token mean and std")
    ax.set_title("per-token statistics")
    ax = axes[2]
    errs = np.array([r["max_abs"] for r in rows], dtype=float)
    tiny = np.finfo(np.float64).tiny
    ax.semilogy(x, np.where(np.isnan(errs), np.nan, np.maximum(errs, tiny)), "D", color="C3", ms=4)
    ax.axhline(np.finfo(np.float64).eps, color="0.4", ls="--", lw=1)
    ax.set_ylabel(r"$\max\,|u_{\mathrm{transflow}} - u_{\mathrm{torch}}|$")
    ax.set_title("difference to torch")
    for a in axes:
        a.set_xticks(x, names, rotation=45, ha="right")
        a.set_xlabel("sub-step")
        a.grid(True, axis="y")
        a.margins(x=0.08)
    handles = [
        Line2D([], [], color="C0", marker="o", ls="", ms=4, label=r"$\|u\|_F$, transflow"),
        Line2D(
            [],
            [],
            color="C1",
            marker="s",
            ls="",
            ms=4,
            label="mean over tokens of the per-token mean (error bar: ± std over tokens)",
        ),
        Line2D([], [], color="C2", marker="^", ls="", ms=4, label="per-token std, transflow"),
        Line2D([], [], **torch_kw, label="torch layer (same quantity)"),
        Line2D([], [], color="C3", marker="D", ls="", ms=4, label="max |transflow − torch|"),
        Line2D([], [], color="0.4", ls="--", lw=1, label="float64 machine epsilon"),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncol=2)
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


@styled
def plot_agreement(
    rows: list[dict[str, Any]],
    *,
    tol_fp64: float = 1e-10,
    tol_fp32: float = 1e-5,
    title: str = "",
):
    """F2: heat maps of log10 of the errors, configurations × {float64 abs, float32 rel}.

    Each cell is labelled with its log10 error to one decimal; the colour bar marks the
    tolerance with a red line.

    ``rows``: the records of :func:`transflow.interop.agreement_rows` (encoder stacks,
    ``stack=True``, are left out of the matrix); ``title``: an optional figure title.
    """
    import numpy as np

    single, rk, ck, rkeys, ckeys = _grid_layout(rows)
    panels = [
        ("max_abs_fp64", r"float64: $\log_{10}\max|\Delta|$", tol_fp64),
        (
            "max_rel_fp32",
            r"float32: $\log_{10}(\max|\Delta| / \max|u_{\mathrm{torch}}|)$",
            tol_fp32,
        ),
    ]
    fig, axes = new_figure(2 * (1.35 + 0.2 * len(rk)), 2, 1)
    for ax, (key, ttl, tol) in zip(axes, panels):
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
                        f"{lm[i, j]:.1f}",
                        ha="center",
                        va="center",
                        fontsize=6.5,
                        color="w" if lm[i, j] < -9 else "k",
                    )
        ax.set_xticks(
            range(len(ck)),
            [f"h={h}, ff={'d' if f is None else f}\nε={e:g}" for h, f, e in ck],
            fontsize=6.5,
        )
        ax.set_yticks(
            range(len(rk)),
            [f"{'pre' if nf else 'post'}-LN {a} b={int(b)}" for nf, a, b in rk],
            fontsize=6.5,
        )
        ax.set_xlabel("heads h, feed-forward width ff (d: default), LayerNorm ε")
        ax.set_ylabel("LayerNorm, activation,\nbias b")
        ax.set_title(f"{ttl} (tolerance $10^{{{np.log10(tol):.0f}}}$)")
        cb = fig.colorbar(im, ax=ax, shrink=0.9, label=r"$\log_{10}$ error" + "\n(red: tolerance)")
        cb.ax.axhline(np.log10(tol), color="red", lw=3)
    if title:
        fig.suptitle(title)
    return fig


@styled
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

    q_r, q_c = query_patch
    gh, gw = grid_shape
    panel_h = (FIGURE_WIDTH - 1.6) / 3 * gh / gw
    fig, axes = new_figure(0.55 + (panel_h + 0.55) * len(heads), len(heads), 3, squeeze=False)
    for row, rec in zip(axes, heads):
        h = rec["head"]
        ours, theirs = np.asarray(rec["transflow"]), np.asarray(rec["hf"])
        diff = np.abs(ours - theirs)
        vmax = float(max(ours.max(), theirs.max()))
        for j, (arr, name) in enumerate(((ours, "transflow"), (theirs, "HF ViTLayer"))):
            ax = row[j]
            im = ax.imshow(arr, cmap="viridis", vmin=0, vmax=vmax)
            ax.plot(q_c, q_r, marker="x", color="red", ms=7, mew=1.8, ls="", label="query $x^*$")
            ax.set_title(
                f"head {h}, {name}\n"
                + rf"$\gamma(x^*, x_{{\mathrm{{cls}}}})$ = {rec['cls_weight']:.3f}"
                if j == 0
                else f"head {h}, {name}"
            )
            fig.colorbar(im, ax=ax, shrink=0.9, label=r"$\gamma(x^*, \tilde x)$")
        ax = row[2]
        im = ax.imshow(np.log10(diff + 1e-18), cmap="magma", vmin=-18, vmax=-14)
        ax.set_title(f"head {h}, difference\n(max {diff.max():.1e})")
        fig.colorbar(im, ax=ax, shrink=0.9, label=r"$\log_{10}|\Delta\gamma|$")
        for ax in row:
            ax.set_xlabel("patch column")
            ax.set_ylabel("patch row")
    fig.legend(*axes[0][0].get_legend_handles_labels(), loc="outside lower center", ncol=1)
    fig.suptitle(
        title
        or f"attention kernel of the query patch $x^*$ = ({q_r}, {q_c}) (red ×) on the "
        f"{gh} × {gw} patch grid $\\Omega_x$"
    )
    return fig
