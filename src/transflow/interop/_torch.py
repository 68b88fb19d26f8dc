"""Load PyTorch encoder layers into the split scheme.

torch is imported inside the functions only: the core of transflow never needs it.
"""

from __future__ import annotations

from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np

from .._controls import AttentionParams, FFNParams, LayerControls, NormParams, stack_controls
from ..models._decoder import DecoderLayerControls, SplitDecoder, SplitEncoderDecoder
from ..models._encoder import SplitTransformer
from ..schemes._lie import LieScheme
from ..schemes._prenorm import PreNormScheme

__all__ = [
    "from_torch",
    "torch_substeps",
    "layer_controls_from_torch",
    "decoder_controls_from_torch",
]

FFNForm = Literal["auto", "paper", "lifted"]


def _torch():
    try:
        import torch
    except ImportError as e:  # pragma: no cover - exercised only without torch
        raise ImportError(
            "transflow.interop needs PyTorch: `pip install 'transflow[reference]'` "
            "(on CPU-only machines with `-c constraints/cpu.txt`)."
        ) from e
    return torch


def _arr(t, dtype) -> jax.Array:
    t = t.detach().cpu()
    if t.dtype == _torch().bfloat16:  # no NumPy bfloat16: widen first (exact)
        t = t.float()
    return jnp.asarray(np.asarray(t.numpy()), dtype=dtype)


def _dropouts(module):
    """``(name, rate)`` of every dropout of ``module`` that is active (training mode)."""
    torch = _torch()
    out = []
    for name, m in module.named_modules():
        if not m.training:
            continue
        if isinstance(m, torch.nn.modules.dropout._DropoutNd):
            rate = m.p
        else:  # nn.MultiheadAttention.dropout, HF's dropout_prob / drop_prob (drop path)
            rate = next(
                (
                    getattr(m, a)
                    for a in ("dropout", "dropout_prob", "drop_prob")
                    if isinstance(getattr(m, a, None), float)
                ),
                0.0,
            )
        if rate > 0:
            out.append((name or type(m).__name__, rate))
    return out


def _check_module(module, arg: str = "module") -> None:
    """Refuse what the conversion cannot reproduce before reading any weight.

    - an activation without an exact counterpart (``torch_activation``), named;
    - a module in training mode with active dropout: transflow computes the eval-mode
      output, so the conversion is refused (call ``module.eval()`` or use dropout 0);
    - parameters or buffers holding NaN or Inf, named.
    """
    from ._acts import torch_activation

    torch = _torch()
    layer_types = (torch.nn.TransformerEncoderLayer, torch.nn.TransformerDecoderLayer)
    for sub in module.modules():  # the activation first: a PReLU is not a dtype problem
        if isinstance(sub, layer_types):
            torch_activation(sub.activation, type(sub).__name__)
    active = _dropouts(module)
    if active:
        name, rate = active[0]
        raise ValueError(
            f"`{arg}` ({type(module).__name__}) is in training mode with active dropout "
            f"({name}: p={rate}; {len(active)} active in all). transflow reproduces the "
            "eval-mode output, where dropout is the identity; call `module.eval()` before "
            "converting (or build it with dropout=0.0)."
        )
    with torch.no_grad():
        for kind, named in (
            ("parameter", module.named_parameters),
            ("buffer", module.named_buffers),
        ):
            for name, t in named():
                if t.is_floating_point() and not bool(torch.isfinite(t).all()):
                    bad = int((~torch.isfinite(t)).sum())
                    raise ValueError(
                        f"`{arg}` {kind} {name!r} holds {bad} NaN/Inf entries (shape "
                        f"{tuple(t.shape)}); transflow converts finite weights only. Fix or "
                        "re-initialize the weights before converting."
                    )


