"""Scaled rotary embeddings (rope types linear, dynamic NTK, yarn, llama3): transflow's
rescaled rotation frequencies reproduce HF's ``LlamaModel``.

float64: max |Δ| / max(1, max |y|) ≤ 1e-10 against HF run through ``hf_float64_reference``
(HF computes ``inv_freq`` in float32; the reference path runs HF's own rope initialisers in
float64); float32: max |Δ| / max |y| ≤ 1e-5 against plain HF. Sequences of 64 tokens.
"""

from __future__ import annotations

import copy

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the HF equivalence tests need PyTorch")
pytest.importorskip("transformers", reason="the HF equivalence tests need transformers")

from transformers import LlamaConfig, LlamaModel  # noqa: E402
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding  # noqa: E402

from test_hf_helpers import randomize_, to_np  # noqa: E402
from transflow.interop import (  # noqa: E402
    RotaryScaling,
    apply_rotary,
    from_hf,
    hf_float64_reference,
    rotary_attention,
    rotary_frequencies,
)
from transflow.interop._hf_reference import _inv_freq  # noqa: E402

# Llama 3.2 (1B/3B) rope parameters; theta 500000, max_position_embeddings 131072
LLAMA32 = {
    "rope_parameters": {
        "rope_type": "llama3",
        "factor": 32.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "rope_theta": 500000.0,
    },
    "max_position_embeddings": 131072,
}
ROPES = {
    "llama3": LLAMA32,
    "yarn": {
        "rope_parameters": {
            "rope_type": "yarn",
            "factor": 4.0,
            "rope_theta": 10000.0,
            "original_max_position_embeddings": 16,
        },
        "max_position_embeddings": 64,
    },
    # the older keyword: HF moves it into rope_parameters
    "linear": {"rope_scaling": {"type": "linear", "factor": 2.0}},
    # L₀ = 32 < 64 tokens: the base is enlarged
    "dynamic": {
        "rope_parameters": {"rope_type": "dynamic", "factor": 3.0, "rope_theta": 10000.0},
        "max_position_embeddings": 32,
    },
}
N = 64


def _config(rope: str, **kw) -> LlamaConfig:
    base = dict(
        hidden_size=32,
        num_attention_heads=2,  # head_dim 16: 8 frequencies
        num_key_value_heads=1,
        intermediate_size=40,
        num_hidden_layers=2,
        vocab_size=61,
        rms_norm_eps=1e-6,
        attn_implementation="eager",
    )
    return LlamaConfig(**(base | copy.deepcopy(ROPES[rope]) | kw))


def _err(out, ref) -> float:
    ref = np.asarray(ref, np.float64)
    return float(np.max(np.abs(np.asarray(out, np.float64) - ref)) / max(1.0, np.abs(ref).max()))


def _batch(seed=0):
    ids = torch.randint(0, 61, (2, N), generator=torch.Generator().manual_seed(seed))
    keep = torch.ones(2, N, dtype=torch.long)
    keep[1, :5] = 0  # left padding
    keep[1, 30:33] = 0  # and in the middle
    return ids, keep


def _run(model, ids, keep):
    fn = eqx.filter_jit(jax.vmap(lambda i, p: model(i, key_padding_mask=p)))
    return np.asarray(fn(jnp.asarray(to_np(ids)), jnp.asarray(to_np(keep) == 0)))


@pytest.mark.parametrize("rope", list(ROPES))
def test_scaled_rope_float64_matches_hf(rope):
    """64 tokens, then a padded batch: kept tokens agree with HF at 1e-10 (float64)."""
    hf = randomize_(LlamaModel(_config(rope)).double().eval(), 1)
    model = from_hf(hf)
    scaling = model.decoder.controls.attn.rope_scaling
    assert isinstance(scaling, RotaryScaling) and scaling.rope_type == rope
    ids, keep = _batch()
    with torch.no_grad(), hf_float64_reference():
        ref = to_np(hf(ids[:1]).last_hidden_state[0])
        ref_pad = to_np(hf(ids, attention_mask=keep).last_hidden_state)
    assert 0.3 < np.abs(ref).max() < 30
    assert _err(eqx.filter_jit(model)(jnp.asarray(to_np(ids[0]))), ref) <= 1e-10
    kept = to_np(keep).astype(bool)
    assert _err(_run(model, ids, keep)[kept], ref_pad[kept]) <= 1e-10


@pytest.mark.parametrize(
    "rope",
    ["llama3", "yarn", *(pytest.param(r, marks=pytest.mark.slow) for r in ("linear", "dynamic"))],
)
def test_scaled_rope_float32_matches_plain_hf(rope):
    """float32 against HF as it runs (float32 rope), padded batch: ≤ 1e-5 relative."""
    hf = randomize_(LlamaModel(_config(rope)).float().eval(), 2)
    ids, keep = _batch(3)
    with torch.no_grad():
        ref = to_np(hf(ids, attention_mask=keep).last_hidden_state)
    out = _run(from_hf(hf), ids, keep)
    assert out.dtype == np.float32
    kept = to_np(keep).astype(bool)
    assert float(np.max(np.abs(out[kept] - ref[kept])) / np.abs(ref[kept]).max()) <= 1e-5


