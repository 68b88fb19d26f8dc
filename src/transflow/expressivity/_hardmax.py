"""Hardmax transformers whose attention queries and keys depend on the input (issue #14).

:class:`HardmaxTransformer` is a general hardmax transformer on one input ``x ∈ R^d``:
x is embedded on T tokens, D blocks of multi-head hardmax attention (general W_Q, W_K,
W_V, W_O with biases, residual) and ReLU FFN (residual) follow, and the output is read
from one token. With the activation pattern frozen the residual stream is affine in x
(hardmax selects one value row), so every attention score ``q_i · k_j`` is a *quadratic*
polynomial of x and every ReLU pre-activation is affine: ``affine_logits`` is False, and
the 1-D counter :func:`exact_regions_1d` finds the breakpoints as exact roots of
quadratics.
"""

from __future__ import annotations

import math
from fractions import Fraction

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._controls import AttentionParams, FFNParams
from .._errors import (
    as_input,
    check_finite,
    check_key,
    check_sizes,
    check_values,
    param_dtype,
)
from .._operators import attention as _attention_op, attention_scores
from ._exact_arith import _dyadic_out, _fraction_out, _sadd, _scaled_input, _scaled_int, _slin
from ._pwl import (
    AbstractAffineLogits,
    AbstractAttention,
    AbstractExactEval,
    exact_argmax,
    to_fraction_array,
)

__all__ = ["AbstractHardmaxTransformer", "ConstantQueryTransformer", "HardmaxTransformer"]