def _resolve_dtype(module, dtype):
    torch = _torch()
    # Parameters only: buffers such as a rotary embedding's ``inv_freq`` are kept in float32
    # by HF even in a float64 model (transflow recomputes them from the config).
    found = {t.dtype for t in module.parameters() if t.is_floating_point()}
    if len(found) > 1:
        raise ValueError(
            f"`module` mixes parameter dtypes {sorted(str(d) for d in found)}; convert it to "
            "one dtype first, e.g. `module.double()` or `module.float()`."
        )
    if dtype is None:
        low = found & {torch.float16, torch.bfloat16}
        if low:
            raise ValueError(
                f"`module` has {low.pop()} parameters; transflow computes in float32 or float64. "
                "Pass `dtype=jnp.float32` to upcast the weights (exact; the outputs then "
                "differ from the half-precision torch outputs by half-precision round-off), "
                "or convert the module first with `module.float()`."
            )
        dtype = jnp.float64 if torch.float64 in found else jnp.float32
    dtype = jnp.dtype(dtype)
    if dtype == jnp.float64 and not jax.config.jax_enable_x64:
        raise ValueError(
            "the torch module is float64 (or dtype=float64 was asked for) but JAX runs in "
            "32-bit mode; enable it first with `jax.config.update('jax_enable_x64', True)`, "
            "or pass dtype=jnp.float32."
        )
    if dtype not in (jnp.float32, jnp.float64):
        raise ValueError(f"`dtype` must be float32 or float64, got {dtype}.")
    return dtype


def _activation(layer) -> str:
    from ._acts import torch_activation

    return torch_activation(layer.activation, type(layer).__name__)


def _norm(ln, dtype) -> NormParams:
    torch = _torch()
    if not isinstance(ln, torch.nn.LayerNorm):
        raise ValueError(
            f"unsupported normalization {type(ln).__name__}: transflow reproduces "
            "torch.nn.LayerNorm only (the projection onto S1; RMSNorm has no mean "
            "constraint). Build the model with nn.LayerNorm."
        )
    d = ln.normalized_shape[-1]
    if len(ln.normalized_shape) != 1:
        raise ValueError(
            f"LayerNorm over {tuple(ln.normalized_shape)} is not supported; "
            "transflow normalizes each token over its features (one axis)."
        )
    gain = _arr(ln.weight, dtype) if ln.weight is not None else jnp.ones((d,), dtype)
    bias = _arr(ln.bias, dtype) if ln.bias is not None else jnp.zeros((d,), dtype)
    return NormParams(gain, bias, float(ln.eps))


def _mha(mha, dtype) -> AttentionParams:
    E, H = mha.embed_dim, mha.num_heads
    if not mha._qkv_same_embed_dim or mha.bias_k is not None or mha.add_zero_attn:
        raise ValueError(
            "unsupported nn.MultiheadAttention: transflow needs self-attention with "
            "kdim == vdim == embed_dim, add_bias_kv=False and add_zero_attn=False."
        )
    w = _arr(mha.in_proj_weight, dtype)  # (3E, E) rows [W_q; W_k; W_v], y = x W^T
    b = (
        _arr(mha.in_proj_bias, dtype)
        if mha.in_proj_bias is not None
        else jnp.zeros((3 * E,), dtype)
    )
    wo = _arr(mha.out_proj.weight, dtype).T
    bo = _arr(mha.out_proj.bias, dtype) if mha.out_proj.bias is not None else jnp.zeros((E,), dtype)
    return AttentionParams(
        w[:E].T, w[E : 2 * E].T, w[2 * E :].T, wo, b[:E], b[E : 2 * E], b[2 * E :], bo, H
    )


def _check_layer(layer, arg: str = "module") -> None:
    torch = _torch()
    for attr in ("norm1", "norm2"):
        norm = getattr(layer, attr, None)
        if not isinstance(norm, torch.nn.LayerNorm):
            raise ValueError(
                f"unsupported `{attr}` of the TransformerEncoderLayer: {type(norm).__name__}; "
                "transflow reproduces torch.nn.LayerNorm only (the projection onto S1). "
                f"Replace it with nn.LayerNorm or convert a layer whose {attr} is a LayerNorm."
            )
    _check_module(layer, arg)


