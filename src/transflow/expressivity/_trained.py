"""Trained expressivity (issue #39): do *trained* hardmax transformers use the linear
regions that the construction shows they can have?

The models are small transformers in the style of the construction
(:func:`maxout_to_transformer`, Variant A): the input ``x ∈ R^d`` (d = 1 or 2) is
embedded on T tokens (per-token embedding and positional part), D blocks of multi-head
attention whose **query is a learned constant per head** (``W_Q = 0``, ``b_Q`` trained, as
in the construction, where every query token asks the same question), keys and values
affine in the stream, residual, and a one-hidden-layer ReLU FFN (residual); read-out from
token 0. With the pattern frozen, every attention score ``b_Q · k_j(x)`` is affine in x,
so the hardmax reading is a continuous-or-not piecewise-linear map whose activation
regions are convex polygons, and both exact counters apply: the 1-D walk
:func:`exact_regions_1d` and the exact 2-D integer partition of
:func:`count_linear_regions` (through :meth:`HardmaxTransformer.exact_eval`).

Training (:func:`train_model`): softmax attention ``softmax(λ·scores)`` with λ annealed
geometrically from ``lam_start`` to ``lam_end`` over the steps, Adam (optax) on the mean
squared error against the target at fresh uniform samples of the box every step; the model
is then **read with hardmax** (:func:`hardmax_reading`, a :class:`ConstantQueryTransformer`
whose regions are counted) and the max gap between the hardmax reading and the softmax
model at ``λ_end`` on a dense grid is reported (:func:`reading_gap`). A ReLU MLP with
(nearly) the same number of parameters (:func:`mlp_width_for`) is trained the same way
(no λ) and counted as a :class:`MaxoutNetwork` (:meth:`MaxoutNetwork.from_relu`).

Targets (:func:`make_target`): ``"sawtooth"`` (1-D, 2^k teeth on [0, 1]: the triangle
map composed k+1 times, 2^(k+1) linear regions), ``"smooth1d"`` (sin 2πx), ``"zigzag2d"``
(``Z_3(x₁) + Z_3(x₂)`` composed ``depth`` times: :func:`zigzag_maxout` with 9^depth
regions on [0, 1]²) and ``"smooth2d"`` (sin πx₁ · cos πx₂). The CPWL targets are
:class:`MaxoutNetwork` objects, so their counts are certified by the same counters.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from .._controls import AttentionParams, FFNParams
from .._errors import check_callable, check_number, check_times, check_values
from ._hardmax import ConstantQueryTransformer, HardmaxTransformer
from ._maxout import MaxoutNetwork, zigzag_maxout

__all__ = [
    "MODEL_KINDS",
    "TARGETS",
    "ConstantQueryTransformer",
    "Target",
    "certified_regions",
    "constructed_capacity",
    "hardmax_reading",
    "init_mlp",
    "init_transformer",
    "make_target",
    "mlp_network",
    "mlp_width_for",
    "model_apply",
    "n_params",
    "reading_gap",
    "sampling_estimate",
    "train_model",
]

#: The training targets of :func:`make_target` (1-D: sawtooth, smooth1d; 2-D: zigzag2d, smooth2d).
TARGETS = ("sawtooth", "smooth1d", "zigzag2d", "smooth2d")
#: The model kinds of the study: the constant-query hardmax transformer and the ReLU MLP.
MODEL_KINDS = ("transformer", "mlp")


# --------------------------------------------------------------------------- validation
def _check_int(where: str, name: str, v, least: int = 1, most: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < least:
        raise ValueError(
            f"{where}: `{name}` must be an int >= {least}, got {v!r}; pass e.g. {name}={least}."
        )
    if most is not None and v > most:
        raise ValueError(
            f"{where}: `{name}` must be an int <= {most}, got {v!r} (larger values make the "
            "exact count or the training too expensive on CPU)."
        )
    return int(v)


def _check_kind(where: str, kind) -> str:
    if kind not in MODEL_KINDS:
        raise ValueError(
            f"{where}: `kind` must be one of {MODEL_KINDS}, got {kind!r}; pass kind='transformer' "
            "or kind='mlp'."
        )
    return kind


_BLOCK_KEYS = ("q", "wk", "bk", "wv", "bv", "wo", "bo", "w1", "b1", "w2", "b2")


def _check_params(where: str, kind: str, params) -> None:
    """Raise unless ``params`` is a parameter dict of ``kind`` (as :func:`init_mlp` or
    :func:`init_transformer` return): the keys, finite float arrays, and layers whose
    sizes fit one another; each failure one line naming the entry, e.g.
    ``params['layers'][1]['w']``."""
    want = "{'layers': [{'w', 'b'}, ...]}" if kind == "mlp" else "init_transformer's dict"
    fix = "init_mlp(...)" if kind == "mlp" else "init_transformer(...)"
    top = ("layers",) if kind == "mlp" else ("embedding", "positional", "blocks")
    top += () if kind == "mlp" else ("readout_weight", "readout_bias")
    if not isinstance(params, dict) or any(k not in params for k in top):
        got = sorted(params) if isinstance(params, dict) else type(params).__name__
        raise TypeError(
            f"{where}: `params` must be a {kind} parameter dict ({want}), got {got}; "
            f"make it with `{fix}`."
        )
    seq_key = "layers" if kind == "mlp" else "blocks"
    seq = params[seq_key]
    if not isinstance(seq, list | tuple) or not seq:
        raise TypeError(
            f"{where}: `params['{seq_key}']` must be a non-empty list of dicts, got "
            f"{type(seq).__name__} {seq!r:.40}; make `params` with `{fix}`."
        )

    def arr(name, x, shape):
        return check_values(name, x, where, ndim=len(shape), shape=shape)

    if kind == "mlp":
        prev = None
        for i, layer in enumerate(seq):
            name = f"params['layers'][{i}]"
            if not isinstance(layer, dict) or "w" not in layer or "b" not in layer:
                raise TypeError(
                    f"{where}: `{name}` must be a dict with 'w' and 'b'; got {layer!r:.40}."
                )
            w = arr(f"{name}['w']", layer["w"], (None, prev))
            arr(f"{name}['b']", layer["b"], (w.shape[0],))
            prev = w.shape[0]
        if prev != 1:
            raise ValueError(
                f"{where}: `params['layers'][{len(seq) - 1}]['w']` must have 1 output row "
                f"(the model's scalar output), got {prev}."
            )
        return
    P = arr("params['positional']", params["positional"], (None, None))
    T, m = P.shape
    arr("params['embedding']", params["embedding"], (T, None, m))
    arr("params['readout_weight']", params["readout_weight"], (1, m))
    arr("params['readout_bias']", params["readout_bias"], (1,))
    for i, b in enumerate(seq):
        name = f"params['blocks'][{i}]"
        if not isinstance(b, dict) or any(k not in b for k in _BLOCK_KEYS):
            raise TypeError(
                f"{where}: `{name}` must be a dict with keys {_BLOCK_KEYS}; got {b!r:.40}."
            )
        q = arr(f"{name}['q']", b["q"], (None, None))
        hk = q.shape[0] * q.shape[1]
        r = arr(f"{name}['w1']", b["w1"], (m, None)).shape[1]
        shapes = {"wk": (m, hk), "bk": (hk,), "wv": (m, hk), "bv": (hk,), "wo": (hk, m)}
        shapes.update(bo=(m,), b1=(r,), w2=(r, m), b2=(m,))
        for k, shape in shapes.items():
            arr(f"{name}['{k}']", b[k], shape)


# --------------------------------------------------------------------------- targets
@dataclasses.dataclass(frozen=True)
class Target:
    """A training target on the box ``[0, 1]^dim``.

    Attributes:
        name: one of :data:`TARGETS`.
        dim: input dimension (1 or 2).
        fn: ``fn(xs)`` for a batch ``xs`` of shape ``(N, dim)`` → ``(N,)`` (JAX).
        network: the CPWL target as a :class:`MaxoutNetwork` (``None`` for a smooth one).
        regions: the known linear-region count on the box (``None`` for a smooth one).
    """

    name: str
    dim: int
    fn: Callable
    network: MaxoutNetwork | None = None
    regions: int | None = None
    lo: float = 0.0
    hi: float = 1.0

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"Target: `name` must be a non-empty str, got {self.name!r}.")
        _check_int("Target", "dim", self.dim, 1, 2)
        check_callable("fn", self.fn, "Target", "fn=lambda xs: jnp.sin(xs[:, 0])")
        if self.network is not None and not isinstance(self.network, MaxoutNetwork):
            raise TypeError(
                f"Target: `network` must be a MaxoutNetwork or None, got "
                f"{type(self.network).__name__}."
            )
        if self.regions is not None:
            _check_int("Target", "regions", self.regions, 1)
        check_times(self.lo, self.hi, "Target", ("lo", "hi"))


def _sawtooth_network(k: int) -> MaxoutNetwork:
    """``t^{∘(k+1)}`` with ``t(u) = 2 relu(u) − 4 relu(u − 1/2)``: 2^k teeth on [0, 1]."""
    ws = [np.array([[1.0], [1.0]])]
    bs = [np.array([0.0, -0.5])]
    for _ in range(k):
        ws.append(np.array([[2.0, -4.0], [2.0, -4.0]]))
        bs.append(np.array([0.0, -0.5]))
    ws.append(np.array([[2.0, -4.0]]))
    bs.append(np.zeros(1))
    return MaxoutNetwork.from_relu(ws, bs, dtype=jnp.float64)


def make_target(name: str, *, teeth_log2: int = 2, zigzag_depth: int = 1) -> Target:
    """The target ``name`` (see the module docstring).

    Args:
        name: ``"sawtooth"``, ``"smooth1d"``, ``"zigzag2d"`` or ``"smooth2d"``.
        teeth_log2: k of the sawtooth (2^k teeth, 2^(k+1) regions), 0..10.
        zigzag_depth: depth of the 2-D zigzag (9^depth regions), 1..3.

    Example:
        >>> from transflow.expressivity import make_target
        >>> t = make_target("sawtooth", teeth_log2=2)
        >>> t.dim, t.regions
        (1, 8)
        >>> make_target("zigzag2d").regions
        9
    """
    if name not in TARGETS:
        raise ValueError(
            f"make_target: `name` (the target) must be one of {TARGETS}, got {name!r}."
        )
    k = _check_int("make_target", "teeth_log2", teeth_log2, 0, 10)
    zd = _check_int("make_target", "zigzag_depth", zigzag_depth, 1, 3)
    if name in ("sawtooth", "zigzag2d"):
        old = jax.config.jax_enable_x64
        jax.config.update("jax_enable_x64", True)  # the network's weights in float64
        try:
            if name == "sawtooth":
                net = _sawtooth_network(k)
                return Target(name, 1, _net_fn(net), net, 2 ** (k + 1))
            net = zigzag_maxout(2, zd, dim=2, dtype=jnp.float64)
            return Target(name, 2, _net_fn(net), net, 9**zd)
        finally:
            jax.config.update("jax_enable_x64", old)
    if name == "smooth1d":
        return Target(name, 1, lambda xs: jnp.sin(2 * jnp.pi * xs[:, 0]))
    return Target(name, 2, lambda xs: jnp.sin(jnp.pi * xs[:, 0]) * jnp.cos(jnp.pi * xs[:, 1]))


def _net_fn(net: MaxoutNetwork):
    W = [np.asarray(w, np.float64) for w in net.weights]
    b = [np.asarray(v, np.float64) for v in net.biases]
    A = np.asarray(net.readout_weight, np.float64)[0]
    c0 = float(net.readout_bias[0])

    def fn(xs):
        xs = jnp.asarray(xs)
        h = xs
        for w, c in zip(W, b):
            h = jnp.max(jnp.einsum("nkp,bp->bnk", w.astype(xs.dtype), h) + c.astype(xs.dtype), -1)
        return h @ A.astype(xs.dtype) + c0

    return fn


# --------------------------------------------------------------------------- models
def init_transformer(
    key,
    *,
    dim: int,
    depth: int,
    n_tokens: int = 4,
    width: int = 8,
    n_heads: int = 2,
    head_dim: int = 2,
    ffn_width: int = 8,
) -> dict:
    """Initial parameters of a constant-query transformer (a dict of float32 arrays).

    Weights ``N(0, 1/fan_in)``, biases and positional part ``N(0, 1/4)`` and ``N(0, 1)``
    (as :meth:`HardmaxTransformer.random`); the query of every head is a learned constant
    ``N(0, 1)``.

    Example:
        >>> import jax
        >>> from transflow.expressivity import init_transformer, n_params
        >>> p = init_transformer(jax.random.PRNGKey(0), dim=1, depth=2)
        >>> n_params(p)
        593
    """
    where = "init_transformer"
    d = _check_int(where, "dim", dim, 1, 2)
    D = _check_int(where, "depth", depth, 1, 12)
    T = _check_int(where, "n_tokens", n_tokens, 2)
    m = _check_int(where, "width", width)
    H = _check_int(where, "n_heads", n_heads)
    dk = _check_int(where, "head_dim", head_dim)
    r = _check_int(where, "ffn_width", ffn_width)
    per_block = H * dk + 3 * (m * H * dk + H * dk) + m + 2 * m * r + r + m
    total = D * per_block + T * d * m + T * m + m + 1
    buf = np.asarray(jax.random.normal(key, (total,), jnp.float32))  # one draw, sliced
    pos = [0]

    def nrm(shape, s):
        k = math.prod(shape)
        out = jnp.asarray(s * buf[pos[0] : pos[0] + k].reshape(shape), jnp.float32)
        pos[0] += k
        return out

    blocks = []
    for _ in range(D):
        blocks.append(
            {
                "q": nrm((H, dk), 1.0),
                "wk": nrm((m, H * dk), m**-0.5),
                "bk": nrm((H * dk,), 0.5),
                "wv": nrm((m, H * dk), m**-0.5),
                "bv": nrm((H * dk,), 0.5),
                "wo": nrm((H * dk, m), (H * dk) ** -0.5),
                "bo": nrm((m,), 0.5),
                "w1": nrm((m, r), m**-0.5),
                "b1": nrm((r,), 0.5),
                "w2": nrm((r, m), r**-0.5),
                "b2": nrm((m,), 0.5),
            }
        )
    return {
        "embedding": nrm((T, d, m), d**-0.5),
        "positional": nrm((T, m), 1.0),
        "blocks": blocks,
        "readout_weight": nrm((1, m), m**-0.5),
        "readout_bias": nrm((1,), 0.5),
    }


def init_mlp(key, *, dim: int, depth: int, width: int) -> dict:
    """Initial parameters of a ReLU MLP ``dim → width (×depth) → 1`` (He-style
    ``N(0, 2/fan_in)`` weights, ``N(0, 1/4)`` biases as the transformer's, so the kinks
    lie in the box; float32).

    Example:
        >>> import jax
        >>> from transflow.expressivity import init_mlp, n_params
        >>> n_params(init_mlp(jax.random.PRNGKey(0), dim=1, depth=2, width=10))
        141
    """
    where = "init_mlp"
    d = _check_int(where, "dim", dim, 1, 2)
    D = _check_int(where, "depth", depth, 1, 12)
    w = _check_int(where, "width", width)
    sizes = [d] + [w] * D + [1]
    total = sum(sizes[i + 1] * (sizes[i] + 1) for i in range(D + 1))
    buf = np.asarray(jax.random.normal(key, (total,), jnp.float32))  # one draw, sliced
    layers, pos = [], 0
    for i in range(D + 1):
        scale = (2.0 / sizes[i]) ** 0.5 if i < D else sizes[i] ** -0.5
        nw = sizes[i + 1] * sizes[i]
        W = scale * buf[pos : pos + nw].reshape(sizes[i + 1], sizes[i])
        b = 0.5 * buf[pos + nw : pos + nw + sizes[i + 1]]
        pos += nw + sizes[i + 1]
        layers.append({"w": jnp.asarray(W, jnp.float32), "b": jnp.asarray(b, jnp.float32)})
    return {"layers": layers}


def n_params(params) -> int:
    """Number of trainable scalars of a parameter pytree."""
    leaves = jax.tree.leaves(params)
    if not leaves or not all(isinstance(a, np.ndarray | jax.Array) for a in leaves):
        raise TypeError(
            f"n_params: `params` must be a pytree of arrays (a dict of init_mlp or "
            f"init_transformer), got {type(params).__name__} {params!r:.40}."
        )
    return int(sum(np.size(a) for a in jax.tree.leaves(params)))


def mlp_width_for(target_params: int, *, dim: int, depth: int) -> int:
    """The ReLU MLP width whose parameter count is closest to ``target_params``.

    Example:
        >>> from transflow.expressivity import mlp_width_for
        >>> mlp_width_for(593, dim=1, depth=2)
        22
    """
    where = "mlp_width_for"
    d = _check_int(where, "dim", dim, 1, 2)
    D = _check_int(where, "depth", depth, 1, 12)
    P = _check_int(where, "target_params", target_params)

    def count(w):
        return (d + 1) * w + (D - 1) * (w + 1) * w + w + 1

    best = min(range(1, 4096), key=lambda w: (abs(count(w) - P), w))
    return best


def _transformer_apply(params, x, lam):
    """One input ``x`` (d,): softmax attention at scale λ, or hardmax if λ is None."""
    X = jnp.einsum("d,tdm->tm", x, params["embedding"]) + params["positional"]
    T = X.shape[0]
    for b in params["blocks"]:
        H, dk = b["q"].shape
        k = (X @ b["wk"] + b["bk"]).reshape(T, H, dk)
        v = (X @ b["wv"] + b["bv"]).reshape(T, H, dk)
        s = jnp.einsum("hc,jhc->hj", b["q"], k)  # (H, T): one score per head and key
        if lam is None:
            w = jax.nn.one_hot(jnp.argmax(s, axis=-1), T, dtype=X.dtype)
        else:
            w = jax.nn.softmax(lam * s, axis=-1)
        o = jnp.einsum("hj,jhc->hc", w, v).reshape(H * dk)  # the same for every query token
        X = X + (o @ b["wo"] + b["bo"])[None, :]
        X = X + jax.nn.relu(X @ b["w1"] + b["b1"]) @ b["w2"] + b["b2"]
    return (params["readout_weight"] @ X[0] + params["readout_bias"])[0]


def _mlp_apply(params, x):
    h = x
    layers = params["layers"]
    for layer in layers[:-1]:
        h = jax.nn.relu(layer["w"] @ h + layer["b"])
    return (layers[-1]["w"] @ h + layers[-1]["b"])[0]


def model_apply(kind: str, params, xs, lam=None):
    """The model on a batch ``xs`` ``(N, d)`` → ``(N,)``; for a transformer ``lam`` is the
    softmax scale λ (``None``: hardmax). JAX-traceable.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow.expressivity import init_transformer, model_apply
        >>> p = init_transformer(jax.random.PRNGKey(0), dim=1, depth=1)
        >>> model_apply("transformer", p, jnp.zeros((3, 1))).shape
        (3,)
    """
    _check_kind("model_apply", kind)
    _check_params("model_apply", kind, params)
    dim = _in_dim(kind, params)
    xs = check_values("xs", xs, "model_apply", ndim=2, shape=(None, dim))
    if lam is not None:
        check_number("lam", lam, "model_apply", lower=0, example="100.0", traced_ok=True)
    xs = jnp.asarray(xs, jax.tree.leaves(params)[0].dtype)  # the parameters' precision
    if kind == "mlp":
        return jax.vmap(lambda x: _mlp_apply(params, x))(xs)
    return jax.vmap(lambda x: _transformer_apply(params, x, lam))(xs)


def _in_dim(kind: str, params) -> int:
    w = params["layers"][0]["w"] if kind == "mlp" else params["embedding"]
    return int(np.shape(w)[1])


def _check_dim(where: str, kind: str, params, dim: int) -> None:
    if _in_dim(kind, params) != dim:
        raise ValueError(
            f"{where}: `dim` = {dim} but the model takes {_in_dim(kind, params)}-D inputs; "
            f"pass dim={_in_dim(kind, params)}."
        )


_apply_jit = jax.jit(model_apply, static_argnums=0)


# --------------------------------------------------------------------------- readings
def hardmax_reading(params, *, lam: float | None = None, dtype=jnp.float64):
    """The trained transformer as a :class:`ConstantQueryTransformer` (hardmax, the object
    the exact counters take), or with ``lam`` the softmax model at scale λ (same weights,
    ``attention=lam``; smooth, not countable).

    The per-head constant query becomes ``b_Q`` with ``W_Q = 0``; every query token then
    has the same query, so every head is one max-group per query token with identical
    competitors (the counters see T identical groups; the count is unaffected).

    Example:
        >>> import jax, jax.numpy as jnp, numpy as np
        >>> jax.config.update("jax_enable_x64", True)
        >>> from transflow.expressivity import init_transformer, hardmax_reading, model_apply
        >>> p = init_transformer(jax.random.PRNGKey(0), dim=1, depth=2)
        >>> f = hardmax_reading(p)
        >>> f.affine_logits
        True
        >>> x = np.array([[0.3]])
        >>> bool(abs(float(f(x[0])[0]) - float(model_apply("transformer", p, x)[0])) < 1e-5)
        True
    """
    _check_params("hardmax_reading", "transformer", params)
    if lam is not None:
        check_number("lam", lam, "hardmax_reading", lower=0, example="100.0")
    p = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
    m = p["positional"].shape[1]
    blocks = []
    for b in p["blocks"]:
        H, dk = b["q"].shape
        attn = AttentionParams(
            np.zeros((m, H * dk)),
            b["wk"],
            b["wv"],
            b["wo"],
            b["q"].reshape(H * dk),
            b["bk"],
            b["bv"],
            b["bo"],
            H,
        )
        ffn = FFNParams((b["w1"], b["w2"]), (b["b1"], b["b2"]), (False, False), "relu")
        blocks.append((attn, ffn))
    cls = HardmaxTransformer if lam is not None else ConstantQueryTransformer
    return cls.from_params(
        blocks,
        p["embedding"],
        p["positional"],
        p["readout_weight"],
        p["readout_bias"],
        attention="hardmax" if lam is None else float(lam),
        dtype=dtype,
    )


def mlp_network(params, *, dtype=jnp.float64) -> MaxoutNetwork:
    """The trained ReLU MLP as a :class:`MaxoutNetwork` (rank-2 units), for the counters.

    Example:
        >>> import jax
        >>> from transflow.expressivity import init_mlp, mlp_network
        >>> mlp_network(init_mlp(jax.random.PRNGKey(0), dim=2, depth=3, width=4)).in_dim
        2
    """
    _check_params("mlp_network", "mlp", params)
    layers = params["layers"]
    return MaxoutNetwork.from_relu(
        [np.asarray(layer["w"], np.float64) for layer in layers],
        [np.asarray(layer["b"], np.float64) for layer in layers],
        dtype=dtype,
    )


def _grid(dim: int, n: int, lo: float = 0.0, hi: float = 1.0) -> np.ndarray:
    ax = lo + (np.arange(n) + 0.5) * (hi - lo) / n
    return np.stack(np.meshgrid(*([ax] * dim), indexing="ij"), -1).reshape(-1, dim)


def reading_gap(params, lam: float, *, dim: int, n: int = 2001) -> float:
    """``max |hardmax reading − softmax model at λ|`` on a grid of the box ``[0, 1]^dim``
    (``n`` points in 1-D, ``⌈√n⌉²`` in 2-D), in float64: how far the counted model is from
    the trained one. A sampled maximum (a lower bound on the sup).

    Example:
        >>> import jax
        >>> from transflow.expressivity import init_transformer, reading_gap
        >>> p = init_transformer(jax.random.PRNGKey(0), dim=1, depth=1)
        >>> reading_gap(p, 1e4, dim=1, n=101) < 1e-3
        True
    """
    _check_params("reading_gap", "transformer", params)
    check_number("lam", lam, "reading_gap", lower=0, example="1e4")
    _check_int("reading_gap", "dim", dim, 1, 2)
    _check_int("reading_gap", "n", n, 1)
    _check_dim("reading_gap", "transformer", params, dim)
    k = n if dim == 1 else math.isqrt(n - 1) + 1
    old = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        xs = jnp.asarray(_grid(dim, k), jnp.float64)
        p = jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), params)
        hard = _apply_jit("transformer", p, xs)
        soft = _apply_jit("transformer", p, xs, jnp.float64(lam))
        return float(jnp.max(jnp.abs(hard - soft)))
    finally:
        jax.config.update("jax_enable_x64", old)


# --------------------------------------------------------------------------- training
_STEPS: dict = {}


def _train_step(kind: str, target: Target, batch: int, lr: float, steps: int):
    """The compiled Adam step (cached: every seed and depth reuses it; a new parameter
    shape retraces the same function)."""
    import optax

    key = (kind, target.name, target.dim, batch, lr, steps)
    if key in _STEPS:
        return _STEPS[key]
    opt = optax.adam(optax.cosine_decay_schedule(lr, steps, alpha=0.05))
    d = target.dim

    def loss_fn(p, xs, lam):
        lam_arg = lam if kind == "transformer" else None
        pred = model_apply(kind, p, xs, lam_arg)
        return jnp.mean((pred - target.fn(xs)) ** 2)

    @jax.jit
    def step(p, s, key, lam):
        key, sub = jax.random.split(key)
        xs = jax.random.uniform(sub, (batch, d), jnp.float32, target.lo, target.hi)
        loss, g = jax.value_and_grad(loss_fn)(p, xs, lam)
        with jax.numpy_dtype_promotion("standard"):  # optax mixes int counts and floats
            upd, s = opt.update(g, s, p)
        return optax.apply_updates(p, upd), s, key, loss

    if len(_STEPS) > 64:
        _STEPS.clear()
    _STEPS[key] = (step, opt)
    return step, opt


def train_model(
    kind: str,
    params,
    target: Target,
    *,
    steps: int,
    lr: float = 3e-3,
    batch: int = 256,
    lam_start: float = 1.0,
    lam_end: float = 100.0,
    seed: int = 0,
):
    """Train ``params`` on ``target`` with Adam (optax, cosine-decayed ``lr``) on the MSE at
    ``batch`` fresh uniform samples of the box per step.

    A transformer is trained with softmax attention at ``λ_t = lam_start·(lam_end /
    lam_start)^{t/(steps−1)}`` (geometric annealing; λ is an argument of the one compiled
    step). Returns ``(params, record)`` with the loss history (every ``steps//50``), the
    final hardmax and softmax MSE on a grid, and the training seconds.

    Example:
        >>> import jax
        >>> from transflow.expressivity import init_mlp, make_target, train_model
        >>> t = make_target("smooth1d")
        >>> p0 = init_mlp(jax.random.PRNGKey(0), dim=1, depth=2, width=8)
        >>> p, rec = train_model("mlp", p0, t, steps=60, lr=1e-2)
        >>> rec["loss"][-1] < rec["loss"][0]
        True
    """
    _check_kind("train_model", kind)
    _check_params("train_model", kind, params)
    if not isinstance(target, Target):
        raise TypeError(
            f"train_model: `target` must be a Target, got {type(target).__name__} "
            f"{target!r:.40}; make it with `make_target(...)`."
        )
    steps = _check_int("train_model", "steps", steps, 2)
    batch = _check_int("train_model", "batch", batch)
    check_number("lr", lr, "train_model", lower=0, example="3e-3")
    check_number("lam_start", lam_start, "train_model", lower=0, example="1.0")
    check_number("lam_end", lam_end, "train_model", lower=0, example="100.0")
    _check_int("train_model", "seed", seed, 0)
    if not (0 < lam_start <= lam_end and math.isfinite(lam_end)):
        raise ValueError(
            "train_model: need 0 < `lam_start` <= `lam_end` < inf (the softmax scale is "
            f"annealed from one to the other), got lam_start={lam_start!r}, lam_end={lam_end!r}."
        )
    step, opt = _train_step(kind, target, batch, float(lr), steps)
    state = opt.init(params)
    ratio = lam_end / lam_start
    key = jax.random.PRNGKey(seed)
    every = max(steps // 50, 1)
    hist = []
    t0 = time.perf_counter()
    for t in range(steps):
        lam = lam_start * ratio ** (t / (steps - 1))
        params, state, key, loss = step(params, state, key, jnp.float32(lam))
        if t % every == 0 or t == steps - 1:
            hist.append(float(loss))
    seconds = time.perf_counter() - t0
    d = target.dim
    xs = jnp.asarray(_grid(d, 2001 if d == 1 else 64), jnp.float32)
    y = target.fn(xs)
    mse_hard = float(jnp.mean((_apply_jit(kind, params, xs) - y) ** 2))  # hardmax reading
    rec = {"loss": hist, "seconds": seconds, "mse": mse_hard}
    if kind == "transformer":
        rec["mse_softmax"] = float(
            jnp.mean((_apply_jit(kind, params, xs, jnp.float32(lam_end)) - y) ** 2)
        )
    return params, rec


# --------------------------------------------------------------------------- counting
def certified_regions(
    kind: str,
    params,
    *,
    dim: int,
    lo: float = 0.0,
    hi: float = 1.0,
    time_budget: float | None = None,
):
    """Certified exact linear-region count of a model's piecewise-linear reading on the box.

    Transformer: :func:`hardmax_reading`; 1-D by :func:`exact_regions_1d` (exact rational
    walk), 2-D by :func:`count_linear_regions` (exact integer partition). MLP:
    :func:`mlp_network` and :func:`count_linear_regions` (certified in 1-D and 2-D). The
    counts run in float64 (x64 is enabled for the call and restored). ``time_budget``
    (seconds, 2-D and MLP counts): past it the count comes back uncertified. Returns the
    :class:`RegionCount`; a count that could not be certified comes back with
    ``certified=False`` and the reason in ``certificate["failure"]``.

    Example:
        >>> import jax
        >>> from transflow.expressivity import init_transformer, certified_regions
        >>> p = init_transformer(jax.random.PRNGKey(0), dim=1, depth=2)
        >>> r = certified_regions("transformer", p, dim=1)
        >>> r.certified, r.linear >= 1
        (True, True)
    """
    from ._exact1d import exact_regions_1d
    from ._regions import count_linear_regions

    _check_kind("certified_regions", kind)
    _check_params("certified_regions", kind, params)
    _check_int("certified_regions", "dim", dim, 1, 2)
    check_times(lo, hi, "certified_regions", ("lo", "hi"))
    if time_budget is not None:
        check_number("time_budget", time_budget, "certified_regions", lower=0, example="60.0")
    old = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        f = hardmax_reading(params) if kind == "transformer" else mlp_network(params)
        if f.in_dim != dim:
            raise ValueError(
                f"certified_regions: `dim` = {dim} but the model takes {f.in_dim}-D inputs."
            )
        if dim == 1 and kind == "transformer":
            return exact_regions_1d(f, lo, hi)
        lo_, hi_ = ([lo, lo], [hi, hi]) if dim == 2 else (lo, hi)
        return count_linear_regions(f, lo_, hi_, strict=False, time_budget=time_budget)
    finally:
        jax.config.update("jax_enable_x64", old)


def sampling_estimate(kind: str, params, *, dim: int, n: int, lo=0.0, hi=1.0) -> dict:
    """An independent estimate of the activation-region count by dense sampling, with its
    error.

    The activation pattern is hashed at the ``n`` (1-D) or ``n × n`` (2-D) cell centres of
    the box (the pattern hashing of :func:`grid_region_count`; no walk, no exact
    arithmetic), and the distinct patterns are counted on that grid and on its nested
    sub-grids of every 2nd and every 4th point per axis: ``counts`` = [c(n/4), c(n/2),
    c(n)]. Every pattern seen is a region (the regions are convex, one per pattern), so
    the exact activation count is at least ``estimate`` = c(n). The grid misses the
    regions that hold no grid point; ``error`` = c(n) − c(n/4), the regions the last two
    refinements found, is taken as the bound on what c(n) still misses: the exact count
    is expected in ``[estimate, estimate + error]`` (a convergence heuristic, not a proof:
    a region thinner than the grid spacing can stay unseen at every level, which is why
    the exact counters exist).

    Example:
        >>> import jax
        >>> from transflow.expressivity import init_mlp, sampling_estimate
        >>> e = sampling_estimate("mlp", init_mlp(jax.random.PRNGKey(0), dim=1, depth=2,
        ...                       width=4), dim=1, n=2000)
        >>> sorted(e), e["error"] >= 0
        (['counts', 'error', 'estimate', 'n'], True)
    """
    from ._regions import _Evaluator

    _check_kind("sampling_estimate", kind)
    _check_params("sampling_estimate", kind, params)
    _check_int("sampling_estimate", "dim", dim, 1, 2)
    n = _check_int("sampling_estimate", "n", n, 8)
    _check_dim("sampling_estimate", kind, params, dim)
    check_times(lo, hi, "sampling_estimate", ("lo", "hi"))
    old = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        f = hardmax_reading(params) if kind == "transformer" else mlp_network(params)
        H = _Evaluator(f, np.float64).hashes(_grid(dim, n, lo, hi)).reshape((n,) * dim)
        counts = [int(np.unique(H[(slice(None, None, k),) * dim]).size) for k in (4, 2, 1)]
    finally:
        jax.config.update("jax_enable_x64", old)
    return {
        "estimate": counts[-1],
        "error": max(counts[-1] - counts[0], 0),
        "counts": counts,
        "n": n,
    }


def constructed_capacity(*, dim: int, depth: int, n_tokens: int) -> int:
    """Linear regions the construction realizes with T tokens and D blocks: the Variant A
    zigzag transformer, ``(2T − 1)^{d(D−1)}`` on ``[0, 1]^d`` (certified in
    docs/expressivity.md, C6 and F9: 117649 for T = 4, D = 7 in 1-D; 625 for T = 3, D = 3
    in 2-D).

    Example:
        >>> from transflow.expressivity import constructed_capacity
        >>> constructed_capacity(dim=1, depth=7, n_tokens=4)
        117649
    """
    d = _check_int("constructed_capacity", "dim", dim, 1, 2)
    D = _check_int("constructed_capacity", "depth", depth, 1)
    T = _check_int("constructed_capacity", "n_tokens", n_tokens, 2)
    return (2 * T - 1) ** (d * (D - 1))