class AbstractHardmaxTransformer(AbstractExactEval, AbstractAttention):
    """A hardmax transformer on one input x: the fields and the code shared by
    :class:`HardmaxTransformer` (general queries) and :class:`ConstantQueryTransformer`
    (``W_Q = 0``, affine logits). See :class:`HardmaxTransformer` for the model."""

    blocks: tuple[tuple[AttentionParams | None, FFNParams | None], ...]
    embedding: Float[Array, "T d m"]
    positional: Float[Array, "T m"]
    readout_weight: Float[Array, "d_out m"]
    readout_bias: Float[Array, " d_out"]
    temperature: Float[Array, ""]
    readout_token: int = eqx.field(static=True, default=0)
    hardmax: bool = eqx.field(static=True, default=True)

    # ------------------------------------------------------------------ structure
    @property
    def in_dim(self) -> int:
        return int(self.embedding.shape[1])

    @property
    def n_tokens(self) -> int:
        return int(self.positional.shape[0])

    @property
    def width(self) -> int:
        return int(self.positional.shape[1])

    @property
    def depth(self) -> int:
        return len(self.blocks)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_params(
        cls,
        blocks,
        embedding,
        positional,
        readout_weight,
        readout_bias=None,
        *,
        readout_token: int = 0,
        attention: str | float = "hardmax",
        dtype=None,
    ) -> AbstractHardmaxTransformer:
        """A model from your own weights (validated, cast to ``dtype``).

        Args:
            blocks: a sequence of ``(attn, ffn)`` pairs, each an
                :class:`transflow.AttentionParams` (``wq, wk: (m, H·d_k)``, ``wv: (m,
                H·d_v)``, ``wo: (H·d_v, m)``, biases) or ``None``, and a
                :class:`transflow.FFNParams` with lifting sub-steps (``residual`` all
                False, ``activation="relu"``, no activation on the last) or ``None``.
            embedding: ``(T, d, m)`` per-token embedding, or ``(d, m)`` shared by every token.
            positional: ``(T, m)``, the fixed part of the embedding.
            readout_weight: ``(d_out, m)``; ``readout_bias``: ``(d_out,)`` (default 0).
            readout_token: the token the output is read from.
            attention: ``"hardmax"`` or a float λ > 0 (softmax at scale λ: not piecewise
                linear, only for comparison; counting refuses it).
            dtype: dtype of the model's arrays (default: that of ``positional``).
        """
        where = "HardmaxTransformer"
        P = check_values("positional", positional, where)
        P = jnp.asarray(P, dtype)
        dtype = P.dtype
        if P.ndim != 2:
            raise ValueError(
                f"HardmaxTransformer: `positional` must have shape (T, m), got {P.shape}."
            )
        T, m = P.shape
        E = jnp.asarray(check_values("embedding", embedding, where), dtype)
        if E.ndim == 2:
            E = jnp.broadcast_to(E[None], (T, *E.shape))
        if E.ndim != 3 or E.shape[0] != T or E.shape[2] != m:
            raise ValueError(
                f"HardmaxTransformer: `embedding` must have shape ({T}, d, {m}) (per token) or "
                f"(d, {m}) (shared), got {np.shape(embedding)}."
            )
        A = jnp.asarray(check_values("readout_weight", readout_weight, where), dtype)
        if A.ndim != 2 or A.shape[1] != m:
            raise ValueError(
                f"HardmaxTransformer: `readout_weight` must have shape (d_out, {m}), got {A.shape}."
            )
        c = (
            jnp.zeros((A.shape[0],), dtype)
            if readout_bias is None
            else jnp.asarray(check_values("readout_bias", readout_bias, where), dtype)
        )
        if c.shape != (A.shape[0],):
            raise ValueError(
                f"HardmaxTransformer: `readout_bias` must have shape ({A.shape[0]},), got "
                f"{c.shape}."
            )
        ok_int = isinstance(readout_token, int) and not isinstance(readout_token, bool)
        if not (ok_int and 0 <= readout_token < T):
            raise ValueError(
                f"HardmaxTransformer: `readout_token` must be an int in [0, {T}), got "
                f"{readout_token!r}."
            )
        if isinstance(attention, str):
            if attention != "hardmax":
                raise ValueError(
                    f"`attention` must be 'hardmax' or a float λ > 0, got {attention!r}."
                )
            hardmax, lam = True, 1.0
        else:
            lam = float(attention)
            if not (lam > 0 and math.isfinite(lam)):
                raise ValueError(
                    f"`attention` must be 'hardmax' or a float λ > 0, got {attention!r}."
                )
            hardmax = False
        cast = lambda t: jax.tree.map(lambda a: jnp.asarray(a, dtype), t)

        def finite(name, t):
            for leaf in jax.tree.leaves(t):
                try:
                    check_finite(name, leaf)
                except ValueError as e:
                    raise ValueError(f"{where}: {e}") from None
            return t

        if not isinstance(blocks, list | tuple):
            raise TypeError(
                f"{where}: `blocks` must be a list of (attn | None, ffn | None) pairs, got "
                f"{type(blocks).__name__} {blocks!r:.40}."
            )
        out = []
        for b, pair in enumerate(blocks):
            if not (isinstance(pair, tuple | list) and len(pair) == 2):
                raise ValueError(
                    f"HardmaxTransformer: `blocks[{b}]` must be a pair (attn | None, ffn | "
                    f"None), got {type(pair).__name__}."
                )
            a, f = pair
            if a is not None:
                if not isinstance(a, AttentionParams):
                    raise TypeError(
                        f"HardmaxTransformer: `blocks[{b}][0]` must be a transflow "
                        f"AttentionParams or None, got {type(a).__name__}."
                    )
                if a.wq.shape[0] != m:
                    raise ValueError(
                        f"HardmaxTransformer: `blocks[{b}][0].wq` must have {m} rows (the "
                        f"stream width), got {a.wq.shape[0]}."
                    )
                a = finite(f"blocks[{b}][0]", cast(a))
            if f is not None:
                if not isinstance(f, FFNParams):
                    raise TypeError(
                        f"HardmaxTransformer: `blocks[{b}][1]` must be a transflow FFNParams "
                        f"or None, got {type(f).__name__}."
                    )
                if (
                    any(f.residual)
                    or f.activation != "relu"
                    or f.activation_on_last
                    or len(f.weights) < 2
                ):
                    raise ValueError(
                        f"HardmaxTransformer: `blocks[{b}][1]` must be a ReLU FFN of lifting "
                        "sub-steps (residual all False, activation='relu', "
                        "activation_on_last=False, at least 2 sub-steps), got residual="
                        f"{f.residual}, activation={f.activation!r}, activation_on_last="
                        f"{f.activation_on_last}; other FFNs are not piecewise linear in "
                        "this form."
                    )
                if f.weights[0].shape[0] != m or f.weights[-1].shape[1] != m:
                    raise ValueError(
                        f"HardmaxTransformer: `blocks[{b}][1]` must map width {m} to {m}, got "
                        f"{f.weights[0].shape[0]} -> {f.weights[-1].shape[1]}."
                    )
                f = finite(f"blocks[{b}][1]", cast(f))
            out.append((a, f))
        return cls(
            blocks=tuple(out),
            embedding=E,
            positional=P,
            readout_weight=A,
            readout_bias=c,
            temperature=jnp.asarray(lam, dtype),
            readout_token=readout_token,
            hardmax=hardmax,
        )

    # ------------------------------------------------------------------ evaluation
    def _refuse_softmax(self):
        if not self.hardmax:
            raise ValueError(
                "HardmaxTransformer: this model uses softmax attention (λ="
                f"{float(self.temperature)}), which is smooth, not piecewise linear: it has no "
                "activation patterns or linear regions. Build it with attention='hardmax'."
            )

    def embed(self, x: Float[Array, " d"]) -> Float[Array, "T m"]:
        """``X⁰[t] = x @ embedding[t] + positional[t]``."""
        x = jnp.asarray(x, self.positional.dtype)
        return jnp.einsum("d,tdm->tm", x, self.embedding) + self.positional

    def _attend(self, X, a):
        """Hardmax attention output (without residual) and the scores ``(H·T, T)``."""
        T = X.shape[0]
        H = a.n_heads
        s = attention_scores(X, a, scale=1.0)  # (H, T, T)
        w = jnp.argmax(s, axis=-1)  # (H, T)
        v = (X @ a.wv + a.bv).reshape(T, H, -1)
        o = v[w.T, jnp.arange(H)[None, :]]  # (T, H, dv): query i, head h -> v[w[h, i], h]
        return o.reshape(T, -1) @ a.wo + a.bo, s.reshape(H * T, T)

    def output_and_logits(self, x):
        self._refuse_softmax()
        X = self.embed(x)
        out = []
        for a, f in self.blocks:
            if a is not None:
                o, s = self._attend(X, a)
                out.append(s)
                X = X + o
            if f is not None:
                Z = X
                J = len(f.weights)
                for j in range(J):
                    Z = Z @ f.weights[j] + f.biases[j]
                    if j < J - 1:
                        pre = Z.reshape(-1)
                        out.append(jnp.stack([jnp.zeros_like(pre), pre], axis=-1))
                        Z = jax.nn.relu(Z)
                X = X + Z
        y = self.readout_weight @ X[self.readout_token] + self.readout_bias
        return y, tuple(out)

    def __call__(self, x: Float[Array, " d"]) -> Float[Array, " d_out"]:
        x = as_input("x", x, param_dtype(self), ndim=1, nonempty=())
        if x.shape != (self.in_dim,):
            raise ValueError(
                f"HardmaxTransformer: `x` must have shape ({self.in_dim},), got {x.shape}."
            )
        if self.hardmax:
            return self.output_and_logits(x)[0]
        X = self.embed(x)
        for a, f in self.blocks:
            if a is not None:
                X = X + _attention_op(X, a, temperature=self.temperature, scale=1.0)
            if f is not None:
                Z = X
                for j in range(len(f.weights)):
                    Z = Z @ f.weights[j] + f.biases[j]
                    if j < len(f.weights) - 1:
                        Z = jax.nn.relu(Z)
                X = X + Z
        return self.readout_weight @ X[self.readout_token] + self.readout_bias

    def layer_logits(self, x: Float[Array, " d"]) -> tuple[Float[Array, "G K"], ...]:
        """Scores ``(H·T, T)`` of every attention block (every head and query token) and
        ``(0, pre-activation)`` pairs ``(T·r, 2)`` of every FFN hidden layer."""
        return self.output_and_logits(x)[1]

    # ------------------------------------------------------------------ exact arithmetic
    def exact_params(self):
        self._refuse_softmax()
        blocks = []
        for a, f in self.blocks:
            ea = (
                None
                if a is None
                else tuple(
                    to_fraction_array(t) for t in (a.wq, a.bq, a.wk, a.bk, a.wv, a.bv, a.wo, a.bo)
                )
                + (a.n_heads,)
            )
            ef = (
                None
                if f is None
                else (
                    tuple(to_fraction_array(w) for w in f.weights),
                    tuple(to_fraction_array(b) for b in f.biases),
                )
            )
            blocks.append((ea, ef))
        return (
            blocks,
            to_fraction_array(self.embedding),
            to_fraction_array(self.positional),
            to_fraction_array(self.readout_weight),
            to_fraction_array(self.readout_bias),
            _Scaled(self),
        )

    def exact_eval(self, params, x, pattern=None):
        """``(y, logits, pattern)`` in exact rational arithmetic at a rational x (object
        array of :class:`fractions.Fraction`); ``pattern`` freezes every winner.

        At a dyadic x (every float is one; also the counter's internal dyadic numbers)
        the pass runs on scaled Python integers (every array ``M·2^e``, one exponent per
        array: no gcd, plain integer products), several times faster than Fractions;
        the values returned are then Fractions (or the counter's dyadic numbers if x was
        given as those)."""
        scaled = _scaled_input(x)
        if scaled is not None and len(params) > 5:
            return self._exact_eval_scaled(params[5], scaled, pattern)
        return self._exact_eval_fractions(params[:5], x, pattern)

    def _exact_eval_fractions(self, params, x, pattern=None):
        blocks, E, P, A, c = params
        T, m = P.shape
        x = np.asarray(x, dtype=object)
        X = np.empty((T, m), dtype=object)
        for t in range(T):
            X[t] = x.dot(E[t]) + P[t] if x.size else P[t].copy()
        logits, wins, off = [], [], 0
        zero = Fraction(0)
        for ea, ef in blocks:
            if ea is not None:
                wq, bq, wk, bk, wv, bv, wo, bo, H = ea
                q = (X.dot(wq) + bq).reshape(T, H, -1)
                k = (X.dot(wk) + bk).reshape(T, H, -1)
                v = (X.dot(wv) + bv).reshape(T, H, -1)
                s = np.empty((H * T, T), dtype=object)
                for h in range(H):
                    for i in range(T):
                        qi = q[i, h]
                        for j in range(T):
                            s[h * T + i, j] = qi.dot(k[j, h])
                if pattern is None:
                    win = exact_argmax(s)
                else:
                    win = np.asarray(pattern[off : off + H * T], np.int64)
                off += H * T
                logits.append(s)
                wins.append(np.asarray(win, np.int64))
                o = np.empty((T, H, v.shape[-1]), dtype=object)
                for h in range(H):
                    for i in range(T):
                        o[i, h] = v[int(win[h * T + i]), h]
                X = X + o.reshape(T, -1).dot(wo) + bo
            if ef is not None:
                Ws, bs = ef
                Z = X
                J = len(Ws)
                for j in range(J):
                    Z = Z.dot(Ws[j]) + bs[j]
                    if j < J - 1:
                        pre = Z.reshape(-1)
                        if pattern is None:
                            act = np.array([p > 0 for p in pre], dtype=bool)
                        else:
                            act = np.asarray(pattern[off : off + pre.size]) == 1
                        off += pre.size
                        lg = np.empty((pre.size, 2), dtype=object)
                        lg[:, 0] = zero
                        lg[:, 1] = pre
                        logits.append(lg)
                        wins.append(act.astype(np.int64))
                        Z = np.where(act, pre, zero).reshape(Z.shape)
                X = X + Z
        y = A.dot(X[self.readout_token]) + c
        return y, logits, np.concatenate(wins) if wins else np.zeros(0, np.int64)

    def _exact_eval_scaled(self, S: _Scaled, scaled, pattern=None):
        """:meth:`exact_eval` on scaled integers (see :class:`_Scaled`)."""
        (xm, xe), as_dyadic = scaled
        Em, Ee = S.E
        T, m = S.P[0].shape
        XE = np.empty((T, m), dtype=object)
        for t in range(T):
            XE[t] = xm.dot(Em[t]) if xm.size else 0
        X = _sadd((XE, xe + Ee), S.P)
        conv = _dyadic_out if as_dyadic else _fraction_out
        logits, wins, off = [], [], 0
        for sa, sf in S.blocks:
            if sa is not None:
                wq, bq, wk, bk, wv, bv, wo, bo, H = sa
                q, eq = _slin(X, wq, bq)
                k, ek = _slin(X, wk, bk)
                v, ev = _slin(X, wv, bv)
                q, k, v = q.reshape(T, H, -1), k.reshape(T, H, -1), v.reshape(T, H, -1)
                s = np.empty((H * T, T), dtype=object)
                for h in range(H):
                    s[h * T : (h + 1) * T] = q[:, h, :].dot(k[:, h, :].T)
                if pattern is None:  # argmax, lowest index on ties (same exponent: ints)
                    win = np.array([max(range(T), key=row.__getitem__) for row in s], np.int64)
                else:
                    win = np.asarray(pattern[off : off + H * T], np.int64)
                off += H * T
                logits.append(conv(s, eq + ek))
                wins.append(win)
                o = np.empty((T, H, v.shape[-1]), dtype=object)
                for h in range(H):
                    for i in range(T):
                        o[i, h] = v[int(win[h * T + i]), h]
                X = _sadd(X, _slin((o.reshape(T, -1), ev), wo, bo))
            if sf is not None:
                Ws, bs = sf
                Z = X
                J = len(Ws)
                for j in range(J):
                    Z = _slin(Z, Ws[j], bs[j])
                    if j < J - 1:
                        pre = Z[0].reshape(-1)
                        if pattern is None:
                            act = np.array([p > 0 for p in pre], dtype=bool)
                        else:
                            act = np.asarray(pattern[off : off + pre.size]) == 1
                        off += pre.size
                        lg = np.zeros((pre.size, 2), dtype=object)
                        lg[:, 1] = pre
                        logits.append(conv(lg, Z[1]))
                        wins.append(act.astype(np.int64))
                        Z = (np.where(act, pre, 0).reshape(Z[0].shape), Z[1])
                X = _sadd(X, Z)
        Am, Ae = S.A
        y = _sadd((Am.dot(X[0][self.readout_token]), Ae + X[1]), S.c)
        return conv(*y), logits, np.concatenate(wins) if wins else np.zeros(0, np.int64)


