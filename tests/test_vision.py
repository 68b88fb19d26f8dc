"""transflow.vision: the ViT front end (initial condition on a 2-D token grid), the
class-token read-out, CvT's convolutions over the token grid and the literal
y-convolution reading of docs/spec/continuous-model.md §4.3 (Q7)."""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest

import transflow
from _reference import require
from transflow.vision import (
    ClassTokenReadout,
    ConvAttentionParams,
    ConvPreNormScheme,
    DepthwiseConv2d,
    FeatureConv,
    PatchEmbedding,
    conv_attention,
    patchify,
)

torch = require("torch", reason="reference convolutions come from PyTorch")


def _rng(seed=0):
    return np.random.default_rng(seed)


def _attn(rng, d, heads, bias=True):
    a = lambda *s: jnp.asarray(rng.standard_normal(s) / np.sqrt(s[0]))
    b = lambda n: jnp.asarray(0.2 * rng.standard_normal(n) * bias)
    return transflow.AttentionParams(
        a(d, d), a(d, d), a(d, d), a(d, d), b(d), b(d), b(d), b(d), heads
    )


# ----------------------------------------------------------------------------- ViT front end
@pytest.mark.parametrize("patch", [4, (2, 3)], ids=["square", "non-square"])
def test_patch_embedding_equals_strided_conv(patch):
    """patchify(image) @ E + b is torch's Conv2d(C, D, kernel=P, stride=P), flattened."""
    rng = _rng(1)
    c, d, image = 3, 10, (8, 12)
    ph, pw = (patch, patch) if isinstance(patch, int) else patch
    conv = torch.nn.Conv2d(c, d, (ph, pw), stride=(ph, pw), dtype=torch.float64)
    x = rng.standard_normal((c, *image))
    with torch.no_grad():
        ref = conv(torch.from_numpy(x)[None]).flatten(2).transpose(1, 2)[0].numpy()
    kernel = jnp.asarray(conv.weight.detach().numpy().reshape(d, -1).T)
    emb = PatchEmbedding(
        kernel, jnp.asarray(conv.bias.detach().numpy()), None, None, image, (ph, pw)
    )
    assert emb.grid_shape == (image[0] // ph, image[1] // pw)
    assert np.max(np.abs(np.asarray(emb(jnp.asarray(x))) - ref)) <= 1e-13
    assert patchify(jnp.asarray(x), patch).shape == (
        emb.grid_shape[0] * emb.grid_shape[1],
        c * ph * pw,
    )


def test_patch_embedding_class_token_position_and_grids():
    rng = _rng(2)
    d, image, patch = 6, (8, 12), 4
    kernel = jnp.asarray(rng.standard_normal((3 * 16, d)))
    cls, pos = jnp.asarray(rng.standard_normal(d)), jnp.asarray(rng.standard_normal((7, d)))
    emb = PatchEmbedding(kernel, jnp.zeros(d), cls, pos, image, (patch, patch))
    x = jnp.asarray(rng.standard_normal((3, *image)))
    f = emb(x)
    assert f.shape == (7, d) and emb.n_tokens == 7 and emb.n_prefix == 1
    np.testing.assert_allclose(f[0], cls + pos[0], rtol=0, atol=1e-14)
    np.testing.assert_allclose(f[1:], patchify(x, 4) @ kernel + pos[1:], rtol=0, atol=1e-13)
    g = emb.token_grid()
    assert g.n_tokens == 7 and g.n_features == d
    np.testing.assert_array_equal(g.x_weights, np.ones(7))
    np.testing.assert_array_equal(g.x_nodes[0], [-1, -1])
    # patch nodes row-major over the 2 x 3 patch grid
    np.testing.assert_array_equal(g.x_nodes[1:], emb.patch_grid().x_nodes)
    np.testing.assert_array_equal(g.x_nodes[2], [0, 1])


def test_patch_embedding_errors_name_the_argument():
    d = 4
    with pytest.raises(ValueError, match="pos_embedding"):
        PatchEmbedding(
            jnp.zeros((12, d)), jnp.zeros(d), jnp.zeros(d), jnp.zeros((4, d)), (4, 4), (2, 2)
        )
    emb = PatchEmbedding(jnp.zeros((12, d)), jnp.zeros(d), None, None, (4, 4), (2, 2))
    with pytest.raises(ValueError, match="image"):
        emb(jnp.zeros((3, 4, 5)))
    with pytest.raises(ValueError, match="patch_size"):
        patchify(jnp.zeros((3, 4, 4)), 0)


def test_class_token_readout():
    rng = _rng(3)
    u = jnp.asarray(rng.standard_normal((5, 6)))
    w, b = jnp.asarray(rng.standard_normal((6, 3))), jnp.asarray(rng.standard_normal(3))
    norm = transflow.NormParams.scalar(0.5, 2.0)
    r = ClassTokenReadout(norm, w, b, "tanh")
    ln = transflow.project_s1(u[:1], 0.5, 2.0)[0]
    np.testing.assert_allclose(r(u), np.tanh(ln @ w + b), rtol=0, atol=1e-14)
    with pytest.raises(ValueError, match="activation"):
        ClassTokenReadout(None, None, None, "softmax")


# ----------------------------------------------------------------------------- CvT convs
@pytest.mark.parametrize("stride,padding,kernel", [(1, 1, 3), (2, 1, 3), (2, 0, 3), (1, 2, 5)])
def test_depthwise_conv_bn_equals_torch(stride, padding, kernel):
    rng = _rng(4)
    d, h, w = 5, 6, 7
    conv = torch.nn.Conv2d(
        d, d, kernel, stride=stride, padding=padding, groups=d, bias=False, dtype=torch.float64
    )
    bn = torch.nn.BatchNorm2d(d, dtype=torch.float64).eval()
    with torch.no_grad():
        bn.running_mean.normal_()
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.normal_()
        bn.bias.normal_()
    x = rng.standard_normal((h, w, d))
    with torch.no_grad():
        ref = bn(conv(torch.from_numpy(x).permute(2, 0, 1)[None]))[0].permute(1, 2, 0).numpy()
    scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
    shift = bn.bias - bn.running_mean * scale
    t = lambda v: jnp.asarray(v.detach().numpy())
    dw = DepthwiseConv2d(
        jnp.transpose(t(conv.weight)[:, 0], (1, 2, 0)), t(scale), t(shift), stride, padding
    )
    out = dw(jnp.asarray(x))
    assert out.shape == ref.shape == (*dw.output_shape((h, w)), d)
    assert np.max(np.abs(np.asarray(out) - ref)) <= 1e-13


@pytest.mark.parametrize("boundary", ["circular", "zero"])
def test_feature_conv_is_the_literal_y_convolution(boundary):
    """Q(x, y) = Σ_ξ κ(ξ) u(x, y − ξ): explicit loop, and u @ T with a Toeplitz T."""
    rng = _rng(5)
    n, d, k = 4, 7, 3
    kappa = rng.standard_normal(k)
    u = rng.standard_normal((n, d))
    ref = np.zeros_like(u)
    for y in range(d):
        for m in range(k):
            xi = m - k // 2
            src = y - xi
            if boundary == "circular":
                ref[:, y] += kappa[m] * u[:, src % d]
            elif 0 <= src < d:
                ref[:, y] += kappa[m] * u[:, src]
    fc = FeatureConv(jnp.asarray(kappa), boundary)
    assert np.max(np.abs(np.asarray(fc(jnp.asarray(u))) - ref)) <= 1e-13
    T = np.asarray(fc.matrix(d))
    # Toeplitz: constant along diagonals (translation-invariant kernel W(ξ, y) = κ(y − ξ))
    for off in range(-d + 1, d):
        diag = np.diagonal(T, off)
        if boundary == "zero":
            assert np.all(diag == diag[0])
    if boundary == "circular":  # circulant: equivariant under shifts in y
        s = 2
        np.testing.assert_allclose(
            fc(jnp.roll(jnp.asarray(u), s, axis=1)), np.roll(ref, s, axis=1), rtol=0, atol=1e-13
        )


def test_conv_attention_without_convs_is_transflow_attention():
    """With no convolutions and the default scale, conv_attention is transflow.attention
    (one attention kernel, transflow.attention_weights, shared by both)."""
    rng = _rng(6)
    a = _attn(rng, 8, 2)
    u = jnp.asarray(rng.standard_normal((6, 8)))
    p = ConvAttentionParams(a, None, None, None)
    out, gamma = conv_attention(u, p, return_weights=True)
    np.testing.assert_allclose(out, transflow.attention(u, a), rtol=0, atol=1e-13)
    np.testing.assert_allclose(
        gamma, transflow.attention_weights(transflow.attention_scores(u, a)), rtol=0, atol=1e-14
    )


def test_y_convolution_reading_is_a_structured_kernel():
    """The literal §4.3 reading (y-convolution, then W^Q) equals standard attention with
    kernels T W^Q, T W^K, T W^V: a translation-invariant special case of W^Q."""
    rng = _rng(7)
    d = 8
    a = _attn(rng, d, 2)
    convs = [FeatureConv(jnp.asarray(rng.standard_normal(3))) for _ in range(3)]
    u = jnp.asarray(rng.standard_normal((5, d)))
    out = conv_attention(u, ConvAttentionParams(a, *convs))
    Tq, Tk, Tv = (c.matrix(d) for c in convs)
    folded = transflow.AttentionParams(
        Tq @ a.wq, Tk @ a.wk, Tv @ a.wv, a.wo, a.bq, a.bk, a.bv, a.bo, a.n_heads
    )
    np.testing.assert_allclose(out, transflow.attention(u, folded), rtol=0, atol=1e-12)


def test_strided_keys_give_a_rectangular_kernel():
    """Strided K/V: γ has shape (heads, n_q, 1 + coarse grid); rows sum to 1; every output
    lies in the range of the values (maximum principle, per head with W_O = I)."""
    rng = _rng(8)
    d, gh, gw = 6, 4, 5
    a = _attn(rng, d, 1, bias=False)
    a = transflow.AttentionParams(a.wq, a.wk, a.wv, jnp.eye(d), a.bq, a.bk, a.bv, jnp.zeros(d), 1)
    dw = lambda stride: DepthwiseConv2d(
        jnp.asarray(rng.standard_normal((3, 3, d)) / 3),
        jnp.asarray(1 + 0.1 * rng.random(d)),
        jnp.asarray(0.1 * rng.standard_normal(d)),
        stride,
        1,
    )
    q, kv = dw(1), dw(2)
    u = jnp.asarray(rng.standard_normal((1 + gh * gw, d)))
    p = ConvAttentionParams(a, q, kv, kv, scale=d**-0.5)
    run = eqx.filter_jit(
        lambda u, p, hard: conv_attention(
            u, p, grid_shape=(gh, gw), n_prefix=1, hardmax=hard, return_weights=True
        ),
    )
    out, gamma = run(u, p, False)
    assert gamma.shape == (1, 1 + gh * gw, 1 + 2 * 3)
    np.testing.assert_allclose(gamma.sum(-1), 1.0, rtol=0, atol=1e-14)
    # values: the class token (not convolved) and the strided, convolved grid tokens
    vals = np.asarray(jnp.concatenate([u[:1], kv(u[1:].reshape(gh, gw, d)).reshape(-1, d)]) @ a.wv)
    out = np.asarray(out)
    assert np.all(out >= vals.min(0) - 1e-12) and np.all(out <= vals.max(0) + 1e-12)
    # hardmax (λ → ∞): each output row is one value row
    hard, _ = run(u, p, True)
    dist = np.abs(np.asarray(hard)[:, None, :] - vals[None]).max(-1).min(-1)
    assert np.all(dist <= 1e-12)


def test_conv_scheme_rejects_causal():
    rng = _rng(9)
    a = _attn(rng, 4, 1)
    ffn = transflow.FFNParams(
        (jnp.eye(4), jnp.eye(4)), (jnp.zeros(4), jnp.zeros(4)), (False, False), "gelu"
    )
    norm = transflow.NormParams.scalar()
    from transflow.vision import ConvLayerControls

    c = ConvLayerControls(ConvAttentionParams(a, None, None, None), norm, ffn, norm)
    with pytest.raises(ValueError, match="causal"):
        ConvPreNormScheme((2, 2)).step(jnp.ones((4, 4)), c, causal=True)


def test_conv_scheme_is_the_pre_ln_step_with_conv_attention():
    """ConvPreNormScheme runs PreNormScheme's step (one implementation): without
    convolutions every sub-step equals PreNormScheme's, and on a grid with non-uniform
    feature weights its projections use them (``grid.y_weights``)."""
    from transflow.vision import ConvLayerControls

    rng = _rng(10)
    d = 4
    a = _attn(rng, d, 2)
    ffn = transflow.FFNParams(
        (jnp.asarray(rng.standard_normal((d, d)) / 2),), (jnp.zeros(d),), (True,), "gelu", True
    )
    vec = lambda loc: jnp.asarray(loc + 0.2 * rng.standard_normal(d))
    n1, n2 = transflow.NormParams(vec(1.0), vec(0.0), 1e-5), transflow.NormParams(vec(1.0), vec(0))
    conv = ConvLayerControls(ConvAttentionParams(a, None, None, None), n1, ffn, n2)
    std = transflow.LayerControls(a, n1, ffn, n2)
    u = jnp.asarray(rng.standard_normal((5, d)))
    got, sub = ConvPreNormScheme().step(u, conv, 0.7, return_substeps=True)
    want, sub_want = transflow.PreNormScheme().step(u, std, 0.7, return_substeps=True)
    assert list(sub) == list(sub_want) == ["ln1", "attention", "ln2", "ffn1", "residual"]
    for k in sub:
        np.testing.assert_allclose(sub[k], sub_want[k], rtol=0, atol=1e-13, err_msg=k)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-13)
    yw = jnp.asarray([0.1, 0.2, 0.3, 0.4])
    grid = transflow.Grid(jnp.arange(5.0), jnp.ones(5), jnp.arange(d, dtype=float), yw)
    _, weighted = ConvPreNormScheme().step(u, conv, 0.7, grid=grid, return_substeps=True)
    ln1 = transflow.project_s1(u, n1.bias, n1.gain, eps=n1.eps, y_weights=yw)
    np.testing.assert_allclose(weighted["ln1"], ln1, rtol=0, atol=1e-13)
    assert float(jnp.max(jnp.abs(weighted["ln1"] - sub["ln1"]))) > 1e-3


def test_depthwise_conv_rejects_a_grid_smaller_than_the_kernel():
    dw = DepthwiseConv2d(jnp.ones((3, 3, 2)), jnp.ones(2), jnp.zeros(2), 1, 0)
    with pytest.raises(ValueError, match="too small"):
        dw(jnp.ones((2, 4, 2)))
