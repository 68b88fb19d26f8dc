"""The one figure style (``transflow.plotting``) and the figure inspection.

Every figure a reader sees must have labelled axes, tick labels that do not overlap, no
empty panel, mathtext instead of raw pseudo-LaTeX, no figure id in a title, and the width
of every other figure (one scale in the docs gallery). :func:`figure_problems` checks a
drawn figure for all of these; here it runs on

- every figure function of :mod:`transflow.plotting`, on records shaped as the studies
  return them, including smoke-size records (fast tier);
- the cheap figures of ``make figures`` at smoke size (fast tier) and all of them (slow);
- every figure of every experiment's ``debug=smoke`` run (slow).
"""

from __future__ import annotations

import importlib.util
import inspect
import pathlib
import sys

import numpy as np
import pytest

import transflow.plotting as P

REPO = pathlib.Path(__file__).resolve().parent.parent
FIG_DIR = REPO / "paper_figures"
PLOT_FUNCTIONS = sorted(n for n in P.__all__ if n.startswith("plot_"))


def _assert_clean(fig, what: str) -> None:
    problems = P.figure_problems(fig)
    width = float(fig.get_size_inches()[0])
    import matplotlib.pyplot as plt

    plt.close(fig)
    assert not problems, f"{what}: " + "; ".join(problems)
    assert width == P.FIGURE_WIDTH, f"{what}: width {width} in, expected {P.FIGURE_WIDTH}"


# --------------------------------------------------------------------------- the style


def test_log_ticks_span_decades_or_one_two_five():
    """Two or more decades in view: decades only; less: 1-2-5 (never one label only)."""
    assert list(P.LogTicks.ticks(1e-4, 2e-2)) == pytest.approx([1e-4, 1e-3, 1e-2])
    # F3's Δt axis (0.0156 … 0.25) had one label (10^-1); F4's N axis (4 … 36) overlapped
    assert list(P.LogTicks.ticks(0.0156, 0.25)) == pytest.approx([0.02, 0.05, 0.1, 0.2])
    assert list(P.LogTicks.ticks(4, 36)) == pytest.approx([5, 10, 20])
    short = P.LogTicks.ticks(2.2, 3.9)  # less than 1-9 spacing: plain linear steps
    assert len(short) >= 2 and all(2.2 <= t <= 3.9 for t in short), short
    many = P.LogTicks.ticks(1e-17, 1e3)
    assert 2 <= len(many) <= P.LogTicks.max_ticks
    assert P.LogTicks.label(0.02, decades=False) == "0.02"
    assert P.LogTicks.label(20.0, decades=False) == "20"
    assert P.LogTicks.label(2e-5, decades=False) == r"$2\times10^{-5}$"
    assert P.LogTicks.label(1e-3, decades=True) == "$10^{-3}$"


def test_figure_style_is_scoped():
    """The style applies inside the context only; matplotlib's globals are untouched."""
    import matplotlib

    before = dict(matplotlib.rcParams)
    with P.figure_style():
        assert matplotlib.rcParams["mathtext.fontset"] == P.STYLE["mathtext.fontset"]
        assert matplotlib.rcParams["font.size"] == P.STYLE["font.size"]
    assert dict(matplotlib.rcParams) == before


def test_every_figure_function_is_styled():
    """Every plot_* function runs inside the style (the ``styled`` decorator)."""
    unstyled = [n for n in PLOT_FUNCTIONS if not hasattr(getattr(P, n), "__wrapped__")]
    assert not unstyled, f"figure functions without @styled: {unstyled}"


def test_checker_finds_each_fault():
    """figure_problems reports F4's old overlapping log ticks, missing labels, an empty
    panel, raw pseudo-LaTeX and a figure id in a title; a panel turned off with a smoke
    note is fine."""
    import matplotlib.pyplot as plt

    P._style._pyplot()
    fig, (ax, bx, cx) = plt.subplots(1, 3, figsize=(9, 3))
    ax.loglog([4, 12, 36], [1e-2, 1e-3, 1e-4], "o-", label="O(N^-2)")  # default ticks
    ax.set_xlabel("N")
    ax.legend()
    bx.set_title("F7: softmax")
    P.smoke_note(cx, "smoke size", empty=True)
    problems = P.figure_problems(fig)
    plt.close(fig)
    text = "\n".join(problems)
    assert "x tick labels" in text and "overlap" in text, text
    assert "axes 0 (no title): no y label" in text, text
    assert "empty panel" in text and "'F7: softmax'" in text, text
    assert "raw TeX" in text and "starts with a figure id" in text, text
    assert not any("axes 2" in p for p in problems), problems


