"""Causal attention (docs/spec/continuous-model.md §4.4): torch with a causal mask, HF
``GPT2Block``/``GPT2Model``, and prefix dependence. float64: max |Δ| ≤ 1e-10; float32: relative
error ≤ 1e-5."""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest

from _reference import require

torch = require("torch", reason="the causal equivalence tests need PyTorch")
require("transformers", reason="the GPT-2 equivalence tests need transformers")

from transformers import GPT2Config  # noqa: E402
from transformers.models.gpt2.modeling_gpt2 import (  # noqa: E402
    GPT2Block,
    GPT2LMHeadModel,
    GPT2Model,
)

import transflow  # noqa: E402
from test_hf_helpers import max_abs, randomize_, rel_err, to_np  # noqa: E402
from transflow.interop import CausalScheme, from_hf, from_torch  # noqa: E402

# ----------------------------------------------------------------------------- torch
# d_model, nhead, dim_feedforward, norm_first, activation
TORCH = [
    (8, 2, 8, False, "relu"),  # the paper's post-LN form (square FFN)
    (12, 3, 20, True, "gelu"),  # pre-LN, odd heads
    (10, 5, 16, False, "gelu"),
    (6, 1, 6, True, "relu"),
]
TORCH_IDS = [f"d{c[0]}-h{c[1]}-ff{c[2]}-{'pre' if c[3] else 'post'}-{c[4]}" for c in TORCH]


def _torch_layer(c, dtype, seed):
    torch.manual_seed(seed)
    d, h, ff, nf, act = c
    layer = torch.nn.TransformerEncoderLayer(
        d, h, ff, dropout=0.0, activation=act, batch_first=True, norm_first=nf, dtype=dtype
    )
    return randomize_(layer, seed).train()  # train() + dropout 0: the slow (reference) path


def _run_torch_causal(layer, x):
    n = x.shape[0]
    mask = torch.nn.Transformer.generate_square_subsequent_mask(n, dtype=x.dtype)
    with torch.no_grad():
        return to_np(layer(x[None], src_mask=mask, is_causal=True)[0])


def _x(n, d, dtype, seed=0):
    return torch.randn(n, d, dtype=dtype, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("c", TORCH, ids=TORCH_IDS)
def test_torch_causal_layer_float64(c):
    layer = _torch_layer(c, torch.float64, 1)
    x = _x(7, c[0], torch.float64)
    ref = _run_torch_causal(layer, x)
    model = from_torch(layer)
    run = eqx.filter_jit(
        lambda m, u, causal: m(u, causal=causal),
    )
    out = run(model, jnp.asarray(to_np(x)), True)
    assert 0.3 < np.abs(ref).max() < 30
    assert max_abs(out, ref) <= 1e-10
    # the mask matters: the non-causal model is far from the causal reference
    assert max_abs(run(model, jnp.asarray(to_np(x)), False), ref) > 1e-3


def test_torch_causal_encoder_float32():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(
        12, 3, 20, dropout=0.0, batch_first=True, norm_first=True, activation="gelu"
    )
    enc = randomize_(torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False), 2)
    enc.train()
    x = _x(6, 12, torch.float32)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(6)
    with torch.no_grad():
        ref = to_np(enc(x[None], mask=mask, is_causal=True)[0])
    model = from_torch(enc)
    out = eqx.filter_jit(lambda m, u: m(u, causal=True))(model, jnp.asarray(to_np(x)))
    assert out.dtype == jnp.float32
    assert rel_err(out, ref) <= 1e-5


# ----------------------------------------------------------------------------- GPT-2
# n_embd, n_head, n_inner, activation, layer_idx, scale_attn_by_inverse_layer_idx,
# scale_attn_weights
GPT2 = [
    (12, 3, None, "gelu_new", 0, False, True),  # GPT-2 defaults: 4d FFN, tanh GELU
    (8, 2, 20, "gelu", 2, True, True),  # 1/(layer_idx+1) score scale
    (10, 5, 16, "relu", 1, False, False),  # unscaled scores
    (16, 4, 24, "gelu_pytorch_tanh", 3, True, True),
]
GPT2_IDS = [f"d{c[0]}-h{c[1]}-{c[3]}-idx{c[4]}-inv{int(c[5])}-scale{int(c[6])}" for c in GPT2]


