"""Controls θⁿ of one time step (one layer), as equinox modules.

The controls are piecewise constant in time, one set per layer (docs/spec/continuous-model.md §2.6).
A stack over time is the *same* pytree with a leading axis (:func:`stack_controls`), so
:func:`transflow.evolve` runs the steps with ``lax.scan`` and its compile time does not
grow with depth.

Row-vector convention throughout: weights act on the right, ``Q = u @ wq + bq`` (Vaswani's
``XW^Q``); a torch ``nn.Linear`` weight of shape ``(out, in)`` is stored transposed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, get_args

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from ._activations import activation_fn
from ._errors import check_flag, check_number

__all__ = [
    "AttentionParams",
    "FFNParams",
    "NormParams",
    "LayerControls",
    "stack_controls",
    "unstack_controls",
    "num_steps",
]


#: How long an FFN branch of a parallel group runs in one step: ``"dt"`` (paper-literal,
#: every branch for Δt) or ``"2dt"`` (a K-branch group at speed K, consistent with the
#: continuous model). The one home of these names; schemes, studies and configs read it.
FfnBranchDt = Literal["dt", "2dt"]
FFN_BRANCH_DT: tuple[str, ...] = get_args(FfnBranchDt)


def _shape_error(where: str, name: str, expected, got) -> ValueError:
    return ValueError(f"{where}: `{name}` must have shape {expected}, got {tuple(got)}.")


class AttentionParams(eqx.Module):
    """Kernels of the attention operator (all heads).

    Shapes: ``wq, wk: (d, H·d_k)``, ``wv: (d, H·d_v)``, ``wo: (H·d_v, d)`` and biases of the
    matching output sizes. Head m uses the m-th contiguous block of d_k (d_v) columns, as
    ``torch.nn.MultiheadAttention`` does. The continuous single-head model has no output
    kernel (W_O = I, docs/spec/continuous-model.md §2.2); for several heads W_O is folded per head,
    ``V_m = u W_V^{(m)} W_O^{(m)}`` (eq. 5.7).
    """

    wq: Float[Array, "d hk"]
    wk: Float[Array, "d hk"]
    wv: Float[Array, "d hv"]
    wo: Float[Array, "hv d"]
    bq: Float[Array, " hk"]
    bk: Float[Array, " hk"]
    bv: Float[Array, " hv"]
    bo: Float[Array, " d"]
    n_heads: int = eqx.field(static=True)

    def __check_init__(self):
        H = self.n_heads
        if not isinstance(H, int) or H < 1:
            raise ValueError(f"AttentionParams: `n_heads` must be a positive int, got {H!r}.")
        d = self.wq.shape[-2]
        hk, hv = self.wq.shape[-1], self.wv.shape[-1]
        if hk % H or hv % H:
            raise ValueError(
                f"AttentionParams: query/key width {hk} and value width {hv} must be "
                f"divisible by n_heads={H}."
            )
        lead = self.wq.shape[:-2]
        for name, arr, want in (
            ("wk", self.wk, (*lead, d, hk)),
            ("wv", self.wv, (*lead, d, hv)),
            ("wo", self.wo, (*lead, hv, d)),
            ("bq", self.bq, (*lead, hk)),
            ("bk", self.bk, (*lead, hk)),
            ("bv", self.bv, (*lead, hv)),
            ("bo", self.bo, (*lead, d)),
        ):
            if tuple(arr.shape) != want:
                raise _shape_error("AttentionParams", name, want, arr.shape)

    @property
    def head_dim(self) -> int:
        return self.wq.shape[-1] // self.n_heads

    @property
    def value_dim(self) -> int:
        return self.wv.shape[-1] // self.n_heads

    @classmethod
    def paper(cls, wq, wk, wv) -> AttentionParams:
        """The paper's single-head kernels: no biases, ``W_O = I`` (docs/spec/continuous-model.md
        §2.2)."""
        wq, wk, wv = map(jnp.asarray, (wq, wk, wv))
        d = wq.shape[0]
        z = jnp.zeros((wq.shape[1],), wq.dtype)
        return cls(
            wq,
            wk,
            wv,
            jnp.eye(wv.shape[1], d, dtype=wq.dtype),
            z,
            z,
            jnp.zeros((wv.shape[1],), wq.dtype),
            jnp.zeros((d,), wq.dtype),
            1,
        )

    @classmethod
    def random(
        cls,
        d: int,
        *,
        n_heads: int = 1,
        head_dim: int | None = None,
        bias: bool = False,
        scale: float = 1.0,
        dtype=None,
        key: PRNGKeyArray,
    ) -> AttentionParams:
        """Random kernels with entries ~ N(0, scale²/d) (for experiments and tests)."""
        _check_layer_sizes("AttentionParams.random", d=d, n_heads=n_heads, head_dim=head_dim)
        check_number("scale", scale, "AttentionParams.random", example="1.0")
        if head_dim is None and d % n_heads:
            raise ValueError(
                f"AttentionParams.random: `n_heads` must divide d = {d}, got {n_heads}; pass "
                "a divisor of d, or `head_dim=` explicitly."
            )
        dtype = dtype or jnp.result_type(float)
        dk = head_dim if head_dim is not None else d // n_heads
        hk = dk * n_heads
        ks = jax.random.split(key, 8)
        s = float(scale / np.sqrt(d))  # a Python float keeps `dtype`
        n = lambda k, shape: s * jax.random.normal(k, shape, dtype)
        b = (
            (lambda k, shape: 0.1 * jax.random.normal(k, shape, dtype))
            if bias
            else (lambda k, shape: jnp.zeros(shape, dtype))
        )
        return cls(
            n(ks[0], (d, hk)),
            n(ks[1], (d, hk)),
            n(ks[2], (d, hk)),
            n(ks[3], (hk, d)),
            b(ks[4], (hk,)),
            b(ks[5], (hk,)),
            b(ks[6], (hk,)),
            b(ks[7], (d,)),
            n_heads,
        )


class FFNParams(eqx.Module):
    """The J feed-forward sub-steps.

    ``weights[j]`` has shape ``(d_j, d_{j+1})`` with ``d_0 = d_J = d``. Sub-step j is

    - ``residual[j] = True`` (the paper's form, square W_j): the explicit Euler step of
      the linear integral operator, ``Z ← Z + Δt (Z W_j + b_j)``; at Δt = 1 this is the
      standard layer with weight ``I + W_j`` (docs/spec/continuous-model.md §3.5).
    - ``residual[j] = False`` (extension for d_ff ≠ d, docs/spec/continuous-model.md Q6): a lifting
        map into (or
      out of) a hidden domain Ω_z, ``Z ← Z W_j + b_j``; it has no identity part.

    followed by the activation for all but the last sub-step (``activation_on_last``
    puts it after the last too, docs/spec/continuous-model.md Q5). ``activation="relu"`` is the
    projection onto S2 (an implicit, Δt-independent step); ``"gelu"``/``"gelu_tanh"`` are explicit
    pointwise maps (extension, not a projection).
    """

    weights: tuple[Float[Array, "din dout"], ...]
    biases: tuple[Float[Array, " dout"], ...]
    residual: tuple[bool, ...] = eqx.field(static=True)
    activation: str = eqx.field(static=True, default="relu")
    activation_on_last: bool = eqx.field(static=True, default=False)

    def __check_init__(self):
        J = len(self.weights)
        if J < 1 or len(self.biases) != J or len(self.residual) != J:
            raise ValueError(
                f"FFNParams: `weights`, `biases` and `residual` must have the same length "
                f"J >= 1, got {len(self.weights)}, {len(self.biases)}, {len(self.residual)}."
            )
        activation_fn(self.activation)  # validates the name
        for j in range(J):
            check_flag(f"residual[{j}]", self.residual[j], "FFNParams")
            w, b = self.weights[j], self.biases[j]
            if tuple(b.shape) != (*w.shape[:-2], w.shape[-1]):
                raise _shape_error(
                    f"FFNParams sub-step {j + 1}",
                    f"biases[{j}]",
                    (*w.shape[:-2], w.shape[-1]),
                    b.shape,
                )
            if j and self.weights[j - 1].shape[-1] != w.shape[-2]:
                raise ValueError(
                    f"FFNParams: `weights[{j}]` expects {w.shape[-2]} features but "
                    f"`weights[{j - 1}]` outputs {self.weights[j - 1].shape[-1]}."
                )
            if self.residual[j] and w.shape[-1] != w.shape[-2]:
                raise ValueError(
                    f"FFNParams: sub-step {j + 1} is residual (Z + Δt(Z W + b)) and needs a "
                    f"square weight, got {tuple(w.shape[-2:])}; set residual[{j}]=False for "
                    "a lifting map."
                )
        if self.weights[0].shape[-2] != self.weights[-1].shape[-1]:
            raise ValueError(
                f"FFNParams: `weights` must map d -> d; got {self.weights[0].shape[-2]} -> "
                f"{self.weights[-1].shape[-1]}."
            )

    @property
    def num_substeps(self) -> int:
        return len(self.weights)

    @classmethod
    def paper(cls, weights: Sequence, biases: Sequence) -> FFNParams:
        """The paper's J square FFN operators W_j, b_j with ReLU after all but the last."""
        ws = tuple(jnp.asarray(w) for w in weights)
        return cls(ws, tuple(jnp.asarray(b) for b in biases), (True,) * len(ws), "relu")


class NormParams(eqx.Module):
    """The constraint set S1(σ1, σ2) of a LayerNorm sub-step.

    ``bias`` = σ1 (target mean) and ``gain`` = σ2 (target standard deviation). The paper's
    σ1, σ2 are scalars (shape ``()``, or constant vectors); per-feature vectors of shape
    ``(d,)`` are the extension of docs/spec/continuous-model.md Q3. ``eps`` is PyTorch's
    ``layer_norm_eps`` (0 in the paper's Theorem 3.1).
    """

    gain: Float[Array, "*d"]
    bias: Float[Array, "*d"]
    eps: float = eqx.field(static=True, default=0.0)

    def __check_init__(self):
        check_number("eps", self.eps, "NormParams", lower=0, strict=False, example="1e-5")

    @classmethod
    def scalar(
        cls, sigma1: float = 0.0, sigma2: float = 1.0, *, eps: float = 0.0, dtype=None
    ) -> NormParams:
        dtype = dtype or jnp.result_type(float)
        return cls(jnp.asarray(sigma2, dtype), jnp.asarray(sigma1, dtype), eps)

    def is_scalar(self) -> bool:
        """True if gain and bias are constant over features (the paper's S1)."""
        g, b = np.asarray(self.gain), np.asarray(self.bias)
        return bool(np.all(g == g.ravel()[0]) and np.all(b == b.ravel()[0]))


class LayerControls(eqx.Module):
    """All controls of one time step θⁿ: attention, two constraint sets and the FFN.

    ``norm1``/``norm2`` are named as in ``torch.nn.TransformerEncoderLayer``: in the
    paper's (post-LN) scheme ``norm1`` is the projection after attention and ``norm2`` the
    closing projection; in the pre-LN extension they precede attention and FFN.
    """

    attn: AttentionParams
    norm1: NormParams
    ffn: FFNParams
    norm2: NormParams

    @property
    def d_model(self) -> int:
        return self.attn.wq.shape[-2]

    @classmethod
    def random(
        cls,
        d: int,
        *,
        n_heads: int = 1,
        d_ff: int | None = None,
        activation: str = "relu",
        bias: bool = False,
        eps: float = 0.0,
        scale: float = 1.0,
        dtype=None,
        ffn_copies: int = 1,
        key: PRNGKeyArray,
    ) -> LayerControls:
        """Random controls. ``d_ff=None`` gives the paper's square FFN (residual form).

        ``ffn_copies = k > 1`` draws k independent FFNs (the first from ``key`` as for
        ``k = 1``, copy i from ``fold_in(key, i)``) and puts their sub-steps one after the
        other in ``ffn`` (2k sub-steps): the untied Macaron layer's two half-step FFNs
        (``StrangScheme(untied=True)``, ``make_scheme("macaron_untied")``).
        """
        _check_layer_sizes("LayerControls.random", d=d, n_heads=n_heads, d_ff=d_ff)
        check_number("scale", scale, "LayerControls.random", example="1.0")
        if isinstance(ffn_copies, bool) or not isinstance(ffn_copies, int) or ffn_copies < 1:
            raise ValueError(
                f"LayerControls.random: `ffn_copies` must be an integer >= 1, got {ffn_copies!r} "
                "(2 for the untied Macaron layer, 1 otherwise)."
            )
        if ffn_copies > 1:
            kw = dict(n_heads=n_heads, d_ff=d_ff, activation=activation, bias=bias, eps=eps)
            kw.update(scale=scale, dtype=dtype)
            base = cls.random(d, **kw, key=key)
            ffns = [base.ffn] + [
                cls.random(d, **kw, key=jax.random.fold_in(key, i)).ffn
                for i in range(1, ffn_copies)
            ]
            ffn = FFNParams(
                tuple(w for f in ffns for w in f.weights),
                tuple(b for f in ffns for b in f.biases),
                tuple(r for f in ffns for r in f.residual),
                activation,
            )
            return cls(base.attn, base.norm1, ffn, base.norm2)
        dtype = dtype or jnp.result_type(float)
        k1, k2, k3, k4 = jax.random.split(key, 4)
        attn = AttentionParams.random(
            d, n_heads=n_heads, bias=bias, scale=scale, dtype=dtype, key=k1
        )
        h = d if d_ff is None else d_ff
        s = float(scale / np.sqrt(d))
        w1 = s * jax.random.normal(k2, (d, h), dtype)
        w2 = float(scale / np.sqrt(h)) * jax.random.normal(k3, (h, d), dtype)
        kb1, kb2 = jax.random.split(k4)
        b1 = 0.1 * jax.random.normal(kb1, (h,), dtype)
        b2 = 0.1 * jax.random.normal(kb2, (d,), dtype)
        residual = (True, True) if d_ff is None else (False, False)
        ffn = FFNParams((w1, w2), (b1, b2), residual, activation)
        norm = NormParams.scalar(0.0, 1.0, eps=eps, dtype=dtype)
        return cls(attn, norm, ffn, norm)


def _check_layer_sizes(owner: str, **sizes) -> None:
    for name, size in sizes.items():
        if size is not None or name not in ("d_ff", "head_dim"):
            check_number(name, size, owner, lower=0, integer=True, example="8")


def stack_controls(layers: Sequence[LayerControls]) -> LayerControls:
    """Stack per-layer controls into one pytree with a leading time axis."""
    layers = list(layers)
    if not layers:
        raise ValueError("stack_controls: need at least one layer.")
    struct = jax.tree.structure(layers[0])
    for i, layer in enumerate(layers[1:], 1):
        if jax.tree.structure(layer) != struct:
            raise ValueError(
                f"stack_controls: layer {i} has a different structure (static options such "
                "as n_heads, activation, eps or FFN form) from layer 0; evolve needs equal "
                "structures to scan over time."
            )
    _check_same_shapes(layers)
    return jax.tree.map(lambda *xs: jnp.stack([jnp.asarray(x) for x in xs]), *layers)


def _check_same_shapes(layers: list) -> None:
    """One line naming the first layer whose array shapes differ from layer 0's."""
    first = jax.tree_util.tree_leaves_with_path(layers[0])
    for i, layer in enumerate(layers[1:], 1):
        for (path, a), b in zip(first, jax.tree.leaves(layer)):
            if np.shape(a) != np.shape(b):
                d = [getattr(x, "d_model", "?") for x in (layers[0], layer)]
                raise ValueError(
                    f"stack_controls: `layers[{i}]` does not match `layers[0]`: "
                    f"{jax.tree_util.keystr(path)} has shape {np.shape(b)} in layer {i} and "
                    f"{np.shape(a)} in layer 0 (d_model {d[1]} vs {d[0]}); every layer "
                    "needs the same sizes (d_model, n_heads, d_ff) to stack over time."
                )


def num_steps(stacked: LayerControls) -> int:
    """Number of time steps N_t of stacked controls (the common leading axis)."""
    leaves = jax.tree.leaves(stacked)
    if not leaves or not all(isinstance(leaf, jax.Array | np.ndarray) for leaf in leaves):
        raise TypeError(
            f"num_steps: `stacked` must be stacked controls (a pytree of arrays), got "
            f"{type(stacked).__name__}; use `stack_controls([...])`."
        )
    sizes = {leaf.shape[0] if leaf.ndim else None for leaf in jax.tree.leaves(stacked)}
    if len(sizes) != 1 or None in sizes:
        raise ValueError(
            "`stacked`: the controls are not stacked: every leaf needs the same leading time axis "
            f"(got leading sizes {sorted(s for s in sizes if s is not None)}); use "
            "`stack_controls([...])`."
        )
    return sizes.pop()


def unstack_controls(stacked: LayerControls) -> list[LayerControls]:
    """Split stacked controls into one :class:`LayerControls` per time step (the inverse of
    :func:`stack_controls`).

    Example:
        >>> import jax
        >>> from transflow import LayerControls, stack_controls, unstack_controls
        >>> layers = [LayerControls.random(4, key=jax.random.key(i)) for i in range(3)]
        >>> len(unstack_controls(stack_controls(layers)))
        3
    """
    n = num_steps(stacked)
    return [jax.tree.map(lambda x, i=i: x[i], stacked) for i in range(n)]