def test_checker_finds_the_faults_of_the_rendered_artists():
    """figure_problems, on the drawn artists: a legend over a line, two overlapping
    texts, a colour in no key, a log axis with one labelled tick in the data range and
    unexplained error bars are each reported; the fixed figure has none of them."""
    import matplotlib.pyplot as plt

    P._style._pyplot()

    def draw(fixed: bool):
        with P.figure_style():
            fig, (ax, bx) = P.new_figure(3.0, 1, 2)
            x = np.linspace(0, 1, 50)
            ax.plot(x, 0.5 + 0 * x, label="flat")  # runs under a centred legend
            ax.plot(x, x**2, color="C3", label="square" if fixed else None)
            ax.errorbar([0.2, 0.8], [0.3, 0.6], yerr=0.1, fmt="o", color="C0")
            ax.set(xlabel="x", ylabel="y")
            ax.text(0.5, 0.8, "note A")
            ax.text(0.1 if fixed else 0.5, 0.8, "note B")
            if fixed:
                ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), title="bars: ± 0.1")
            else:
                ax.legend(loc="center")
            bx.semilogy([1, 2, 3], [1.2, 2.0, 3.5], color="0.2", label="k")
            bx.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
            bx.set(xlabel="n", ylabel="value")
            P.integer_axis(bx.xaxis)
            P._style.finish(fig)
            if not fixed:
                bx.set_yticks([1.0, 10.0])  # no labelled tick within [1.2, 3.5]
        return fig

    fig = draw(False)
    text = "\n".join(P.figure_problems(fig))
    plt.close(fig)
    assert "legend 0 covers plotted data of axes 0" in text, text
    assert "texts 'note A' and 'note B' overlap" in text, text
    assert "colour #d62728 is in no legend" in text, text
    assert "error bars that no text explains" in text, text
    assert "log y axis has 0 labelled tick(s)" in text, text
    fig = draw(True)
    problems = P.figure_problems(fig)
    plt.close(fig)
    assert problems == [], problems


FIXTURES = REPO / "tests" / "fixtures" / "figures"

# The defective figures of issue 49 as main 9125f54 drew them (pickled with their ticks
# as drawn; tests/fixtures/figures/make_fixtures.py) -> what the checker must report.
ISSUE_49_DEFECTS = {
    "smoke_F3": ["text 'smoke size: 2 time steps\\nfitted slopes", "covers plotted data of axes 0"],
    "smoke_F4": ["text 'smoke size: 2 grid sizes' covers plotted data of axes 0"],
    "smoke_F7": ["text 'smoke size: 2 values of λ' covers plotted data of axes 0"],
    "smoke_trained_regions": [
        "text 'smoke size: depths 1, 2 only' covers plotted data of axes 0",
        "reference line 'target (16 regions)' at 16 is not drawn from a claim",
    ],
    "full_F3": ["(full F): 0.96' covers plotted data of axes 1 ('sub-model (b)')"],
    "full_F12": ["the upper end of the y data range [0.55, 1.62] is 45% of the range"],
    "smoke_depth": [
        "axes 0 ('T = 0.2, training depth fixed'): the upper end of the x data range [1, 8] "
        "is 33% of the range from a labelled tick (labels: 1, 4)",
        "a smoke-size figure without a smoke mark",
    ],
    "smoke_F8": ["the upper end of the y data range [2, 9] is 39% of the range"],
    "smoke_F8_one_depth": [
        "x axis of integer data has fractional tick labels (1.900, 1.925",
        "legend 0: entry 'Montúfar $k^{L-1}k^d$' stands for nothing drawn",
        "legend 1: entry 'RC exact $(2T-3)^{dD/3}$' stands for nothing drawn",
    ],
    "smoke_analyze_trajectories": [
        "colour bar of integer data has fractional tick labels (0.5, 1.5)",
    ],
    "smoke_train_sequence": [
        "reference line 'accuracy 0.95' at 0.95 is not drawn from a claim (claims: "
        "test_accuracy 0.99",
    ],
}


@pytest.mark.parametrize("name", sorted(ISSUE_49_DEFECTS))
def test_checker_reports_the_figures_of_issue_49(name):
    """Each defective figure of issue 49, as main drew it, is reported for its defect
    (texts over data, a data range without nearby labelled ticks, fractional ticks on
    integer data, legend entries for nothing drawn, a threshold not taken from the
    claim, a smoke figure without a smoke mark)."""
    import gzip
    import pickle

    import matplotlib.pyplot as plt

    P._style._pyplot()
    fig = pickle.loads(gzip.decompress((FIXTURES / f"{name}.pkl.gz").read_bytes()))
    claims = {"test_accuracy": 0.99, "eval_sequence_accuracy": 0.95}
    problems = P.figure_problems(
        fig, smoke=name.startswith("smoke"), claims=claims if "train" in name else None
    )
    plt.close(fig)
    text = "\n".join(problems)
    for want in ISSUE_49_DEFECTS[name]:
        assert want in text, f"{name}: {want!r} not reported in:\n{text}"


