"""Transformers that realize maxout networks: the reference construction (RC) of
docs/spec/maxout-expressivity.md §2.2–§3.2, §4, built from transflow's own operators.

Every block is ``X ↦ FF(Attn(X))`` with residuals and **no LayerNorm** (RC §2.2):

- attention: :func:`transflow.attention` with head size 1, one head per maxout unit,
  scores ``q·k`` without the 1/√d factor (``scale=1.0``), hardmax or softmax at scale λ
  (``temperature=λ``); the residual is added here;
- FFN: :func:`transflow.ffn_branch` with one hidden ReLU layer as two lifting sub-steps
  (:class:`transflow.FFNParams` with ``residual=(False, False)``); the residual is added here.

A block with no heads (no FFN units) skips its attention (FFN).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Literal

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float

from .._controls import AttentionParams, FFNParams
from .._errors import as_input, check_number, check_sequence, param_dtype
from .._operators import attention as _attention_op, attention_scores
from ..schemes._base import ffn_branch
from ._maxout import MaxoutNetwork, ibp_bounds
from ._programs import TransformerProgram
from ._pwl import (
    AbstractAffineLogits,
    AbstractAttention,
    AbstractBoundedEval,
    AbstractExactProgram,
    AbstractIntervalForward,
    AbstractProvenance,
    exact_argmax,
    gamma,
    odot,
    to_fraction_array,
)
from ._softmax import softmax_deltas, softmax_error_bound

_SCALED: dict[int, tuple] = {}  # id(exact params) -> (params, scaled-integer params)

__all__ = ["MaxoutTransformer", "maxout_to_transformer"]


class MaxoutTransformer(
    AbstractAffineLogits,
    AbstractBoundedEval,
    AbstractIntervalForward,
    AbstractExactProgram,
    AbstractAttention,
    AbstractProvenance,
):
    """A transformer built by :func:`maxout_to_transformer`, callable on one input x
    (final; every counting capability, constant attention queries).

    ``model(x)`` embeds ``x ∈ R^d`` on T tokens (``X⁰ = E x 1_Tᵀ + P``: x replicated on
    every token plus a fixed positional/constant part), runs the blocks and reads out
    ``y = A · h-slot(token 0) + c``.

    The equality with the maxout network holds on the box ``[lo, hi]`` used for the
    gating bounds B_ℓ (hardmax: exactly). Outside the box the token-wise shift fails (spec
    §2.4, check C4): :meth:`in_box` returns the flag, :meth:`checked` raises (also under
    ``jit``), ``model(x)`` itself does not check.

    Attributes:
        blocks: ``((attn | None, ffn | None), …)`` with transflow controls.
        positional: the fixed part P of the embedding, ``(T, m)``.
        bounds: the gating bounds B_ℓ used (IBP + margin, or given), float64 numpy.
        ibp: the IBP bounds of the box (without margin), float64 numpy.
        variant, hardmax, temperature: construction options.
    """

    blocks: tuple[tuple[AttentionParams | None, FFNParams | None], ...]
    positional: Float[Array, "T m"]
    readout_weight: Float[Array, "d_out n_L"]
    readout_bias: Float[Array, " d_out"]
    lo: Float[Array, " d"]
    hi: Float[Array, " d"]
    bounds: Float[Array, " L"]
    ibp: Float[Array, " L"]
    variant: str = eqx.field(static=True)
    hardmax: bool = eqx.field(static=True)
    temperature: Float[Array, ""]
    n_out_units: int = eqx.field(static=True)
    net: MaxoutNetwork

    # ------------------------------------------------------------------ structure
    @property
    def in_dim(self) -> int:
        return int(self.lo.shape[0])

    @property
    def n_tokens(self) -> int:
        return int(self.positional.shape[0])

    @property
    def width(self) -> int:
        """Embedding (residual-stream) width m."""
        return int(self.positional.shape[1])

    @property
    def depth(self) -> int:
        """Number D of blocks."""
        return len(self.blocks)

    def heads(self) -> tuple[int, ...]:
        return tuple(0 if a is None else a.n_heads for a, _ in self.blocks)

    def ffn_widths(self) -> tuple[int, ...]:
        return tuple(0 if f is None else int(f.weights[0].shape[1]) for _, f in self.blocks)

    # ------------------------------------------------------------------ evaluation
    def embed(self, x: Float[Array, " d"]) -> Float[Array, "T m"]:
        """``X⁰ = E x 1ᵀ + P``: x in the first d slots of every token, plus P (x is cast to
        the model's dtype)."""
        d, (T, m) = self.in_dim, self.positional.shape
        x = jnp.asarray(x, self.positional.dtype)
        return self.positional + jnp.zeros((T, m), x.dtype).at[:, :d].set(x[None, :])

    def _attn(self, X, a):
        return X + _attention_op(
            X, a, hardmax=self.hardmax, temperature=self.temperature, scale=1.0
        )

    def stream(self, x: Float[Array, " d"]) -> Float[Array, "T m"]:
        """The residual stream after the last block."""
        X = self.embed(x)
        for a, f in self.blocks:
            if a is not None:
                X = self._attn(X, a)
            if f is not None:
                X = X + ffn_branch(X, f, 1.0)
        return X

    def __call__(self, x: Float[Array, " d"]) -> Float[Array, " d_out"]:
        x = as_input("x", x, param_dtype(self), ndim=1, nonempty=())
        X = self.stream(x)
        return self.readout_weight @ X[0, : self.n_out_units] + self.readout_bias

    def layer_logits(self, x: Float[Array, " d"]) -> tuple[Float[Array, "G K"], ...]:
        """Decision quantities per sub-layer, along the hardmax forward pass at x.

        Attention: the scores ``attention_scores(X, p, scale=1)`` of every head, shape
        ``(H, T)`` (winner = argmax key); the queries of the construction are constant
        (they read only the constant coordinate), so every query token has the same
        scores and one group per head is the whole decision. FFN: ``(0, pre-activation)``
        of every token and hidden unit, shape ``(T·r, 2)`` (winner 1 ⇔ the ReLU is
        active). Only defined for hardmax attention.
        """
        return self.output_and_logits(x)[1]

    def output_and_logits(self, x):
        self._refuse_softmax()
        X = self.embed(x)
        out = []
        for a, f in self.blocks:
            if a is not None:
                s = attention_scores(X, a, scale=1.0)
                out.append(s[:, 0, :])  # constant queries: query token 0 stands for all
                X = self._attn(X, a)
            if f is not None:
                pre = (X @ f.weights[0] + f.biases[0]).reshape(-1)
                out.append(jnp.stack([jnp.zeros_like(pre), pre], axis=-1))
                X = X + ffn_branch(X, f, 1.0)
        y = self.readout_weight @ X[0, : self.n_out_units] + self.readout_bias
        return y, tuple(out)

    def _refuse_softmax(self):
        if not self.hardmax:
            raise ValueError(
                "MaxoutTransformer: this model uses softmax attention (λ="
                f"{float(self.temperature)}), which is smooth, not piecewise linear: it has no "
                "linear regions to count. Build it with attention='hardmax' (the exact "
                "construction), or count the regions of its maxout network `model.net`."
            )

    def eval_bounded(self, x, ex=None, pattern=None):
        """Forward pass with running round-off bounds (hardmax; see
        :meth:`AbstractBoundedEval.eval_bounded`). Every matrix product with n terms
        adds ``γ_{n+1}(|W||X̂| + |b|)`` to ``|W| e_X``; a score ``q·k`` adds
        ``|q| e_k + |k| e_q + e_q e_k + γ_{dk}|q||k|``; the hardmax keeps the error of the
        selected value; a residual sum adds ``u |X̂|``."""
        self._refuse_softmax()
        dt = self.positional.dtype
        u = gamma(1, dt)
        T, m = self.positional.shape
        d = self.in_dim
        x = jnp.asarray(x, dt)
        X = self.embed(x)
        EX = jnp.zeros((T, m), dt)
        if ex is not None:
            EX = EX.at[:, :d].set(jnp.asarray(ex, dt)[None, :])
        logits, errs, wins, off = [], [], [], 0

        def lin(Z, EZ, W, b):
            # |W| e + γ_{n+1}(|W||Z| + |b|) with one product: (e + γ|Z|) |W| + γ|b|
            g = gamma(W.shape[0] + 1, dt)
            return Z @ W + b, (EZ + g * jnp.abs(Z)) @ jnp.abs(W) + g * jnp.abs(b)

        for a, f in self.blocks:
            if a is not None:
                H = a.n_heads
                q, eq = lin(X[:1], EX[:1], a.wq, a.bq)  # constant queries: token 0
                k, ek = lin(X, EX, a.wk, a.bk)
                v, ev = lin(X, EX, a.wv, a.bv)
                dk, dv = q.shape[-1] // H, v.shape[-1] // H
                q, eq = q.reshape(H, dk), eq.reshape(H, dk)
                k, ek = k.reshape(T, H, dk), ek.reshape(T, H, dk)
                s = jnp.einsum("hc,thc->ht", q, k)
                es = (
                    jnp.einsum("hc,thc->ht", jnp.abs(q), ek)
                    + jnp.einsum("hc,thc->ht", eq, jnp.abs(k) + ek)
                    + gamma(dk, dt) * jnp.einsum("hc,thc->ht", jnp.abs(q), jnp.abs(k))
                )
                win = jnp.argmax(s, axis=-1) if pattern is None else pattern[off : off + H]
                off += H
                logits.append(s)
                errs.append(es)
                wins.append(win.astype(jnp.int32))
                v, ev = v.reshape(T, H, dv), ev.reshape(T, H, dv)
                o = v[win, jnp.arange(H)].reshape(H * dv)
                eo = ev[win, jnp.arange(H)].reshape(H * dv)
                out, eout = lin(o[None], eo[None], a.wo, a.bo)
                X = X + out
                EX = EX + eout + u * jnp.abs(X)
            if f is not None:
                W1, W2 = f.weights
                b1, b2 = f.biases
                pre, epre = lin(X, EX, W1, b1)
                r = pre.shape[-1]
                logits.append(jnp.stack([jnp.zeros_like(pre), pre], -1).reshape(T * r, 2))
                errs.append(jnp.stack([jnp.zeros_like(epre), epre], -1).reshape(T * r, 2))
                if pattern is None:
                    act = (pre > 0).reshape(-1)
                else:
                    act = pattern[off : off + T * r] == 1
                off += T * r
                wins.append(act.astype(jnp.int32))
                act = act.reshape(T, r)
                hid = jnp.where(act, pre, 0.0)
                ehid = jnp.where(act, epre, 0.0)
                out, eout = lin(hid, ehid, W2, b2)
                X = X + out
                EX = EX + eout + u * jnp.abs(X)
        n = self.n_out_units
        y, ey = lin(X[:1, :n], EX[:1, :n], self.readout_weight.T, self.readout_bias)
        return y[0], ey[0], tuple(logits), tuple(errs), jnp.concatenate(wins)

    def interval_forward(self, ctx, x):
        """The hardmax forward pass on 1-D intervals (see
        :meth:`AbstractIntervalForward.interval_forward`), mirroring :meth:`eval_bounded`:
        one decision per attention block (groups = heads, competitors = key tokens, the
        constant query of token 0) and per FFN (groups = token × hidden unit, competitors
        ``(0, pre-activation)``)."""
        self._refuse_softmax()
        f64 = lambda a: np.asarray(a, np.float64)
        P = f64(self.positional)
        T, m = P.shape
        d = self.in_dim
        emb = np.zeros((d, m))
        emb[np.arange(d), np.arange(d)] = 1.0
        xe = ctx.lin(x, emb)
        X = ctx.add(ctx.const(P), xe.map(lambda a: a[:, None, :]))
        for a, f in self.blocks:
            if a is not None:
                H = a.n_heads
                q = ctx.lin(X.map(lambda z: z[:, :1]), f64(a.wq), f64(a.bq))
                k = ctx.lin(X, f64(a.wk), f64(a.bk))
                v = ctx.lin(X, f64(a.wv), f64(a.bv))
                N = q.v.shape[0]
                dk, dv = q.v.shape[-1] // H, v.v.shape[-1] // H
                q = q.map(lambda z, sh=(N, H, dk): z.reshape(sh))
                k = k.map(lambda z, sh=(N, T, H, dk): z.reshape(sh))
                vals = v.map(lambda z, sh=(N, T, H, dv): z.reshape(sh).transpose(0, 2, 1, 3))
                o = ctx.decide(ctx.scores(q, k), vals)  # (N', H, dv)
                X = ctx.carry(X)
                o = o.map(lambda z, c=H * dv: z.reshape(z.shape[0], 1, c))
                X = ctx.residual(X, o, f64(a.wo), f64(a.bo))
            if f is not None:
                W1, W2 = (f64(w) for w in f.weights)
                b1, b2 = (f64(b) for b in f.biases)
                pre = ctx.lin(X, W1, b1)  # (N, T, r)
                N, r = pre.v.shape[0], pre.v.shape[-1]
                Z = pre.map(
                    lambda z, sh=(N, T * r, 2): np.stack([np.zeros_like(z), z], -1).reshape(sh)
                )
                hid = ctx.decide(Z).map(lambda z, sh=(T, r): z.reshape((z.shape[0], *sh)))
                X = ctx.carry(X)
                X = ctx.residual(X, hid, W2, b2)
        n = self.n_out_units
        X0 = X.map(lambda z: z[:, 0, :n])
        return ctx.lin(X0, f64(self.readout_weight).T, f64(self.readout_bias))

    def exact_params(self):
        self._refuse_softmax()
        blocks = []
        for a, f in self.blocks:
            ea = (
                None
                if a is None
                else tuple(to_fraction_array(t) for t in (a.wq, a.bq, a.wk, a.bk, a.wv, a.bv))
                + (to_fraction_array(a.wo), to_fraction_array(a.bo), a.n_heads)
            )
            ef = None if f is None else tuple(to_fraction_array(t) for t in (*f.weights, *f.biases))
            blocks.append((ea, ef))
        return (
            blocks,
            to_fraction_array(self.positional),
            to_fraction_array(self.readout_weight),
            to_fraction_array(self.readout_bias),
        )

    def exact_program(self) -> TransformerProgram:
        return TransformerProgram(self)

    def outside_certificate(self) -> tuple[str, ...]:
        return (
            "that the transformer equals its maxout network: its weights (gating bounds, "
            "pieces) were built in float64 by maxout_to_transformer; the certificate is "
            "about the transformer's stored weights",
        )

    def _scaled_params(self, params):
        """The parameters as scaled integers ``(M, e)`` (value ``M·2^e``; cached per
        ``params``), for the integer path of :meth:`exact_eval`."""
        hit = _SCALED.get(id(params))
        if hit is not None and hit[0] is params:
            return hit[1]
        from ._exact_arith import _scaled_int

        blocks = []
        for a, f in self.blocks:
            sa = (
                None
                if a is None
                else tuple(_scaled_int(t) for t in (a.wq, a.bq, a.wk, a.bk, a.wv, a.bv, a.wo, a.bo))
                + (a.n_heads,)
            )
            sf = None if f is None else tuple(_scaled_int(t) for t in (*f.weights, *f.biases))
            blocks.append((sa, sf))
        out = (
            blocks,
            _scaled_int(self.positional),
            _scaled_int(self.readout_weight),
            _scaled_int(self.readout_bias),
        )
        if len(_SCALED) > 64:
            _SCALED.clear()
        _SCALED[id(params)] = (params, out)
        return out

    def _exact_eval_int(self, sp, xin, pattern):
        """:meth:`exact_eval` at a dyadic point in integer arithmetic (every quantity is
        ``M·2^e`` with an integer array M; no rational normalisation): the same values."""
        from ._exact_arith import _fraction_out, _sadd

        def lin(X, W, b):
            return _sadd((odot(X[0], W[0]), X[1] + W[1]), b)

        blocks, (PM, pe), A, c = sp
        T, m = PM.shape
        (xm, xe) = xin
        emb = np.zeros((T, m), dtype=object)
        emb[:, : xm.size] = xm[None, :]
        X = _sadd((PM, pe), (emb, xe))
        logits, wins, off = [], [], 0
        for sa, sf in blocks:
            if sa is not None:
                wq, bq, wk, bk, wv, bv, wo, bo, H = sa
                q = lin((X[0][:1], X[1]), wq, bq)
                k = lin(X, wk, bk)
                v = lin(X, wv, bv)
                qM, kM = q[0].reshape(H, -1), k[0].reshape(T, H, -1)
                vM = v[0].reshape(T, H, -1)
                s = np.empty((H, T), dtype=object)
                for h in range(H):
                    for t in range(T):
                        s[h, t] = qM[h].dot(kM[t, h])
                win = exact_argmax(s) if pattern is None else np.asarray(pattern[off : off + H])
                off += H
                logits.append(_fraction_out(s, q[1] + k[1]))
                wins.append(np.asarray(win, np.int64))
                o = np.concatenate([vM[win[h], h] for h in range(H)])
                X = _sadd(X, lin((o[None, :], v[1]), wo, bo))
            if sf is not None:
                W1, W2, b1, b2 = sf
                pre = lin(X, W1, b1)
                r = pre[0].shape[-1]
                flat = pre[0].reshape(-1)
                if pattern is None:
                    act = np.array([p > 0 for p in flat])
                else:
                    act = np.asarray(pattern[off : off + T * r]) == 1
                off += T * r
                lg = np.empty((T * r, 2), dtype=object)
                lg[:, 0] = Fraction(0)
                lg[:, 1] = _fraction_out(flat, pre[1])
                logits.append(lg)
                wins.append(act.astype(np.int64))
                hid = np.where(act.reshape(T, r), pre[0], 0).astype(object)
                X = _sadd(X, lin((hid, pre[1]), W2, b2))
        n = self.n_out_units
        y = _sadd((odot(X[0][:1, :n], A[0].T)[0], X[1] + A[1]), c)
        return _fraction_out(*y), logits, np.concatenate(wins)

    def exact_eval(self, params, x, pattern=None):
        blocks, P, A, c = params
        xs = np.asarray(x, dtype=object).reshape(-1)
        if all(type(v) is Fraction and not (v.denominator & (v.denominator - 1)) for v in xs):
            from ._exact_arith import _scaled_input

            xin = _scaled_input(xs)
            if xin is not None:
                return self._exact_eval_int(self._scaled_params(params), xin[0], pattern)
        T, m = P.shape
        X = P.copy()
        for t in range(T):
            for j, xj in enumerate(x):
                X[t, j] = X[t, j] + xj
        logits, wins, off = [], [], 0
        for ea, ef in blocks:
            if ea is not None:
                wq, bq, wk, bk, wv, bv, wo, bo, H = ea
                q = (odot(X[:1], wq) + bq).reshape(H, -1)
                k = (odot(X, wk) + bk).reshape(T, H, -1)
                v = (odot(X, wv) + bv).reshape(T, H, -1)
                s = np.empty((H, T), dtype=object)
                for h in range(H):
                    for t in range(T):
                        s[h, t] = q[h].dot(k[t, h])
                win = exact_argmax(s) if pattern is None else np.asarray(pattern[off : off + H])
                off += H
                logits.append(s)
                wins.append(np.asarray(win, np.int64))
                o = np.concatenate([v[win[h], h] for h in range(H)])
                X = X + (odot(o[None, :], wo)[0] + bo)[None, :]
            if ef is not None:
                W1, W2, b1, b2 = ef
                pre = odot(X, W1) + b1
                r = pre.shape[-1]
                if pattern is None:
                    act = np.array([[p > 0 for p in row] for row in pre]).reshape(-1)
                else:
                    act = np.asarray(pattern[off : off + T * r]) == 1
                off += T * r
                lg = np.empty((T * r, 2), dtype=object)
                lg[:, 0] = Fraction(0)
                lg[:, 1] = pre.reshape(-1)
                logits.append(lg)
                wins.append(act.astype(np.int64))
                hid = np.where(act.reshape(T, r), pre, Fraction(0))
                X = X + odot(hid, W2) + b2
        y = A.dot(X[0, : self.n_out_units]) + c
        return y, logits, np.concatenate(wins)

    def in_box(self, x: Float[Array, " d"]) -> Bool[Array, ""]:
        """True iff ``lo ≤ x ≤ hi`` componentwise (where the construction is exact)."""
        return jnp.all((x >= self.lo) & (x <= self.hi))

    def checked(self, x: Float[Array, " d"]) -> Float[Array, " d_out"]:
        """``model(x)``, raising (also under ``jit``) if x lies outside ``[lo, hi]``."""
        x = eqx.error_if(
            x,
            ~self.in_box(x),
            "MaxoutTransformer: input `x` lies outside the box [lo, hi] used for the gating "
            "bounds B; the construction is only exact inside it "
            "(docs/spec/maxout-expressivity.md §2.4). Rebuild with a larger box.",
        )
        return self(x)

    # ------------------------------------------------------------------ accounting
    def param_counts(self) -> dict[str, int]:
        """Parameter counts of the construction beside the maxout network's
        (docs/spec/maxout-expressivity.md §4).

        - ``nnz``: non-zero entries of all attention (W_Q, W_K, W_V, W_O and biases) and
          FFN (W_1, b_1, W_2, b_2) arrays; not the fixed embedding nor the shared read-out.
        - ``dense``: ``Σ_blocks (4 m H_b + 2 m r_b + r_b + m)`` — the dense weights of size-1
          heads without attention biases and of a one-hidden-layer FFN of width r_b with
          both biases (a block without FFN still counts its output bias b_2, m entries).
        - ``maxout``: ``P_N = Σ_ℓ k_ℓ n_ℓ (n_{ℓ−1}+1)``; ``maxout_readout`` adds A, c.
        - ``embedding``: fixed entries of the embedding (d placements + P's non-zeros).
        - ``tokens`` T, ``width`` m, ``depth`` D, ``total_heads``, ``max_ffn_width``.
        """
        nnz = 0
        for a, f in self.blocks:
            arrays = [] if a is None else [a.wq, a.wk, a.wv, a.wo, a.bq, a.bk, a.bv, a.bo]
            if f is not None:
                arrays += [*f.weights, *f.biases]
            nnz += sum(int(np.count_nonzero(np.asarray(arr))) for arr in arrays)
        m = self.width
        dense = sum(4 * m * H + 2 * m * r + r + m for H, r in zip(self.heads(), self.ffn_widths()))
        return {
            "nnz": nnz,
            "dense": dense,
            "maxout": self.net.num_params(),
            "maxout_readout": self.net.num_params(readout=True),
            "embedding": self.in_dim + int(np.count_nonzero(np.asarray(self.positional))),
            "tokens": self.n_tokens,
            "width": m,
            "depth": self.depth,
            "total_heads": sum(self.heads()),
            "max_ffn_width": max(self.ffn_widths()),
        }

    def softmax_error_bound(self, lam: float | None = None) -> float:
        """The §3.6 sup bound for softmax at scale λ (default: this model's λ).

        Returns ``inf`` if the margin side condition ``B_ℓ ≥ B_ℓ^{IBP} + Lip_ℓ δ_{ℓ−1}``
        fails (then the gating may break under the softmax perturbation).
        """
        lam = float(self.temperature) if lam is None else lam
        if not (lam > 0 and math.isfinite(lam)):
            raise ValueError(f"softmax_error_bound: `lam` must be finite and > 0, got {lam!r}.")
        deltas = softmax_deltas(self.net, lam, self.n_tokens)
        pairs = zip(np.asarray(self.bounds), np.asarray(self.ibp), self.net.lipschitz(), deltas)
        for b, b0, lip, dprev in pairs:
            if float(b) < float(b0) + lip * dprev:
                return math.inf
        return softmax_error_bound(self.net, lam, self.n_tokens)


def maxout_to_transformer(
    net: MaxoutNetwork,
    lo: Float[Array, " d"] | float,
    hi: Float[Array, " d"] | float,
    *,
    variant: Literal["A", "B"] = "A",
    attention: Literal["hardmax"] | float = "hardmax",
    margin: float = 1.0,
    bounds: tuple[float, ...] | None = None,
    dtype=None,
) -> MaxoutTransformer:
    """The reference-construction transformer realizing ``net`` on the box ``[lo, hi]``.

    Token layout (docs/spec/maxout-expressivity.md §2.3):
    ``x_t = [h ∈ R^{n_h}; (Z ∈ R^{max k n}, Variant B); s ∈ R^{n_s}; e_t ∈ R^T; 1]`` with
    ``n_h = max(d, n_ℓ)``, ``n_s = max n_ℓ``.

    - **Token-wise shift** (§2.4): FFN hidden unit (j, i) has pre-activation
      ``z^ℓ_{ij} − B_ℓ + 2B_ℓ (e_t)_j``, so ``ReLU(·) = (z^ℓ_{ij} + B_ℓ)[t = j]``: token j
      receives piece j in its scratch slot s_i (tokens without a piece hold the null piece
      −B_ℓ), exact while ``|z^ℓ_{ij}| ≤ B_ℓ``.
    - **Max-attention** (§3.1): head i has query = the constant coordinate, key = s_i,
      value = ``s_i − h_i − B_ℓ``, output into h_i, so hardmax gives
      ``h_i ← max_t s_i(t) − B_ℓ = max_j z^ℓ_{ij}``; ties need no care (values = scores).

    Args:
        net: the maxout network (use :meth:`MaxoutNetwork.from_relu` for ReLU nets).
        lo, hi: the compact input box K = [lo, hi] (scalars broadcast to ``(d,)``).
        variant: ``"A"`` (docs/spec/maxout-expressivity.md §3.2, fused: ``D = L+1`` blocks,
            ``T = max k_ℓ`` tokens, blocks ``(∅, F_1), (A_ℓ, F_{ℓ+1} ⊕ C_ℓ), (A_L, ∅)``) or ``"B"``
            (3 blocks per layer — token-wise affine, shift-and-select, max — and one reserved token,
            ``T = max k_ℓ + 1``; the layout matching the summary's "L = 3", "T − 1" and
            "⌊D/3⌋", docs/spec/maxout-expressivity.md §5.4).
        attention: ``"hardmax"`` (exact; Yun et al.'s tie averaging, irrelevant here) or a
            float λ > 0: softmax of λ·scores (``temperature=λ``), error ≤ c_T/λ per unit
            (docs/spec/maxout-expressivity.md §3.6, :meth:`MaxoutTransformer.softmax_error_bound`).
        margin: μ ≥ 0 added to every IBP bound, ``B_ℓ = B_ℓ^{IBP} + μ``
            (docs/spec/maxout-expressivity.md Appendix A; keeps every ReLU strictly on one side
            inside the box; needed for softmax).
        bounds: explicit gating bounds ``(B_1, …, B_L)`` instead of IBP + margin (each must
            be ≥ the IBP bound of its layer, else the construction may fail in the box).
        dtype: dtype of the transformer's arrays (default: JAX's default float; use
            float64 for verification, docs/spec/maxout-expressivity.md C10).

    Returns:
        A :class:`MaxoutTransformer`.

    Example:
        >>> import numpy as np
        >>> from transflow.expressivity import MaxoutNetwork, maxout_to_transformer
        >>> net = MaxoutNetwork([np.array([[[1.0], [-1.0], [0.5]]])], [np.zeros((1, 3))])
        >>> tf = maxout_to_transformer(net, -2.0, 2.0)
        >>> x = np.array([-1.5])
        >>> bool(abs(tf(x)[0] - net(x)[0]) < 1e-6), tf.param_counts()["tokens"]
        (True, 3)
    """
    if not isinstance(net, MaxoutNetwork):
        raise TypeError(f"`net` must be a MaxoutNetwork, got {type(net).__name__}.")
    if variant not in ("A", "B"):
        raise ValueError(f"`variant` must be 'A' or 'B', got {variant!r}.")
    if isinstance(attention, str):
        if attention != "hardmax":
            raise ValueError(f"`attention` must be 'hardmax' or a float λ > 0, got {attention!r}.")
        hardmax, lam = True, 1.0
    else:
        lam = float(attention)
        if not (lam > 0 and math.isfinite(lam)):
            raise ValueError(f"`attention` must be 'hardmax' or a float λ > 0, got {attention!r}.")
        hardmax = False
    check_number("margin", margin, "maxout_to_transformer", lower=0, strict=False, example="1.0")
    d = net.in_dim
    lo_np = np.broadcast_to(np.asarray(lo, np.float64), (d,)).copy()
    hi_np = np.broadcast_to(np.asarray(hi, np.float64), (d,)).copy()
    if np.any(hi_np < lo_np):
        raise ValueError(f"need `lo` <= `hi` componentwise, got lo={lo_np}, hi={hi_np}.")
    ibp = ibp_bounds(net, lo_np, hi_np)
    L = net.depth
    if bounds is None:
        B = [b + margin for b in ibp]
    else:
        B = check_sequence(
            "bounds", bounds, "maxout_to_transformer", integer=False, example="(5.0, 5.0)"
        )
        if len(B) != L:
            raise ValueError(f"`bounds` must hold one bound per layer ({L}), got {len(B)}.")
        for ell, (b, b0) in enumerate(zip(B, ibp)):
            if not b >= b0:
                raise ValueError(
                    f"`bounds[{ell}]` = {b} is below the IBP bound {b0} of layer {ell + 1} on "
                    "the box; the token-wise shift would not be exact."
                )
    Ws = [np.asarray(w, np.float64) for w in net.weights]
    bs = [np.asarray(b, np.float64) for b in net.biases]
    ns, ks = net.widths, net.ranks
    T = max(ks) + (1 if variant == "B" else 0)
    off = 1 if variant == "B" else 0
    nh, nsc = max((d, *ns)), max(ns)
    nz = max(k * n for k, n in zip(ks, ns)) if variant == "B" else 0
    m = nh + nz + nsc + T + 1
    h_ = lambda i: i
    z_ = lambda ell, j, i: nh + j * ns[ell] + i
    s_ = lambda i: nh + nz + i
    p_ = lambda t: nh + nz + nsc + t
    one = m - 1
    n_in = lambda ell: Ws[ell].shape[2]

    # hidden units as (in-weight row (m,), bias, out-weight row (m,)); FFN output bias (m,)
    def writer(ell):  # Variant A: token-wise shift, piece (j, i) -> s_i on token j
        R = []
        for j in range(ks[ell]):
            for i in range(ns[ell]):
                w1 = np.zeros(m)
                w1[: n_in(ell)] = Ws[ell][i, j]
                w1[p_(j + off)] = 2 * B[ell]
                w2 = np.zeros(m)
                w2[s_(i)] = 1.0
                R.append((w1, bs[ell][i, j] - B[ell], w2))
        return R

    def clearer(ell):  # s_i <- s_i - relu(s_i)
        R = []
        for i in range(ns[ell]):
            w1 = np.zeros(m)
            w1[s_(i)] = 1.0
            w2 = np.zeros(m)
            w2[s_(i)] = -1.0
            R.append((w1, 0.0, w2))
        return R

    def affine_b(ell):  # Variant B (a): Z_{j,i} = relu(z_{ij} + B) - B on every token
        R, bias = [], np.zeros(m)
        for j in range(ks[ell]):
            for i in range(ns[ell]):
                w1 = np.zeros(m)
                w1[: n_in(ell)] = Ws[ell][i, j]
                w2 = np.zeros(m)
                w2[z_(ell, j, i)] = 1.0
                R.append((w1, bs[ell][i, j] + B[ell], w2))
                bias[z_(ell, j, i)] = -B[ell]
        return R, bias

    def select_b(ell):  # Variant B (b): select piece j on token j+1, then clear Z
        R, bias = [], np.zeros(m)
        for j in range(ks[ell]):
            for i in range(ns[ell]):
                w1 = np.zeros(m)
                w1[z_(ell, j, i)] = 1.0
                w1[p_(j + off)] = 2 * B[ell]
                w2 = np.zeros(m)
                w2[s_(i)] = 1.0
                R.append((w1, -B[ell], w2))
        for j in range(ks[ell]):
            for i in range(ns[ell]):
                w1 = np.zeros(m)
                w1[z_(ell, j, i)] = 1.0
                w2 = np.zeros(m)
                w2[z_(ell, j, i)] = -1.0
                R.append((w1, B[ell], w2))
                bias[z_(ell, j, i)] = B[ell]
        return R, bias

    cast = lambda a: jnp.asarray(a, dtype=dtype)

    def pack(R, bias=None):
        if not R:
            return None
        W1 = np.stack([r[0] for r in R], axis=1)
        b1 = np.array([r[1] for r in R])
        W2 = np.stack([r[2] for r in R], axis=0)
        b2 = np.zeros(m) if bias is None else bias
        return FFNParams((cast(W1), cast(W2)), (cast(b1), cast(b2)), (False, False), "relu")

    def max_attn(ell):  # head i: q = 1, k = s_i, v = s_i - h_i - B, out -> h_i
        n = ns[ell]
        wq, wk, wv, wo = np.zeros((m, n)), np.zeros((m, n)), np.zeros((m, n)), np.zeros((n, m))
        for i in range(n):
            wq[one, i] = 1.0
            wk[s_(i), i] = 1.0
            wv[s_(i), i] = 1.0
            wv[h_(i), i] = -1.0
            wv[one, i] = -B[ell]
            wo[i, h_(i)] = 1.0
        zn, zm = np.zeros(n), np.zeros(m)
        return AttentionParams(
            cast(wq), cast(wk), cast(wv), cast(wo), cast(zn), cast(zn), cast(zn), cast(zm), n
        )

    blocks = []
    if variant == "A":
        blocks.append((None, pack(writer(0))))
        for ell in range(L):
            nxt = writer(ell + 1) + clearer(ell) if ell + 1 < L else []
            blocks.append((max_attn(ell), pack(nxt)))
    else:
        for ell in range(L):
            blocks.append((None, pack(*affine_b(ell))))
            blocks.append((None, pack(*select_b(ell))))
            blocks.append((max_attn(ell), pack(clearer(ell))))

    P = np.zeros((T, m))
    P[np.arange(T), p_(np.arange(T))] = 1.0
    P[:, one] = 1.0
    return MaxoutTransformer(
        blocks=tuple(blocks),
        positional=cast(P),
        readout_weight=cast(np.asarray(net.readout_weight, np.float64)),
        readout_bias=cast(np.asarray(net.readout_bias, np.float64)),
        lo=cast(lo_np),
        hi=cast(hi_np),
        bounds=np.asarray(B, np.float64),
        ibp=np.asarray(ibp, np.float64),
        variant=variant,
        hardmax=hardmax,
        temperature=cast(lam),
        n_out_units=ns[-1],
        net=net,
    )
