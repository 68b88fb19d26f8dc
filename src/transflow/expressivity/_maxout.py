"""Deep maxout networks, ReLU networks as rank-2 maxout networks, the zigzag family and
interval-bound propagation (docs/spec/maxout-expressivity.md §2.1, §3.5, Appendix A/B).
"""

from __future__ import annotations

from collections.abc import Sequence

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._errors import _from_torch, _is_torch_tensor, as_input, check_finite, param_dtype
from ._programs import MaxoutProgram
from ._pwl import (
    AbstractAffineLogits,
    AbstractBoundedEval,
    AbstractExactProgram,
    AbstractIntervalForward,
    AbstractProvenance,
    exact_argmax,
    gamma,
    to_fraction_array,
)

__all__ = ["MaxoutNetwork", "zigzag_maxout", "ibp_bounds"]


def _as_np(name: str, a, owner: str = "MaxoutNetwork") -> np.ndarray:
    """``a`` as a finite float64 array (numbers of any real dtype), or one line naming
    ``name``."""
    if _is_torch_tensor(a):
        a = _from_torch(name, a)
    arr = np.asarray(a) if not isinstance(a, str | bytes) else None
    if arr is None or arr.dtype.kind not in "biuf":
        raise TypeError(
            f"{owner}: `{name}` must be an array of real numbers, got {type(a).__name__} "
            f"{a!r:.40}; pass e.g. `np.asarray(...)`."
        )
    arr = arr.astype(np.float64)
    try:
        return check_finite(name, arr)
    except ValueError as e:
        raise ValueError(f"{owner}: {e}") from None


