"""Heterogeneous torch stacks: layers that differ in an option are refused with an error
naming the layer index and the option; converted one by one they compose to torch's stack
(float64, ≤ 1e-10 · max(1, |y|)).
"""

from __future__ import annotations

import copy

import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch interop tests need PyTorch")

from test_hf_helpers import randomize_, to_np  # noqa: E402
from transflow.interop import from_torch  # noqa: E402

D = 16


def _enc_layer(width, **kw):
    return torch.nn.TransformerEncoderLayer(
        D, 2, width, dropout=0.0, batch_first=True, dtype=torch.float64, **kw
    )


def _encoder(widths, **kw):
    enc = torch.nn.TransformerEncoder(
        _enc_layer(widths[0], **kw), len(widths), enable_nested_tensor=False
    )
    for i, w in enumerate(widths):
        enc.layers[i] = _enc_layer(w, **kw)
    return randomize_(enc.eval(), 0)


def _err(out, ref) -> float:
    ref = np.asarray(ref, np.float64)
    return float(np.max(np.abs(np.asarray(out, np.float64) - ref)) / max(1.0, np.abs(ref).max()))


def test_encoder_widths_16_24_16_refused_naming_layer_1():
    enc = _encoder([16, 24, 16])
    with pytest.raises(ValueError, match=r"layer 1 of the encoder .*`dim_feedforward`: 24 vs 16"):
        from_torch(enc)
    # the documented way out: convert each layer and compose; equals torch's stack
    x = torch.randn(1, 7, D, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = to_np(enc(x)[0])
    u = jnp.asarray(to_np(x[0]))
    for layer in enc.layers:
        u = from_torch(layer)(u)
    assert _err(u, ref) <= 1e-10


@pytest.mark.parametrize(
    ("option", "change", "match"),
    [
        (
            "layer_norm_eps",
            {"layer_norm_eps": 1e-3},
            r"layer 2 .*`layer_norm_eps`: 0\.001 vs 1e-05",
        ),
        ("activation", {"activation": "gelu"}, r"layer 2 .*`activation`: 'gelu' vs 'relu'"),
        ("nhead", {"nhead": 4}, r"layer 2 .*`nhead`: 4 vs 2"),
    ],
)
def test_decoder_layers_differing_are_refused(option, change, match):
    kw = dict(d_model=D, nhead=2, dim_feedforward=24, dropout=0.0, batch_first=True)
    kw["dtype"] = torch.float64
    dec = torch.nn.TransformerDecoder(torch.nn.TransformerDecoderLayer(**kw), 3)
    dec.layers[2] = torch.nn.TransformerDecoderLayer(**(kw | change))
    dec = randomize_(dec.eval(), 2)
    with pytest.raises(ValueError, match=match):
        from_torch(dec)


def test_decoder_layer_norm_eps_layers_compose():
    """A decoder differing in layer_norm_eps: refused as a stack (naming layer 1), and the
    layers converted one by one reproduce torch's decoder."""
    kw = dict(d_model=D, nhead=2, dim_feedforward=24, dropout=0.0, batch_first=True)
    kw["dtype"] = torch.float64
    dec = torch.nn.TransformerDecoder(torch.nn.TransformerDecoderLayer(**kw), 2)
    dec.layers[1] = torch.nn.TransformerDecoderLayer(**(kw | {"layer_norm_eps": 1e-2}))
    dec = randomize_(dec.eval(), 3)
    with pytest.raises(ValueError, match=r"layer 1 of the decoder .*`layer_norm_eps`"):
        from_torch(dec)
    g = torch.Generator().manual_seed(4)
    tgt = torch.randn(1, 6, D, dtype=torch.float64, generator=g)
    mem = torch.randn(1, 5, D, dtype=torch.float64, generator=g)
    with torch.no_grad():
        ref = to_np(dec(tgt, mem)[0])
    u, m = jnp.asarray(to_np(tgt[0])), jnp.asarray(to_np(mem[0]))
    for layer in dec.layers:
        u = from_torch(layer)(u, m)
    assert _err(u, ref) <= 1e-10


def test_homogeneous_stack_still_converts():
    enc = _encoder([24, 24])
    enc2 = copy.deepcopy(enc)
    x = torch.randn(1, 5, D, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        ref = to_np(enc2(x)[0])
    assert _err(from_torch(enc)(jnp.asarray(to_np(x[0]))), ref) <= 1e-10
