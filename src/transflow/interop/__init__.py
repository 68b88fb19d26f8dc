"""Interop with reference implementations (PyTorch, HuggingFace).

torch and transformers are imported inside these functions only.
"""

from ._torch import (
    from_torch as from_torch,
    layer_controls_from_torch as layer_controls_from_torch,
    torch_substeps as torch_substeps,
)