class MaxoutNetwork(
    AbstractAffineLogits,
    AbstractBoundedEval,
    AbstractIntervalForward,
    AbstractExactProgram,
    AbstractProvenance,
):
    """A deep maxout network with an affine read-out (final; every counting capability).

    ``h⁰ = x ∈ R^d``; layer ℓ = 1..L has width n_ℓ and rank k_ℓ, pieces
    ``z^ℓ_{ij} = w^ℓ_{ij}·h^{ℓ−1} + b^ℓ_{ij}`` and output ``h^ℓ_i = max_j z^ℓ_{ij}``; the
    network returns ``y = A h^L + c``. Parameters (docs/spec/maxout-expressivity.md §2.1):
    ``P_N = Σ_ℓ k_ℓ n_ℓ (n_{ℓ−1} + 1)`` (+ ``d_out (n_L + 1)`` for the read-out).

    Args:
        weights: ``weights[ℓ]`` of shape ``(n_ℓ, k_ℓ, n_{ℓ−1})`` (``n_0 = d``).
        biases: ``biases[ℓ]`` of shape ``(n_ℓ, k_ℓ)``.
        readout_weight: ``A`` of shape ``(d_out, n_L)``; ``None`` means the identity.
        readout_bias: ``c`` of shape ``(d_out,)``; ``None`` means zero.
        dtype: dtype of the stored arrays (default: JAX's default float).

    A mismatch raises a ``ValueError`` that names the layer, the expected and the
    actual shape.

    Example:
        >>> import numpy as np
        >>> from transflow.expressivity import MaxoutNetwork
        >>> net = MaxoutNetwork([np.array([[[1.0], [-1.0]]])], [np.zeros((1, 2))])
        >>> float(net(np.array([-3.0]))[0])    # |x| as one rank-2 maxout unit
        3.0
    """

    weights: tuple[Float[Array, "n k n_prev"], ...]
    biases: tuple[Float[Array, "n k"], ...]
    readout_weight: Float[Array, "d_out n_L"]
    readout_bias: Float[Array, " d_out"]
    provenance: str | None = eqx.field(static=True)

    def __init__(
        self,
        weights: Sequence,
        biases: Sequence,
        readout_weight=None,
        readout_bias=None,
        *,
        dtype=None,
        provenance: str | None = None,
    ):
        for name, seq in (("weights", weights), ("biases", biases)):
            if not isinstance(seq, list | tuple):
                raise TypeError(
                    f"MaxoutNetwork: `{name}` must be a list with one array per layer, got "
                    f"{type(seq).__name__}; pass e.g. {name}=[w1, w2]."
                )
        ws = [_as_np(f"weights[{i}]", w) for i, w in enumerate(weights)]
        bs = [_as_np(f"biases[{i}]", b) for i, b in enumerate(biases)]
        if not ws:
            raise ValueError("MaxoutNetwork: `weights` must hold at least one layer, got 0.")
        if len(bs) != len(ws):
            raise ValueError(
                f"MaxoutNetwork: got {len(ws)} weight arrays but {len(bs)} bias arrays; "
                "expected one bias array of shape (n_l, k_l) per layer."
            )
        n_prev = None
        for i, (w, b) in enumerate(zip(ws, bs)):
            if w.ndim != 3:
                raise ValueError(
                    f"MaxoutNetwork layer {i + 1}: `weights[{i}]` must have shape "
                    f"(n_l, k_l, n_(l-1)) (rank 3), got shape {w.shape}."
                )
            if n_prev is not None and w.shape[2] != n_prev:
                raise ValueError(
                    f"MaxoutNetwork layer {i + 1}: `weights[{i}]` has shape {w.shape} but layer "
                    f"{i} outputs {n_prev} units; expected shape ({w.shape[0]}, {w.shape[1]}, "
                    f"{n_prev})."
                )
            if b.shape != w.shape[:2]:
                raise ValueError(
                    f"MaxoutNetwork layer {i + 1}: `biases[{i}]` must have shape "
                    f"{w.shape[:2]} (n_l, k_l), got {b.shape}."
                )
            if min(w.shape) < 1:
                raise ValueError(
                    f"MaxoutNetwork layer {i + 1}: `weights[{i}]` has an empty axis, "
                    f"shape {w.shape}."
                )
            n_prev = w.shape[0]
        A = np.eye(n_prev) if readout_weight is None else _as_np("readout_weight", readout_weight)
        if A.ndim == 1:
            A = A[None]
        if A.ndim != 2 or A.shape[1] != n_prev:
            raise ValueError(
                f"MaxoutNetwork read-out: `readout_weight` must have shape (d_out, {n_prev}), "
                f"got {A.shape}."
            )
        c = np.zeros(A.shape[0]) if readout_bias is None else _as_np("readout_bias", readout_bias)
        c = np.atleast_1d(c)
        if c.shape != (A.shape[0],):
            raise ValueError(
                f"MaxoutNetwork read-out: `readout_bias` must have shape ({A.shape[0]},), "
                f"got {c.shape}."
            )
        cast = lambda a: jnp.asarray(a, dtype=dtype)
        self.weights = tuple(cast(w) for w in ws)
        self.biases = tuple(cast(b) for b in bs)
        self.readout_weight = cast(A)
        self.readout_bias = cast(c)
        # where the stored weights came from, if they were converted (``from_torch``); a
        # region certificate covers the stored weights, not the conversion
        self.provenance = provenance

    # ------------------------------------------------------------------ structure
    @property
    def in_dim(self) -> int:
        return int(self.weights[0].shape[2])

    @property
    def out_dim(self) -> int:
        return int(self.readout_weight.shape[0])

    @property
    def depth(self) -> int:
        """Number L of maxout layers."""
        return len(self.weights)

    @property
    def widths(self) -> tuple[int, ...]:
        return tuple(int(w.shape[0]) for w in self.weights)

    @property
    def ranks(self) -> tuple[int, ...]:
        return tuple(int(w.shape[1]) for w in self.weights)

    def num_params(self, *, readout: bool = False) -> int:
        """``P_N = Σ_ℓ k_ℓ n_ℓ (n_{ℓ−1}+1)``, plus ``d_out (n_L+1)`` if ``readout``."""
        p = sum(int(np.prod(w.shape)) + int(np.prod(w.shape[:2])) for w in self.weights)
        if readout:
            p += int(np.prod(self.readout_weight.shape)) + self.out_dim
        return p

    def lipschitz(self) -> tuple[float, ...]:
        """Per-layer ``Lip_ℓ = max_{i,j} ||w^ℓ_{ij}||_1`` (sup-norm Lipschitz constants)."""
        return tuple(float(np.abs(np.asarray(w)).sum(-1).max()) for w in self.weights)

    # ------------------------------------------------------------------ evaluation
    def layer_logits(self, x: Float[Array, " d"]) -> tuple[Float[Array, "n k"], ...]:
        """The pieces ``z^ℓ`` of shape ``(n_ℓ, k_ℓ)`` of every layer along the pass at x."""
        return self.output_and_logits(x)[1]

    def output_and_logits(self, x):
        h = x
        out = []
        for w, b in zip(self.weights, self.biases):
            z = w @ h + b
            out.append(z)
            h = jnp.take_along_axis(z, jnp.argmax(z, axis=-1)[:, None], axis=-1)[:, 0]
        return self.readout_weight @ h + self.readout_bias, tuple(out)

    def hidden(self, x: Float[Array, " d"]) -> Float[Array, " n_L"]:
        """The last hidden layer ``h^L``."""
        h = x
        for w, b in zip(self.weights, self.biases):
            z = w @ h + b
            h = jnp.take_along_axis(z, jnp.argmax(z, axis=-1)[:, None], axis=-1)[:, 0]
        return h

    def __call__(self, x: Float[Array, " d"]) -> Float[Array, " d_out"]:
        x = as_input("x", x, param_dtype(self), ndim=1, nonempty=())
        return self.readout_weight @ self.hidden(x) + self.readout_bias

    # ------------------------------------------------------------------ certification
    def eval_bounded(self, x, ex=None, pattern=None):
        """Forward pass with running round-off bounds (see
        :meth:`AbstractBoundedEval.eval_bounded`): for ``z = W h + b`` with n inputs,
        ``|ẑ − z| ≤ |W| e_h + γ_{n+1} (|W| |ĥ| + |b|)``; the max keeps the error of the
        selected piece."""
        dt = self.weights[0].dtype
        h = jnp.asarray(x, dt)
        eh = jnp.zeros_like(h) if ex is None else jnp.asarray(ex, dt)
        logits, errs, wins, off = [], [], [], 0
        for w, b in zip(self.weights, self.biases):
            n, _, n_prev = w.shape
            aw = jnp.abs(w)
            z = w @ h + b
            g = gamma(n_prev + 1, dt)
            ez = aw @ (eh + g * jnp.abs(h)) + g * jnp.abs(b)
            win = jnp.argmax(z, axis=-1) if pattern is None else pattern[off : off + n]
            off += n
            h = jnp.take_along_axis(z, win[:, None], axis=-1)[:, 0]
            eh = jnp.take_along_axis(ez, win[:, None], axis=-1)[:, 0]
            logits.append(z)
            errs.append(ez)
            wins.append(win.astype(jnp.int32))
        A, c = self.readout_weight, self.readout_bias
        aA = jnp.abs(A)
        y = A @ h + c
        ey = aA @ eh + gamma(h.shape[0] + 1, dt) * (aA @ jnp.abs(h) + jnp.abs(c))
        return y, ey, tuple(logits), tuple(errs), jnp.concatenate(wins)

    def interval_forward(self, ctx, x):
        """The forward pass on 1-D intervals (see
        :meth:`AbstractIntervalForward.interval_forward`): one decision per layer, the
        groups are the units, the competitors their pieces."""
        h = x
        for w, b in zip(self.weights, self.biases):
            w, b = np.asarray(w, np.float64), np.asarray(b, np.float64)
            # units with identical weights and biases (a duplicated unit) have identical
            # exact logits: decide the distinct ones, expand the winners to all
            rows = np.concatenate([w.reshape(w.shape[0], -1), b], axis=1)
            _, first, groups = np.unique(rows, axis=0, return_index=True, return_inverse=True)
            groups = groups.reshape(-1)
            dup = first.size < w.shape[0]
            if dup:
                order = np.argsort(first)  # distinct units in their first order
                rank = np.empty_like(order)
                rank[order] = np.arange(order.size)
                w, b, groups = w[first[order]], b[first[order]], rank[groups]
            n, k, n_prev = w.shape
            W = w.reshape(n * k, n_prev).T
            z = ctx.lin(h, W, b.reshape(n * k))
            z = z.map(lambda a, n=n, k=k: a.reshape(a.shape[0], n, k))
            h = ctx.decide(z, groups=groups if dup else None).map(lambda a: a[..., 0])
        A = np.asarray(self.readout_weight, np.float64)
        return ctx.lin(h, A.T, np.asarray(self.readout_bias, np.float64))

    def exact_params(self):
        return (
            [to_fraction_array(w) for w in self.weights],
            [to_fraction_array(b) for b in self.biases],
            to_fraction_array(self.readout_weight),
            to_fraction_array(self.readout_bias),
        )

    def exact_eval(self, params, x, pattern=None):
        Ws, bs, A, c = params
        h = np.asarray(x, dtype=object)
        logits, wins, off = [], [], 0
        for w, b in zip(Ws, bs):
            n, k, n_prev = w.shape
            z = (w.reshape(n * k, n_prev).dot(h)).reshape(n, k) + b
            win = exact_argmax(z) if pattern is None else np.asarray(pattern[off : off + n])
            off += n
            h = np.array([z[i, win[i]] for i in range(n)], dtype=object)
            logits.append(z)
            wins.append(np.asarray(win, np.int64))
        return A.dot(h) + c, logits, np.concatenate(wins)

    def exact_program(self) -> MaxoutProgram:
        return MaxoutProgram(self)

    def outside_certificate(self) -> tuple[str, ...]:
        """The conversion that made the network (``from_torch``), if any."""
        return (self.provenance,) if self.provenance else ()

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_torch(cls, module, *, dtype=None) -> MaxoutNetwork:
        """The maxout network of a ``torch.nn.Sequential`` of ``Linear`` layers with
        ``ReLU`` / ``LeakyReLU`` / ``Identity`` between them (weights copied as float64).

        ``ReLU`` is the rank-2 unit ``max(0, u)``, ``LeakyReLU(a)`` the rank-2 unit
        ``max(a·u, u)`` (``0 ≤ a ≤ 1``); consecutive ``Linear`` layers (or ``Identity``)
        are composed. The last ``Linear`` becomes the read-out. Anything else (``Conv``,
        ``Tanh``, ``Dropout`` in training mode, normalisations, …) raises a ``TypeError``
        naming the module and what to do instead.

        Example:
            >>> import jax, torch
            >>> jax.config.update("jax_enable_x64", True)
            >>> from transflow.expressivity import MaxoutNetwork
            >>> torch.manual_seed(0) and None
            >>> m = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(),
            ...                         torch.nn.Linear(4, 1)).double()
            >>> net = MaxoutNetwork.from_torch(m)
            >>> x = torch.randn(3, dtype=torch.float64)
            >>> bool(abs(float(net(x.numpy())[0]) - float(m(x).detach()[0])) < 1e-12)
            True
        """
        import torch

        if not isinstance(module, torch.nn.Sequential):
            raise TypeError(
                "MaxoutNetwork.from_torch: `module` must be a torch.nn.Sequential of Linear "
                f"and ReLU/LeakyReLU/Identity layers, got {type(module).__name__}. Wrap your "
                "layers in nn.Sequential (or build MaxoutNetwork(weights, biases) yourself)."
            )
        A = None  # pending affine map (W, b) since the last activation
        ws, bs = [], []
        for i, layer in enumerate(module):
            if isinstance(layer, torch.nn.Linear):
                W = layer.weight.detach().cpu().double().numpy()
                b = (
                    layer.bias.detach().cpu().double().numpy()
                    if layer.bias is not None
                    else np.zeros(W.shape[0])
                )
                A = (W, b) if A is None else (W @ A[0], W @ A[1] + b)
            elif isinstance(layer, torch.nn.Identity) or (
                isinstance(layer, torch.nn.Dropout) and not layer.training
            ):
                continue
            elif isinstance(layer, torch.nn.ReLU | torch.nn.LeakyReLU):
                if A is None:
                    raise TypeError(
                        f"MaxoutNetwork.from_torch: layer {i} ({layer}) is an activation "
                        "without a Linear layer before it; start the Sequential with a Linear."
                    )
                a = float(layer.negative_slope) if isinstance(layer, torch.nn.LeakyReLU) else 0.0
                if not 0.0 <= a <= 1.0:
                    raise TypeError(
                        f"MaxoutNetwork.from_torch: layer {i} LeakyReLU(negative_slope={a}) is "
                        "not a max of two pieces for a outside [0, 1]; use 0 <= a <= 1."
                    )
                W, b = A
                ws.append(np.stack([a * W, W], axis=1))
                bs.append(np.stack([a * b, b], axis=1))
                A = None
            else:
                raise TypeError(
                    f"MaxoutNetwork.from_torch: unsupported module {type(layer).__name__} at "
                    f"position {i}; supported are Linear, ReLU, LeakyReLU, Identity (and "
                    "Dropout in eval mode). Convert other piecewise-linear layers to Linear "
                    "first, or restrict the count to the supported part of the network."
                )
        if not ws:
            raise TypeError(
                "MaxoutNetwork.from_torch: the Sequential has no ReLU/LeakyReLU, so it is "
                "affine (one linear region); add an activation or count nothing."
            )
        if A is None:
            n = ws[-1].shape[0]
            A = (np.eye(n), np.zeros(n))
        src = {str(p.dtype).removeprefix("torch.") for p in module.parameters()} or {
            "no parameters"
        }
        kinds = "/".join(sorted(src))
        note = (
            f"converted by MaxoutNetwork.from_torch from a torch.nn.Sequential ({kinds} "
            "weights): weights cast to float64, LeakyReLU pieces a·W and consecutive Linear "
            "layers composed in float64; the rounding of this conversion is outside the "
            "certificate (the certified model is the converted float64 network)"
        )
        return cls(ws, bs, A[0], A[1], dtype=dtype, provenance=note)

    @classmethod
    def from_relu(cls, weights: Sequence, biases: Sequence, *, dtype=None) -> MaxoutNetwork:
        """A ReLU network as a rank-2 maxout network: ``ReLU(w·v+b) = max(0, w·v+b)``.

        Args:
            weights: ``[W_1, …, W_L, A]`` with ``W_ℓ`` of shape ``(n_ℓ, n_{ℓ−1})`` (the
                ``torch.nn.Linear.weight`` layout); the last matrix is the affine read-out
                (no ReLU after it).
            biases: the matching bias vectors ``[b_1, …, b_L, c]``.

        Piece 0 of every unit is the zero function and piece 1 the affine map, so the
        activation pattern (winner index) is 1 exactly where the ReLU is active.

        Example:
            >>> import numpy as np
            >>> from transflow.expressivity import MaxoutNetwork
            >>> net = MaxoutNetwork.from_relu([np.ones((2, 1)), np.ones((1, 2))],
            ...                               [np.array([0.0, -1.0]), np.zeros(1)])
            >>> float(net(np.array([3.0]))[0])   # relu(3) + relu(2)
            5.0
        """
        where = "MaxoutNetwork.from_relu"
        for name, seq in (("weights", weights), ("biases", biases)):
            if not isinstance(seq, list | tuple):
                raise TypeError(
                    f"{where}: `{name}` must be a list with one array per layer, got "
                    f"{type(seq).__name__}; pass e.g. {name}=[w1, w2]."
                )
        ws = [_as_np(f"weights[{i}]", w, where) for i, w in enumerate(weights)]
        bs = [np.atleast_1d(_as_np(f"biases[{i}]", b, where)) for i, b in enumerate(biases)]
        if len(ws) < 2 or len(bs) != len(ws):
            raise ValueError(
                "MaxoutNetwork.from_relu: need weights [W_1, ..., W_L, A] with L >= 1 and one "
                f"bias per matrix; got {len(ws)} weights and {len(bs)} biases."
            )
        mw, mb = [], []
        for i, (w, b) in enumerate(zip(ws[:-1], bs[:-1])):
            if w.ndim != 2 or b.shape != (w.shape[0],):
                raise ValueError(
                    f"MaxoutNetwork.from_relu layer {i + 1}: expected `weights[{i}]` of shape "
                    f"(n_l, n_(l-1)) and `biases[{i}]` of shape (n_l,), got {w.shape} and "
                    f"{b.shape}."
                )
            if i and w.shape[1] != ws[i - 1].shape[0]:
                raise ValueError(
                    f"MaxoutNetwork.from_relu layer {i + 1}: `weights[{i}]` has shape {w.shape} "
                    f"but layer {i} outputs {ws[i - 1].shape[0]} units; expected shape "
                    f"({w.shape[0]}, {ws[i - 1].shape[0]})."
                )
            mw.append(np.stack([np.zeros_like(w), w], axis=1))
            mb.append(np.stack([np.zeros_like(b), b], axis=1))
        return cls(mw, mb, ws[-1], bs[-1], dtype=dtype)


