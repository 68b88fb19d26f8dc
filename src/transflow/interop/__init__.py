"""Interop with reference implementations (PyTorch, HuggingFace).

torch and transformers are imported inside these functions only.
"""

from .._causal import (
    CausalDecoder as CausalDecoder,
    CausalScheme as CausalScheme,
    TokenEmbedding as TokenEmbedding,
)
from .._llama_ops import (
    GatedFFNParams as GatedFFNParams,
    RMSDecoder as RMSDecoder,
    RMSLayerControls as RMSLayerControls,
    RMSNormParams as RMSNormParams,
    RMSPreNormScheme as RMSPreNormScheme,
    RotaryAttentionParams as RotaryAttentionParams,
    apply_rotary as apply_rotary,
    gated_ffn as gated_ffn,
    project_sphere as project_sphere,
    random_rms_controls as random_rms_controls,
    rotary_attention as rotary_attention,
)
from ._bert import TextEmbedding as TextEmbedding, TextEncoder as TextEncoder
from ._hf import from_hf as from_hf, hf_activation as hf_activation, load_hf as load_hf
from ._hf_reference import hf_float64_reference as hf_float64_reference
from ._torch import (
    decoder_controls_from_torch as decoder_controls_from_torch,
    from_torch as from_torch,
    layer_controls_from_torch as layer_controls_from_torch,
    torch_substeps as torch_substeps,
)

__all__ = [
    "CausalDecoder",
    "CausalScheme",
    "GatedFFNParams",
    "RMSDecoder",
    "RMSLayerControls",
    "RMSNormParams",
    "RMSPreNormScheme",
    "RotaryAttentionParams",
    "TextEmbedding",
    "TextEncoder",
    "TokenEmbedding",
    "apply_rotary",
    "from_hf",
    "from_torch",
    "gated_ffn",
    "hf_activation",
    "hf_float64_reference",
    "layer_controls_from_torch",
    "load_hf",
    "project_sphere",
    "random_rms_controls",
    "rotary_attention",
    "torch_substeps",
]
