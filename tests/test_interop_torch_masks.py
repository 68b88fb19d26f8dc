"""torch encoder/decoder layers with masks == transflow (docs/masks.md).

Tolerances: float64 max |Δ| / max(1, max |y|) ≤ 1e-10; float32 ≤ 1e-5 relative. torch
runs its slow path (fast path and nested tensors off): padded rows then hold values, which
transflow reproduces on *every* row. torch's bool masks (True = not allowed) are
converted with ``mask_from_torch``; key padding masks have the same polarity in both.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is needed for the reference checks")

from transflow import SplitDecoder, SplitEncoderDecoder, mask_from_torch  # noqa: E402
from transflow.interop import from_torch  # noqa: E402

D, NHEAD, DFF = 8, 2, 16
TOL = {torch.float64: 1e-10, torch.float32: 1e-5}


@pytest.fixture(autouse=True)
def _slow_path():
    prev = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    yield
    torch.backends.mha.set_fastpath_enabled(prev)


def _rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(1.0, np.max(np.abs(b))))


def _biased(module):
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    return module.eval()


def _j(t):
    return jnp.asarray(t.detach().cpu().numpy())


def _kpm(lengths, n):
    return torch.arange(n)[None, :] >= torch.tensor(lengths)[:, None]


def _like(kpm, mask):
    """torch wants key padding and attention masks of one type: float −inf for float."""
    if mask.dtype == torch.bool:
        return kpm
    return torch.zeros(kpm.shape, dtype=mask.dtype).masked_fill(kpm, -torch.inf)


# --------------------------------------------------------------------------- encoder
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_with_padding_and_masks(dtype, norm_first):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(
        D, NHEAD, DFF, dropout=0.0, batch_first=True, norm_first=norm_first, dtype=dtype
    )
    enc = _biased(torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False))
    n = 6
    x = torch.randn(3, n, D, dtype=dtype)
    kpm = _kpm([6, 4, 1], n)
    bool_mask = torch.rand(n, n) > 0.7  # torch: True = not allowed
    bool_mask.fill_diagonal_(False)
    float_mask = torch.randn(n, n, dtype=dtype)
    causal = torch.nn.Transformer.generate_square_subsequent_mask(n, dtype=dtype)
    model = from_torch(enc)
    run = jax.vmap(lambda u, k, a: model(u, key_padding_mask=k, attention_mask=a))
    for mask in (bool_mask, float_mask, causal):
        with torch.no_grad():
            y = enc(x, mask=mask, src_key_padding_mask=_like(kpm, mask))
        am = jnp.broadcast_to(mask_from_torch(mask), (3, n, n))
        yj = run(_j(x), _j(kpm), am)
        assert _rel(yj, y) <= TOL[dtype]
    with torch.no_grad():
        y = enc(x, mask=causal, is_causal=True)
    yj = jax.vmap(lambda u: model(u, causal=True))(_j(x))
    assert _rel(yj, y) <= TOL[dtype]


def test_encoder_layer_bool_padding_every_row_float64():
    torch.manual_seed(1)
    layer = _biased(
        torch.nn.TransformerEncoderLayer(
            D, NHEAD, 4 * D, dropout=0.0, activation="gelu", dtype=torch.float64
        )
    )  # batch_first=False: (n, batch, d)
    n = 5
    x = torch.randn(n, 2, D, dtype=torch.float64)
    kpm = _kpm([5, 2], n)
    with torch.no_grad():
        y = layer(x, src_key_padding_mask=kpm).transpose(0, 1)
    yj = jax.vmap(lambda u, k: from_torch(layer)(u, key_padding_mask=k))(
        _j(x.transpose(0, 1)), _j(kpm)
    )
    assert _rel(yj, y) <= 1e-10  # padded rows included: torch's slow path


# --------------------------------------------------------------------------- torch's tests
def _torch_test_layer(dtype):
    """torch's test_transformerencoderlayer construction: d_model 4, 2 heads, d_ff 16,
    every parameter set to cos(arange) (deterministic, no hard-coded outputs here)."""
    layer = torch.nn.TransformerEncoderLayer(4, 2, 16, dropout=0.0, dtype=dtype)
    with torch.no_grad():
        for p in layer.parameters():
            p.copy_(torch.cos(torch.arange(p.numel(), dtype=dtype).view(p.shape)))
    return layer.eval()


TORCH_CASES = [  # (input (n, batch, 4) builder, src_key_padding_mask (batch, n))
    ("one token, not masked", lambda: [[[20.0, 30.0, 40.0, 50.0]]], [[0]]),
    ("two tokens, none masked", lambda: [[[1.0, 2.0, 3.0, 4.0]], [[5.0, 6.0, 7.0, 8.0]]], [[0, 0]]),
    (
        "two tokens, first masked",
        lambda: [[[1.0, 2.0, 3.0, 4.0]], [[5.0, 6.0, 7.0, 8.0]]],
        [[1, 0]],
    ),
    ("5x2 none masked", lambda: np.cos(np.arange(40.0)).reshape(5, 2, 4).tolist(), [[0] * 5] * 2),
    (
        "5x2 masked [0,1],[1,3],[1,4]",
        lambda: np.cos(np.arange(40.0)).reshape(5, 2, 4).tolist(),
        [[0, 1, 0, 0, 0], [0, 0, 0, 1, 1]],
    ),
]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_pytorch_unit_test_cases_with_src_key_padding_mask(dtype):
    layer = _torch_test_layer(dtype)
    model = from_torch(layer)
    for name, build, mask in TORCH_CASES:
        x = torch.tensor(build(), dtype=dtype)
        kpm = torch.tensor(mask) == 1
        with torch.no_grad():
            y = layer(x, src_key_padding_mask=kpm).transpose(0, 1)
        yj = jax.vmap(lambda u, k: model(u, key_padding_mask=k))(_j(x.transpose(0, 1)), _j(kpm))
        assert _rel(yj, y) <= TOL[dtype], name


def test_pytorch_all_masked_case_is_b_o_as_torch_sdpa():
    """torch's sixth case: the only token padded. Attention over the empty domain is 0 per
    head, so 𝒜u = b_O and the layer is norm2(a + FF(a)) with a = norm1(x + b_O) (computed
    here with torch's submodules). torch's own unit test expects NaN (old MHA math path;
    ``MultiheadAttention(need_weights=True)`` still gives NaN); the encoder layer's SDPA
    path (``need_weights=False``) returns 0 per head, i.e. the same value as transflow."""
    layer = _torch_test_layer(torch.float64)
    x = torch.tensor([[[20.0, 30.0, 40.0, 50.0]]], dtype=torch.float64)
    kpm = torch.tensor([[1]]) == 1
    with torch.no_grad():
        y = layer(x, src_key_padding_mask=kpm)
        a = layer.norm1(x + layer.self_attn.out_proj.bias)
        expected = layer.norm2(a + layer._ff_block(a))
    yj = from_torch(layer)(_j(x[:, 0]), key_padding_mask=jnp.array([True]))
    assert bool(jnp.all(jnp.isfinite(yj)))
    assert _rel(yj, expected[:, 0]) <= 1e-10
    if not bool(torch.isnan(y).any()):  # torch versions whose layer uses SDPA
        assert _rel(yj, y[:, 0]) <= 1e-10


# --------------------------------------------------------------------------- decoder
def _decoder_inputs(dtype, n=5, m=7, batch=3):
    tgt = torch.randn(batch, n, D, dtype=dtype)
    mem = torch.randn(batch, m, D, dtype=dtype)
    tkpm = _kpm([5, 3, 1], n)
    mkpm = _kpm([7, 4, 2], m)
    return tgt, mem, tkpm, mkpm


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_with_all_masks(dtype, norm_first):
    torch.manual_seed(2)
    layer = torch.nn.TransformerDecoderLayer(
        D, NHEAD, DFF, dropout=0.0, batch_first=True, norm_first=norm_first, dtype=dtype
    )
    dec = _biased(torch.nn.TransformerDecoder(layer, 2, norm=torch.nn.LayerNorm(D, dtype=dtype)))
    tgt, mem, tkpm, mkpm = _decoder_inputs(dtype)
    n, m = tgt.shape[1], mem.shape[1]
    tgt_mask = torch.nn.Transformer.generate_square_subsequent_mask(n, dtype=dtype)
    memory_mask = torch.rand(n, m) > 0.7  # torch bool: True = not allowed
    memory_mask[:, 0] = False
    with torch.no_grad():
        y = dec(
            tgt,
            mem,
            tgt_mask=tgt_mask,
            memory_mask=memory_mask,
            tgt_key_padding_mask=_like(tkpm, tgt_mask),
            memory_key_padding_mask=mkpm,
            tgt_is_causal=True,
        )
    model = from_torch(dec)
    assert isinstance(model, SplitDecoder) and model.norm_first == norm_first
    mm = mask_from_torch(memory_mask)
    yj = jax.vmap(
        lambda t, s, a, b: model(
            t,
            s,
            causal=True,
            key_padding_mask=a,
            memory_key_padding_mask=b,
            memory_attention_mask=mm,
        )
    )(_j(tgt), _j(mem), _j(tkpm), _j(mkpm))
    assert _rel(yj, y) <= TOL[dtype]
    # one layer, float tgt_mask as attention_mask instead of causal=True
    one = from_torch(dec.layers[0])
    with torch.no_grad():
        y1 = dec.layers[0](tgt, mem, tgt_mask=tgt_mask, memory_key_padding_mask=mkpm)
    yj1 = jax.vmap(
        lambda t, s, b: one(t, s, attention_mask=_j(tgt_mask), memory_key_padding_mask=b)
    )(_j(tgt), _j(mem), _j(mkpm))
    assert _rel(yj1, y1) <= TOL[dtype]


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_encoder_decoder_float64(norm_first):
    torch.manual_seed(3)
    tr = _biased(
        torch.nn.Transformer(
            D,
            NHEAD,
            2,
            2,
            DFF,
            dropout=0.0,
            batch_first=True,
            norm_first=norm_first,
            dtype=torch.float64,
        )
    )
    tgt, src, tkpm, skpm = _decoder_inputs(torch.float64)
    n = tgt.shape[1]
    tgt_mask = torch.nn.Transformer.generate_square_subsequent_mask(n, dtype=torch.float64)
    with torch.no_grad():
        y = tr(
            src,
            tgt,
            tgt_mask=tgt_mask,
            src_key_padding_mask=skpm,
            tgt_key_padding_mask=_like(tkpm, tgt_mask),
            memory_key_padding_mask=skpm,
            tgt_is_causal=True,
        )
    model = from_torch(tr)
    assert isinstance(model, SplitEncoderDecoder)
    yj = jax.vmap(
        lambda s, t, a, b: model(
            s,
            t,
            tgt_causal=True,
            src_key_padding_mask=b,
            tgt_key_padding_mask=a,
            memory_key_padding_mask=b,
        )
    )(_j(src), _j(tgt), _j(tkpm), _j(skpm))
    assert _rel(yj, y) <= 1e-10


def test_decoder_bad_masks_name_argument():
    layer = torch.nn.TransformerDecoderLayer(D, NHEAD, DFF, dropout=0.0, dtype=torch.float64)
    model = from_torch(layer.eval())
    t, s = jnp.ones((4, D)), jnp.ones((6, D))
    with pytest.raises(ValueError, match=r"`memory_key_padding_mask`.*expected shape \(6,\)"):
        model(t, s, memory_key_padding_mask=jnp.zeros((4,), bool))
    with pytest.raises(ValueError, match=r"`memory_attention_mask`.*\(4, 6\)"):
        model(t, s, memory_attention_mask=jnp.zeros((4, 4), bool))
    with pytest.raises(TypeError, match="TransformerDecoderLayer"):
        from transflow.interop import decoder_controls_from_torch

        decoder_controls_from_torch(torch.nn.Linear(2, 2))
