"""Interop with reference implementations (PyTorch, HuggingFace).

- Conversion: :func:`from_torch`, :func:`layer_controls_from_torch`, :func:`from_hf`,
  :func:`torch_substeps` (a torch layer's own intermediates).
- Equivalence studies (library functions returning records, used by the experiments
  ``equivalence`` and ``vit_equivalence`` and by the paper figures): :class:`EquivalenceConfig`,
  :func:`equivalence_configurations`, :func:`agreement_rows`, :func:`substep_rows`,
  :func:`build_torch_reference`, :func:`torch_slow_path`, :func:`fast_eager`;
  :func:`hf_configurations`, :func:`hf_compare`, :func:`hf_equivalence_rows`,
  :func:`randomize_`, :func:`fp64_vit_softmax`.

torch and transformers are imported inside these functions only.
"""

from .._causal import (
    CausalDecoder as CausalDecoder,
    CausalScheme as CausalScheme,
    TokenEmbedding as TokenEmbedding,
)
from ._hf import from_hf as from_hf, hf_activation as hf_activation
from ._hf_studies import (
    HF_FAMILIES as HF_FAMILIES,
    fp64_vit_softmax as fp64_vit_softmax,
    hf_compare as hf_compare,
    hf_configurations as hf_configurations,
    hf_equivalence_rows as hf_equivalence_rows,
    randomize_ as randomize_,
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
