"""The exact rational walk of a 1-D model (:class:`_Exact`), shared by the certified and
the layerwise 1-D counters; imports only :mod:`._budget`."""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from ._budget import CertificationError, check_budget


class _Exact:
    """Exact rational evaluation of a 1-D model: patterns, frozen affine gaps, walks."""

    def __init__(self, f):
        self.f = f
        self.params = f.exact_params()
        self.n_eval = 0

    def eval(self, t, pattern=None):
        self.n_eval += 1
        y, L, pat = self.f.exact_eval(self.params, np.array([t], dtype=object), pattern)
        return y, L, pat

    @staticmethod
    def gaps(L, pat):
        out, off = [], 0
        for v in L:
            G, K = v.shape
            for g in range(G):
                w = int(pat[off + g])
                for c in range(K):
                    if c != w:
                        out.append(v[g, w] - v[g, c])
            off += G
        return out

    def frozen(self, pat, t):
        """Gaps at t and their exact rates (frozen pattern: affine in t)."""
        _, L0, _ = self.eval(t, pat)
        _, L1, _ = self.eval(t + 1, pat)
        g0, g1 = self.gaps(L0, pat), self.gaps(L1, pat)
        return g0, [b - a for a, b in zip(g0, g1)]

    def exit_right(self, pat, t):
        g, r = self.frozen(pat, t)
        roots = [t + gi / (-ri) for gi, ri in zip(g, r) if ri < 0]
        return min(roots) if roots else None

    def exit_left(self, pat, t):
        g, r = self.frozen(pat, t)
        roots = [t - gi / ri for gi, ri in zip(g, r) if ri > 0]
        return max(roots) if roots else None

    def right_pattern(self, t):
        """The pattern on ``(t, t + ε)`` for small ε > 0 (the pattern of the region that
        starts at t): layer by layer, with the earlier layers frozen to their right-hand
        winners, every group's winner is the lexicographic argmax of (value at t, slope);
        equal value and slope (identical competitors) go to the lowest index. At a kink
        the plain pattern at t (lowest index on ties) may be the left-hand one."""
        _, L0, pat = self.eval(t)
        pat = np.array(pat, np.int64)
        L1 = None  # logits at t + 1 under the current pattern (only needed at ties)
        off = 0
        for layer in range(len(L0)):
            v0 = L0[layer]
            G, K = v0.shape
            changed = False
            for g in range(G):
                w = int(pat[off + g])
                if sum(1 for c in range(K) if v0[g, c] == v0[g, w]) == 1:
                    continue  # no tie: the winner at t wins right of t
                if L1 is None:
                    L1 = self.eval(t + 1, pat)[1]
                v1 = L1[layer]
                best, key = 0, (v0[g, 0], v1[g, 0] - v0[g, 0])
                for c in range(1, K):
                    kc = (v0[g, c], v1[g, c] - v0[g, c])
                    if kc > key:
                        best, key = c, kc
                if best != w:
                    pat[off + g] = best
                    changed = True
            off += G
            if changed and layer + 1 < len(L0):
                # the later layers' logits change with this layer's winners
                _, L0, _ = self.eval(t, pat)
                L1 = None
        return pat

    def maps_differ(self, p, q, t):
        yp0 = self.eval(t, p)[0]
        yq0 = self.eval(t, q)[0]
        yp1 = self.eval(t + 1, p)[0]
        yq1 = self.eval(t + 1, q)[0]
        return bool(np.any(yp0 != yq0) or np.any(yp1 != yq1))

    def walk(self, a: Fraction, b: Fraction):
        """Exact switches in the open interval (a, b): list of (point, maps_differ).

        The walk follows right-hand patterns (:meth:`right_pattern`), so a kink at ``a``
        (or at a probe point) is never taken for a region of zero length, and a switch at
        ``b`` is not reported (it is no boundary of a region inside [a, b])."""
        x = a
        pat = self.right_pattern(x)
        out = []
        for _ in range(100000):
            check_budget("exact rational walk")
            e = self.exit_right(pat, x)
            if e is None or e >= b:
                return out
            y = (e + b) / 2
            while True:
                r = self.right_pattern(y)
                lr = self.exit_left(r, y)
                if lr is None or lr <= e:
                    break
                y = (e + lr) / 2
            if np.array_equal(r, pat):
                x = y
                continue
            out.append((e, self.maps_differ(pat, r, e)))
            pat, x = r, y
        raise CertificationError("exact walk did not terminate (more than 1e5 steps)")
