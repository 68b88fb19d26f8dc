"""Transformers realizing maxout / ReLU / CPWL functions: checks C1–C4, C7, C9, C11 of
docs/spec/maxout-expressivity.md §7, and bad input.

Tolerances: float64 — the hardmax construction equals the target to ≤ 1e-12 relative to
max|y| on the sample (spec reference: ~1e-14 absolute); float32 — ≤ 1e-4 relative on a
shallow net.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transflow.expressivity import (
    MaxoutNetwork,
    hinging_cpwl,
    ibp_bounds,
    lattice_cpwl,
    lattice_eval,
    lattice_from_1d,
    maxout_to_transformer,
    zigzag_maxout,
)

RTOL64 = 1e-12


@eqx.filter_jit
def batched(f, x):
    """vmap(f)(x), compiled once per model structure (f is an argument, not a constant)."""
    return jax.vmap(f)(x)


def random_maxout(rng, d, widths, ranks, d_out=2):
    ws, bs, prev = [], [], d
    for n, k in zip(widths, ranks):
        ws.append(rng.normal(size=(n, k, prev)))
        bs.append(rng.normal(size=(n, k)))
        prev = n
    return MaxoutNetwork(ws, bs, rng.normal(size=(d_out, prev)), rng.normal(size=d_out))


def rel_err(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return float(np.abs(a - b).max() / max(1.0, np.abs(b).max()))


# ---------------------------------------------------------------- docs/spec/maxout-expressivity.md
# Appendix A (numpy)
def _ref_build_rc(Ws, bs, lo, hi, margin):
    """The spec's verified numpy reference builder (Appendix A), Variant A."""
    L, d = len(Ws), Ws[0].shape[2]
    ns, ks = [W.shape[0] for W in Ws], [W.shape[1] for W in Ws]
    T, nh, nsc = max(ks), max([d] + ns), max(ns)
    m = nh + nsc + T + 1
    sI, pI, one = (lambda i: nh + i), (lambda t: nh + nsc + t), m - 1
    B, lo_, hi_ = [], lo, hi
    for W, b in zip(Ws, bs):
        Wp, Wm = np.clip(W, 0, None), np.clip(W, None, 0)
        zl, zh = Wp @ lo_ + Wm @ hi_ + b, Wp @ hi_ + Wm @ lo_ + b
        B.append(max(abs(zl).max(), abs(zh).max()) + margin)
        lo_, hi_ = zl.max(-1), zh.max(-1)

    def writer(ell):
        R = []
        for j in range(ks[ell]):
            for i in range(ns[ell]):
                w1 = np.zeros(m)
                w1[: Ws[ell].shape[2]] = Ws[ell][i, j]
                w1[pI(j)] = 2 * B[ell]
                w2 = np.zeros(m)
                w2[sI(i)] = 1.0
                R.append((w1, bs[ell][i, j] - B[ell], w2))
        return R

    def clearer(ell):
        R = []
        for i in range(ns[ell]):
            w1 = np.zeros(m)
            w1[sI(i)] = 1
            w2 = np.zeros(m)
            w2[sI(i)] = -1
            R.append((w1, 0.0, w2))
        return R

    def pack(R):
        if not R:
            return None
        return (
            np.array([r[0] for r in R]),
            np.array([r[1] for r in R]),
            np.array([r[2] for r in R]).T,
        )

    def max_attn(ell):
        n = ns[ell]
        Wq, Wk, Wv, Wo = np.zeros((n, m)), np.zeros((n, m)), np.zeros((n, m)), np.zeros((m, n))
        for i in range(n):
            Wq[i, one] = 1
            Wk[i, sI(i)] = 1
            Wv[i, sI(i)] = 1
            Wv[i, i] = -1
            Wv[i, one] = -B[ell]
            Wo[i, i] = 1
        return (Wq, Wk, Wv, Wo)

    blocks = [(None, pack(writer(0)))]
    for ell in range(L):
        blocks.append(
            (max_attn(ell), pack(writer(ell + 1) + clearer(ell)) if ell + 1 < L else None)
        )

    def run(x):
        X = np.zeros((len(x), T, m))
        X[:, :, :d] = x[:, None, :]
        X[:, :, one] = 1
        X[:, np.arange(T), pI(np.arange(T))] = 1
        for a, f in blocks:
            if a is not None:
                Wq, Wk, Wv, Wo = a
                S = np.einsum("nqh,nkh->nhqk", X @ Wq.T, X @ Wk.T)
                P = (S == S.max(-1, keepdims=True)).astype(float)
                P /= P.sum(-1, keepdims=True)
                X = X + np.einsum("nhqk,nkh->nqh", P, X @ Wv.T) @ Wo.T
            if f is not None:
                W1, b1, W2 = f
                X = X + np.maximum(X @ W1.T + b1, 0) @ W2.T
        return X[:, 0, : ns[-1]]

    return run, B