@pytest.mark.parametrize("rope", list(ROPES))
def test_reference_path_is_hfs_rope_initialiser(rope):
    """The float64 frequencies of the reference path are HF's float32 ones up to float32
    rounding, and transflow's frequencies are the float64 ones (≤ 1e-15 relative)."""
    cfg = _config(rope)
    rot = LlamaRotaryEmbedding(cfg)
    pos = torch.arange(N)[None]
    x32 = torch.zeros(1, dtype=torch.float32)
    with torch.no_grad():
        rot(x32, pos)  # HF's forward (dynamic: grows inv_freq to the 64-token length)
    ref64, a64 = _inv_freq(rot, torch.zeros(1, dtype=torch.float64), pos)
    ref64 = to_np(ref64)
    hf32 = to_np(rot.inv_freq).astype(np.float64)
    assert np.max(np.abs(hf32 - ref64) / ref64) <= 5e-7
    assert a64 == pytest.approx(rot.attention_scaling, rel=1e-7)
    model = from_hf(LlamaModel(cfg).double().eval())
    attn = model.decoder.controls.attn
    ours = rotary_frequencies(16, attn.rope_theta, jnp.float64, attn.rope_scaling, N)
    assert float(np.max(np.abs(np.asarray(ours) - ref64) / ref64)) <= 1e-15
    assert attn.rope_scaling.magnitude == pytest.approx(a64, rel=1e-15)


def test_llama3_frequency_regions():
    """llama3: high frequencies (wavelength < L₀/h) kept, low ones (> L₀/l) divided by s,
    the blend in between lies between ω/s and ω."""
    s = RotaryScaling("llama3", 32.0, 8192, 131072, 1.0, 4.0)
    w = np.asarray(rotary_frequencies(16, 500000.0, jnp.float64))
    w3 = np.asarray(rotary_frequencies(16, 500000.0, jnp.float64, s))
    lam = 2 * np.pi / w
    high, low = lam < 8192 / 4, lam > 8192 / 1
    mid = ~high & ~low
    assert high.any() and low.any() and mid.any()
    assert np.array_equal(w3[high], w[high])
    np.testing.assert_allclose(w3[low], w[low] / 32, rtol=1e-15)
    assert np.all((w3[mid] > w[mid] / 32) & (w3[mid] < w[mid]))


def test_dynamic_ntk_depends_on_the_sequence_length():
    """dynamic NTK: the default frequencies up to L₀, a larger base beyond it."""
    s = RotaryScaling("dynamic", 3.0, max_position_embeddings=32)
    default = rotary_frequencies(16, 10000.0, jnp.float64)
    assert bool(jnp.array_equal(rotary_frequencies(16, 10000.0, jnp.float64, s, 20), default))
    longer = rotary_frequencies(16, 10000.0, jnp.float64, s, 64)
    assert float(longer[0]) == 1.0 and bool(jnp.all(longer[1:] < default[1:]))
    # the angles of a 20-token and a 64-token sequence differ (length-dependent kernel)
    x = jnp.ones((1, 64, 16), jnp.float64)
    pos = jnp.arange(64.0)
    short = apply_rotary(x[:, :20], pos[:20], 10000.0, s)
    assert float(jnp.max(jnp.abs(short - apply_rotary(x, pos, 10000.0, s)[:, :20]))) > 1e-3


@pytest.mark.parametrize("rope", ["llama3", "yarn", "linear"])
def test_scaled_rotary_kernel_depends_on_position_differences(rope):
    """A shift of every position leaves rotary attention unchanged (kernel of x̃ − x)."""
    hf = randomize_(LlamaModel(_config(rope, num_hidden_layers=1)).double().eval(), 5)
    attn = from_hf(hf).decoder.controls.attn
    attn = jax.tree.map(lambda a: a[0], attn)  # layer 0 of the stack
    u = jax.random.normal(jax.random.key(0), (9, 32), jnp.float64)
    pos = jnp.arange(9.0)
    a = rotary_attention(u, attn, positions=pos, causal=True)
    b = rotary_attention(u, attn, positions=pos + 40.0, causal=True)
    assert float(jnp.max(jnp.abs(a - b))) <= 1e-12


def test_refused_rope_options_name_the_option():
    from transflow.interop._llama import rope_scaling

    cfg = _config("linear")
    cfg.rope_parameters = {"rope_type": "longrope", "rope_theta": 1e4, "factor": 2.0}
    with pytest.raises(ValueError, match="rope_type"):
        rope_scaling(cfg)
    cfg.rope_parameters = {"rope_type": "linear", "rope_theta": 1e4, "factor": 2.0}
    cfg.rope_parameters["partial_rotary_factor"] = 0.5
    with pytest.raises(ValueError, match="partial_rotary_factor"):
        rope_scaling(cfg)
    with pytest.raises(ValueError, match="rope_type"):
        RotaryScaling("ntk-by-parts")
    with pytest.raises(ValueError, match="original_max_position_embeddings"):
        RotaryScaling("llama3", 8.0)
