"""The split scheme reproduces torch.nn.TransformerEncoderLayer / TransformerEncoder.

Tolerances: float64 max |Δ| ≤ 1e-10 on outputs of unit scale (LayerNorm outputs);
float32 max |Δ| / max |y| ≤ 1e-5. torch runs on its slow path (fast path disabled), as
docs/spec/reference-layers.md B1 recommends for golden references.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from _reference import require

torch = require("torch", reason="torch is needed for the reference checks")

from transflow import LieScheme, PreNormScheme  # noqa: E402
from transflow.interop import from_torch, torch_substeps  # noqa: E402

D = 24  # divisible by every head count in the matrix
NHEADS = (1, 2, 3, 8)
DFFS = (D, 4 * D, 37)
EPSS = (0.0, 1e-6, 1e-5)
TOL64 = 1e-10
TOL32 = 1e-5


def _layer(norm_first, activation, nhead, d_ff, bias, eps, batch_first, dtype, seed=0):
    torch.manual_seed(seed)
    layer = torch.nn.TransformerEncoderLayer(
        D,
        nhead,
        d_ff,
        dropout=0.0,
        activation=activation,
        layer_norm_eps=eps,
        batch_first=batch_first,
        norm_first=norm_first,
        bias=bias,
        dtype=dtype,
    )
    if bias:  # make every bias non-zero (torch initialises some to 0)
        with torch.no_grad():
            for name, p in layer.named_parameters():
                if name.endswith("bias"):
                    p.add_(0.1 * torch.randn_like(p))
    return layer.eval()


def _torch_forward(module, x, batch_first):
    """x: (batch, n, d) numpy -> torch output (batch, n, d) numpy, slow path."""
    xt = torch.from_numpy(x)
    if not batch_first:
        xt = xt.transpose(0, 1)
    with torch.no_grad():
        y = module(xt)
    if not batch_first:
        y = y.transpose(0, 1)
    return y.numpy()


@pytest.fixture(autouse=True)
def _slow_path():
    prev = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    yield
    torch.backends.mha.set_fastpath_enabled(prev)


def _check(norm_first, activation, nhead, d_ff, bias, eps, batch_first):
    rng = np.random.default_rng(nhead * 100 + d_ff)
    x64 = rng.standard_normal((2, 7, D))
    # float64
    layer = _layer(norm_first, activation, nhead, d_ff, bias, eps, batch_first, torch.float64)
    y = _torch_forward(layer, x64, batch_first)
    model = from_torch(layer)
    assert isinstance(model.scheme, PreNormScheme if norm_first else LieScheme)
    yj = np.asarray(jax.vmap(model)(jnp.asarray(x64)))
    err64 = np.abs(yj - y).max()
    assert err64 <= TOL64, f"float64 max |Δ| = {err64:.3e}"
    # float32
    layer32 = _layer(norm_first, activation, nhead, d_ff, bias, eps, batch_first, torch.float32)
    x32 = x64.astype(np.float32)
    y32 = _torch_forward(layer32, x32, batch_first)
    model32 = from_torch(layer32)
    yj32 = np.asarray(jax.vmap(model32)(jnp.asarray(x32)))
    assert yj32.dtype == np.float32
    rel32 = np.abs(yj32 - y32).max() / np.abs(y32).max()
    assert rel32 <= TOL32, f"float32 relative max |Δ| = {rel32:.3e}"


FULL = list(
    itertools.product(
        (False, True), ("relu", "gelu"), NHEADS, DFFS, (False, True), EPSS, (False, True)
    )
)


def _covering(cases):
    """A small subset covering every pair of factor values (greedy pairwise design)."""

    def pairs(c):
        return {(i, a, j, b) for (i, a), (j, b) in itertools.combinations(enumerate(c), 2)}

    todo = set().union(*(pairs(c) for c in cases))
    chosen = []
    while todo:
        best = max(cases, key=lambda c: len(pairs(c) & todo))
        chosen.append(best)
        todo -= pairs(best)
    return chosen


PAIRWISE = _covering(FULL)


@pytest.mark.parametrize("case", PAIRWISE, ids=lambda c: "-".join(map(str, c)))
def test_layer_matrix_pairwise(case):
    """Every pair of option values (norm_first, activation, nhead, d_ff, bias, eps,
    batch_first) appears in at least one case; the full product runs in the slow suite."""
    _check(*case)


@pytest.mark.slow
@pytest.mark.parametrize("case", FULL, ids=lambda c: "-".join(map(str, c)))
def test_layer_matrix_full(case):
    _check(*case)


@pytest.mark.parametrize("n_layers", [1, 2, 6])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("final_norm", [False, True])
def test_encoder_stack(n_layers, norm_first, final_norm):
    torch.manual_seed(n_layers)
    layer = torch.nn.TransformerEncoderLayer(
        D,
        3,
        40,
        dropout=0.0,
        batch_first=True,
        norm_first=norm_first,
        dtype=torch.float64,
        layer_norm_eps=1e-5,
    )
    norm = torch.nn.LayerNorm(D, dtype=torch.float64) if final_norm else None
    enc = torch.nn.TransformerEncoder(layer, n_layers, norm=norm, enable_nested_tensor=False)
    with torch.no_grad():  # distinct per-layer parameters
        for p in enc.parameters():
            p.add_(0.05 * torch.randn_like(p))
    enc.eval()
    x = np.random.default_rng(0).standard_normal((3, 9, D))
    y = _torch_forward(enc, x, True)
    model = from_torch(enc)
    assert model.num_layers == n_layers
    yj = np.asarray(jax.vmap(model)(jnp.asarray(x)))
    assert np.abs(yj - y).max() <= TOL64


@pytest.mark.parametrize("norm_first", [False, True])
def test_substeps_match_torch_intermediates(norm_first):
    layer = _layer(norm_first, "relu", 2, 4 * D, True, 1e-5, True, torch.float64)
    x = np.random.default_rng(1).standard_normal((7, D))
    ref = {k: v.numpy() for k, v in torch_substeps(layer, torch.from_numpy(x)).items()}
    states = {k: np.asarray(v) for k, v in from_torch(layer).substeps(jnp.asarray(x)).items()}
    if norm_first:
        pairs = {
            "ln1": "ln1",
            "attention": "attention",
            "ln2": "ln2",
            "ffn2": "ffn",
            "residual": "residual",
        }
    else:
        pairs = {"attention": "attention", "ln1": "ln1", "ffn2": "ffn", "ln2": "ln2"}
    for ours, theirs in pairs.items():
        err = np.abs(states[ours] - ref[theirs]).max()
        assert err <= TOL64, f"sub-step {ours} vs torch {theirs}: {err:.3e}"
    if not norm_first:  # the relaxation is the averaged FFN residual
        np.testing.assert_allclose(states["relax"], 0.5 * (ref["ffn"] + ref["ln1"]), atol=TOL64)
    # the final state is the layer output
    with torch.no_grad():
        out = layer(torch.from_numpy(x)[None])[0].numpy()
    np.testing.assert_allclose(states["ln2" if not norm_first else "residual"], out, atol=TOL64)


def test_paper_exact_identification():
    """Scalar σ1, σ2, ε = 0, d_ff = d, W_O = I: the controls are the paper's W_j = W̃_j − I."""
    rng = np.random.default_rng(3)
    d = 16
    wq, wk, wv, w1, w2 = (rng.standard_normal((d, d)) / np.sqrt(d) for _ in range(5))
    b1, b2 = rng.standard_normal(d) * 0.1, rng.standard_normal(d) * 0.1
    s1, s2 = 0.3, 1.7
    layer = torch.nn.TransformerEncoderLayer(
        d, 1, d, dropout=0.0, layer_norm_eps=0.0, batch_first=True, dtype=torch.float64
    )
    eye = np.eye(d)
    with torch.no_grad():
        sa = layer.self_attn
        sa.in_proj_weight.copy_(torch.from_numpy(np.concatenate([wq.T, wk.T, wv.T])))
        sa.in_proj_bias.zero_()
        sa.out_proj.weight.copy_(torch.eye(d, dtype=torch.float64))
        sa.out_proj.bias.zero_()
        layer.linear1.weight.copy_(torch.from_numpy((eye + w1).T))
        layer.linear1.bias.copy_(torch.from_numpy(b1))
        layer.linear2.weight.copy_(torch.from_numpy((eye + w2).T))
        layer.linear2.bias.copy_(torch.from_numpy(b2))
        for ln in (layer.norm1, layer.norm2):
            ln.weight.fill_(s2)
            ln.bias.fill_(s1)
    layer.eval()
    model = from_torch(layer, ffn_form="paper")
    c = model.layer(0)
    np.testing.assert_allclose(c.ffn.weights[0], w1, atol=1e-14)
    np.testing.assert_allclose(c.ffn.weights[1], w2, atol=1e-14)
    np.testing.assert_allclose(c.attn.wo, eye)
    assert c.ffn.residual == (True, True)
    assert c.norm1.is_scalar() and c.norm2.is_scalar()
    assert float(c.norm1.gain[0]) == s2 and float(c.norm1.bias[0]) == s1
    x = rng.standard_normal((6, d))
    with torch.no_grad():
        y = layer(torch.from_numpy(x)[None])[0].numpy()
    assert np.abs(np.asarray(model(jnp.asarray(x))) - y).max() <= TOL64
    # the same torch layer loaded in lifted form gives the same model output
    lifted = from_torch(layer, ffn_form="lifted")
    np.testing.assert_allclose(lifted(jnp.asarray(x)), y, atol=TOL64)


def test_unsupported_modules_and_options():
    with pytest.raises(TypeError, match="TransformerEncoderLayer"):
        from_torch(torch.nn.Linear(4, 4))
    layer = torch.nn.TransformerEncoderLayer(
        8, 2, 8, dropout=0.0, activation=torch.nn.functional.softplus, dtype=torch.float64
    )
    with pytest.raises(ValueError, match="unsupported activation"):
        from_torch(layer)
    square = torch.nn.TransformerEncoderLayer(8, 2, 12, dropout=0.0)
    with pytest.raises(ValueError, match="dim_feedforward == d_model"):
        from_torch(square, ffn_form="paper")
    with pytest.raises(ValueError, match="ffn_form"):
        from_torch(square, ffn_form="nonsense")


def test_float64_module_needs_x64():
    layer = torch.nn.TransformerEncoderLayer(8, 2, 8, dropout=0.0, dtype=torch.float64)
    jax.config.update("jax_enable_x64", False)
    try:
        with pytest.raises(ValueError, match="jax_enable_x64"):
            from_torch(layer)
    finally:
        jax.config.update("jax_enable_x64", True)