def test_checker_threshold_integer_and_smoke_rules():
    """threshold_line stores its claim: the checker accepts it at the claim's value,
    reports it against another claim value or a label stating another value; integer_axis
    ticks integers; a smoke figure needs a text saying so and smoke_mark gives one."""
    import matplotlib.pyplot as plt

    P._style._pyplot()

    def draw(value, label=None):
        with P.figure_style():
            fig, ax = P.new_figure(2.5)
            ax.plot([1, 2, 3], [0.5, 0.9, 0.995], "o-", color="0.2", label="test accuracy")
            ax.set(xlabel="step", ylabel="accuracy")
            P.integer_axis(ax.xaxis)
            P.threshold_line(ax, "test_accuracy", value, label=label, color="0.5", ls=":")
            ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
            P._style.finish(fig)
        return fig

    fig = draw(0.99, "claim: accuracy ≥ 0.99")
    assert P.figure_problems(fig, smoke=False, claims={"test_accuracy": 0.99}) == []
    assert P.figure_problems(fig, smoke=False, claims={"test_accuracy": 0.95}) == [
        "axes 0 ('no title'): threshold of 'test_accuracy' drawn at 0.99, the claim is 0.95"
    ]
    smoke = P.figure_problems(fig, smoke=True)
    assert smoke and "without a smoke mark" in smoke[0], smoke
    P.smoke_mark(fig)
    assert P.figure_problems(fig, smoke=True) == []
    plt.close(fig)
    fig = draw(0.99, "accuracy 0.95")
    text = "\n".join(P.figure_problems(fig, smoke=False))
    plt.close(fig)
    assert "does not state the claim's value 0.99" in text, text


# --------------------------------------------------------------------------- records


def _res_analysis(n_steps: int = 4, n_tokens: int = 6, with_scaling: bool = True) -> dict:
    rng = np.random.default_rng(0)
    states = n_steps + 1
    cos = np.clip(rng.uniform(-1, 1, (states, n_tokens, n_tokens)), -1, 1)
    names = ("attention", "ln1", "ffn1", "ffn2", "relax", "ln2")
    diag = {
        "step": np.arange(states),
        "cosine": cos,
        "mean_cosine": np.linspace(0.1, 0.9, states),
        "min_cosine": np.linspace(-0.5, 0.8, states),
        "n_clusters": np.linspace(n_tokens, 2, states).round(),
        "threshold": 0.99,
        "effective_rank": np.linspace(5, 2, states),
        "distance_s1": np.linspace(0.8, 0.0, states),
        "substep_names": names,
        "increments": {k: rng.uniform(0.1, 2.0, states - 1) for k in names},
    }
    res = {
        "diagnostics": diag,
        "projection": rng.standard_normal((states, n_tokens, 2)),
        "increments": {
            "attn.w_q": rng.uniform(0.01, 0.1, n_steps - 1),
            "ffn.w_1": rng.uniform(0.01, 0.1, n_steps - 1),
            "all": rng.uniform(0.01, 0.1, n_steps - 1),
        },
        "scaling": (
            {"strides": [1, 2, 4], "max_increment": [0.05, 0.08, 0.12], "beta": 0.6}
            if with_scaling
            else None
        ),
    }
    return res


def _studies(factors=(1, 2, 4, 8)) -> dict:
    k = np.asarray(factors, float)
    out = {}
    for i, interp in enumerate(("constant", "linear")):
        change = [0.0, *(0.1 / (i + 1) * (1 - 1 / k[1:]))]
        out[interp] = {
            "factors": list(factors),
            "change": change,
            "successive": list(0.05 / k[:-1] / (i + 1)),
            "order": 1.0 + i,
            "evaluate": [{"accuracy": 0.95 - 0.001 * j} for j in range(len(factors))],
        }
    return out


def _convergence(n_steps=(4, 8, 16, 32, 64)) -> list[dict]:
    dts = [1.0 / n for n in n_steps]
    recs = []
    for sub, frac in (("a", None), ("b", None), ("c", 0.86)):
        for scheme, p in (("lie", 1), ("strang", 2)):
            splits = ("tangent", "full") if sub == "b" else (None,)
            for b in splits:
                q = 1 if (b == "full" or sub == "c") else p
                recs.append(
                    {
                        "submodel": sub,
                        "scheme": scheme,
                        "dts": dts,
                        "errors": [0.3 * dt**q for dt in dts],
                        "slope": float(q),
                        "b_splitting": b,
                        "active_fraction": frac,
                    }
                )
    return recs


