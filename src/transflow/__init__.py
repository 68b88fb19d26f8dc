"""transflow: Transformers as splitting schemes of a continuous integro-differential
equation on grids in token index x and feature index y, and transformers that realize
maxout networks.

Public API (re-exported from private modules, equinox style):

- :class:`Grid`: quadrature grids on Ω_x × Ω_y.
- Controls: :class:`AttentionParams`, :class:`FFNParams`, :class:`NormParams`,
  :class:`LayerControls`, :func:`stack_controls`.
- Operators: :func:`attention`, :func:`attention_scores`, :func:`attention_weights`,
  :func:`chunked_attention`, :func:`online_softmax_attention` (memory-linear attention),
  :func:`project_s1` (LayerNorm), :func:`project_s2` (ReLU), :func:`linear_y`.
- Masks (docs/masks.md): ``key_padding_mask=`` (True = padded) and ``attention_mask=``
  (True = may attend, or additive float) on every operator, scheme and model;
  :func:`causal_mask`, :func:`padding_mask`, :func:`mask_from_torch`, :func:`mask_from_hf`;
  :func:`cross_attention` (keys/values from a memory on its own token grid).
- Encoder–decoder: :class:`SplitDecoder`, :class:`SplitEncoderDecoder`,
  :class:`DecoderLayerControls` (``torch.nn.TransformerDecoder``/``Transformer``).
- Schemes (:mod:`transflow.schemes`, one module per family): :class:`LieScheme` (the
  paper's), :class:`PreNormScheme`, :class:`CausalScheme` (decoders); :func:`evolve`,
  :class:`SplitTransformer`.
- How :func:`evolve` computes (diffrax style, docs/model.md): :class:`SaveAt` (what is
  returned), :class:`Remat` (rematerialisation in reverse mode), :class:`ConstantSteps`
  and :class:`Adaptive` (step-size controllers).
- Layers designed by numerical analysis (docs/schemes.md): :class:`StrangScheme`
  (Macaron), :class:`RungeKuttaScheme` (ODE Transformer), :class:`IMEXScheme`,
  :func:`make_scheme`, :func:`register_scheme`, :func:`stability_function`, :func:`stage_controls`.
- Subpackages: :mod:`transflow.models` (every architecture; docs/architectures.md),
  :mod:`transflow.interop` (PyTorch/HuggingFace → models), :mod:`transflow.continuous`
  (Δt and grid limits), :mod:`transflow.vision` (ViT/CvT), :mod:`transflow.expressivity`
  (maxout/CPWL constructions, linear regions), :mod:`transflow.control` (training),
  :mod:`transflow.parallel` (sharded evolution).
"""

from ._chunked import online_softmax_attention as online_softmax_attention
from ._controls import (
    AttentionParams as AttentionParams,
    FFNParams as FFNParams,
    LayerControls as LayerControls,
    NormParams as NormParams,
    num_steps as num_steps,
    stack_controls as stack_controls,
    unstack_controls as unstack_controls,
)
from ._evolve import evolve as evolve
from ._grid import Grid as Grid
from ._integrate import (
    Adaptive as Adaptive,
    ConstantSteps as ConstantSteps,
    ReferenceTolerances as ReferenceTolerances,
    Remat as Remat,
    SaveAt as SaveAt,
)
from ._masks import (
    causal_mask as causal_mask,
    mask_from_hf as mask_from_hf,
    mask_from_torch as mask_from_torch,
    padding_mask as padding_mask,
)
from ._operators import (
    CHUNKED_THRESHOLD as CHUNKED_THRESHOLD,
    activation_fn as activation_fn,
    attention as attention,
    attention_scores as attention_scores,
    attention_weights as attention_weights,
    chunked_attention as chunked_attention,
    cross_attention as cross_attention,
    linear_y as linear_y,
    project_s1 as project_s1,
    project_s2 as project_s2,
)
from .models._decoder import (
    DecoderLayerControls as DecoderLayerControls,
    SplitDecoder as SplitDecoder,
    SplitEncoderDecoder as SplitEncoderDecoder,
)
from .models._encoder import SplitTransformer as SplitTransformer
from .schemes import (
    SCHEME_NAMES as SCHEME_NAMES,
    TABLEAUS as TABLEAUS,
    AbstractScheme as AbstractScheme,
    ButcherTableau as ButcherTableau,
    CausalScheme as CausalScheme,
    IMEXScheme as IMEXScheme,
    LieScheme as LieScheme,
    PreNormScheme as PreNormScheme,
    RungeKuttaScheme as RungeKuttaScheme,
    StrangScheme as StrangScheme,
    amplification_factor as amplification_factor,
    confirm_stable_dt as confirm_stable_dt,
    declared_order as declared_order,
    ffn_branch as ffn_branch,
    largest_stable_dt as largest_stable_dt,
    linear_run_growth as linear_run_growth,
    linear_step_matrix as linear_step_matrix,
    linearised_stability as linearised_stability,
    make_scheme as make_scheme,
    perturbation_growth as perturbation_growth,
    reference_solution as reference_solution,
    register_scheme as register_scheme,
    spectral_radius as spectral_radius,
    stability_function as stability_function,
    stage_controls as stage_controls,
    sub_field_jacobians as sub_field_jacobians,
)

__version__ = "0.1.0"