def layer_controls_from_torch(layer, *, ffn_form: FFNForm = "auto", dtype=None) -> LayerControls:
    """Controls θ of one ``torch.nn.TransformerEncoderLayer`` (see :func:`from_torch`)."""
    torch = _torch()
    if not isinstance(layer, torch.nn.TransformerEncoderLayer):
        raise TypeError(
            f"layer_controls_from_torch: `layer` must be a torch.nn.TransformerEncoderLayer, "
            f"got {type(layer).__name__}; for a stack or a decoder call from_torch(module)."
        )
    _check_layer(layer, "layer")
    if ffn_form not in ("auto", "paper", "lifted"):
        raise ValueError(f"`ffn_form` must be 'auto', 'paper' or 'lifted', got {ffn_form!r}.")
    dtype = _resolve_dtype(layer, dtype)
    act = _activation(layer)
    attn = _mha(layer.self_attn, dtype)
    d = attn.wq.shape[0]
    ffn = _ffn_params(layer, act, d, ffn_form, dtype)
    return LayerControls(attn, _norm(layer.norm1, dtype), ffn, _norm(layer.norm2, dtype))


def _ffn_params(layer, act, d, ffn_form, dtype) -> FFNParams:
    """The FFN of a torch encoder/decoder layer (``linear1``, ``linear2``) as FFNParams."""
    w1 = _arr(layer.linear1.weight, dtype).T
    w2 = _arr(layer.linear2.weight, dtype).T
    b1 = (
        _arr(layer.linear1.bias, dtype)
        if layer.linear1.bias is not None
        else jnp.zeros((w1.shape[1],), dtype)
    )
    b2 = (
        _arr(layer.linear2.bias, dtype)
        if layer.linear2.bias is not None
        else jnp.zeros((d,), dtype)
    )
    square = w1.shape[1] == d
    if ffn_form == "paper" and not square:
        raise ValueError(
            f"ffn_form='paper' needs dim_feedforward == d_model (the paper's W_j map Ω_y to "
            f"Ω_y, docs/spec/continuous-model.md Q6); got dim_feedforward={w1.shape[1]}, "
            f"d_model={d}. Use ffn_form='lifted' or 'auto'."
        )
    if ffn_form == "paper" or (ffn_form == "auto" and square):
        eye = jnp.eye(d, dtype=dtype)
        return FFNParams((w1 - eye, w2 - eye), (b1, b2), (True, True), act)
    return FFNParams((w1, w2), (b1, b2), (False, False), act)


def decoder_controls_from_torch(
    layer, *, ffn_form: FFNForm = "auto", dtype=None
) -> DecoderLayerControls:
    """Controls of one ``torch.nn.TransformerDecoderLayer`` (see :func:`from_torch`)."""
    torch = _torch()
    if not isinstance(layer, torch.nn.TransformerDecoderLayer):
        raise TypeError(f"expected torch.nn.TransformerDecoderLayer, got {type(layer).__name__}.")
    if ffn_form not in ("auto", "paper", "lifted"):
        raise ValueError(f"`ffn_form` must be 'auto', 'paper' or 'lifted', got {ffn_form!r}.")
    dtype = _resolve_dtype(layer, dtype)
    act = _activation(layer)
    sa = _mha(layer.self_attn, dtype)
    ca = _mha(layer.multihead_attn, dtype)
    d = sa.wq.shape[0]
    return DecoderLayerControls(
        sa,
        _norm(layer.norm1, dtype),
        ca,
        _norm(layer.norm2, dtype),
        _ffn_params(layer, act, d, ffn_form, dtype),
        _norm(layer.norm3, dtype),
    )