# ---------------------------------------------------------------- C1, C7, C9
@pytest.fixture(scope="module")
def example_net():
    """The spec's worked example: d=3, widths (5,4,3), ranks (2,4,3) (null pieces: ties)."""
    return random_maxout(np.random.default_rng(0), 3, (5, 4, 3), (2, 4, 3))


@pytest.mark.parametrize("variant", ["A", "B"])
def test_hardmax_equals_maxout_c1_c7(example_net, variant):
    net = example_net
    tf = maxout_to_transformer(net, -1.0, 1.0, variant=variant)
    x = np.random.default_rng(1).uniform(-1, 1, size=(20000, 3))
    y_net = batched(net, x)
    y_tf = batched(tf, x)
    assert rel_err(y_tf, y_net) <= RTOL64
    # the maxout network itself against a plain numpy forward pass
    h = x
    for w, b in zip(net.weights, net.biases):
        h = np.max(np.einsum("nkp,bp->bnk", np.asarray(w), h) + np.asarray(b), axis=-1)
    y_np = h @ np.asarray(net.readout_weight).T + np.asarray(net.readout_bias)
    assert rel_err(y_net, y_np) <= RTOL64
    assert tf.n_tokens == max(net.ranks) + (variant == "B")
    assert tf.depth == (net.depth + 1 if variant == "A" else 3 * net.depth)


def test_matches_spec_numpy_reference(example_net):
    """transflow's operators reproduce the spec's independent numpy builder (Appendix A)."""
    net = example_net
    Ws = [np.asarray(w) for w in net.weights]
    bs = [np.asarray(b) for b in net.biases]
    run, B = _ref_build_rc(Ws, bs, -np.ones(3), np.ones(3), margin=1.0)
    tf = maxout_to_transformer(net, -1.0, 1.0, margin=1.0)
    np.testing.assert_allclose(tf.bounds, B, rtol=1e-15)
    x = np.random.default_rng(2).uniform(-1, 1, size=(2000, 3))
    h_ref = run(x)
    X = batched(tf.stream, x)
    assert rel_err(X[:, 0, : net.widths[-1]], h_ref) <= RTOL64


def test_parameter_counts_c9(example_net):
    net = example_net
    tf = maxout_to_transformer(net, -1.0, 1.0)
    pc = tf.param_counts()
    d, ns, ks = net.in_dim, net.widths, net.ranks
    n_prev = (d, *ns[:-1])
    P_N = sum(k * n * (p + 1) for k, n, p in zip(ks, ns, n_prev))
    nnz = sum(k * n * (p + 3) for k, n, p in zip(ks, ns, n_prev)) + 6 * sum(ns) + 2 * sum(ns[:-1])
    T, m = max(ks), max((d, *ns)) + max(ns) + max(ks) + 1
    heads = (0, *ns)
    ffn = (ks[0] * ns[0], *(k * n + p for k, n, p in zip(ks[1:], ns[1:], ns[:-1])), 0)
    dense = sum(4 * m * H + 2 * m * r + r + m for H, r in zip(heads, ffn))
    assert (pc["maxout"], pc["nnz"], pc["dense"]) == (P_N, nnz, dense)
    assert (pc["tokens"], pc["width"], pc["depth"]) == (T, m, net.depth + 1)
    # the worked example of docs/spec/maxout-expressivity.md §4 (reference values)
    assert (P_N, nnz, dense, m) == (181, 341, 2144, 15)
    # Variant B non-zeros: Σ_ℓ [k n (n_{ℓ−1} + 11) + 8 n]
    pcb = maxout_to_transformer(net, -1.0, 1.0, variant="B").param_counts()
    assert pcb["nnz"] == sum(k * n * (p + 11) + 8 * n for k, n, p in zip(ks, ns, n_prev))


def test_parameter_counts_other_architecture():
    net = random_maxout(np.random.default_rng(3), 2, (3, 6), (5, 2), d_out=1)
    pc = maxout_to_transformer(net, -1.0, 1.0).param_counts()
    d, ns, ks = 2, (3, 6), (5, 2)
    n_prev = (d, 3)
    assert pc["maxout"] == sum(k * n * (p + 1) for k, n, p in zip(ks, ns, n_prev))
    assert pc["nnz"] == pc["maxout"] + sum(2 * k * n + 6 * n for k, n in zip(ks, ns)) + 2 * 3


