"""The numerical studies of ``experiment=expressivity`` and of the paper figures F7–F9 and
F13, as library functions that return records (docs/spec/maxout-expressivity.md §7).

Each function returns plain records (lists of dicts, dicts, :class:`RegionCount`); the
task writes them and states its claims, :mod:`transflow.plotting` draws them. Call with
``jax_enable_x64`` on (float64, docs/spec/maxout-expressivity.md C10).
"""

from __future__ import annotations

import numpy as np

from .._errors import (
    check_flag,
    check_kind,
    check_number,
    check_same_shape,
    check_sequence,
    check_sizes,
    check_values,
)
from ._construction import maxout_to_transformer
from ._cpwl import hinging_cpwl, lattice_cpwl, lattice_eval
from ._maxout import MaxoutNetwork, zigzag_maxout
from ._regions import count_linear_regions, grid_region_count
from ._slice import restrict
from ._softmax import softmax_max_constant

__all__ = [
    "random_maxout",
    "max_errors",
    "construction_checks",
    "outside_box_errors",
    "softmax_rows",
    "softmax_multilayer_rows",
    "region_rows",
    "partition_2d",
    "relu_and_cpwl_checks",
    "c8_regions",
    "precision_rows",
    "slice_study",
]

_CALL: dict = {}


def _batched(f, x):
    """``vmap(f)(x)`` as numpy, compiled once per model structure (f is an argument)."""
    if "fn" not in _CALL:
        import equinox as eqx
        import jax

        _CALL["fn"] = eqx.filter_jit(lambda f, x: jax.vmap(f)(x))
    return np.asarray(_CALL["fn"](f, x))


def random_maxout(rng, d, widths, ranks, d_out=1) -> MaxoutNetwork:
    """A maxout network with standard normal weights (the spec's random test nets)."""
    check_sizes("random_maxout", d=d, d_out=d_out)
    widths, ranks = tuple(widths), tuple(ranks)
    if len(widths) != len(ranks) or not widths:
        raise ValueError(
            f"random_maxout: `ranks` must have one entry per layer of `widths` "
            f"({len(widths)}), got {len(ranks)}."
        )
    for name, sizes in (("widths", widths), ("ranks", ranks)):
        for size in sizes:
            check_number(name, size, "random_maxout", lower=0, integer=True, example="[4, 4]")
    ws, bs, prev = [], [], d
    for n, k in zip(widths, ranks):
        ws.append(rng.normal(size=(n, k, prev)))
        bs.append(rng.normal(size=(n, k)))
        prev = n
    return MaxoutNetwork(ws, bs, rng.normal(size=(d_out, prev)), rng.normal(size=d_out))


def _check_rng(rng, owner: str) -> None:
    check_kind("rng", rng, np.random.Generator, owner, "pass rng=np.random.default_rng(0)")


def _check_seed(seed, owner: str) -> None:
    check_number("seed", seed, owner, lower=0, strict=False, integer=True, example="0")


def max_errors(a, b) -> dict:
    """``{"max_abs", "max_rel"}`` of ``a − b`` (relative to ``max(1, max|b|)``)."""
    a = np.asarray(check_values("a", a, "max_errors"))
    b = np.asarray(check_values("b", b, "max_errors"))
    check_same_shape(("a", "b"), a, b, "max_errors")
    d = np.abs(np.asarray(a) - np.asarray(b))
    return {"max_abs": float(d.max()), "max_rel": float(d.max() / max(1.0, np.abs(b).max()))}


def construction_checks(rng, n: int, variants=("A", "B")) -> list[dict]:
    """C1/C7/C9: hardmax Variant A/B vs a random maxout net (d=3, widths (5,4,3), ranks
    (2,4,3)) on n random points of [−1,1]³, with the parameter counts."""
    _check_rng(rng, "construction_checks")
    check_sizes("construction_checks", n=n)
    _check_variants(variants, "construction_checks")
    net = random_maxout(rng, 3, (5, 4, 3), (2, 4, 3), d_out=2)
    x = rng.uniform(-1, 1, size=(n, 3))
    y = _batched(net, x)
    rows = []
    for variant in variants:
        tf = maxout_to_transformer(net, -1.0, 1.0, variant=variant)
        rows.append({"variant": variant, **max_errors(_batched(tf, x), y), **tf.param_counts()})
    return rows