def _gpt2_config(c, n_layer=1):
    d, h, inner, act, _, inv, scale = c
    return GPT2Config(
        n_embd=d,
        n_head=h,
        n_inner=inner,
        activation_function=act,
        n_layer=n_layer,
        n_positions=16,
        vocab_size=11,
        scale_attn_by_inverse_layer_idx=inv,
        scale_attn_weights=scale,
        attn_implementation="eager",
    )


def _gpt2_block(c, dtype, seed):
    block = GPT2Block(_gpt2_config(c), layer_idx=c[4]).to(dtype)
    return randomize_(block, seed).eval()


def _causal_additive_mask(n, dtype):
    return torch.full((n, n), -torch.inf, dtype=dtype).triu(1)[None, None]


@pytest.mark.parametrize("c", GPT2, ids=GPT2_IDS)
def test_gpt2_block_float64(c):
    block = _gpt2_block(c, torch.float64, 3)
    x = _x(7, c[0], torch.float64)
    with torch.no_grad():
        ref = to_np(block(x[None], attention_mask=_causal_additive_mask(7, x.dtype))[0])
    model = from_hf(block)
    assert isinstance(model.scheme, CausalScheme)
    out = eqx.filter_jit(model)(jnp.asarray(to_np(x)))
    assert 0.3 < np.abs(ref).max() < 30
    assert max_abs(out, ref) <= 1e-10


def test_gpt2_block_float32():
    c = GPT2[1]
    block = _gpt2_block(c, torch.float32, 4)
    x = _x(6, c[0], torch.float32)
    with torch.no_grad():
        ref = to_np(block(x[None], attention_mask=_causal_additive_mask(6, x.dtype))[0])
    out = eqx.filter_jit(from_hf(block))(jnp.asarray(to_np(x)))
    assert out.dtype == jnp.float32
    assert rel_err(out, ref) <= 1e-5


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_gpt2_model_with_its_own_causal_mask(dtype):
    """GPT2Model builds its causal mask itself: f = inputs_embeds + wpe, the blocks
    (from_hf of ``model.h``), then ln_f as a closing projection."""
    tdt = getattr(torch, dtype)
    c = GPT2[0]
    hf = randomize_(GPT2Model(_gpt2_config(c, n_layer=2)).to(tdt).eval(), 5)
    e = _x(6, c[0], tdt)
    with torch.no_grad():
        ref = to_np(hf(inputs_embeds=e[None]).last_hidden_state[0])
        f = to_np(e + hf.wpe.weight[:6])
    blocks = from_hf(hf.h)
    assert blocks.num_layers == 2
    ln = hf.ln_f
    final = transflow.NormParams(
        jnp.asarray(to_np(ln.weight)), jnp.asarray(to_np(ln.bias)), float(ln.eps)
    )
    model = eqx.tree_at(lambda m: m.final_norm, blocks, final, is_leaf=lambda x: x is None)
    out = eqx.filter_jit(model)(jnp.asarray(f))
    if dtype == "float64":
        assert max_abs(out, ref) <= 1e-10
    else:
        assert rel_err(out, ref) <= 1e-5