# ---------------------------------------------------------------- C2, C3 (ReLU, CPWL)
def test_relu_network_c2():
    rng = np.random.default_rng(4)
    sizes = (4, 8, 8, 6, 1)
    Ws = [rng.normal(size=(o, i)) / np.sqrt(i) for i, o in zip(sizes[:-1], sizes[1:])]
    bs = [0.3 * rng.normal(size=o) for o in sizes[1:]]
    net = MaxoutNetwork.from_relu(Ws, bs)
    tf = maxout_to_transformer(net, -1.0, 1.0)
    assert (tf.n_tokens, tf.depth) == (2, 4)
    x = rng.uniform(-1, 1, size=(5000, 4))
    h = x
    for w, b in zip(Ws[:-1], bs[:-1]):
        h = np.maximum(h @ w.T + b, 0)
    y_relu = h @ Ws[-1].T + bs[-1]
    assert rel_err(batched(net, x), y_relu) <= RTOL64
    assert rel_err(batched(tf, x), y_relu) <= RTOL64
    pc = tf.param_counts()
    assert pc["max_ffn_width"] <= 3 * 8 and pc["width"] <= 2 * 8 + 3


def test_lattice_cpwl_c3():
    rng = np.random.default_rng(5)
    q, d = 7, 2
    A, c = rng.normal(size=(q, d)), rng.normal(size=q)
    sets = [[0, 1, 2], [2, 3], [3, 4, 5], [5, 6, 0], [1, 4, 6]]
    net = lattice_cpwl(A, c, sets)
    tf = maxout_to_transformer(net, -2.0, 2.0)
    assert (tf.n_tokens, tf.depth, tf.heads()) == (5, 3, (0, 5, 1))
    x = rng.uniform(-2, 2, size=(5000, 2))
    ref = lattice_eval(A, c, sets, x)
    assert rel_err(batched(tf, x)[:, 0], ref) <= RTOL64


def test_lattice_from_1d_interpolant():
    rng = np.random.default_rng(6)
    nodes = np.sort(rng.uniform(-1, 1, size=9))
    values = rng.normal(size=9)
    net, info = lattice_from_1d(nodes, values)
    tf = maxout_to_transformer(net, nodes[0], nodes[-1])
    x = np.linspace(nodes[0], nodes[-1], 3001)
    ref = np.interp(x, nodes, values)
    assert rel_err(batched(net, x[:, None])[:, 0], ref) <= RTOL64
    assert rel_err(batched(tf, x[:, None])[:, 0], ref) <= RTOL64
    assert len(info["sets"]) <= len(nodes) - 1


def test_hinging_hyperplanes():
    rng = np.random.default_rng(7)
    P, d = 4, 2
    W, b = rng.normal(size=(P, d + 1, d)), rng.normal(size=(P, d + 1))
    s = np.array([1.0, -1.0, 1.0, -1.0])
    net = hinging_cpwl(W, b, s)
    tf = maxout_to_transformer(net, -1.0, 1.0)
    assert (tf.n_tokens, tf.depth, tf.heads()) == (d + 1, 2, (0, P))
    x = rng.uniform(-1, 1, size=(3000, d))
    ref = (np.max(np.einsum("pkd,nd->npk", W, x) + b, -1) * s).sum(-1)
    assert rel_err(batched(tf, x)[:, 0], ref) <= RTOL64


# ---------------------------------------------------------------- C4 compactness
def test_outside_box_fails_and_is_reported_c4():
    rng = np.random.default_rng(8)
    net = random_maxout(rng, 2, (4, 3), (3, 2), d_out=1)
    tf = maxout_to_transformer(net, -1.0, 1.0, margin=0.0)
    f_net, f_tf = (lambda x: batched(net, x)), (lambda x: batched(tf, x))
    u = rng.normal(size=(4000, 2))
    u /= np.abs(u).max(-1, keepdims=True)  # on the unit sphere of the sup norm
    errs = {}
    for R in (0.5, 1.0, 30.0, 100.0):
        errs[R] = rel_err(f_tf(R * u), f_net(R * u))
    assert errs[0.5] <= RTOL64 and errs[1.0] <= RTOL64
    assert errs[30.0] > 1e-3 and errs[100.0] > errs[30.0]
    in_box = eqx.filter_jit(tf.in_box)
    assert bool(in_box(jnp.array([0.5, -1.0])))
    assert not bool(in_box(jnp.array([0.5, 1.5])))
    checked = eqx.filter_jit(tf.checked)
    with pytest.raises(Exception, match="outside the box"):
        checked(jnp.array([3.0, 0.0]))
    x_in = jnp.array([0.2, 0.1])
    np.testing.assert_allclose(checked(x_in), batched(net, x_in[None])[0], rtol=1e-12)