def _check_variants(variants, owner: str) -> None:
    if (
        not isinstance(variants, list | tuple)
        or not variants
        or any(v not in ("A", "B") for v in variants)
    ):
        raise ValueError(
            f"{owner}: `variants` must be a non-empty sequence of 'A' and 'B', got "
            f"{variants!r:.40}; pass e.g. variants=('A', 'B')."
        )


def outside_box_errors(rng, n: int, radii=(0.5, 1.0, 3.0, 10.0, 30.0, 100.0)) -> dict:
    """C4: the error of the construction (margin 0) at radius R times the box [−1,1]²."""
    _check_rng(rng, "outside_box_errors")
    check_sizes("outside_box_errors", n=n)
    check_sequence("radii", radii, "outside_box_errors", integer=False, example="(1.0, 10.0)")
    small = random_maxout(rng, 2, (4, 3), (3, 2))
    tf = maxout_to_transformer(small, -1.0, 1.0, margin=0.0)
    u = rng.normal(size=(n, 2))
    u /= np.abs(u).max(-1, keepdims=True)
    errs = {R: max_errors(_batched(tf, R * u), _batched(small, R * u))["max_abs"] for R in radii}
    return {"B": [float(v) for v in tf.bounds], "max_abs_by_radius": errs}


def softmax_rows(tokens, lambdas, n_grid=20001, n_random=2000, seed=0) -> list[dict]:
    """F7 / C5: for one rank-T unit (pieces x, 0, …, 0 on [−1, 1]) and every λ: the sup of
    error·λ over a dense grid of gaps (≈ 1/λ) and over ``n_random`` uniform points, with
    ``c_T = W((T−1)/e)``."""
    check_sequence("tokens", tokens, "softmax_rows", lower=1, example="[2, 4]")
    check_sequence("lambdas", lambdas, "softmax_rows", integer=False, example="[100.0]")
    check_sizes("softmax_rows", n_grid=n_grid, n_random=n_random)
    _check_seed(seed, "softmax_rows")
    rng = np.random.default_rng(seed)
    rows = []
    for T in tokens:
        w = np.zeros((1, T, 1))
        w[0, 0, 0] = 1.0
        net = MaxoutNetwork([w], [np.zeros((1, T))])
        xr = rng.uniform(-1, 1, size=(n_random, 1))
        for lam in lambdas:
            tf = maxout_to_transformer(net, -1.0, 1.0, attention=float(lam))
            xg = np.linspace(0.0, min(1.0, 10.0 / lam), n_grid)[:, None]
            eg = _batched(net, xg) - _batched(tf, xg)
            er = _batched(net, xr) - _batched(tf, xr)
            rows.append(
                {
                    "T": T,
                    "lambda": float(lam),
                    "err_lambda_grid": float(np.abs(eg).max() * lam),
                    "err_lambda_random": float(np.abs(er).max() * lam),
                    "c_T": softmax_max_constant(T),
                    "n_random": n_random,
                }
            )
    return rows


def softmax_multilayer_rows(rng, n: int, lambdas=(1e2, 1e3, 1e4)) -> list[dict]:
    """C5 (multi-layer): error of the softmax transformer of a random net (widths (3,3,2),
    ranks (3,2,3)) vs the §3.6 bound."""
    _check_rng(rng, "softmax_multilayer_rows")
    check_sizes("softmax_multilayer_rows", n=n)
    lambdas = check_sequence(
        "lambdas", lambdas, "softmax_multilayer_rows", integer=False, example="[100.0]"
    )
    deep = random_maxout(rng, 2, (3, 3, 2), (3, 2, 3))
    xs = rng.uniform(-1, 1, size=(n, 2))
    yd = _batched(deep, xs)
    rows = []
    for lam in lambdas:
        tf = maxout_to_transformer(deep, -1.0, 1.0, attention=lam)
        err = max_errors(_batched(tf, xs), yd)["max_abs"]
        rows.append({"lambda": lam, "max_abs": err, "bound": tf.softmax_error_bound()})
    return rows


