"""Exact integer affine programs of piecewise-linear models (the capability
:class:`transflow.expressivity._pwl.AbstractExactProgram`).

Every float weight is a dyadic rational ``m·2^e``, so with the activation pattern of the
earlier layers frozen, every logit of the next decision layer is an affine function of the
(one or two) line/plane coordinates with dyadic coefficients. A program propagates those
coefficients exactly as integer arrays with one power-of-two scale per array
(:class:`_Aff`): ``start(x)`` → state, ``logits(state, l)`` → (integer logits ``(G, K, 3)``
up to a positive scale, cache), ``advance(state, cache, l, winners)`` → state,
``output(state)`` → the exact output map. A model with the capability returns its program
from ``exact_program()``; :class:`GenericProgram` serves any model with exact evaluation
(three exact rational evaluations per call).
"""

from __future__ import annotations

import abc
import math
from fractions import Fraction

import numpy as np

__all__ = [
    "ExactProgram",
    "GenericProgram",
    "MaxoutProgram",
    "NotExact",
    "RestrictedProgram",
    "TransformerProgram",
]


class NotExact(Exception):
    """The model (or this part of it) has no exact affine program."""


# --------------------------------------------------------------------------- dyadic arrays
def _dyadic(a) -> tuple[np.ndarray, int]:
    """``(M, e)`` with ``a = M·2^e`` exactly, M an object array of Python ints."""
    a = np.asarray(a, np.float64)
    if not np.all(np.isfinite(a)):
        raise NotExact("a parameter is not finite")
    flat = a.reshape(-1)
    ratios = [float(v).as_integer_ratio() for v in flat]
    exps = [-(d.bit_length() - 1) for _, d in ratios if _ != 0]
    e = min(exps) if exps else 0
    M = np.empty(flat.shape, dtype=object)
    for i, (n, d) in enumerate(ratios):
        M[i] = n << (-(d.bit_length() - 1) - e)
    return M.reshape(a.shape), e


class _Aff:
    """An array of affine functions of (s, t): ``M[..., 0] + M[..., 1] s + M[..., 2] t``,
    all scaled by ``2^e`` (M: object array of Python ints, trailing axis 3)."""

    __slots__ = ("M", "e")

    def __init__(self, M, e):
        self.M, self.e = M, e

    def __getitem__(self, idx):
        return _Aff(self.M[idx], self.e)

    def aligned(self, e):
        return self.M if e == self.e else self.M * (1 << (self.e - e))

    def __add__(self, other: _Aff) -> _Aff:
        e = min(self.e, other.e)
        return _Aff(self.aligned(e) + other.aligned(e), e)

    def reshape(self, *shape):
        return _Aff(self.M.reshape(*shape, 3), self.e)

    def fractions(self) -> np.ndarray:
        s = Fraction(2) ** self.e
        out = np.empty(self.M.shape, dtype=object)
        for idx in np.ndindex(*self.M.shape):
            out[idx] = Fraction(self.M[idx]) * s
        return out


def _lin(X: _Aff, W, b=None) -> _Aff:
    """``X @ W + b`` for X of shape (..., n_in) (affine), W ``(n_in, n_out)`` and b
    ``(n_out,)`` given as dyadic pairs."""
    WM, We = W
    M = np.matmul(np.moveaxis(X.M, -1, -2), WM)  # (..., 3, n_out)
    out = _Aff(np.ascontiguousarray(np.moveaxis(M, -2, -1)), X.e + We)
    if b is None:
        return out
    bM, be = b
    e = min(out.e, be)
    M = out.aligned(e).copy()
    M[..., 0] = M[..., 0] + bM * (1 << (be - e))
    return _Aff(M, e)


def _const(M, e, shape) -> _Aff:
    out = np.zeros((*shape, 3), dtype=object)
    out[..., 0] = M
    return _Aff(out, e)


def _zeros_obj(shape):
    out = np.empty(shape, dtype=object)
    out.fill(0)
    return out