class HardmaxTransformer(AbstractHardmaxTransformer):
    """A hardmax transformer with input-dependent queries and keys, on one input x.

    ``model(x)`` for ``x ∈ R^d``:

    - embedding ``X⁰[t] = x @ embedding[t] + positional[t]`` (a per-token embedding
      ``(T, d, m)``; a shared one is ``embedding[t] = E`` for every t);
    - per block: ``X ← X + Attn(X)`` then ``X ← X + FFN(X)`` (either may be ``None``).
      Attention (:class:`transflow.AttentionParams`, H heads): scores
      ``s_h[i, j] = q_h(X[i]) · k_h(X[j])`` over all keys (no mask; the score scale is
      irrelevant to a hardmax), query token i of head h takes the value row of its
      **argmax key** (the lowest index on ties, as :func:`jax.numpy.argmax` — not the tie
      averaging of ``transflow.attention(..., hardmax=True)``; ties have measure zero),
      then ``W_O``. FFN (:class:`transflow.FFNParams` with lifting sub-steps
      ``residual=(False, …)``, ReLU between them): ``X ← X + relu(X W₁ + b₁) W₂ + b₂``
      (more hidden layers are allowed);
    - read-out ``y = readout_weight @ X[readout_token] + readout_bias``.

    Decision layers (:meth:`layer_logits`): for every attention block the scores of every
    head **and every query token**, shape ``(H·T, T)`` (group ``h·T + i``); for every FFN
    hidden layer the pairs ``(0, pre-activation)``, shape ``(T·r, 2)`` (group ``t·r + j``).
    With the pattern frozen the scores are quadratic in x (``affine_logits`` is False),
    so in 2-D the activation regions have curved boundaries; count on lines with
    :func:`restrict` and :func:`count_linear_regions` (exact in 1-D).

    The model is generally **discontinuous** where a hardmax switches (the selected value
    row jumps); it is still affine on every activation region, and its pieces are counted.

    ``attention`` may be a float λ > 0 (softmax of λ·scores) to compare with a smooth
    model; such a model is not piecewise linear and region counting refuses it.

    Build with :meth:`random` or :meth:`from_params` (your own weights).

    Example:
        >>> import jax, numpy as np
        >>> jax.config.update("jax_enable_x64", True)
        >>> from transflow.expressivity import HardmaxTransformer, count_linear_regions
        >>> f = HardmaxTransformer.random(jax.random.PRNGKey(0), in_dim=1, n_tokens=3)
        >>> f.affine_logits, [z.shape for z in f.layer_logits(np.array([0.5]))]
        (False, [(6, 3), (24, 2), (6, 3), (24, 2)])
        >>> r = count_linear_regions(f, -2.0, 2.0)
        >>> r.certified, r.certificate["method"]
        (True, 'exact rational / quadratic-irrational arithmetic')
    """

    @classmethod
    def random(
        cls,
        key,
        *,
        in_dim: int = 1,
        n_tokens: int = 3,
        width: int = 4,
        depth: int = 2,
        n_heads: int = 2,
        head_dim: int = 2,
        ffn_width: int = 8,
        out_dim: int = 1,
        attention: str | float = "hardmax",
        dtype=None,
    ) -> HardmaxTransformer:
        """A random model: every weight ``N(0, 1/fan_in)`` (biases ``N(0, 1/4)``), a random
        per-token embedding and positional part; ``depth`` blocks of attention (``n_heads``
        heads of size ``head_dim``, value size ``head_dim``) and a one-hidden-layer ReLU
        FFN of width ``ffn_width``; read-out from token 0. ``attention``: as
        :meth:`from_params`. ``dtype`` defaults to JAX's default float."""
        where = "HardmaxTransformer.random"
        check_key("key", key, where)
        check_sizes(
            where,
            in_dim=in_dim,
            n_tokens=n_tokens,
            width=width,
            depth=depth,
            n_heads=n_heads,
            head_dim=head_dim,
            ffn_width=ffn_width,
            out_dim=out_dim,
        )
        dtype = jnp.zeros(()).dtype if dtype is None else jnp.dtype(dtype)
        T, m, H, dk, r = n_tokens, width, n_heads, head_dim, ffn_width
        per_block = 3 * m * H * dk + H * dk * m + 3 * H * dk + m + 2 * m * r + r + m
        total = depth * per_block + T * in_dim * m + T * m + out_dim * m + out_dim
        # one draw (one compilation), sliced in order
        buf = np.asarray(jax.random.normal(key, (total,), dtype))
        pos = [0]

        def nrm(shape, s):
            n = math.prod(shape)
            out = s * buf[pos[0] : pos[0] + n].reshape(shape)
            pos[0] += n
            return out

        blocks = []
        for _ in range(depth):
            attn = AttentionParams(
                nrm((m, H * dk), m**-0.5),
                nrm((m, H * dk), m**-0.5),
                nrm((m, H * dk), m**-0.5),
                nrm((H * dk, m), (H * dk) ** -0.5),
                nrm((H * dk,), 0.5),
                nrm((H * dk,), 0.5),
                nrm((H * dk,), 0.5),
                nrm((m,), 0.5),
                H,
            )
            ffn = FFNParams(
                (nrm((m, ffn_width), m**-0.5), nrm((ffn_width, m), ffn_width**-0.5)),
                (nrm((ffn_width,), 0.5), nrm((m,), 0.5)),
                (False, False),
                "relu",
            )
            blocks.append((attn, ffn))
        return cls.from_params(
            blocks,
            nrm((T, in_dim, m), in_dim**-0.5),
            nrm((T, m), 1.0),
            nrm((out_dim, m), m**-0.5),
            nrm((out_dim,), 0.5),
            attention=attention,
            dtype=dtype,
        )