def _softmax_rows(tokens=(2, 3, 4, 8), lambdas=(1.0, 10.0, 100.0, 1e3, 1e4)) -> list[dict]:
    from scipy.special import lambertw

    rows = []
    for T in tokens:
        c = float(lambertw((T - 1) / np.e).real)
        for lam in lambdas:
            rows.append(
                {
                    "T": T,
                    "lambda": lam,
                    "err_lambda_grid": c,
                    "err_lambda_random": c * (1 - 0.01 * np.log10(lam)),
                    "c_T": c,
                    "n_random": 2000,
                }
            )
    return rows


def _region_rows(variants=None, depths=(2, 3, 4, 5)) -> list[dict]:
    variants = variants or {"A": (2, 3), "B": (3, 4)}
    rows = []
    for v, tokens in variants.items():
        for T in tokens:
            for D in depths if v == "A" else [3 * d for d in depths]:
                rc = (2 * T - 1) ** (D - 1) if v == "A" else (2 * T - 3) ** (D // 3)
                rows.append(
                    {
                        "variant": v,
                        "T": T,
                        "D": D,
                        "regions": rc,
                        "rc_exact": rc,
                        "montufar": max(T ** (D - 1), 1),
                        "summary_qd": (T - 1) ** max(D // 3 - 1, 0),
                        "certified": True,
                    }
                )
    return rows


def _agreement_rows() -> list[dict]:
    rows = []
    for nf in (False, True):
        for act in ("relu", "gelu"):
            for b in (True, False):
                for h in (1, 4):
                    for ff in (None, 32):
                        for eps in (1e-5, 0.0):
                            rows.append(
                                dict(
                                    norm_first=nf,
                                    activation=act,
                                    bias=b,
                                    nhead=h,
                                    dim_feedforward=ff,
                                    layer_norm_eps=eps,
                                    max_abs_fp64=3e-16,
                                    max_rel_fp32=1.2e-7,
                                )
                            )
    return rows


def _substep_rows() -> list[dict]:
    names = ["attention", "ln1", "ffn1", "ffn2", "relax", "ln2"]
    rows = []
    for i, n in enumerate(names):
        r = {"substep": n, "fro": 5.0 + i, "torch_fro": 5.0 + i, "max_abs": 1e-16 * (i + 1)}
        for k in ("token_mean", "token_std", "token_mean_spread"):
            r[k] = 0.1 * i
            r["torch_" + k] = 0.1 * i
        rows.append(r)
    return rows


def _vit_heads(gh=6, gw=8) -> list[dict]:
    rng = np.random.default_rng(0)
    heads = []
    for h in range(2):
        k = rng.uniform(size=(gh, gw))
        k /= k.sum() * 1.05
        heads.append(
            {"head": h, "transflow": k, "hf": k + 1e-17, "cls_weight": 0.05, "max_abs_diff": 1e-17}
        )
    return heads


def _memory_records(devices=(1, 2, 4, 8)) -> list[dict]:
    return [
        {"method": m, "token_devices": p, "temp": 2**26 / p**e}
        for m, e in (("gspmd", 1.0), ("ring", 1.3))
        for p in devices
    ]


def _curves(n_eval=6) -> dict:
    steps = np.arange(10, 310, 10)
    ev = np.linspace(0, 300, n_eval).round()
    return {
        "step": steps,
        "loss": 2.3 * np.exp(-steps / 200),
        "train_accuracy": 1 - np.exp(-steps / 100),
        "eval_step": ev,
        "eval_loss": 2.3 * np.exp(-ev / 200),
        "eval_accuracy": 1 - np.exp(-ev / 100),
    }


def _benchmarks() -> dict:
    stat = lambda m: {"median": m, "min": 0.9 * m, "max": 1.1 * m}  # noqa: E731
    return {
        "layer": {
            "timings_s": {"transflow": stat(0.15), "torch": stat(0.14)},
            "shape": {"layers": 6, "batch": 8, "tokens": 256, "d_model": 256},
            "ratio_vs_torch": 0.94,
            "flop_fraction": 0.74,
            "threads": {"torch": 2},
            "jax_version": "0.0",
            "torch_version": "0.0",
            "backend": "cpu",
        },
        "threads1/layer": {
            "timings_s": {"transflow": stat(0.23), "torch": stat(0.28)},
            "ratio_vs_torch": 1.21,
        },
        "compile": {
            "steps": [1, 48],
            "timings_s": {"1": {"total": stat(0.22)}, "48": {"total": stat(0.26)}},
            "compile_ratio": 1.16,
        },
        "chunked": {
            "baseline_rss_gib": 0.27,
            "chunked_peak_rss_gib": 0.3,
            "chunked_grad_peak_rss_gib": 0.37,
            "dense_scores_gib": 4.0,
            "tokens": 32768,
            "d": 64,
            "agreement_tokens": 4096,
            "agreement_rel_err": 2.9e-7,
        },
    }


def _nonconvergence(refs=(1, 2, 4, 8, 16, 32)) -> dict:
    dts = [1.0 / m for m in refs]
    return {
        "sigma1=0 (S1∩S2=∅)": {
            "dts": dts,
            "diffs": [0.8, 0.3, 0.6, 0.2, 0.1][: len(dts) - 1],
            "sensitivity": dts,
        },
        "sigma1=1, sigma2=0.3 (S1∩S2≠∅)": {
            "dts": dts,
            "diffs": [0.3 / 2**i for i in range(len(dts) - 1)],
            "sensitivity": [0.9] * len(dts),
        },
    }


def _clustering(n=8, steps=40) -> dict:
    rng = np.random.default_rng(0)
    x0 = rng.standard_normal((n, 4))
    t = np.linspace(0, 1, steps + 1)[:, None, None]
    traj = (1 - t) * x0 + t * x0.mean(0)
    return {
        "times": np.linspace(0, 4, steps + 1),
        "min_cosine": np.linspace(-0.6, 1, steps + 1),
        "trajectory": traj,
    }


_PARTITIONS: dict = {}


def _partitions(which: str):
    """Real expressivity records, computed once per session on first use."""
    if which not in _PARTITIONS:
        import jax

        from transflow.expressivity import partition_2d, slice_study

        x64 = jax.config.jax_enable_x64
        jax.config.update("jax_enable_x64", True)
        try:
            if which == "full":
                _PARTITIONS[which] = partition_2d(2, 2)
            elif which == "smoke":  # the experiment's debug=smoke: no ReLU net
                _PARTITIONS[which] = partition_2d(2, 2, relu=False)
            else:
                _PARTITIONS[which] = slice_study(0, width=6, depth=2, n_dense=2001)
        finally:
            jax.config.update("jax_enable_x64", x64)
    return _PARTITIONS[which]


def _depth_factorial(
    paths=("per_layer", "linear", "legendre", "embedding"),
    ts=(0.2, 1.0, 4.0),
    trains=("fixed", "random"),
    grid=(1, 2, 4, 8, 16, 32, 64, 128, 256),
):
    """Cells and aggregates shaped as experiment=depth's factorial study returns them:
    every crossed cell with the Euler (prenorm) scheme, plus the headline with Heun."""
    rng = np.random.default_rng(3)
    cells, agg = [], {}
    levels = [
        {"path": p, "T": t, "train": tr, "scheme": "prenorm"}
        for p in paths
        for t in ts
        for tr in trains
    ]
    levels.append({"path": "legendre", "T": ts[0], "train": trains[-1], "scheme": "heun"})
    for lv in levels:
        name = f"{lv['path']}-{lv['T']:g}-{lv['train']}-{lv['scheme']}"
        cells.append((name, lv, "crossed" if lv["scheme"] == "prenorm" else "one-at-a-time"))
        a = {}
        for n in grid:
            acc = 0.96 - (0.5 if n < 4 else 0.02) * rng.uniform() * (lv["path"] == "per_layer")
            a[f"acc.{lv['scheme']}.{n}"] = {"mean": acc, "std": 0.01 * rng.uniform(), "n": 3}
            a[f"dist.{lv['scheme']}.{n}"] = {"mean": 0.5 / n, "std": 0.05 / n, "n": 3}
        agg[name] = a
    return list(grid), cells, agg


def _scheme_rows(tasks=("digits", "sequence", "text"), schemes=("prenorm", "strang", "imex")):
    rng = np.random.default_rng(0)
    rows = {}
    for t in tasks:
        for s in schemes:
            if t == "text":
                base = {"bpc": 3.2, "bpc_half_dt": 3.3, "bpc_double_dt": 12.0}
            else:
                base = {"accuracy": 0.9, "accuracy_half_dt": 0.88, "accuracy_double_dt": 0.5}
            rows[(t, s)] = {k: list(v + 0.02 * rng.standard_normal(3)) for k, v in base.items()}
    return rows


_ELEVEN = (
    "lie prenorm macaron macaron_post strang heun rk4 ode_rk2 imex macaron_untied imex_dissipative"
).split()


def _stable(schemes=("prenorm", "strang", "imex")) -> dict:
    return {s: {"dt_star": 1.0} for s in schemes}


def _trained_rows(depths=(1, 2, 3), seeds=(0, 1, 2)):
    """Records of experiments/tasks/trained_regions.py (synthetic counts)."""
    rows = []
    for target, dim in (("sawtooth", 1), ("zigzag2d", 2)):
        for D in depths:
            for seed in seeds:
                for kind in ("transformer", "mlp"):
                    n = 5 * D + seed + (3 if kind == "mlp" else 0)
                    rows.append(
                        dict(target=target, dim=dim, kind=kind, depth=D, seed=seed,
                             regions=n, regions_init=n - 1, capacity=7 ** (dim * (D - 1)),
                             target_regions=16 if dim == 1 else 9)
                    )  # fmt: skip
    return rows


def _trained_partition():
    p = _partitions("smoke")["zigzag"]
    return P.plot_trained_partition(p, p, model_title="trained", target_title="target")


# (function, case) -> callable() returning a figure; "smoke" cases carry the
# records of the experiments' debug=smoke runs (one depth, a missing part, two points).
CASES = {
    ("plot_substeps", "full"): lambda: P.plot_substeps(_substep_rows(), title="one step"),
    ("plot_agreement", "full"): lambda: P.plot_agreement(_agreement_rows(), title="agreement"),
    ("plot_agreement", "smoke"): lambda: P.plot_agreement(_agreement_rows()[:2]),
    ("plot_vit_attention", "full"): lambda: P.plot_vit_attention(
        _vit_heads(), grid_shape=(6, 8), query_patch=(2, 5)
    ),
    ("plot_vit_attention", "smoke"): lambda: P.plot_vit_attention(
        _vit_heads(3, 4), grid_shape=(3, 4), query_patch=(0, 1)
    ),
    ("plot_convergence", "full"): lambda: P.plot_convergence(_convergence(), title="Δt"),
    ("plot_convergence", "smoke"): lambda: P.plot_convergence(
        [r for r in _convergence((4, 8)) if r["submodel"] == "a"]
    ),
    ("plot_grid", "full"): lambda: P.plot_grid(
        [
            {"quantity": q, "sizes": [4, 12, 36], "errors": [e, e / 9, e / 81], "slope": 2.0}
            for q, e in (("attention", 1.8e-2), ("linear", 7e-3), ("evolution", 8e-3))
        ]
    ),
    ("plot_grid", "smoke"): lambda: P.plot_grid(
        [{"quantity": "attention", "sizes": [4, 12], "errors": [1.8e-2, 1.6e-3], "slope": 2.2}]
    ),
    ("plot_nonconvergence", "full"): lambda: P.plot_nonconvergence(_nonconvergence()),
    ("plot_nonconvergence", "smoke"): lambda: P.plot_nonconvergence(_nonconvergence((1, 2))),
    ("plot_clustering", "full"): lambda: P.plot_clustering(_clustering(32, 200)),
    ("plot_clustering", "smoke"): lambda: P.plot_clustering(_clustering(4, 3)),
    ("plot_softmax", "full"): lambda: P.plot_softmax(_softmax_rows()),
    ("plot_softmax", "smoke"): lambda: P.plot_softmax(_softmax_rows((2,), (10.0, 1e3))),
    ("plot_regions", "full"): lambda: P.plot_regions(_region_rows()),
    ("plot_regions", "smoke"): lambda: P.plot_regions(
        _region_rows({"A": (2,), "B": (3,)}, depths=(2,))
    ),
    ("plot_regions", "one variant"): lambda: P.plot_regions(_region_rows({"A": (2,)})),
    ("plot_partition", "full"): lambda: P.plot_partition(_partitions("full"), 2, 2),
    ("plot_partition", "smoke"): lambda: P.plot_partition(_partitions("smoke"), 2, 2),
    ("plot_slice", "full"): lambda: P.plot_slice(_partitions("slice")),
    ("plot_benchmarks", "full"): lambda: P.plot_benchmarks(_benchmarks()),
    ("plot_benchmarks", "no results"): lambda: P.plot_benchmarks({}),
    ("plot_sharded_memory", "full"): lambda: P.plot_sharded_memory(
        _memory_records(), title="sharded"
    ),
    ("plot_sharded_memory", "smoke"): lambda: P.plot_sharded_memory(_memory_records((1, 2))),
    ("plot_training_curves", "full"): lambda: P.plot_training_curves(
        {"digits": _curves(), "sort": _curves()}, title="training"
    ),
    ("plot_training_curves", "smoke"): lambda: P.plot_training_curves({"digits": _curves(1)}),
    ("plot_token_trajectories", "full"): lambda: P.plot_token_trajectories(_res_analysis()),
    ("plot_cosine_matrices", "full"): lambda: P.plot_cosine_matrices(_res_analysis(12, 16)),
    ("plot_cosine_matrices", "smoke"): lambda: P.plot_cosine_matrices(_res_analysis(1, 3)),
    ("plot_token_geometry", "full"): lambda: P.plot_token_geometry(_res_analysis()),
    ("plot_substep_budgets", "full"): lambda: P.plot_substep_budgets(_res_analysis()),
    ("plot_substep_budgets", "smoke"): lambda: P.plot_substep_budgets(_res_analysis(1)),
    ("plot_control_smoothness", "full"): lambda: P.plot_control_smoothness(_res_analysis(8)),
    ("plot_control_smoothness", "smoke"): lambda: P.plot_control_smoothness(
        _res_analysis(2, with_scaling=False)
    ),
    ("plot_refinement", "full"): lambda: P.plot_refinement(_studies(), title="refinement"),
    ("plot_refinement", "smoke"): lambda: P.plot_refinement(_studies((1, 2))),
    ("plot_flow_clustering", "full"): lambda: P.plot_flow_clustering(
        _res_analysis(4, 16), title="digits ViT"
    ),
    ("plot_depth_factorial", "full"): lambda: P.plot_depth_factorial(*_depth_factorial()),
    ("plot_depth_factorial", "full-distance"): lambda: P.plot_depth_factorial(
        *_depth_factorial(), what="distance"
    ),
    ("plot_depth_factorial", "smoke"): lambda: P.plot_depth_factorial(
        *_depth_factorial(paths=("per_layer", "legendre"), ts=(0.2,), grid=(1, 2, 4, 8))
    ),
    ("plot_schemes", "full"): lambda: P.plot_schemes(
        {**_scheme_rows(), **_scheme_rows(schemes=("lie",))},
        tasks=["digits", "sequence", "text"],
        schemes=["prenorm", "strang", "imex", "lie"],
        stable=_stable(),
    ),
    # the full run's eleven scheme names (its figure overlapped them: found at save)
    ("plot_schemes", "eleven schemes"): lambda: P.plot_schemes(
        _scheme_rows(("digits", "text"), _ELEVEN),
        tasks=["digits", "text"],
        schemes=list(_ELEVEN),
        stable=_stable(_ELEVEN[1:]),
    ),
    ("plot_schemes", "smoke"): lambda: P.plot_schemes(
        _scheme_rows(("digits",), ("prenorm", "imex")),
        tasks=["digits"],
        schemes=["prenorm", "imex"],
        stable=_stable(("prenorm",)),
    ),
    ("plot_trained_regions", "full"): lambda: P.plot_trained_regions(_trained_rows()),
    ("plot_trained_regions", "smoke"): lambda: P.plot_trained_regions(
        _trained_rows((1, 2), (0, 1))
    ),
    ("plot_trained_partition", "full"): _trained_partition,
}


# The fast tier draws these (the figures of the issue and the smoke-size records); the
# slow tier all the others (drawing and inspecting one figure takes ~0.5-2 s).
FAST_CASES = {
    ("plot_convergence", "full"),
    ("plot_grid", "full"),
    ("plot_grid", "smoke"),
    ("plot_clustering", "full"),
    ("plot_softmax", "full"),
    ("plot_regions", "smoke"),
    ("plot_partition", "smoke"),
    ("plot_flow_clustering", "full"),
    ("plot_sharded_memory", "full"),
    ("plot_token_trajectories", "full"),
    ("plot_trained_regions", "full"),
    ("plot_schemes", "eleven schemes"),
}


def test_every_figure_function_has_a_case():
    assert {f for f, _ in CASES} == set(PLOT_FUNCTIONS)
    assert FAST_CASES <= set(CASES)


@pytest.mark.parametrize(
    "case",
    [pytest.param(c, marks=() if c in FAST_CASES else pytest.mark.slow) for c in sorted(CASES)],
    ids=lambda c: f"{c[0]}-{c[1]}",
)
def test_figure_function_is_clean(case):
    """Labelled axes, disjoint tick labels, no empty panel, mathtext, one width."""
    fig = CASES[case]()
    _assert_clean(fig, f"{case[0]} ({case[1]})")


# --------------------------------------------------------------------------- make figures


def _make_all():
    spec = importlib.util.spec_from_file_location("paper_figures_make_all", FIG_DIR / "make_all.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _inspect_saved_figures(monkeypatch, *, smoke: bool = True) -> dict[str, list[str]]:
    """Inspect every figure as it is saved (``Figure.savefig``, first file of each figure:
    what the reader of the PNG sees, smoke mark included), keyed by the file's stem."""
    from matplotlib.figure import Figure

    original = Figure.savefig
    seen: dict[str, list[str]] = {}
    done: set[int] = set()

    def inspecting(fig, fname, *args, **kw):
        if id(fig) not in done:
            done.add(id(fig))
            problems = P.figure_problems(fig, smoke=smoke)
            width = float(fig.get_size_inches()[0])
            if width != P.FIGURE_WIDTH:
                problems.append(f"width {width} in, expected {P.FIGURE_WIDTH}")
            seen[pathlib.Path(str(fname)).stem] = problems
        return original(fig, fname, *args, **kw)

    monkeypatch.setattr(Figure, "savefig", inspecting)
    return seen


def _run_make_figures(ids, tmp_path, monkeypatch):
    monkeypatch.setenv("TRANSFLOW_SMOKE", "1")
    seen = _inspect_saved_figures(monkeypatch)
    make_all = _make_all()
    try:
        results = make_all.run_figures(ids, out_dir=tmp_path)
    finally:
        for name in list(sys.modules):
            if name.startswith("paper_figures_f"):
                sys.modules.pop(name)
    failed = {k: e["error"] for k, e in results.items() if e["status"] != "ok"}
    assert not failed, failed
    assert set(seen) == set(results), (sorted(seen), sorted(results))
    bad = {fid: p for fid, p in seen.items() if p}
    assert not bad, bad


def test_make_figures_subset_is_clean(tmp_path, monkeypatch):
    """The cheapest figure of ``make figures`` (smoke size), inspected as saved: the
    inspection hook sees what the scripts save."""
    _run_make_figures(["FPERF"], tmp_path, monkeypatch)


@pytest.mark.slow
def test_make_figures_all_clean(tmp_path, monkeypatch):
    """Every figure of ``make figures`` (smoke size), inspected as saved (≈ 4 min)."""
    _run_make_figures(None, tmp_path, monkeypatch)


EXPERIMENTS = sorted(p.stem for p in (REPO / "configs" / "experiment").glob("*.yaml"))
# The experiments that save no figure at smoke size (their results are tables; sharded
# skips its memory scan, and so its figure, in smoke mode; the three studies split off
# depth report numbers only).
NO_FIGURES = {
    "hf_equivalence",
    "vit_equivalence",
    "sharded",
    "depth_adjoint",
    "depth_memory",
    "depth_text",
}


@pytest.mark.slow
@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_smoke_figures_clean(name, tmp_path, monkeypatch):
    """Every figure an experiment's ``debug=smoke`` run saves, inspected as saved."""
    from transflow.experiments.run import run_in_process

    if name in ("hf_equivalence", "vit_equivalence"):
        pytest.importorskip("transformers", reason="the HF experiments load transformers")
    seen = _inspect_saved_figures(monkeypatch)  # a debug=smoke run: smoke marks required
    run_in_process([f"experiment={name}", "debug=smoke"], tmp_path / "run")
    assert bool(seen) == (name not in NO_FIGURES), (name, sorted(seen))
    bad = {k: p for k, p in seen.items() if p}
    assert not bad, bad


def test_plot_function_signatures_take_records_first():
    """Each figure function takes its records first (the documented calling convention)."""
    for name in PLOT_FUNCTIONS:
        params = list(inspect.signature(getattr(P, name)).parameters.values())
        assert params and params[0].kind in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
        ), name


def test_smoke_mark_stays_clear_of_a_bottom_legend_in_the_saved_file():
    """A tight save grows the figure's box to hold the mark, and what is anchored to that
    box (a figure legend below the panels, the suptitle) used to slide onto the mark in
    the file while the figure itself looked clean (analyze, schemes and training smoke
    figures). Measured as drawn into the file: a probe artist records the extents."""
    import io

    from matplotlib.artist import Artist

    fig, axes = P.new_figure(4.0, 1, 2, squeeze=False)
    for ax in axes[0]:
        for i in range(13):
            ax.semilogy([0.5], [1 + i / 10], ".-", label=f"block {i}")
        ax.set(xlabel="x", ylabel="y", title="panel")
    fig.suptitle("figure title")
    handles = axes[0][0].get_legend_handles_labels()
    fig.legend(*handles, loc="outside lower center", ncol=4, fontsize=6)
    P.smoke_mark(fig)
    seen = []

    class Probe(Artist):
        def draw(self, renderer):
            mark = next(t for t in fig.texts if t.get_gid() == "smoke-mark")
            parts = [mark, fig.legends[0], fig._suptitle]
            seen.append([a.get_window_extent(renderer) for a in parts])
            seen[-1] += [ax.get_tightbbox(renderer) for ax in fig.axes]  # with tick labels

    fig.add_artist(Probe())
    fig.savefig(io.BytesIO(), format="png", dpi=150, bbox_inches="tight")
    mark, legend, title, *panels = seen[-1]
    assert mark.y1 < legend.y0, (mark, legend)  # below the legend, not on it
    assert legend.y1 < min(p.y0 for p in panels)  # the legend still under the panels
    assert title.y0 > max(p.y1 for p in panels)  # the title still above them
    assert not P.figure_problems(fig, smoke=True)
