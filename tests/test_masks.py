"""Masks as restrictions of the attention integral (docs/masks.md).

- key padding = zero token weight: a ragged batch equals each unpadded sequence alone
  (≤ 1e-12, float64), and kept rows do not change *at all* when padded tokens change;
- attention masks (bool support, additive float) through the dense and the chunked
  operator, values and gradients (≤ 1e-12 relative, float64);
- rows without admissible keys: finite, 0 per head (𝒜u = b_O);
- masks through every scheme, evolve, SplitTransformer, cross-attention, sharded paths;
- bad masks raise naming the argument and the expected shape.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transflow import (
    AttentionParams,
    Grid,
    LayerControls,
    LieScheme,
    PreNormScheme,
    SplitTransformer,
    attention,
    attention_weights,
    causal_mask,
    cross_attention,
    evolve,
    mask_from_hf,
    mask_from_torch,
    online_softmax_attention,
    padding_mask,
    stack_controls,
)
from transflow.interop import CausalScheme

TOL = 1e-12
D, H = 8, 2


def _params(getkey, d=D, heads=H):
    p = AttentionParams.random(d, n_heads=heads, key=getkey())
    # non-zero biases everywhere (random() may leave some at 0)
    return jax.tree.map(lambda x: x + 0.1 * jax.random.normal(getkey(), x.shape), p)


def _model(getkey, scheme, layers=2):
    theta = stack_controls(
        [
            LayerControls.random(D, n_heads=H, d_ff=16, bias=True, key=getkey())
            for _ in range(layers)
        ]
    )
    return SplitTransformer(theta, scheme)


def _rel(a, b):
    return float(jnp.max(jnp.abs(a - b)) / max(1.0, float(jnp.max(jnp.abs(b)))))


SCHEMES = {
    "lie": LieScheme(),
    "prenorm": PreNormScheme(),
    "prenorm_chunked": PreNormScheme(implementation="chunked"),
}


# --------------------------------------------------------------------------- ragged batches
@pytest.mark.parametrize("name", ["lie", "prenorm_chunked"])
def test_ragged_batch_equals_each_sequence_alone(getkey, name):
    model = _model(getkey, SCHEMES[name])
    lengths, n = (9, 4, 1), 9
    u = jax.random.normal(getkey(), (len(lengths), n, D))
    pad = padding_mask(lengths, n)
    out = jax.vmap(lambda x, m: model(x, key_padding_mask=m))(u, pad)
    assert bool(jnp.all(jnp.isfinite(out)))
    for b, L in enumerate(lengths):
        alone = model(u[b, :L])
        assert _rel(out[b, :L], alone) <= TOL, (name, L)


@pytest.mark.parametrize("impl,hardmax", [("dense", False), ("chunked", True)])
def test_kept_rows_do_not_change_when_padded_tokens_change(getkey, impl, hardmax):
    """The property itself: Δ on kept rows is exactly 0.0, also after several steps."""
    p = _params(getkey)
    n = 10
    pad = jnp.arange(n) >= 6
    u = jax.random.normal(getkey(), (n, D))
    v = u.at[6:].set(100.0 * jax.random.normal(getkey(), (4, D)))
    kw = dict(key_padding_mask=pad, implementation=impl, hardmax=hardmax)
    if impl == "chunked":
        kw.update(query_block=3, key_block=4)
    a, b = attention(u, p, **kw), attention(v, p, **kw)
    assert float(jnp.max(jnp.abs(a[:6] - b[:6]))) == 0.0
    assert float(jnp.max(jnp.abs(a[6:] - b[6:]))) > 0.0  # padded rows do evolve
    model = _model(getkey, LieScheme(implementation=impl, hardmax=hardmax), layers=3)
    ya, yb = model(u, key_padding_mask=pad), model(v, key_padding_mask=pad)
    assert float(jnp.max(jnp.abs(ya[:6] - yb[:6]))) == 0.0


def test_padded_rows_follow_torch_slow_path_not_zeros(getkey):
    """Padded query rows attend to the kept tokens (torch's slow path), not zeros."""
    p = _params(getkey)
    u = jax.random.normal(getkey(), (5, D))
    pad = jnp.array([False, False, False, True, True])
    a = attention(u, p, key_padding_mask=pad)
    # row 4 equals the operator on [kept tokens, row 4] read at the last row
    only_kept = jnp.ones((4, 4), bool).at[3, 3].set(False)  # row 3 reads tokens 0..2
    alone = attention(jnp.concatenate([u[:3], u[4:5]]), p, attention_mask=only_kept)
    assert _rel(a[4], alone[3]) <= TOL
    assert float(jnp.max(jnp.abs(a[3:]))) > 0.0


# --------------------------------------------------------------------------- general masks
def _masks(getkey, n, m=None):
    m = n if m is None else m
    b = jax.random.uniform(getkey(), (n, m)) > 0.4
    b = b.at[2].set(False)  # one row with no admissible key
    f = jax.random.normal(getkey(), (H, n, m))
    return {"bool": b, "float": f, "float_inf": jnp.where(b, f, -jnp.inf)}


@pytest.mark.parametrize(
    "kind,causal,hardmax",
    [("bool", True, False), ("float", False, False), ("float_inf", True, True)],
)
def test_chunked_equals_dense_with_masks_values_and_gradients(getkey, kind, causal, hardmax):
    p = _params(getkey)
    n = 11
    am = _masks(getkey, n)[kind]
    pad = jnp.arange(n) >= 8
    u = jax.random.normal(getkey(), (n, D))
    grid = Grid.interval(n, D, x_rule="gauss", y_rule="gauss")

    def f(impl, u, am):
        kw = dict(implementation=impl, causal=causal, hardmax=hardmax, grid=grid)
        if impl == "chunked":
            kw.update(query_block=3, key_block=4)
        return attention(u, p, key_padding_mask=pad, attention_mask=am, **kw)

    a, c = f("dense", u, am), f("chunked", u, am)
    assert bool(jnp.all(jnp.isfinite(a)))
    assert _rel(c, a) <= TOL
    loss = lambda impl: lambda u, am: jnp.sum(jnp.sin(f(impl, u, am)))
    argnums = (0,) if kind == "bool" else (0, 1)
    ga = jax.grad(loss("dense"), argnums=argnums)(u, am)
    gc = jax.grad(loss("chunked"), argnums=argnums)(u, am)
    assert bool(jnp.all(jnp.isfinite(ga[0])))
    for x, y in zip(gc, ga):
        finite = jnp.isfinite(y)  # d/db at b = −∞ entries: 0·∞ is not defined
        assert _rel(jnp.where(finite, x, 0), jnp.where(finite, y, 0)) <= TOL


def test_bool_mask_equals_minus_inf_float_and_causal_flag(getkey):
    p = _params(getkey)
    n = 7
    u = jax.random.normal(getkey(), (n, D))
    cm = causal_mask(n)
    ref = attention(u, p, causal=True)
    assert _rel(attention(u, p, attention_mask=cm), ref) <= TOL
    assert _rel(attention(u, p, attention_mask=jnp.where(cm, 0.0, -jnp.inf)), ref) <= TOL
    # a finite additive mask reweights: γ ∝ exp(s + b)
    b = jax.random.normal(getkey(), (n, n))
    s = jnp.einsum("hic,hjc->hij", *[x for x in (_q(u, p), _k(u, p))])
    gamma = attention_weights(s, attention_mask=b)
    assert _rel(gamma, jax.nn.softmax(s + b, axis=-1)) <= TOL


def _q(u, p):
    return (u @ p.wq + p.bq).reshape(u.shape[0], H, -1).transpose(1, 0, 2) * (D // H) ** -0.5


def _k(u, p):
    return (u @ p.wk + p.bk).reshape(u.shape[0], H, -1).transpose(1, 0, 2)


def test_fully_masked_rows_are_zero_per_head_and_finite(getkey):
    p = _params(getkey)
    n = 6
    u = jax.random.normal(getkey(), (n, D))
    am = jnp.ones((n, n), bool).at[1].set(False)
    for impl in ("dense", "chunked"):
        f = lambda u, impl=impl: attention(u, p, attention_mask=am, implementation=impl)
        assert _rel(f(u)[1], p.bo) <= TOL  # 𝒜u = b_O where the domain is empty
        g = jax.grad(lambda u, f=f: jnp.sum(f(u)))(u)
        assert bool(jnp.all(jnp.isfinite(g)))
    # the whole sequence padded: every row is empty
    a = attention(u, p, key_padding_mask=jnp.ones((n,), bool))
    assert _rel(a, jnp.broadcast_to(p.bo, a.shape)) <= TOL
    s = jnp.einsum("hic,hjc->hij", _q(u, p), _k(u, p))
    gamma = attention_weights(s, attention_mask=am)
    assert float(jnp.max(jnp.abs(gamma[:, 1]))) == 0.0
    assert _rel(jnp.sum(gamma[:, jnp.array([0, 2, 3, 4, 5])], -1), jnp.ones((H, 5))) <= TOL


def test_online_softmax_attention_masks_and_empty_rows(getkey):
    q, k, v = jax.random.normal(getkey(), (3, H, 9, 4))
    pad = jnp.arange(9) >= 6
    am = (jax.random.uniform(getkey(), (9, 9)) > 0.3).at[0].set(False)
    out = online_softmax_attention(
        q, k, v, key_padding_mask=pad, attention_mask=am, query_block=4, key_block=4
    )
    allowed = am & ~pad[None, :]
    s = jnp.where(allowed, q @ k.swapaxes(-1, -2), -jnp.inf)
    ref = jax.nn.softmax(s, axis=-1) @ v
    assert float(jnp.max(jnp.abs(out[:, 0]))) == 0.0
    assert _rel(out[:, 1:], ref[:, 1:]) <= TOL


def _max_intermediate(jaxpr) -> int:
    """Largest number of elements of any value in a jaxpr, sub-jaxprs included."""
    import jax.extend.core

    best = 0
    for eqn in jaxpr.eqns:
        for var in eqn.outvars:
            shape = getattr(var.aval, "shape", ())
            best = max(best, int(np.prod(shape)) if shape else 1)
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            best = max(best, _max_intermediate(sub))
    return best


def test_chunked_with_padding_stays_memory_linear(getkey):
    """With key_padding_mask (and causal) no intermediate of the chunked operator or its
    gradient has n² entries: padding is one log-weight per key."""
    n, d = 1024, 16
    p = AttentionParams.random(d, n_heads=1, dtype=jnp.float32, key=getkey())
    u = jax.random.normal(getkey(), (n, d), jnp.float32)
    pad = jnp.arange(n) >= 700

    def f(u):
        out = attention(
            u,
            p,
            causal=True,
            key_padding_mask=pad,
            implementation="chunked",
            query_block=128,
            key_block=128,
        )
        return jnp.sum(out**2)

    assert _max_intermediate(jax.make_jaxpr(jax.value_and_grad(f))(u).jaxpr) <= 128 * 128 * 2


# --------------------------------------------------------------------------- models
@pytest.mark.parametrize("name", ["lie"])
def test_masks_through_evolve_model_substeps_and_gradients(getkey, name):
    model = _model(getkey, SCHEMES[name])
    n = 7
    u = jax.random.normal(getkey(), (n, D))
    pad = jnp.arange(n) >= 5
    am = _masks(getkey, n)["float_inf"]
    y = model(u, key_padding_mask=pad, attention_mask=am)
    y2 = evolve(u, model.controls, model.scheme, key_padding_mask=pad, attention_mask=am)
    assert float(jnp.max(jnp.abs(y - y2))) == 0.0
    assert bool(jnp.all(jnp.isfinite(y)))
    assert _rel(y, model(u)) > 1e-3  # the masks matter
    st = model.substeps(u, key_padding_mask=pad, attention_mask=am)
    one = _model_one(model)
    assert _rel(st[model.scheme.substep_names(model.layer(0))[-1]], one(u, pad, am)) <= TOL
    g = jax.grad(lambda c: jnp.sum(evolve(u, c, model.scheme, key_padding_mask=pad) ** 2))(
        model.controls
    )
    assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(g))


def _model_one(model):
    first = SplitTransformer(jax.tree.map(lambda x: x[:1], model.controls), model.scheme)
    return lambda u, pad, am: first(u, key_padding_mask=pad, attention_mask=am)


def test_causal_scheme_combines_causal_and_padding(getkey):
    model = _model(getkey, CausalScheme(PreNormScheme()))
    n = 6
    u = jax.random.normal(getkey(), (n, D))
    pad = jnp.array([True, True, False, False, False, False])  # left padding (HF style)
    y = model(u, key_padding_mask=pad)
    plain = SplitTransformer(model.controls, PreNormScheme())
    ref = plain(u, attention_mask=causal_mask(n) & ~pad[None, :])
    assert _rel(y, ref) <= TOL
    assert bool(jnp.all(jnp.isfinite(y)))  # rows 0, 1 have no admissible key
    assert _rel(y[2:], model(u[2:])) <= TOL


def test_cross_attention_padding_equals_trimmed_memory(getkey):
    p = _params(getkey)
    u, mem = jax.random.normal(getkey(), (5, D)), jax.random.normal(getkey(), (8, D))
    mpad = jnp.arange(8) >= 6
    ref = cross_attention(u, mem[:6], p)
    for impl in ("dense", "chunked"):
        out = cross_attention(
            u, mem, p, key_padding_mask=mpad, implementation=impl, query_block=2, key_block=3
        )
        assert _rel(out, ref) <= TOL
    am = jax.random.uniform(getkey(), (5, 8)) > 0.5
    a = cross_attention(u, mem, p, attention_mask=am)
    c = cross_attention(u, mem, p, attention_mask=am, implementation="chunked", key_block=3)
    assert _rel(c, a) <= TOL


def test_sharded_paths_with_masks_one_device(getkey):
    from transflow.parallel import make_mesh, max_rel_diff, shard_evolve

    model = _model(getkey, LieScheme())
    B, n = 3, 8
    u = jax.random.normal(getkey(), (B, n, D))
    pad = padding_mask([8, 5, 2], n)
    am = jax.random.normal(getkey(), (B, H, n, n))
    ref = jax.vmap(lambda x, k, a: model(x, key_padding_mask=k, attention_mask=a))(u, pad, am)
    mesh = make_mesh((1, 1), ("t", "f"), devices=jax.devices()[:1])
    axes = {"tokens": "t", "features": "f"}
    for method in ("gspmd", "ring"):
        out = shard_evolve(
            model, u, mesh, axes, method=method, key_padding_mask=pad, attention_mask=am
        )
        assert max_rel_diff(out, ref) <= TOL, method
    with pytest.raises(ValueError, match=r"key_padding_mask.*\(3, 8\)"):
        shard_evolve(model, u, mesh, axes, key_padding_mask=pad[:, :4])


# --------------------------------------------------------------------------- conversions
def test_polarity_converters():
    torch_bool = np.triu(np.ones((3, 3), bool), 1)  # torch: True = NOT allowed
    assert bool(jnp.all(mask_from_torch(torch_bool) == causal_mask(3)))
    f = np.array([[0.0, -np.inf], [0.0, 0.0]])
    assert bool(jnp.all(mask_from_torch(f) == f))
    hf = np.array([[1, 1, 0], [1, 0, 0]])  # HF: 1 = keep
    assert mask_from_hf(hf).tolist() == [[False, False, True], [False, True, True]]
    ext = np.zeros((2, 1, 3, 3))
    assert mask_from_hf(ext).shape == (2, 1, 3, 3)
    assert padding_mask([2], 3).tolist() == [[False, False, True]]


# --------------------------------------------------------------------------- bad input
def test_bad_masks_name_argument_and_expected_shape(getkey):
    p = _params(getkey)
    u = jnp.ones((5, D))
    with pytest.raises(ValueError, match=r"`key_padding_mask`.*expected shape \(5,\)"):
        attention(u, p, key_padding_mask=jnp.zeros((4,), bool))
    with pytest.raises(TypeError, match=r"`key_padding_mask`.*bool.*mask_from_hf"):
        attention(u, p, key_padding_mask=jnp.zeros((5,), jnp.int32))
    with pytest.raises(ValueError, match=r"`attention_mask`.*expected shape \(5, 5\)"):
        attention(u, p, attention_mask=jnp.zeros((5, 4), bool))
    with pytest.raises(ValueError, match=r"`attention_mask`.*\(1 or 2, 5, 5\)"):
        attention(u, p, attention_mask=jnp.zeros((3, 5, 5), bool))
    with pytest.raises(TypeError, match=r"`attention_mask`.*mask_from_torch"):
        attention(u, p, attention_mask=jnp.zeros((5, 5), jnp.int32))
    model = _model(getkey, LieScheme())
    with pytest.raises(ValueError, match=r"`key_padding_mask`.*jax.vmap"):
        model(u, key_padding_mask=jnp.zeros((2, 5), bool))
    with pytest.raises(ValueError, match=r"`attention_mask`.*\(5, 5\)"):
        model(u, attention_mask=jnp.zeros((4, 4)))
    with pytest.raises(ValueError, match=r"`key_padding_mask`"):
        online_softmax_attention(
            *jnp.ones((3, 1, 5, 2)), key_padding_mask=jnp.zeros((3,), bool), key_block=2
        )


@pytest.mark.slow
def test_sharded_with_masks_on_8_devices():
    """gspmd, ring and gspmd+chunked on a (2, 4) mesh with ragged padding and a per-head
    additive mask with −∞ entries (some rows empty) == single-device evolve (≤ 1e-12)."""
    from transflow.parallel._selftest import run_subprocess

    pairs = [
        ["tokens_x_features", "gspmd"],
        ["tokens_x_features", "ring"],
        ["batch_x_tokens", "ring"],
        ["tokens", "gspmd+chunked"],
    ]
    opts = {"dtypes": ["float64"], "masks": True, "pairs": pairs, "causal": True}
    records = run_subprocess("check", opts, timeout=900)
    assert len(records) == len(pairs)
    for r in records:
        assert r["masks"] and r["max_rel_diff_vs_single_device"] <= 1e-12, r


def test_causal_decoder_takes_padding(getkey):
    from transflow.interop import CausalDecoder, TokenEmbedding

    model = _model(getkey, CausalScheme(PreNormScheme()))
    emb = TokenEmbedding(jax.random.normal(getkey(), (11, D)), jax.random.normal(getkey(), (6, D)))
    dec = CausalDecoder(emb, model, jax.random.normal(getkey(), (D, 11)))
    ids = jnp.array([3, 1, 4, 1, 5, 9])
    pad = mask_from_hf(jnp.array([1, 1, 1, 1, 0, 0]))  # right padding, HF polarity
    out = dec.logits(ids, key_padding_mask=pad)
    assert _rel(out[:4], dec.logits(ids[:4])) <= TOL