class ConstantQueryTransformer(AbstractHardmaxTransformer, AbstractAffineLogits):
    """A hardmax transformer whose attention queries are constants (``W_Q = 0``: the query
    of head h is ``b_Q``), so every score is affine in x with the pattern frozen (it
    inherits :class:`AbstractAffineLogits`): the exact 2-D partition of
    :func:`count_linear_regions` applies, as for the construction's transformers. Built by
    :func:`hardmax_reading`; ``W_Q ≠ 0`` is refused."""

    def __check_init__(self):
        for b, (a, _) in enumerate(self.blocks):
            if a is None or isinstance(a.wq, jax.core.Tracer):
                continue
            if np.any(np.asarray(a.wq)):
                raise ValueError(
                    f"ConstantQueryTransformer: `blocks[{b}][0].wq` must be zero (constant "
                    "queries b_Q), got a non-zero W_Q; use HardmaxTransformer for queries "
                    "that depend on x."
                )


# --------------------------------------------------------------------------- scaled integers
# (the helpers _scaled_int, _sadd, _slin, ... are in ._exact_arith)
class _Scaled:
    """The parameters of a :class:`HardmaxTransformer` as scaled integers ``(M, e)``."""

    def __init__(self, model: AbstractHardmaxTransformer):
        self.blocks = []
        for a, f in model.blocks:
            sa = (
                None
                if a is None
                else tuple(_scaled_int(t) for t in (a.wq, a.bq, a.wk, a.bk, a.wv, a.bv, a.wo, a.bo))
                + (a.n_heads,)
            )
            sf = (
                None
                if f is None
                else (
                    tuple(_scaled_int(w) for w in f.weights),
                    tuple(_scaled_int(b) for b in f.biases),
                )
            )
            self.blocks.append((sa, sf))
        self.E = _scaled_int(model.embedding)
        self.P = _scaled_int(model.positional)
        self.A = _scaled_int(model.readout_weight)
        self.c = _scaled_int(model.readout_bias)