def ibp_bounds(
    net: MaxoutNetwork, lo: Float[Array, " d"] | float, hi: Float[Array, " d"] | float
) -> tuple[float, ...]:
    """Interval-bound propagation: ``B_ℓ ≥ sup_{x ∈ [lo, hi]} max_{i,j} |z^ℓ_{ij}(x)|``.

    With ``W = W⁺ + W⁻`` (positive/negative parts) the pieces of layer ℓ lie in
    ``[W⁺ l + W⁻ u + b, W⁺ u + W⁻ l + b]`` when ``h^{ℓ−1} ∈ [l, u]``, and the unit outputs
    in ``[max_j lower, max_j upper]`` (docs/spec/maxout-expressivity.md Appendix A). Computed in
    float64 numpy.

    Example:
        >>> import numpy as np
        >>> from transflow.expressivity import MaxoutNetwork, ibp_bounds
        >>> net = MaxoutNetwork([np.array([[[2.0], [-1.0]]])], [np.zeros((1, 2))])
        >>> ibp_bounds(net, -1.0, 1.0)
        (2.0,)
    """
    from ._region_count import _check_box  # the region counters' box rule

    d = net.in_dim
    lo, hi = _check_box(net, lo, hi)
    lo = np.broadcast_to(np.asarray(lo, np.float64), (d,))
    hi = np.broadcast_to(np.asarray(hi, np.float64), (d,))
    if np.any(hi < lo):
        raise ValueError(f"ibp_bounds: need `lo` <= `hi` componentwise, got lo={lo}, hi={hi}.")
    out = []
    for w, b in zip(net.weights, net.biases):
        w, b = np.asarray(w, np.float64), np.asarray(b, np.float64)
        wp, wm = np.clip(w, 0, None), np.clip(w, None, 0)
        zl, zh = wp @ lo + wm @ hi + b, wp @ hi + wm @ lo + b
        out.append(float(max(np.abs(zl).max(), np.abs(zh).max())))
        lo, hi = zl.max(-1), zh.max(-1)
    return tuple(out)