# --------------------------------------------------------------------------- programs
class ExactProgram(abc.ABC):
    """Exact affine propagation of one model: ``start(x)`` → state, ``logits(state, l)`` →
    (integer logits (G, K, 3) up to a positive scale, cache), ``advance(state, cache, l,
    winners)`` → state, ``output(state)`` → exact map (an :class:`_Aff` or Fractions
    ``(d_out, 3)``). ``name`` is reported in the certificate; ``integer`` is False for a
    program that evaluates the model exactly instead of propagating integers."""

    n_layers: int
    name: str = "?"
    integer: bool = True

    @abc.abstractmethod
    def start(self, x: _Aff):
        """The state of the input ``x`` (the identity map of the coordinates)."""

    @abc.abstractmethod
    def logits(self, state, layer: int):
        """``(Z, cache)``: the integer logits of decision layer ``layer`` given ``state``."""

    @abc.abstractmethod
    def advance(self, state, cache, layer: int, win):
        """The state after decision layer ``layer`` with the winners ``win`` (G,)."""

    @abc.abstractmethod
    def output(self, state):
        """The exact output map of ``state``."""


class MaxoutProgram(ExactProgram):
    """The program of a :class:`MaxoutNetwork`."""

    name = "Maxout"

    def __init__(self, net):
        self.W, self.b, self.shape = [], [], []
        for w, b in zip(net.weights, net.biases):
            n, k, n_prev = w.shape
            self.W.append(_dyadic(np.asarray(w, np.float64).reshape(n * k, n_prev).T))
            self.b.append(_dyadic(np.asarray(b, np.float64).reshape(n * k)))
            self.shape.append((n, k))
        self.A = _dyadic(np.asarray(net.readout_weight, np.float64).T)
        self.c = _dyadic(np.asarray(net.readout_bias, np.float64))
        self.n_layers = len(self.W)

    def start(self, x: _Aff):
        return x

    def logits(self, h: _Aff, layer: int):
        n, k = self.shape[layer]
        z = _lin(h, self.W[layer], self.b[layer]).reshape(n, k)
        return z, z

    def advance(self, h, z: _Aff, layer: int, win):
        n = z.M.shape[0]
        return _Aff(z.M[np.arange(n), win], z.e)

    def output(self, h: _Aff):
        return _lin(h, self.A, self.c)


class TransformerProgram(ExactProgram):
    """The program of a hardmax :class:`MaxoutTransformer` (constant queries, checked
    exactly: :class:`NotExact` otherwise)."""

    name = "Transformer"

    def __init__(self, tf):
        if not tf.hardmax:
            raise NotExact("softmax attention is not piecewise linear")
        self.P = _dyadic(np.asarray(tf.positional, np.float64))
        self.T, self.m = self.P[0].shape
        self.layers = []  # (kind, params)
        for a, f in tf.blocks:
            if a is not None:
                p = [_dyadic(np.asarray(t, np.float64)) for t in (a.wq, a.bq, a.wk, a.bk)]
                p += [_dyadic(np.asarray(t, np.float64)) for t in (a.wv, a.bv, a.wo, a.bo)]
                self.layers.append(("attn", (*p, a.n_heads)))
            if f is not None:
                W1, W2 = f.weights
                b1, b2 = f.biases
                p = [_dyadic(np.asarray(t, np.float64)) for t in (W1, b1, W2, b2)]
                self.layers.append(("ffn", tuple(p)))
        self.A = _dyadic(np.asarray(tf.readout_weight, np.float64).T)
        self.c = _dyadic(np.asarray(tf.readout_bias, np.float64))
        self.n_out = tf.n_out_units
        self.n_layers = len(self.layers)

    def start(self, x: _Aff):
        T, m = self.T, self.m
        PM, Pe = self.P
        d = x.M.shape[0]
        e = min(Pe, x.e)
        M = _zeros_obj((T, m, 3))
        M[..., 0] = PM * (1 << (Pe - e))
        M[:, :d, :] = M[:, :d, :] + x.aligned(e)[None]
        return _Aff(M, e)

    def logits(self, X: _Aff, layer: int):
        kind, p = self.layers[layer]
        T = self.T
        if kind == "attn":
            wq, bq, wk, bk, wv, bv, wo, bo, H = p
            q = _lin(X, wq, bq)  # (T, H dk, 3)
            Q = q.M[0, :, 0]
            if any(v != 0 for v in q.M[..., 1:].reshape(-1)) or any(
                v != w for row in q.M[1:, :, 0] for v, w in zip(row, Q)
            ):
                raise NotExact(
                    "an attention query depends on x or differs between tokens (the scores "
                    "are not affine with the pattern frozen)"
                )
            k = _lin(X, wk, bk)  # (T, H dk, 3)
            dk = Q.shape[0] // H
            kM = k.M.reshape(T, H, dk, 3)
            s = (kM * Q.reshape(1, H, dk, 1)).sum(axis=2)  # (T, H, 3)
            return _Aff(np.ascontiguousarray(s.transpose(1, 0, 2)), q.e + k.e), None
        W1, b1, W2, b2 = p
        pre = _lin(X, W1, b1)  # (T, r, 3)
        r = pre.M.shape[1]
        M = _zeros_obj((T * r, 2, 3))
        M[:, 1, :] = pre.M.reshape(T * r, 3)
        return _Aff(M, pre.e), pre

    def advance(self, X: _Aff, cache, layer: int, win):
        kind, p = self.layers[layer]
        T = self.T
        if kind == "attn":
            wq, bq, wk, bk, wv, bv, wo, bo, H = p
            v = _lin(X, wv, bv)  # (T, H dv, 3)
            dv = v.M.shape[1] // H
            vM = v.M.reshape(T, H, dv, 3)
            o = _Aff(np.concatenate([vM[win[h], h] for h in range(H)]), v.e)  # (H dv, 3)
            out = _lin(o, wo, bo)  # (m, 3)
            return X + _Aff(np.broadcast_to(out.M[None], X.M.shape), out.e)
        W1, b1, W2, b2 = p
        pre = cache
        act = np.asarray(win).reshape(pre.M.shape[:2]) == 1
        hid = _Aff(np.where(act[..., None], pre.M, 0), pre.e)
        return X + _lin(hid, W2, b2)

    def output(self, X: _Aff):
        return _lin(X[0, : self.n_out], self.A, self.c)