def _depths(T, variant, max_regions):
    out, D = [], (2 if variant == "A" else 3)
    while True:
        L = D - 1 if variant == "A" else D // 3
        k = T if variant == "A" else T - 1
        if (2 * k - 1) ** L > max_regions:
            return out
        out.append(D)
        D += 1 if variant == "A" else 3


def region_rows(tokens_a, tokens_b, max_regions, d=1, *, large=None, n_seed=1024) -> list[dict]:
    """F8 / C6 / C7 / C12: certified exact 1-D region counts of the zigzag transformers vs
    depth D, for every depth whose count is ≤ ``max_regions`` and the deepest one whose
    count is ≤ ``large`` (if given), with the candidate bounds of docs/spec/maxout-expressivity.md
    §3.5: the RC-exact formula, Montúfar's ``k^{L−1} k^d`` and the summary's
    ``(T−1)^d (T−1)^{q(⌊D/3⌋−1)}`` for q ∈ {1, d}."""
    check_sequence("tokens_a", tokens_a, "region_rows", lower=1, nonempty=False, example="[2]")
    check_sequence("tokens_b", tokens_b, "region_rows", lower=2, nonempty=False, example="[3]")
    check_sizes("region_rows", max_regions=max_regions, d=d, large=large, n_seed=n_seed)
    rows = []
    for variant, tokens in (("A", tokens_a), ("B", tokens_b)):
        for T in tokens:
            k = T if variant == "A" else T - 1
            depths = _depths(T, variant, max_regions)
            if large is not None:
                big = _depths(T, variant, large)
                if big and big[-1] not in depths:
                    depths = depths + [big[-1]]
            for D in depths:
                L = D - 1 if variant == "A" else D // 3
                tf = maxout_to_transformer(zigzag_maxout(k, L, d), 0.0, 1.0, variant=variant)
                seeds = max(n_seed, min(1 << 14, (2 * k - 1) ** L // 8))
                r = count_linear_regions(tf, 0.0, 1.0, n_seed=seeds)
                rows.append(
                    {
                        "variant": variant,
                        "T": T,
                        "D": D,
                        "rank": k,
                        "layers": L,
                        "regions": r.linear,
                        "activation_regions": r.activation,
                        "certified": r.certified,
                        "junctions_exact": r.certificate["junctions_exact"],
                        "rc_exact": (2 * k - 1) ** (d * L),
                        "montufar": k ** (L - 1) * k**d,
                        "summary_q1": (T - 1) ** d * (T - 1) ** (1 * (D // 3 - 1)),
                        "summary_qd": (T - 1) ** d * (T - 1) ** (d * (D // 3 - 1)),
                    }
                )
    return rows


def partition_2d(T=3, D=3, seed=0, relu=True) -> dict:
    """F9 / C6 in 2-D: the exact partition of [0,1]² into linear regions of the Variant-A
    transformer of the zigzag net (T tokens, D blocks), plus a random ReLU net's
    (2→6→5→1) transformer on [−2, 2]²; :class:`RegionCount` per name."""
    check_number("T", T, "partition_2d", lower=1, integer=True, example="3")
    check_number("D", D, "partition_2d", lower=1, integer=True, example="3")
    _check_seed(seed, "partition_2d")
    check_flag("relu", relu, "partition_2d")
    out = {}
    tf = maxout_to_transformer(zigzag_maxout(T, D - 1, 2), 0.0, 1.0)
    out["zigzag"] = count_linear_regions(tf, [0.0, 0.0], [1.0, 1.0])
    if not relu:
        return out
    rng = np.random.default_rng(seed)
    Ws = [rng.normal(size=(6, 2)), rng.normal(size=(5, 6)), rng.normal(size=(1, 5))]
    bs = [rng.normal(size=6), rng.normal(size=5), rng.normal(size=1)]
    tf = maxout_to_transformer(MaxoutNetwork.from_relu(Ws, bs), -2.0, 2.0)
    out["relu"] = count_linear_regions(tf, [-2.0, -2.0], [2.0, 2.0])
    return out


def relu_and_cpwl_checks(rng, n: int) -> list[dict]:
    """C2 (ReLU net 4→8→8→6→1) and C3 (lattice and hinging-hyperplane CPWL) records."""
    _check_rng(rng, "relu_and_cpwl_checks")
    check_sizes("relu_and_cpwl_checks", n=n)
    rows = []
    sizes = (4, 8, 8, 6, 1)
    Ws = [rng.normal(size=(o, i)) / np.sqrt(i) for i, o in zip(sizes[:-1], sizes[1:])]
    bs = [0.3 * rng.normal(size=o) for o in sizes[1:]]
    tf = maxout_to_transformer(MaxoutNetwork.from_relu(Ws, bs), -1.0, 1.0)
    x4 = rng.uniform(-1, 1, size=(n, 4))
    h = x4
    for w, b in zip(Ws[:-1], bs[:-1]):
        h = np.maximum(h @ w.T + b, 0)
    e = max_errors(_batched(tf, x4), h @ Ws[-1].T + bs[-1])
    rows.append({"check": "C2", "route": "relu", "T": tf.n_tokens, "D": tf.depth, **e})
    A, c = rng.normal(size=(7, 2)), rng.normal(size=7)
    sets = [[0, 1, 2], [2, 3], [3, 4, 5], [5, 6, 0], [1, 4, 6]]
    tf = maxout_to_transformer(lattice_cpwl(A, c, sets), -2.0, 2.0)
    x2 = rng.uniform(-2, 2, size=(n, 2))
    e = max_errors(_batched(tf, x2)[:, 0], lattice_eval(A, c, sets, x2))
    rows.append({"check": "C3", "route": "lattice", "T": tf.n_tokens, "D": tf.depth, **e})
    W, b, s = rng.normal(size=(4, 3, 2)), rng.normal(size=(4, 3)), np.array([1.0, -1, 1, -1])
    tf = maxout_to_transformer(hinging_cpwl(W, b, s), -2.0, 2.0)
    ref = (np.max(np.einsum("pkd,nd->npk", W, x2) + b, -1) * s).sum(-1)
    e = max_errors(_batched(tf, x2)[:, 0], ref)
    rows.append({"check": "C3", "route": "hinging", "T": tf.n_tokens, "D": tf.depth, **e})
    return rows


def c8_regions(rng, n_grid=200_000) -> dict:
    """C8: regions of a random 1-6-6-6-1 rank-3 net on [−3, 3], of its transformer, and of
    grid hashing (``n_grid`` points)."""
    _check_rng(rng, "c8_regions")
    check_sizes("c8_regions", n_grid=n_grid)
    Wc = [rng.normal(size=(6, 3, 1)), rng.normal(size=(6, 3, 6)), rng.normal(size=(6, 3, 6))]
    net = MaxoutNetwork(
        Wc, [rng.normal(size=(6, 3)) for _ in range(3)], rng.normal(size=(1, 6)), np.zeros(1)
    )
    r_net = count_linear_regions(net, -3.0, 3.0)
    r_tf = count_linear_regions(maxout_to_transformer(net, -3.0, 3.0), -3.0, 3.0)
    g = grid_region_count(net, -3.0, 3.0, n_grid)
    return {
        "net": [r_net.linear, r_net.activation],
        "transformer": [r_tf.linear, r_tf.activation],
        "certified": [r_net.certified, r_tf.certified],
        "grid": g,
    }


def precision_rows(rank=3, depths=(1, 2, 3, 4), n=20001) -> list[dict]:
    """C10: the error of the zigzag transformer (Variant A) against its maxout net on a
    dense grid of [0, 1] grows with the gating bounds B_ℓ and the Lipschitz constants;
    each row has the measured float64 error, the rigorous running round-off bound of both
    models (max over the grid; the error must stay below it) and ``u·Σ_ℓ B_ℓ Π_{r>ℓ}
    Lip_r`` (the a-priori scale)."""
    import equinox as eqx
    import jax

    check_sizes("precision_rows", rank=rank, n=n)
    check_sequence("depths", depths, "precision_rows", example="(1, 2)")
    bounded = eqx.filter_jit(lambda f, x: jax.vmap(lambda xi: f.eval_bounded(xi)[:2])(x))
    x = np.linspace(0.0, 1.0, n)[:, None]
    u = np.finfo(np.float64).eps / 2
    rows = []
    for L in depths:
        net = zigzag_maxout(rank, L)
        tf = maxout_to_transformer(net, 0.0, 1.0)
        yt, et = (np.asarray(a) for a in bounded(tf, x))
        yn, en = (np.asarray(a) for a in bounded(net, x))
        lips = net.lipschitz()
        scale = sum(
            float(b) * float(np.prod(lips[i + 1 :])) for i, b in enumerate(np.asarray(tf.bounds))
        )
        rows.append(
            {
                "rank": rank,
                "layers": L,
                "pieces": (2 * rank - 1) ** L,
                "max_abs_error": float(np.abs(yt - yn).max()),
                "running_bound": float((et + en).max()),
                "a_priori_scale": u * scale,
                "B": [float(b) for b in np.asarray(tf.bounds)],
            }
        )
    return rows


def _torch_relu_net(seed, d_in=5, width=16, depth=3):
    import torch

    torch.manual_seed(seed)
    layers, prev = [], d_in
    for _ in range(depth):
        layers += [torch.nn.Linear(prev, width), torch.nn.ReLU()]
        prev = width
    layers.append(torch.nn.Linear(prev, 1))
    return torch.nn.Sequential(*layers).double()


def _torch_patterns(module, X):
    """Activation patterns of a torch ReLU Sequential on points X (independent of
    transflow: signs of the pre-activations in torch)."""
    import torch

    h = torch.as_tensor(X, dtype=torch.float64)
    bits = []
    with torch.no_grad():
        for layer in module:
            if isinstance(layer, torch.nn.ReLU):
                bits.append((h > 0).numpy())
            h = layer(h)
    return np.concatenate(bits, axis=1)


def slice_study(seed=0, *, d_in=5, width=16, depth=3, n_dense=400_001, plane=True) -> dict:
    """A random torch ReLU network on R^{d_in}: the certified count on the segment through
    two random points (t ∈ [0, 1]) against an independent dense-sampling count (distinct
    consecutive torch activation patterns on ``n_dense`` points), and the certified count
    on the plane through three random points (t ∈ [0, 1]², F13; certified by exact integer
    arithmetic, see :func:`count_linear_regions`)."""
    _check_seed(seed, "slice_study")
    check_sizes("slice_study", d_in=d_in, width=width, depth=depth, n_dense=n_dense)
    check_flag("plane", plane, "slice_study")
    rng = np.random.default_rng(seed)
    module = _torch_relu_net(seed, d_in, width, depth)
    net = MaxoutNetwork.from_torch(module)
    p0, p1, p2 = rng.normal(size=(3, d_in))
    line = restrict(net, p0, p1 - p0)
    r1 = count_linear_regions(line, 0.0, 1.0)
    t = np.linspace(0.0, 1.0, n_dense)
    pats = _torch_patterns(module, p0[None] + t[:, None] * (p1 - p0)[None])
    dense = 1 + int(np.count_nonzero(np.any(pats[1:] != pats[:-1], axis=1)))
    out = {
        "d_in": d_in,
        "width": width,
        "depth": depth,
        "points": [p0.tolist(), p1.tolist(), p2.tolist()],
        "line": {
            "activation": r1.activation,
            "linear": r1.linear,
            "certified": r1.certified,
            "dense_activation": dense,
            "n_dense": n_dense,
            "min_region_width": float(
                np.diff(np.concatenate([[0.0], r1.breakpoints, [1.0]])).min()
            ),
        },
        "line_count": r1,
    }
    if plane:
        pl = restrict(net, p0, np.stack([p1 - p0, p2 - p0]))
        r2 = count_linear_regions(pl, [0.0, 0.0], [1.0, 1.0])
        out["plane"] = {
            "activation": r2.activation,
            "linear": r2.linear,
            "certified": r2.certified,
            "method": (r2.certificate or {}).get("method"),
            "seconds": (r2.certificate or {}).get("seconds"),
        }
        out["plane_count"] = r2
    return out
