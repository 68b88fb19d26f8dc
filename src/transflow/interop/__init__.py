"""Interop with reference implementations (PyTorch, HuggingFace): converters to the models
of :mod:`transflow.models` (this package defines no model class; the model classes it
re-exports, e.g. ``TextEncoder``, ``RMSDecoder``, ``CausalDecoder``, ``HeadModel``, live
in :mod:`transflow.models`).

- Conversion: :func:`from_torch`, :func:`layer_controls_from_torch`, :func:`from_hf`,
  :func:`torch_substeps` (a torch layer's own intermediates).
- Equivalence studies (library functions returning records, used by the experiments
  ``equivalence`` and ``vit_equivalence`` and by the paper figures): :class:`EquivalenceConfig`,
  :func:`equivalence_configurations`, :func:`agreement_rows`, :func:`substep_rows`,
  :func:`build_torch_reference`, :func:`torch_slow_path`, :func:`fast_eager`;
  :func:`hf_configurations`, :func:`hf_compare`, :func:`hf_equivalence_rows`,
  :func:`randomize_`, :func:`fp64_vit_softmax`; the model zoo of ``hf_equivalence``:
  :func:`hf_zoo_rows` (:data:`HF_ZOO_FAMILIES`, :func:`hf_zoo_configurations`,
  :func:`hf_zoo_compare`, :func:`hf_zoo_vit_row`).

torch and transformers are imported inside these functions only.
"""

from .._errors import CheckpointError as CheckpointError
from .._llama_ops import (
    GatedFFNParams as GatedFFNParams,
    RMSLayerControls as RMSLayerControls,
    RMSNormParams as RMSNormParams,
    RotaryAttentionParams as RotaryAttentionParams,
    RotaryScaling as RotaryScaling,
    apply_rotary as apply_rotary,
    gated_ffn as gated_ffn,
    project_sphere as project_sphere,
    random_rms_controls as random_rms_controls,
    rotary_attention as rotary_attention,
    rotary_frequencies as rotary_frequencies,
)
from ..models._causal import (
    CausalDecoder as CausalDecoder,
    CausalScheme as CausalScheme,
    TokenEmbedding as TokenEmbedding,
)
from ..models._heads import DenseHead as DenseHead, HeadModel as HeadModel
from ..models._rms import RMSDecoder as RMSDecoder
from ..models._text import TextEmbedding as TextEmbedding, TextEncoder as TextEncoder
from ..schemes._rms import RMSPreNormScheme as RMSPreNormScheme
from ._checkpoint import load_torch_checkpoint as load_torch_checkpoint
from ._hf import from_hf as from_hf, hf_activation as hf_activation, load_hf as load_hf
from ._hf_reference import hf_float64_reference as hf_float64_reference
from ._hf_studies import (
    HF_FAMILIES as HF_FAMILIES,
    fp64_vit_softmax as fp64_vit_softmax,
    hf_compare as hf_compare,
    hf_configurations as hf_configurations,
    hf_equivalence_rows as hf_equivalence_rows,
    randomize_ as randomize_,
)
from ._hf_zoo import (
    HF_ZOO_FAMILIES as HF_ZOO_FAMILIES,
    hf_zoo_compare as hf_zoo_compare,
    hf_zoo_configurations as hf_zoo_configurations,
    hf_zoo_rows as hf_zoo_rows,
    hf_zoo_vit_row as hf_zoo_vit_row,
)
from ._studies import (
    EQUIVALENCE_AXES as EQUIVALENCE_AXES,
    EquivalenceConfig as EquivalenceConfig,
    agreement_rows as agreement_rows,
    build_torch_reference as build_torch_reference,
    equivalence_configurations as equivalence_configurations,
    fast_eager as fast_eager,
    substep_rows as substep_rows,
    torch_slow_path as torch_slow_path,
)
from ._torch import (
    decoder_controls_from_torch as decoder_controls_from_torch,
    from_torch as from_torch,
    layer_controls_from_torch as layer_controls_from_torch,
    torch_substeps as torch_substeps,
)

__all__ = [
    "CheckpointError",
    "DenseHead",
    "HeadModel",
    "CausalDecoder",
    "CausalScheme",
    "GatedFFNParams",
    "RMSDecoder",
    "RMSLayerControls",
    "RMSNormParams",
    "RMSPreNormScheme",
    "RotaryAttentionParams",
    "RotaryScaling",
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
    "load_torch_checkpoint",
    "project_sphere",
    "random_rms_controls",
    "rotary_attention",
    "rotary_frequencies",
    "torch_substeps",
]