def _layer_options(layer) -> dict[str, Any]:
    """The torch options of one encoder/decoder layer that fix the controls' structure."""
    from ._acts import torch_activation

    norms = [getattr(layer, n) for n in ("norm1", "norm2", "norm3") if hasattr(layer, n)]
    return {
        "d_model": layer.self_attn.embed_dim,
        "nhead": layer.self_attn.num_heads,
        "dim_feedforward": layer.linear1.out_features,
        "activation": torch_activation(layer.activation, type(layer).__name__),
        "layer_norm_eps": tuple(float(getattr(n, "eps", 0.0)) for n in norms),
        "norm_first": bool(layer.norm_first),
        "bias": layer.linear1.bias is not None,
        "elementwise_affine": tuple(getattr(n, "weight", None) is not None for n in norms),
    }


def check_homogeneous(layers, kind: str) -> None:
    """Refuse a stack whose layers differ in an option, naming the layer and the option.

    transflow evolves a stack as one set of controls with a leading time axis (a scan over
    time), so every step must have the same options. torch allows heterogeneous stacks
    (``enc.layers[1] = TransformerEncoderLayer(..., dim_feedforward=24)``); such a stack
    is refused with a ``ValueError`` naming the first differing layer and option. Each
    layer converts on its own (``from_torch(module.layers[i])``) and the converted layers
    compose: ``m2(m1(u))``.
    """
    if len(layers) < 2:
        return
    first = _layer_options(layers[0])
    for i, layer in enumerate(layers[1:], 1):
        opts = _layer_options(layer)
        for name, value in first.items():
            if opts[name] != value:
                got, want = opts[name], value
                if isinstance(got, tuple) and len(set(got)) == len(set(want)) == 1:
                    got, want = got[0], want[0]  # the same eps in every norm of a layer
                raise ValueError(
                    f"layer {i} of the {kind} differs from layer 0 in `{name}`: "
                    f"{got!r} vs {want!r}. transflow evolves a stack as "
                    "one set of controls with equal options at every time step; build the "
                    f"layers with equal `{name}`, or convert the layers one by one "
                    f"(`from_torch({kind}.layers[{i}])`) and compose them."
                )


def _decoder_from_torch(module, ffn_form, dtype) -> SplitDecoder:
    torch = _torch()
    final_norm = None
    if isinstance(module, torch.nn.TransformerDecoderLayer):
        layers = [module]
    else:
        layers = list(module.layers)
        if module.norm is not None:
            if not isinstance(module.norm, torch.nn.LayerNorm):
                raise ValueError(
                    f"TransformerDecoder.norm must be nn.LayerNorm, got "
                    f"{type(module.norm).__name__}."
                )
            final_norm = _norm(module.norm, _resolve_dtype(module, dtype))
    check_homogeneous(layers, "decoder")
    norm_first = {bool(layer.norm_first) for layer in layers}
    ctrls = [decoder_controls_from_torch(layer, ffn_form=ffn_form, dtype=dtype) for layer in layers]
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *ctrls)
    return SplitDecoder(stacked, norm_first.pop(), 1.0, final_norm)


