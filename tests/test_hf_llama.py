"""Llama-family decoders: transflow reproduces HF ``LlamaDecoderLayer``, ``LlamaModel``,
``LlamaForCausalLM`` and ``MistralModel``/``Qwen2Model`` (RMSNorm as the projection onto a
sphere, rotary grouped-query attention, SwiGLU), plus properties of the new operators.

float64: max |Δ| ≤ 1e-10 · max(1, |y|) against HF run through ``hf_float64_reference``
(HF computes RMSNorm, rotary angles and the eager softmax in float32 otherwise);
float32: max |Δ| / max |y| ≤ 1e-5.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the HF equivalence tests need PyTorch")
pytest.importorskip("transformers", reason="the HF equivalence tests need transformers")

from transformers import (  # noqa: E402
    LlamaConfig,
    LlamaForCausalLM,
    LlamaModel,
    MistralConfig,
    MistralModel,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen2Model,
)
from transformers.models.llama.modeling_llama import LlamaDecoderLayer  # noqa: E402

import transflow  # noqa: E402
from test_hf_helpers import randomize_, to_np  # noqa: E402
from transflow.interop import (  # noqa: E402
    RMSDecoder,
    RMSPreNormScheme,
    RotaryAttentionParams,
    apply_rotary,
    from_hf,
    hf_float64_reference,
    project_sphere,
    rotary_attention,
)

FAMILIES = {
    "llama": (LlamaConfig, LlamaModel, LlamaForCausalLM),
    "mistral": (MistralConfig, MistralModel, None),
    "qwen2": (Qwen2Config, Qwen2Model, Qwen2ForCausalLM),
}
# family, hidden, heads, kv heads, intermediate, extra config
CONFIGS = [
    ("llama", 32, 4, 2, 48, {"attention_bias": True, "mlp_bias": True}),  # GQA, biases
    ("llama", 32, 4, 1, 40, {"rope_parameters": {"rope_type": "default", "rope_theta": 50.0}}),
    ("mistral", 32, 2, 2, 64, {"sliding_window": None}),  # MHA
    ("qwen2", 48, 6, 2, 64, {}),  # q/k/v biases, 3 query heads per kv head
]
IDS = [f"{c[0]}-d{c[1]}-h{c[2]}-kv{c[3]}" for c in CONFIGS]


def _config(c, layers=2, vocab=61):
    fam, d, h, kv, inter, extra = c
    return FAMILIES[fam][0](
        hidden_size=d,
        num_attention_heads=h,
        num_key_value_heads=kv,
        intermediate_size=inter,
        num_hidden_layers=layers,
        vocab_size=vocab,
        rms_norm_eps=1e-6,
        attn_implementation="eager",
        **extra,
    )


def _ids(n=9, vocab=61, seed=0, batch=1):
    return torch.randint(0, vocab, (batch, n), generator=torch.Generator().manual_seed(seed))


def _err(out, ref) -> float:
    ref = np.asarray(ref, np.float64)
    return float(np.max(np.abs(np.asarray(out, np.float64) - ref)) / max(1.0, np.abs(ref).max()))


@pytest.mark.parametrize(
    "c",
    [CONFIGS[0], *(pytest.param(c, marks=pytest.mark.slow) for c in CONFIGS[1:3]), CONFIGS[3]],
    ids=IDS,
)
def test_llama_family_model_float64(c):
    """{Llama,Mistral,Qwen2}Model: f = embed[ids] → 2 causal RMS pre-norm steps → RMSNorm."""
    hf = randomize_(FAMILIES[c[0]][1](_config(c)).double().eval(), 1)
    ids = _ids()
    with torch.no_grad(), hf_float64_reference():
        ref = to_np(hf(ids).last_hidden_state[0])
    model = from_hf(hf)
    assert isinstance(model, RMSDecoder)
    assert model.decoder.scheme == transflow.CausalScheme(RMSPreNormScheme())
    out = eqx.filter_jit(model)(jnp.asarray(to_np(ids[0])))
    assert out.dtype == jnp.float64
    assert 0.3 < np.abs(ref).max() < 30
    assert _err(out, ref) <= 1e-10


@pytest.mark.parametrize("fam", ["llama", pytest.param("qwen2", marks=pytest.mark.slow)])
def test_causal_lm_logits_float64(fam):
    c = next(c for c in CONFIGS if c[0] == fam)
    hf = randomize_(FAMILIES[fam][2](_config(c)).double().eval(), 2)
    ids = _ids(seed=3)
    with torch.no_grad(), hf_float64_reference():
        o = hf(ids, output_hidden_states=True)
    model = from_hf(hf)
    ji = jnp.asarray(to_np(ids[0]))
    assert _err(eqx.filter_jit(model.logits)(ji), to_np(o.logits[0])) <= 1e-10
    assert _err(model(ji), to_np(o.hidden_states[-1][0])) <= 1e-10  # last_hidden_state
    # the base model alone has no unembedding
    with pytest.raises(ValueError, match="unembedding"):
        from_hf(hf.model).logits(ji)


@pytest.mark.parametrize(
    "c", [CONFIGS[0], pytest.param(CONFIGS[3], marks=pytest.mark.slow)], ids=IDS[::3]
)
def test_llama_family_float32_batched(c):
    hf = randomize_(FAMILIES[c[0]][1](_config(c)).float().eval(), 4)
    ids = _ids(batch=3, seed=5)
    with torch.no_grad():
        ref = to_np(hf(ids).last_hidden_state)
    model = from_hf(hf)
    out = eqx.filter_jit(jax.vmap(lambda i: model(i)))(jnp.asarray(to_np(ids)))
    assert out.dtype == jnp.float32
    assert float(np.max(np.abs(out - ref)) / np.abs(ref).max()) <= 1e-5


def test_hf_float64_needs_the_reference_path():
    """HF's float64 Llama carries float32 rounding (RMSNorm, rotary, softmax); the
    reference path removes it: transflow agrees with the patched run, not the plain one."""
    c = CONFIGS[0]
    hf = randomize_(LlamaModel(_config(c)).double().eval(), 6)
    ids = _ids()
    with torch.no_grad():
        plain = to_np(hf(ids).last_hidden_state[0])
        with hf_float64_reference():
            exact = to_np(hf(ids).last_hidden_state[0])
        again = to_np(hf(ids).last_hidden_state[0])  # the patch is undone on exit
    out = from_hf(hf)(jnp.asarray(to_np(ids[0])))
    assert _err(out, exact) <= 1e-10
    assert _err(plain, exact) > 1e-9
    assert np.array_equal(plain, again)


def test_reference_eager_path_matches_hf_sdpa():
    """The patched eager attention (float64 softmax, HF's repeat_kv) equals HF's own sdpa
    attention in float64, with GQA and a padding mask: the reference path is HF's map."""
    c = CONFIGS[0]
    outs = []
    ids = _ids(batch=2, seed=13)
    keep = torch.ones(2, 9, dtype=torch.long)
    keep[1, :3] = 0
    for impl in ("eager", "sdpa"):
        cfg = _config(c)
        cfg._attn_implementation = impl
        hf = randomize_(LlamaModel(cfg).double().eval(), 14)
        with torch.no_grad(), hf_float64_reference():
            outs.append(to_np(hf(ids, attention_mask=keep).last_hidden_state))
    kept = to_np(keep).astype(bool)
    assert _err(outs[0][kept], outs[1][kept]) <= 1e-13


def test_llama_layer_and_substeps_match_hf():
    """One LlamaDecoderLayer with HF's causal mask; each sub-step is HF's intermediate."""
    c = CONFIGS[0]
    cfg = _config(c, layers=1)
    hf = randomize_(LlamaModel(cfg).double().eval(), 7)
    layer = hf.layers[0]
    assert isinstance(layer, LlamaDecoderLayer)
    n = 8
    x = torch.randn(1, n, c[1], dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    pos = torch.arange(n)[None]
    mask = torch.full((n, n), torch.finfo(torch.float64).min, dtype=torch.float64).triu(1)
    with torch.no_grad(), hf_float64_reference():
        pe = hf.rotary_emb(x, pos)
        out = layer(x, attention_mask=mask[None, None], position_embeddings=pe)
        p1 = layer.input_layernorm(x)
        a = x + layer.self_attn(p1, pe, mask[None, None])[0]
        p2 = layer.post_attention_layernorm(a)
    model = from_hf(layer)
    u = jnp.asarray(to_np(x[0]))
    assert _err(model(u), to_np(out[0])) <= 1e-10
    states = model.substeps(u)
    for name, ref in (("rms1", p1), ("attention", a), ("rms2", p2), ("residual", out)):
        assert _err(states[name], to_np(ref[0])) <= 1e-10, name
    # a ModuleList of decoder layers gives the stacked causal model
    stacked = from_hf(hf.layers)
    assert stacked.num_layers == 1 and _err(stacked(u), to_np(out[0])) <= 1e-10


# ----------------------------------------------------------------- unsupported options
@pytest.mark.parametrize(
    ("family", "extra", "option"),
    [
        (
            "llama",
            {
                "rope_parameters": {
                    "rope_type": "longrope",
                    "rope_theta": 1e4,
                    "factor": 2.0,
                    "short_factor": [1.0] * 4,
                    "long_factor": [2.0] * 4,
                    "original_max_position_embeddings": 64,
                },
                "max_position_embeddings": 128,
            },
            "rope_type",
        ),
        ("llama", {"hidden_act": "laplace"}, "hidden_act"),
        ("llama", {"add_cross_attention": True}, "add_cross_attention"),
    ],
)
def test_unsupported_llama_options_name_the_option(family, extra, option):
    cfg = FAMILIES[family][0](
        hidden_size=16,
        num_attention_heads=2,
        intermediate_size=24,
        num_hidden_layers=1,
        vocab_size=11,
        **extra,
    )
    hf = FAMILIES[family][1](cfg).eval()
    with pytest.raises(ValueError, match=option):
        from_hf(hf)


@pytest.mark.parametrize("family", ["mistral", pytest.param("qwen2", marks=pytest.mark.slow)])
def test_sliding_window_is_a_band_mask(family):
    """A sliding window W used by every layer: key x̃ admissible for x iff x − x̃ < W
    (HF: kv_idx > q_idx − W), with and without padding; equal to HF beyond the window."""
    extra = {"sliding_window": 3}
    if family == "qwen2":
        extra |= {"use_sliding_window": True, "max_window_layers": 0}
    c = (family, 16, 2, 1, 24, extra)
    hf = randomize_(FAMILIES[family][1](_config(c, layers=2, vocab=11)).double().eval(), 8)
    model = from_hf(hf)
    assert model.sliding_window == 3
    ids = _ids(n=8, vocab=11, batch=2)
    keep = torch.ones(2, 8, dtype=torch.long)
    keep[1, :2] = 0
    with torch.no_grad(), hf_float64_reference():
        ref = to_np(hf(ids, attention_mask=keep).last_hidden_state)
        full = to_np(hf(ids).last_hidden_state[0])
    ji = jnp.asarray(to_np(ids))
    assert _err(model(ji[0]), full) <= 1e-10
    out = jax.vmap(lambda i, p: model(i, key_padding_mask=p))(ji, jnp.asarray(to_np(keep) == 0))
    kept = to_np(keep).astype(bool)
    assert _err(np.asarray(out)[kept], ref[kept]) <= 1e-10


def test_mixed_sliding_layers_are_refused():
    cfg = Qwen2Config(
        hidden_size=16,
        num_attention_heads=2,
        num_key_value_heads=2,
        intermediate_size=24,
        num_hidden_layers=2,
        vocab_size=11,
        use_sliding_window=True,
        sliding_window=4,
        max_window_layers=1,
    )
    with pytest.raises(ValueError, match="layer_types"):
        from_hf(Qwen2Model(cfg).eval())


# ----------------------------------------------------------------- padding masks
@pytest.mark.parametrize(
    "c",
    [CONFIGS[1], *(pytest.param(c, marks=pytest.mark.slow) for c in CONFIGS[2:])],
    ids=IDS[1:],
)
def test_llama_family_left_padding_float64(c):
    """HF ``attention_mask`` (1 = keep) with left padding = ``key_padding_mask = mask == 0``
    combined with the causal mask: kept tokens agree with HF, and with the unpadded
    sequence run alone (rotary kernels depend on position differences only)."""
    fam = c[0]
    cls = FAMILIES[fam][2] or FAMILIES[fam][1]
    hf = randomize_(cls(_config(c)).double().eval(), 9)
    ids = _ids(n=9, batch=2, seed=10)
    keep = torch.ones(2, 9, dtype=torch.long)
    keep[1, :3] = 0
    lm = FAMILIES[fam][2] is not None
    with torch.no_grad(), hf_float64_reference():
        o = hf(ids, attention_mask=keep)
        alone = hf(ids[1:, 3:])
    pick = (lambda o: o.logits) if lm else (lambda o: o.last_hidden_state)
    ref, ref_alone = to_np(pick(o)), to_np(pick(alone)[0])
    model = from_hf(hf)
    fn = model.logits if lm else model
    out = eqx.filter_jit(jax.vmap(lambda i, p: fn(i, key_padding_mask=p)))(
        jnp.asarray(to_np(ids)), jnp.asarray(to_np(keep) == 0)
    )
    kept = to_np(keep).astype(bool)
    assert _err(np.asarray(out)[kept], ref[kept]) <= 1e-10
    assert _err(np.asarray(out)[1, 3:], ref_alone) <= 1e-12
    assert bool(jnp.all(jnp.isfinite(out)))  # padded rows (no admissible key) are finite


def test_llama_padding_mask_float32_and_exact_independence():
    c = CONFIGS[0]
    hf = randomize_(LlamaModel(_config(c)).float().eval(), 11)
    ids = _ids(n=8, batch=2, seed=12)
    keep = torch.ones(2, 8, dtype=torch.long)
    keep[0, :2] = 0
    with torch.no_grad():
        ref = to_np(hf(ids, attention_mask=keep).last_hidden_state)
    model = from_hf(hf)
    pad = jnp.asarray(to_np(keep) == 0)
    out = jax.vmap(lambda i, p: model(i, key_padding_mask=p))(jnp.asarray(to_np(ids)), pad)
    kept = to_np(keep).astype(bool)
    assert float(np.max(np.abs(np.asarray(out)[kept] - ref[kept])) / np.abs(ref).max()) <= 1e-5
    # changing the padded tokens changes no kept row, exactly
    ji = jnp.asarray(to_np(ids[0]))
    a = model(ji, key_padding_mask=pad[0])
    b = model(ji.at[:2].set(jnp.array([5, 7])), key_padding_mask=pad[0])
    assert float(jnp.max(jnp.abs(a[2:] - b[2:]))) == 0.0


# ----------------------------------------------------------------- operator properties
def test_project_sphere_is_the_closest_point():
    """RMSNorm with ε = 0 maps onto {mean u² = 1} and beats random points of the sphere."""
    v = jax.random.normal(jax.random.key(0), (3, 8), jnp.float64) * 3 + 1
    p = project_sphere(v)
    assert float(jnp.max(jnp.abs(jnp.mean(p**2, -1) - 1))) <= 1e-14
    others = jax.random.normal(jax.random.key(1), (500, 3, 8), jnp.float64)
    others = others / jnp.sqrt(jnp.mean(others**2, -1, keepdims=True))
    assert bool(jnp.all(jnp.sum((v - p) ** 2, -1) <= jnp.sum((v - others) ** 2, -1)))
    # a zero token (no unique closest point) maps to 0 without NaN in value or gradient
    z = jnp.zeros((1, 8), jnp.float64)
    assert float(jnp.max(jnp.abs(project_sphere(z)))) == 0.0
    g = jax.grad(lambda x: jnp.sum(project_sphere(x)))(z)
    assert bool(jnp.all(jnp.isfinite(g)))


def _rotary_params(d=16, H=4, G=2, theta=10000.0, key=0):
    ks = jax.random.split(jax.random.key(key), 4)
    dk = d // H
    n = lambda k, s: jax.random.normal(k, s, jnp.float64) * s[0] ** -0.5
    z = lambda m: jnp.zeros((m,), jnp.float64)
    return RotaryAttentionParams(
        n(ks[0], (d, H * dk)),
        n(ks[1], (d, G * dk)),
        n(ks[2], (d, G * dk)),
        n(ks[3], (H * dk, d)),
        z(H * dk),
        z(G * dk),
        z(G * dk),
        z(d),
        H,
        G,
        theta,
    )


def test_rotary_kernel_depends_on_position_differences():
    """Shifting every position by s leaves the attention unchanged (kernel depends on
    x̃ − x); the rotation itself is orthogonal and does depend on the absolute position."""
    p = _rotary_params(theta=100.0)
    u = jax.random.normal(jax.random.key(2), (7, 16), jnp.float64)
    pos = jnp.arange(7.0)
    base = rotary_attention(u, p, positions=pos, causal=True)
    shifted = rotary_attention(u, p, positions=pos + 13.0, causal=True)
    assert float(jnp.max(jnp.abs(base - shifted))) <= 1e-12
    x = jax.random.normal(jax.random.key(3), (2, 7, 4), jnp.float64)
    r1, r2 = apply_rotary(x, pos, 100.0), apply_rotary(x, pos + 13.0, 100.0)
    norms = jnp.linalg.norm(r1, axis=-1) - jnp.linalg.norm(x, axis=-1)
    assert float(jnp.max(jnp.abs(norms))) < 1e-13
    assert float(jnp.max(jnp.abs(r1 - r2))) > 1e-3


def test_grouped_query_attention_is_multihead_with_shared_kv():
    """Without rotation, G shared key/value heads = transflow.attention with the K/V
    kernels of head m taken from group ⌊m G/H⌋."""
    H, G, d = 4, 2, 16
    p = _rotary_params(d, H, G, theta=None, key=4)
    dk = d // H
    group = [m * G // H for m in range(H)]
    rep = lambda w: jnp.concatenate([w[..., g * dk : (g + 1) * dk] for g in group], -1)
    full = transflow.AttentionParams(
        p.wq, rep(p.wk), rep(p.wv), p.wo, p.bq, rep(p.bk), rep(p.bv), p.bo, H
    )
    u = jax.random.normal(jax.random.key(5), (6, d), jnp.float64)
    for causal in (False, True):
        a = rotary_attention(u, p, causal=causal)
        b = transflow.attention(u, full, causal=causal)
        assert float(jnp.max(jnp.abs(a - b))) <= 1e-13
    # the chunked (memory-linear) evaluation is the same operator
    c = rotary_attention(u, p, causal=True, implementation="chunked")
    assert float(jnp.max(jnp.abs(c - rotary_attention(u, p, causal=True)))) <= 1e-13
    # ... also with masks: padded keys get zero weight in both evaluations
    pad = jnp.array([True, False, False, False, True, False])
    kw = dict(causal=True, key_padding_mask=pad)
    dense = rotary_attention(u, p, **kw)
    chunked = rotary_attention(u, p, implementation="chunked", **kw)
    assert float(jnp.max(jnp.abs(dense - chunked))) <= 1e-13
    ref = transflow.attention(u, full, **kw)
    assert float(jnp.max(jnp.abs(dense - ref))) <= 1e-13


@pytest.mark.parametrize("impl", ["dense", pytest.param("chunked", marks=pytest.mark.slow)])
def test_masked_rotary_scheme_gradients(impl):
    """Gradients through the masked Llama-family scheme: a loss on kept tokens has exactly
    zero gradient w.r.t. padded tokens; the chunked evaluation gives the dense gradient."""
    from transflow.interop import random_rms_controls

    theta = transflow.stack_controls(
        [
            random_rms_controls(16, 4, 2, 24, dtype=jnp.float64, key=jax.random.key(i))
            for i in (0, 1)
        ]
    )
    u = jax.random.normal(jax.random.key(2), (7, 16), jnp.float64)
    pad = jnp.array([True, True, False, False, False, False, False])

    def loss(u, impl):
        model = transflow.SplitTransformer(
            theta, transflow.CausalScheme(RMSPreNormScheme(implementation=impl))
        )
        return jnp.sum(model(u, key_padding_mask=pad)[2:] ** 2)

    g = jax.grad(loss)(u, impl)
    assert bool(jnp.all(jnp.isfinite(g)))
    assert float(jnp.max(jnp.abs(g[:2]))) == 0.0
    assert float(jnp.max(jnp.abs(g[2:]))) > 0.0
    if impl == "chunked":
        gd = jax.grad(loss)(u, "dense")
        assert float(jnp.max(jnp.abs(g - gd))) <= 1e-12 * max(1.0, float(jnp.max(jnp.abs(gd))))
