"""GPT-2 with padding masks: HF ``attention_mask`` (1 = keep) → transflow
``key_padding_mask = (mask == 0)``, combined with the causal mask (docs/spec/continuous-model.md
§4.4).

float64: max |Δ| ≤ 1e-10 · max(1, |y|) on the kept tokens; float32 ≤ 1e-5 relative.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the HF equivalence tests need PyTorch")
pytest.importorskip("transformers", reason="the HF equivalence tests need transformers")

from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

from test_hf_helpers import randomize_, to_np  # noqa: E402
from transflow.interop import from_hf  # noqa: E402

VOCAB = 29


def _model(dtype, seed):
    cfg = GPT2Config(
        n_embd=24,
        n_head=3,
        n_layer=2,
        vocab_size=VOCAB,
        n_positions=16,
        attn_implementation="eager",
    )
    return randomize_(GPT2LMHeadModel(cfg).to(dtype).eval(), seed)


def _batch(n=9, pad=4, seed=0):
    ids = torch.randint(0, VOCAB, (2, n), generator=torch.Generator().manual_seed(seed))
    keep = torch.ones(2, n, dtype=torch.long)
    keep[1, n - pad :] = 0  # right padding: positions of the kept tokens are unchanged
    return ids, keep


def _err(out, ref) -> float:
    ref = np.asarray(ref, np.float64)
    return float(np.max(np.abs(np.asarray(out, np.float64) - ref)) / max(1.0, np.abs(ref).max()))


def test_gpt2_padding_mask_float64_and_ragged_batch():
    hf = _model(torch.float64, 0)
    ids, keep = _batch()
    with torch.no_grad():
        ref = to_np(hf(ids, attention_mask=keep).logits)
        alone = to_np(hf(ids[1:, :5]).logits[0])
    model = from_hf(hf)
    pad = jnp.asarray(to_np(keep) == 0)
    out = eqx.filter_jit(jax.vmap(lambda i, p: model.logits(i, key_padding_mask=p)))(
        jnp.asarray(to_np(ids)), pad
    )
    kept = to_np(keep).astype(bool)
    assert _err(np.asarray(out)[kept], ref[kept]) <= 1e-10
    assert _err(np.asarray(out)[1, :5], alone) <= 1e-12
    # with a causal model, right padding never influences kept tokens even unmasked
    assert _err(np.asarray(model.logits(jnp.asarray(to_np(ids[1]))))[:5], alone) <= 1e-12


def test_gpt2_left_padding_attention_mask_float64():
    """Left padding: the padded keys are removed from every kept row's kernel support
    (positions stay arange(n), as in HF's forward)."""
    hf = _model(torch.float64, 1)
    ids, keep = _batch(seed=2)
    keep = keep.flip(-1)
    with torch.no_grad():
        ref = to_np(hf(ids, attention_mask=keep).logits)
    model = from_hf(hf)
    out = jax.vmap(lambda i, p: model.logits(i, key_padding_mask=p))(
        jnp.asarray(to_np(ids)), jnp.asarray(to_np(keep) == 0)
    )
    kept = to_np(keep).astype(bool)
    assert _err(np.asarray(out)[kept], ref[kept]) <= 1e-10


def test_gpt2_padding_mask_float32():
    hf = _model(torch.float32, 3)
    ids, keep = _batch(seed=4)
    with torch.no_grad():
        ref = to_np(hf.transformer(ids, attention_mask=keep).last_hidden_state)
    model = from_hf(hf.transformer)
    out = jax.vmap(lambda i, p: model(i, key_padding_mask=p))(
        jnp.asarray(to_np(ids)), jnp.asarray(to_np(keep) == 0)
    )
    kept = to_np(keep).astype(bool)
    assert float(np.max(np.abs(np.asarray(out)[kept] - ref[kept])) / np.abs(ref).max()) <= 1e-5


def test_gpt2_cross_attention_config_is_refused():
    cfg = GPT2Config(n_embd=8, n_head=2, n_layer=1, vocab_size=VOCAB, add_cross_attention=True)
    with pytest.raises(ValueError, match="add_cross_attention"):
        from_hf(GPT2LMHeadModel(cfg).eval())