def from_torch(
    module: Any, *, ffn_form: FFNForm = "auto", dtype=None
) -> SplitTransformer | SplitDecoder | SplitEncoderDecoder:
    """A transflow model that reproduces a PyTorch encoder, decoder or encoder–decoder.

    Accepts ``torch.nn.TransformerEncoderLayer`` and ``torch.nn.TransformerEncoder`` with
    any ``norm_first``, ``activation`` in {"relu", "gelu"} (and ``nn.GELU``),
    ``nhead``, ``dim_feedforward``, ``bias``, ``layer_norm_eps`` and ``batch_first``
    (equal in every layer of a stack: a heterogeneous stack raises a ``ValueError``
    naming the first differing layer and option, see :func:`check_homogeneous`). The
    model maps one sequence of shape ``(n_tokens, d_model)`` (batch with ``jax.vmap``;
    ``batch_first`` only concerns how torch lays out batches) and computes the layer's
    eval-mode output (dropout is an identity at inference).

    What is checked before any weight is read (each a ``ValueError`` naming the part): a
    module in training mode with active dropout is refused (call ``module.eval()``);
    ``norm1``/``norm2``/``norm`` must be ``nn.LayerNorm`` (RMSNorm is refused); the
    activation must be pointwise with an exact counterpart; every parameter and buffer
    must be finite; the parameters must share one dtype, and float16/bfloat16 modules
    need an explicit ``dtype=jnp.float32`` (an exact upcast) instead of a silent one.

    How each torch option reads in the continuous model:

    - ``norm_first=False`` (post-LN): the paper's :class:`LieScheme` at Δt = 1.
      ``norm_first=True`` (pre-LN): :class:`PreNormScheme` (extension).
    - FFN weights, ``ffn_form``: ``"paper"`` stores the increments W_j = W̃_j − I of
      square FFN weights (residual sub-steps ``Z + Δt(ZW_j + b_j)``, docs/spec/continuous-model.md
      §3.5); ``"lifted"`` stores W̃_j as lifting maps to a hidden domain Ω_z (needed when
      ``dim_feedforward ≠ d_model``, docs/spec/continuous-model.md Q6); ``"auto"`` picks ``"paper"``
      when square.
    - ``activation="relu"``: the projection onto S2; ``"gelu"``: an explicit pointwise map.
    - LayerNorm weight/bias: σ2/σ1 of S1 (per-feature vectors are the docs/spec/continuous-model.md
        Q3 extension);
      ``layer_norm_eps = ε``: the ε-regularized projection, with ε/4 in the closing
      projection of the post-LN scheme (docs/spec/continuous-model.md §8.7).
    - q/k/v/out biases and ``out_proj``: kept as :class:`AttentionParams` (W_O folded per
      head in eq. 5.7; W_O = I and no biases in the paper).
    - ``TransformerEncoder.norm``: a final projection after the last step.
    - ``TransformerDecoderLayer`` / ``TransformerDecoder`` → :class:`SplitDecoder`
      (self-attention, cross-attention over the memory's token grid, FFN; post-LN: the
      Lie scheme with one more sub-step and projection, pre-LN: explicit Euler on the
      composite operators), called ``model(tgt, memory, *, causal=False,
      key_padding_mask=None, memory_key_padding_mask=None, attention_mask=None,
      memory_attention_mask=None)``.
    - ``Transformer`` → :class:`SplitEncoderDecoder`: ``model(src, tgt, ...)``.

    Masks: every model takes ``key_padding_mask=`` with torch's polarity (True =
    padded; torch's ``src_key_padding_mask``/``tgt_key_padding_mask``) and
    ``attention_mask=`` with transflow's (bool True = may attend, or an additive float).
    torch's bool ``mask``/``src_mask``/``tgt_mask``/``memory_mask`` are True = *not*
    allowed: convert them with :func:`transflow.mask_from_torch`; ``is_causal=True`` is
    ``causal=True``. Padded rows take the values of torch's slow path (not the zeros of
    its nested-tensor fast path). See docs/masks.md.

    With ``dim_feedforward = d_model``, scalar-valued LayerNorm parameters and ε = 0 the
    controls are exactly the paper's identification.

    Args:
        module: the torch layer or encoder.
        ffn_form: ``"auto"``, ``"paper"`` or ``"lifted"`` (above).
        dtype: ``float32``/``float64``; default follows the module's parameters (float64
            needs ``jax_enable_x64``).

    Example:
        >>> import torch, jax.numpy as jnp
        >>> from transflow.interop import from_torch
        >>> layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
        >>> model = from_torch(layer)
        >>> model(jnp.ones((5, 8)) * jnp.arange(8.0)).shape
        (5, 8)
    """
    torch = _torch()
    final_norm = None
    if isinstance(module, torch.nn.Module):
        _check_module(module)
    if isinstance(module, torch.nn.TransformerDecoderLayer | torch.nn.TransformerDecoder):
        return _decoder_from_torch(module, ffn_form, dtype)
    if isinstance(module, torch.nn.Transformer):
        return SplitEncoderDecoder(
            from_torch(module.encoder, ffn_form=ffn_form, dtype=dtype),
            _decoder_from_torch(module.decoder, ffn_form, dtype),
        )
    if isinstance(module, torch.nn.TransformerEncoderLayer):
        layers = [module]
    elif isinstance(module, torch.nn.TransformerEncoder):
        layers = list(module.layers)
        if module.norm is not None:
            if not isinstance(module.norm, torch.nn.LayerNorm):
                raise ValueError(
                    f"TransformerEncoder.norm must be nn.LayerNorm, got "
                    f"{type(module.norm).__name__}."
                )
            final_norm = _norm(module.norm, _resolve_dtype(module, dtype))
    else:
        raise TypeError(
            "from_torch: `module` must be a torch.nn.TransformerEncoderLayer, "
            "TransformerEncoder, TransformerDecoderLayer, TransformerDecoder or Transformer, got "
            f"{type(module).__name__}. HuggingFace layers: "
            "see transflow.interop.from_hf."
        )
    check_homogeneous(layers, "encoder")
    norm_first = {bool(layer.norm_first) for layer in layers}
    controls = stack_controls(
        [layer_controls_from_torch(layer, ffn_form=ffn_form, dtype=dtype) for layer in layers]
    )
    scheme = PreNormScheme() if norm_first.pop() else LieScheme()
    return SplitTransformer(controls, scheme, 1.0, final_norm)


