"""Map controls (or their gradients) back to PyTorch's parameter names and layouts.

Inverse of :func:`transflow.interop.from_torch` for the derivative: a gradient with respect
to the stored controls is the gradient with respect to torch's parameters, transposed to
torch's ``(out, in)`` layout. The paper form stores W_j = W̃_j − I (docs/spec/continuous-model.md
§3.5); the identity is a constant, so ∂ℓ/∂W_j = ∂ℓ/∂W̃_j.
"""

from __future__ import annotations

import numpy as np

from .._controls import LayerControls, NormParams, num_steps
from .._errors import check_flag, check_kind

__all__ = ["grads_to_torch_layout"]


def _np(x) -> np.ndarray:
    return np.asarray(x)


def _norm_entries(name: str, norm: NormParams, d: int) -> dict[str, np.ndarray]:
    g, b = _np(norm.gain), _np(norm.bias)
    if g.shape != (d,) or b.shape != (d,):
        raise ValueError(
            f"{name}: torch's LayerNorm has per-feature (d,) = ({d},) weight and bias; the "
            f"controls have gain {g.shape} and bias {b.shape} (scalar σ1, σ2 have no torch "
            "counterpart of the same shape)."
        )
    return {f"{name}.weight": g, f"{name}.bias": b}


def grads_to_torch_layout(
    controls: LayerControls,
    *,
    final_norm: NormParams | None = None,
    single_layer: bool = False,
) -> dict[str, np.ndarray]:
    """Name → array in the layout of ``torch.nn.TransformerEncoder(Layer).named_parameters()``.

    Works for controls loaded by :func:`transflow.interop.from_torch` and for their
    gradients (same pytree); for the gradient of the paper-form FFN (W_j = W̃_j − I) the
    result is ∂ℓ/∂W̃_j, exactly what torch's autograd gives for ``linear{j}.weight``
    (transposed, as every weight).

    Args:
        controls: stacked :class:`~transflow.LayerControls` (leading time axis).
        final_norm: the encoder's final ``norm`` (names ``norm.weight``/``norm.bias``).
        single_layer: names of one ``TransformerEncoderLayer`` (no ``layers.i.`` prefix);
            needs N_t = 1.

    Returns:
        Dict from torch parameter name to a NumPy array of torch's shape.

    Example:
        >>> import torch
        >>> from transflow.interop import from_torch
        >>> from transflow.control import grads_to_torch_layout
        >>> layer = torch.nn.TransformerEncoderLayer(8, 2, 8, dropout=0.0)
        >>> names = grads_to_torch_layout(from_torch(layer).controls, single_layer=True)
        >>> sorted(names) == sorted(n for n, _ in layer.named_parameters())
        True
    """
    owner = "grads_to_torch_layout"
    check_kind("controls", controls, LayerControls, owner, "stack_controls([...])")
    if final_norm is not None:
        check_kind("final_norm", final_norm, NormParams, owner, "or None")
    check_flag("single_layer", single_layer, owner)
    n = num_steps(controls)
    if single_layer and n != 1:
        raise ValueError(f"`single_layer=True` needs one time step, got N_t = {n}.")
    out: dict[str, np.ndarray] = {}
    for i in range(n):
        c = controls
        pre = "" if single_layer else f"layers.{i}."
        a, f = c.attn, c.ffn
        d = _np(a.wq).shape[-2]
        out[pre + "self_attn.in_proj_weight"] = np.concatenate(
            [_np(a.wq[i]).T, _np(a.wk[i]).T, _np(a.wv[i]).T]
        )
        out[pre + "self_attn.in_proj_bias"] = np.concatenate(
            [_np(a.bq[i]), _np(a.bk[i]), _np(a.bv[i])]
        )
        out[pre + "self_attn.out_proj.weight"] = _np(a.wo[i]).T
        out[pre + "self_attn.out_proj.bias"] = _np(a.bo[i])
        if f.num_substeps != 2:
            raise ValueError(f"torch layers have J = 2 FFN sub-steps, got J = {f.num_substeps}.")
        for j in range(2):
            out[pre + f"linear{j + 1}.weight"] = _np(f.weights[j][i]).T
            out[pre + f"linear{j + 1}.bias"] = _np(f.biases[j][i])
        for name, norm in (("norm1", c.norm1), ("norm2", c.norm2)):
            layer_norm = NormParams(norm.gain[i], norm.bias[i], norm.eps)
            out.update(_norm_entries(pre + name, layer_norm, d))
    if final_norm is not None:
        d = _np(controls.attn.wq).shape[-2]
        out.update(_norm_entries("norm", final_norm, d))
    return out