def zigzag_maxout(rank: int, depth: int, dim: int = 1, *, dtype=None) -> MaxoutNetwork:
    """The zigzag maxout family with exactly ``(2·rank − 1)^{dim·depth}`` regions on [0,1]^dim.

    With ``m = 2k − 1`` (``k = rank``) the zigzag ``Z_m: [0,1] → [0,1]`` (breakpoints i/m,
    slopes ±m) is a difference of two convex functions with k pieces each,
    ``Z_m = C_1 − C_2``, ``C_1(u) = m u + 2m Σ_{i even, 0<i<m} ReLU(u − i/m)``,
    ``C_2(u) = 2m Σ_{i odd} ReLU(u − i/m)`` (docs/spec/maxout-expressivity.md §3.5, Appendix B).
    Layer ℓ has the two rank-k units ``C_1(u_ℓ), C_2(u_ℓ)`` per coordinate (width ``2·dim``), with
    ``u_1 = x_c`` and ``u_ℓ = h^{ℓ−1}_1 − h^{ℓ−1}_2``; the read-out ``(1, −1, 1, −1, …)``
    gives ``Σ_c Z_m^{∘L}(x_c)``.

    Args:
        rank: k ≥ 2 (rank of every unit).
        depth: L ≥ 1 (number of maxout layers).
        dim: input dimension d ≥ 1.

    Example:
        >>> import numpy as np
        >>> from transflow.expressivity import zigzag_maxout
        >>> net = zigzag_maxout(2, 1)            # Z_3: 0 -> 1 -> 0 -> 1 on [0, 1]
        >>> [round(float(net(np.array([t]))[0]), 12) for t in (0.0, 1 / 3, 2 / 3, 1.0)]
        [0.0, 1.0, 0.0, 1.0]
    """
    for name, v, least in (("rank", rank, 2), ("depth", depth, 1), ("dim", dim, 1)):
        if not isinstance(v, int | np.integer) or v < least:
            raise ValueError(f"zigzag_maxout: `{name}` must be an int >= {least}, got {v!r}.")
    k, m = int(rank), 2 * int(rank) - 1
    evens = [i / m for i in range(2, m, 2)]
    odds = [i / m for i in range(1, m, 2)]
    s1 = np.array([m * (1 + 2 * r) for r in range(k)], np.float64)
    c1 = np.array([-2 * m * sum(evens[:r]) for r in range(k)], np.float64)
    s2 = np.array([2 * m * r for r in range(k)], np.float64)
    c2 = np.array([-2 * m * sum(odds[:r]) for r in range(k)], np.float64)
    ws, bs = [], []
    for layer in range(depth):
        n_in = dim if layer == 0 else 2 * dim
        w = np.zeros((2 * dim, k, n_in))
        b = np.zeros((2 * dim, k))
        for c in range(dim):
            for unit, (s, icpt) in enumerate(((s1, c1), (s2, c2))):
                row = 2 * c + unit
                if layer == 0:
                    w[row, :, c] = s
                else:
                    w[row, :, 2 * c] = s
                    w[row, :, 2 * c + 1] = -s
                b[row] = icpt
        ws.append(w)
        bs.append(b)
    A = np.tile([1.0, -1.0], dim)[None]
    return MaxoutNetwork(ws, bs, A, np.zeros(1), dtype=dtype)