def torch_substeps(layer, x) -> dict[str, Any]:
    """The intermediates of a ``TransformerEncoderLayer`` for one sequence, from torch.

    Computed with the layer's own submodules (``_sa_block``, ``norm1``, ``_ff_block``,
    ``norm2``), independently of transflow. ``x`` is a torch tensor ``(n_tokens, d)``.
    Keys for post-LN: ``attention`` (x + SA(x)), ``ln1``, ``ffn`` (FFN(ln1)), ``ln2``.
    Pre-LN: ``ln1``, ``attention`` (x + SA(ln1)), ``ln2``, ``ffn``, ``residual``.
    """
    torch = _torch()
    if not isinstance(layer, torch.nn.TransformerEncoderLayer):
        raise TypeError(
            f"torch_substeps: `layer` must be a torch.nn.TransformerEncoderLayer, got "
            f"{type(layer).__name__}."
        )
    if not isinstance(x, torch.Tensor):
        raise TypeError(
            f"torch_substeps: `x` must be a torch tensor (n_tokens, d), got {type(x).__name__}; "
            "pass e.g. `torch.as_tensor(u)`."
        )
    d = layer.self_attn.embed_dim
    if x.ndim != 2 or x.shape[1] != d:
        raise ValueError(
            f"torch_substeps: `x` must have shape (n_tokens, {d}) (one sequence), got "
            f"{tuple(x.shape)}."
        )
    if not x.is_floating_point():
        raise TypeError(f"torch_substeps: `x` must be a float tensor, got {x.dtype}.")
    if not bool(torch.isfinite(x).all()):
        raise ValueError("torch_substeps: `x` contains NaN or Inf; expected finite values.")
    xb = x.unsqueeze(0) if layer.self_attn.batch_first else x.unsqueeze(1)
    squeeze = (lambda t: t[0]) if layer.self_attn.batch_first else (lambda t: t[:, 0])
    with torch.no_grad():
        if layer.norm_first:
            p1 = layer.norm1(xb)
            a = xb + layer._sa_block(p1, None, None)
            p2 = layer.norm2(a)
            f = layer._ff_block(p2)
            out = {"ln1": p1, "attention": a, "ln2": p2, "ffn": f, "residual": a + f}
        else:
            a = xb + layer._sa_block(xb, None, None)
            p1 = layer.norm1(a)
            f = layer._ff_block(p1)
            out = {"attention": a, "ln1": p1, "ffn": f, "ln2": layer.norm2(p1 + f)}
    return {k: squeeze(v) for k, v in out.items()}
