"""Interop with reference implementations (PyTorch, HuggingFace).

torch and transformers are imported inside these functions only.
"""

from .._causal import (
    CausalDecoder as CausalDecoder,
    CausalScheme as CausalScheme,
    TokenEmbedding as TokenEmbedding,
)
from ._hf import from_hf as from_hf, hf_activation as hf_activation
from ._torch import (
    decoder_controls_from_torch as decoder_controls_from_torch,
    from_torch as from_torch,
    layer_controls_from_torch as layer_controls_from_torch,
    torch_substeps as torch_substeps,
)
