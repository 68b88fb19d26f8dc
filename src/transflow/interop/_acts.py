"""Activation names of HuggingFace configs and torch activation modules → transflow's.

Every pointwise activation HF and torch use in the supported families has an exact
counterpart among :func:`transflow.activation_fn`'s names (an option of the FFN sub-step):
relu and relu6 are projections (onto {u ≥ 0} and the box {0 ≤ u ≤ 6}), the others explicit
pointwise maps. Names and modules without one (e.g. HF's "laplace", "prelu" with its
learned slope, "xielu") raise a ``ValueError`` naming the option.
"""

from __future__ import annotations

from typing import Any

# HF ``ACT2FN`` keys with an exact counterpart in transflow.
HF_ACTIVATIONS = {
    "relu": "relu",
    "relu6": "relu6",
    "gelu": "gelu",
    "gelu_python": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_python_tanh": "gelu_tanh",
    "gelu_fast": "gelu_fast",
    "quick_gelu": "quick_gelu",
    "silu": "silu",
    "swish": "silu",
    "mish": "mish",
    "tanh": "tanh",
    "sigmoid": "sigmoid",
    "leaky_relu": "leaky_relu",  # HF: nn.LeakyReLU() (slope 0.01)
    "linear": "identity",
}


def hf_activation(name: Any, option: str = "hidden_act") -> str:
    """The transflow activation for a HuggingFace activation name (``ACT2FN`` key).

    "gelu" is exact erf; "gelu_new" and "gelu_pytorch_tanh" are the tanh approximation;
    "gelu_fast" HF's rounded-constant one; "swish" is "silu"; "leaky_relu" has slope 0.01.
    Names without an exact counterpart raise a ``ValueError`` naming ``option``.

    Example:
        >>> from transflow.interop import hf_activation
        >>> hf_activation("swish")
        'silu'
    """
    if not isinstance(option, str) or not option:
        raise TypeError(
            f"hf_activation: `option` must be the config option's name (a str), got "
            f"{type(option).__name__} {option!r:.40}; pass e.g. option='hidden_act'."
        )
    if not isinstance(name, str) or name not in HF_ACTIVATIONS:
        raise ValueError(
            f"unsupported `{option}`={name!r}: transflow has exact counterparts only for "
            f"{sorted(HF_ACTIVATIONS)}; rebuild the config with one of them."
        )
    return HF_ACTIVATIONS[name]


def torch_activation(act: Any, where: str) -> str:
    """The transflow activation of a torch activation (function or module, including HF's
    activation modules), or a ``ValueError`` naming ``where`` and the activation."""
    import torch

    F = torch.nn.functional
    functions = {
        F.relu: "relu",
        torch.relu: "relu",
        F.relu6: "relu6",
        F.gelu: "gelu",
        F.silu: "silu",
        F.mish: "mish",
        F.tanh: "tanh",
        torch.tanh: "tanh",
        F.sigmoid: "sigmoid",
        torch.sigmoid: "sigmoid",
        F.leaky_relu: "leaky_relu",
    }
    for fn, name in functions.items():
        if act is fn:
            return name
    nn = torch.nn
    if isinstance(act, nn.GELU):
        return "gelu_tanh" if act.approximate == "tanh" else "gelu"
    if isinstance(act, nn.LeakyReLU):
        slope = float(act.negative_slope)
        return "leaky_relu" if slope == 0.01 else f"leaky_relu:{slope!r}"
    if isinstance(act, nn.ReLU6):  # before ReLU? (ReLU6 subclasses Hardtanh, not ReLU)
        return "relu6"
    modules = {
        nn.ReLU: "relu",
        nn.SiLU: "silu",
        nn.Mish: "mish",
        nn.Tanh: "tanh",
        nn.Sigmoid: "sigmoid",
        nn.Identity: "identity",
    }
    for cls, name in modules.items():
        if type(act) is cls:
            return name
    try:
        from transformers import activations as ha
    except ImportError:  # pragma: no cover - transformers is optional
        ha = None
    if ha is not None:
        hf_modules = {
            ha.GELUActivation: "gelu",
            ha.NewGELUActivation: "gelu_tanh",
            ha.GELUTanh: "gelu_tanh",
            ha.FastGELUActivation: "gelu_fast",
            ha.QuickGELUActivation: "quick_gelu",
            ha.SiLUActivation: "silu",
            ha.MishActivation: "mish",
            ha.LinearActivation: "identity",
        }
        for cls, name in hf_modules.items():
            if type(act) is cls:
                return name
    raise ValueError(
        f"unsupported activation {act!r} in {where}: transflow reproduces the pointwise "
        "activations relu, relu6, gelu (erf and tanh), gelu_fast, quick_gelu, silu, mish, "
        "tanh, sigmoid and leaky_relu (functions or modules); rebuild the layer with one."
    )