def test_gpt2_lm_head_model_from_input_ids():
    """from_hf(GPT2LMHeadModel): f = wte[ids] + wpe, causal blocks, ln_f, tied logits;
    and prefix dependence of the whole decoder on the token ids."""
    c = GPT2[1]
    hf = randomize_(GPT2LMHeadModel(_gpt2_config(c, n_layer=2)).double().eval(), 8)
    ids = torch.tensor([3, 1, 4, 1, 5, 9, 2])
    with torch.no_grad():
        o = hf.transformer(input_ids=ids[None])
        logits = hf(input_ids=ids[None]).logits[0]
    model = from_hf(hf)
    jids = jnp.asarray(ids.numpy())
    run = eqx.filter_jit(lambda m, i: (m(i), m.logits(i)))
    out, lg = run(model, jids)
    assert max_abs(out, to_np(o.last_hidden_state[0])) <= 1e-10
    assert max_abs(lg, to_np(logits)) <= 1e-10
    changed = jids.at[4:].set(jnp.asarray([0, 7, 8]))
    out2, _ = run(model, changed)
    assert max_abs(out2[:4], out[:4]) <= 1e-13
    assert max_abs(out2[4:], out[4:]) > 1e-3
    # GPT2Model gives the same decoder without the unembedding
    bare = from_hf(hf.transformer)
    assert bare.unembedding is None
    assert max_abs(eqx.filter_jit(bare)(jids), out) <= 1e-13


def test_gpt2_unsupported_activation_names_the_option():
    c = (8, 2, 16, "laplace", 0, False, True)
    with pytest.raises(ValueError, match="activation_function.*laplace"):
        from_hf(GPT2Block(_gpt2_config(c), layer_idx=0).eval())


# ----------------------------------------------------------------------------- prefix
def _prefix_check(run, u, seed):
    """Changing tokens i+1.. leaves rows 0..i unchanged (and changes the later rows)."""
    u = np.asarray(u)
    n = u.shape[0]
    rng = np.random.default_rng(seed)
    base = np.asarray(run(jnp.asarray(u)))
    for i in range(n - 1):
        v = u.copy()
        v[i + 1 :] = rng.standard_normal(v[i + 1 :].shape)
        out = np.asarray(run(jnp.asarray(v)))
        assert max_abs(out[: i + 1], base[: i + 1]) <= 1e-13, i
        assert max_abs(out[i + 1 :], base[i + 1 :]) > 1e-3, i  # the suffix did change


def test_prefix_dependence_gpt2():
    block_a = _gpt2_block(GPT2[0], torch.float64, 6)
    block_b = _gpt2_block(GPT2[0], torch.float64, 7)
    model = from_hf(torch.nn.ModuleList([block_a, block_b]))
    u = np.random.default_rng(0).standard_normal((6, GPT2[0][0]))
    # CausalScheme: causal even when the caller asks for causal=False
    _prefix_check(eqx.filter_jit(lambda x: model(x, causal=False)), u, 0)


def _np_controls(rng, d, heads, d_ff):
    """Random controls drawn with NumPy (no JAX dispatch before the jitted run)."""
    a = lambda *shape: jnp.asarray(rng.standard_normal(shape) / np.sqrt(shape[0]))
    b = lambda n: jnp.asarray(0.2 * rng.standard_normal(n))
    attn = transflow.AttentionParams(
        a(d, d), a(d, d), a(d, d), a(d, d), b(d), b(d), b(d), b(d), heads
    )
    ffn = transflow.FFNParams((a(d, d_ff), a(d_ff, d)), (b(d_ff), b(d)), (False, False), "relu")
    norm = transflow.NormParams(1.0 + b(d), b(d), 1e-5)
    return transflow.LayerControls(attn, norm, ffn, norm)


@pytest.mark.parametrize(
    "scheme", [transflow.LieScheme(), transflow.PreNormScheme()], ids=["lie", "prenorm"]
)
def test_prefix_dependence_split_schemes(scheme):
    """Three steps of either scheme with causal=True: token i depends on tokens ≤ i only."""
    rng = np.random.default_rng(2)
    theta = transflow.stack_controls([_np_controls(rng, 8, 2, 12) for _ in range(3)])
    model = transflow.SplitTransformer(theta, scheme)
    u = rng.standard_normal((7, 8))
    _prefix_check(eqx.filter_jit(lambda x: model(x, causal=True)), u, 1)


def test_causal_scheme_rejects_non_schemes():
    with pytest.raises(TypeError, match="inner"):
        CausalScheme("prenorm")