# ---------------------------------------------------------------- C11 Jacobians
def test_jacobian_equals_active_piece_c11(example_net):
    net = example_net
    tf = maxout_to_transformer(net, -1.0, 1.0)
    x = np.random.default_rng(9).uniform(-1, 1, size=(300, 3))
    J_tf = batched(jax.jacfwd(tf), x)
    # the active-piece Jacobian of the maxout net, composed explicitly in numpy
    J_ref = []
    for xi in x:
        h, J = xi, np.eye(3)
        for w, b in zip(net.weights, net.biases):
            w, b = np.asarray(w), np.asarray(b)
            z = np.einsum("nkp,p->nk", w, h) + b
            j = z.argmax(-1)
            J = w[np.arange(len(j)), j] @ J
            h = z.max(-1)
        J_ref.append(np.asarray(net.readout_weight) @ J)
    assert rel_err(J_tf, np.array(J_ref)) <= RTOL64


# ---------------------------------------------------------------- float32
def test_float32_construction():
    net = random_maxout(np.random.default_rng(10), 2, (3,), (3,), d_out=1)
    tf = maxout_to_transformer(net, -1.0, 1.0, dtype=jnp.float32)
    x = np.random.default_rng(11).uniform(-1, 1, size=(1000, 2)).astype(np.float32)
    y = batched(tf, jnp.asarray(x))
    assert y.dtype == jnp.float32
    assert rel_err(y, batched(net, x.astype(np.float64))) <= 1e-4


# ---------------------------------------------------------------- zigzag, IBP
def test_zigzag_is_composed_zigzag():
    net = zigzag_maxout(3, 2)
    x = np.linspace(0, 1, 2001)
    m = 5

    def Z(u):  # the zigzag with breakpoints i/m, values 0 (even i) and 1 (odd i)
        t = m * u
        i = np.minimum(np.floor(t), m - 1)
        frac = t - i
        return np.where(i % 2 == 0, frac, 1 - frac)

    np.testing.assert_allclose(batched(net, x[:, None])[:, 0], Z(Z(x)), atol=1e-12)
    assert net.widths == (2, 2) and net.ranks == (3, 3)


def test_ibp_bounds_cover_pieces(example_net):
    net = example_net
    B = ibp_bounds(net, -1.0, 1.0)
    x = np.random.default_rng(12).uniform(-1, 1, size=(5000, 3))
    z = jax.vmap(net.layer_logits)(x)
    for b, zl in zip(B, z):
        assert float(np.abs(zl).max()) <= b


# ---------------------------------------------------------------- bad input
def test_mismatched_shapes_name_the_layer():
    rng = np.random.default_rng(13)
    with pytest.raises(ValueError, match="layer 2"):
        MaxoutNetwork(
            [rng.normal(size=(4, 2, 3)), rng.normal(size=(2, 2, 5))],
            [np.zeros((4, 2)), np.zeros((2, 2))],
        )
    with pytest.raises(ValueError, match=r"layer 1: `biases\[0\]` must have shape \(4, 2\)"):
        MaxoutNetwork([rng.normal(size=(4, 2, 3))], [np.zeros((4, 3))])
    with pytest.raises(ValueError, match="read-out"):
        MaxoutNetwork([rng.normal(size=(4, 2, 3))], [np.zeros((4, 2))], np.ones((1, 3)))
    with pytest.raises(ValueError, match="from_relu layer 2"):
        MaxoutNetwork.from_relu(
            [np.ones((3, 2)), np.ones((3, 4)), np.ones((1, 3))],
            [np.zeros(3), np.zeros(3), np.zeros(1)],
        )


def test_bad_construction_options():
    net = zigzag_maxout(2, 2)
    with pytest.raises(ValueError, match="variant"):
        maxout_to_transformer(net, 0.0, 1.0, variant="C")
    with pytest.raises(ValueError, match="attention"):
        maxout_to_transformer(net, 0.0, 1.0, attention=-1.0)
    with pytest.raises(ValueError, match=r"bounds\[1\]"):
        maxout_to_transformer(net, 0.0, 1.0, bounds=(100.0, 1e-3))
    with pytest.raises(ValueError, match="lo"):
        maxout_to_transformer(net, 1.0, 0.0)
    soft = maxout_to_transformer(net, 0.0, 1.0, attention=10.0)
    with pytest.raises(ValueError, match="hardmax"):
        soft.layer_logits(jnp.array([0.5]))