class RestrictedProgram(ExactProgram):
    """The program of a slice ``t ↦ f(origin + D t)``: the inner model's program on the
    composed input."""

    name = "Restricted"

    def __init__(self, g, inner: ExactProgram):
        self.inner = inner
        self.o = np.asarray(g.origin, np.float64)
        self.D = np.asarray(g.directions, np.float64)  # (d, 2)
        self.n_layers = inner.n_layers

    def start(self, x: _Aff):
        # origin + D @ x: x is the identity map of (s, t) here; compose in general
        oM, oe = _dyadic(self.o)
        y = _lin(x, _dyadic(self.D.T)) + _const(oM, oe, oM.shape)
        return self.inner.start(y)

    def logits(self, state, layer):
        return self.inner.logits(state, layer)

    def advance(self, state, cache, layer, win):
        return self.inner.advance(state, cache, layer, win)

    def output(self, state):
        return self.inner.output(state)


class GenericProgram(ExactProgram):
    """Any model with ``exact_eval`` (:class:`AbstractExactEval`): the logits of layer l
    from three exact rational evaluations with the prefix pattern frozen (later layers
    padded with winner 0)."""

    name = "Generic"
    integer = False

    def __init__(self, f, sizes):
        self.f = f
        self.params = f.exact_params()
        self.sizes = sizes  # groups per decision layer
        self.n_layers = len(sizes)

    def start(self, x):
        return ()

    def _eval(self, prefix):
        pat = np.concatenate(
            [np.asarray(w, np.int64) for w in prefix]
            + [np.zeros(g, np.int64) for g in self.sizes[len(prefix) :]]
        )
        pts = [(0, 0), (1, 0), (0, 1)]
        return [
            self.f.exact_eval(self.params, np.array([Fraction(a), Fraction(b)], dtype=object), pat)
            for a, b in pts
        ]

    def logits(self, prefix, layer):
        (_, L0, _), (_, L1, _), (_, L2, _) = self._eval(prefix)
        z0, z1, z2 = (np.asarray(L[layer], dtype=object) for L in (L0, L1, L2))
        F = np.stack([z0, z1 - z0, z2 - z0], axis=-1)
        den = 1
        for v in F.reshape(-1):
            den = math.lcm(den, Fraction(v).denominator)
        M = np.empty(F.shape, dtype=object)
        for idx in np.ndindex(*F.shape):
            v = Fraction(F[idx]) * den
            M[idx] = v.numerator
        return _Aff(M, 0), None

    def advance(self, prefix, cache, layer, win):
        return (*prefix, np.asarray(win, np.int64))

    def output(self, prefix):
        (y0, _, _), (y1, _, _), (y2, _, _) = self._eval(prefix)
        y0, y1, y2 = (np.asarray(y, dtype=object) for y in (y0, y1, y2))
        return np.stack([y0, y1 - y0, y2 - y0], axis=-1)
