"""Shared helpers for the HuggingFace/PyTorch equivalence tests (and checks of the helpers).

HF's eager ViT attention computes the softmax in float32 even for float64 inputs
(``softmax(..., dtype=torch.float32).to(query.dtype)``, docs/spec/reference-layers.md pitfall 5), so
its float64 output carries float32 rounding (~1e-8). For the float64 checks at 1e-10 the
tests replace the module-level ``eager_attention_forward`` of ``modeling_vit`` by
:func:`eager_attention_fp64`: the same code with the softmax in the input dtype. The test
below checks that replacement against HF's ``sdpa`` path, which runs in float64.
"""

from __future__ import annotations

import numpy as np
import pytest

from _reference import require
from transflow.interop import randomize_  # the library's re-draw (one implementation)

torch = require("torch", reason="the HF equivalence tests need PyTorch")
transformers = require("transformers", reason="the HF equivalence tests need transformers")


def eager_attention_fp64(
    module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs
):
    """HF's ``eager_attention_forward`` (ViT) with the softmax in the input dtype."""
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    w = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        w = w + attention_mask
    w = torch.nn.functional.softmax(w, dim=-1)
    w = torch.nn.functional.dropout(w, p=dropout, training=module.training)
    out = torch.matmul(w, value).transpose(1, 2).contiguous()
    return out, w


@pytest.fixture
def fp64_eager(monkeypatch):
    """Run HF ViT's eager attention with a float64 softmax (see module docstring)."""
    from transformers.models.vit import modeling_vit

    monkeypatch.setattr(modeling_vit, "eager_attention_forward", eager_attention_fp64)


def to_np(t) -> np.ndarray:
    return t.detach().cpu().numpy()


def max_abs(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


def rel_err(a, b) -> float:
    """max |a − b| / max |b|."""
    b = np.asarray(b, np.float64)
    return max_abs(a, b) / float(np.max(np.abs(b)))


def scaled_err(out, ref) -> float:
    """max |out − ref| / max(1, max |ref|): the float64 criterion of the HF tests."""
    ref = np.asarray(ref, np.float64)
    return max_abs(out, ref) / max(1.0, float(np.max(np.abs(ref))))


def padded_batch(vocab: int, n: int, n_kept: int, *, seed: int, pad_id: int | None = None):
    """Token ids ``(2, n)`` (ids ≥ 3) and HF's ``attention_mask`` (1 = keep): the second
    sequence keeps its first ``n_kept`` tokens (right padding, ids ``pad_id`` if given)."""
    ids = torch.randint(3, vocab, (2, n), generator=torch.Generator().manual_seed(seed))
    keep = torch.ones(2, n, dtype=torch.long)
    keep[1, n_kept:] = 0
    if pad_id is not None:
        ids[1, n_kept:] = pad_id
    return ids, keep


def run_padded(model, ids, keep) -> np.ndarray:
    """transflow's outputs for a padded HF batch: ``model(ids_b, key_padding_mask=pad_b)``
    over the batch (``pad = keep == 0``, transflow's polarity), one compiled call."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    run = eqx.filter_jit(jax.vmap(lambda i, p: model(i, key_padding_mask=p)))
    return np.asarray(run(jnp.asarray(to_np(ids)), jnp.asarray(to_np(keep) == 0)))


# ------------------------------------------------------------------ checks of the helpers
def test_fp64_eager_matches_sdpa(fp64_eager):
    """The float64-softmax eager path equals HF's sdpa path (float64 throughout)."""
    from transformers import ViTConfig
    from transformers.models.vit.modeling_vit import ViTLayer

    outs = []
    for impl in ("eager", "sdpa"):
        cfg = ViTConfig(
            hidden_size=12, num_attention_heads=3, intermediate_size=20, attn_implementation=impl
        )
        layer = randomize_(ViTLayer(cfg).double().eval(), 0)
        x = torch.randn(1, 7, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
        outs.append(to_np(layer(x)))
    assert max_abs(*outs) <= 1e-13


def test_randomize_gives_unit_scale_and_nonuniform_attention():
    from transformers import ViTConfig
    from transformers.models.vit.modeling_vit import ViTLayer

    cfg = ViTConfig(
        hidden_size=16, num_attention_heads=2, intermediate_size=32, attn_implementation="eager"
    )
    layer = randomize_(ViTLayer(cfg).double().eval(), 3)
    x = torch.randn(1, 9, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        _, probs = layer.attention(layer.layernorm_before(x))
        out = layer(x)
    # far from uniform attention (1/9 everywhere), so the tests exercise the kernel
    assert float(probs.max()) > 2.0 / 9
    assert 0.1 < float(out.abs().mean()) < 10.0
