"""Study models as flows: trajectories, token geometry, operator budgets, control
smoothness and depth refinement of any model transflow builds or converts.

- Trajectories: :func:`trajectory` (the states after every step, or every sub-step),
  :func:`iter_steps` (streamed, one step at a time), :func:`as_flow`,
  :func:`model_output`.
- Token geometry and operator budgets per step: :func:`step_diagnostics`
  (:func:`cosine_matrix`, :func:`count_clusters`, :func:`effective_rank`,
  :func:`distance_to_s1`, sub-step increments with :func:`substep_parents`).
- Controls across depth: :func:`control_blocks`, :func:`control_increments`,
  :func:`increment_scaling` and :func:`depth_scaling` (the scaling test of Sander, Ablin,
  Peyré, NeurIPS 2022, for the controls θⁿ).
- Depth refinement: :func:`refine` (Δt/k, k·N_t steps, controls piecewise constant or
  linear in t), :func:`refinement_study`, :func:`fit_order`.
- Sensitivity: :func:`lyapunov_exponent` (the finite-time Lyapunov exponent of a flow).
- Everything at once: :func:`analyze`, :func:`project_2d`.
- The models and records of ``experiment=analyze`` (importable here, not in ``__all__``):
  :func:`model_source`, :func:`load_hf_flow`, :func:`model_from_module`,
  :func:`random_module`, :func:`flow_inputs`, :func:`refinement_identities`,
  :func:`analysis_records`, :func:`analysis_arrays`, :func:`analysis_summary`; of
  ``experiment=depth``: :func:`depth_evaluation` (:func:`reading_suffix`).

Supported models (:data:`SUPPORTED_MODELS`): :class:`~transflow.SplitTransformer` (and
every ``from_torch``/``from_hf`` layer or stack), :class:`~transflow.vision.VisionTransformer`,
:class:`~transflow.vision.CvtStageModel` (no refine), :class:`~transflow.interop.CausalDecoder`
(GPT-2) and :class:`~transflow.control.FlowModel` (the trained digits and sequence models).
See ``docs/analysis.md``.
"""

from ._across_depth import (
    control_blocks as control_blocks,
    control_increments as control_increments,
    control_path as control_path,
    depth_scaling as depth_scaling,
    fit_order as fit_order,
    increment_scaling as increment_scaling,
    refine as refine,
    refine_controls as refine_controls,
    refinement_study as refinement_study,
)
from ._depth_evaluation import (
    depth_evaluation as depth_evaluation,
    reading_suffix as reading_suffix,
)
from ._flow import (
    SUPPORTED_MODELS as SUPPORTED_MODELS,
    Flow as Flow,
    StepRecord as StepRecord,
    as_flow as as_flow,
    iter_steps as iter_steps,
    model_output as model_output,
    trajectory as trajectory,
)
from ._geometry import (
    STEP_QUANTITIES as STEP_QUANTITIES,
    cosine_matrix as cosine_matrix,
    count_clusters as count_clusters,
    distance_to_s1 as distance_to_s1,
    effective_rank as effective_rank,
    step_diagnostics as step_diagnostics,
    substep_parents as substep_parents,
)
from ._sensitivity import lyapunov_exponent as lyapunov_exponent
from ._sources import (
    MODEL_ARCHS as MODEL_ARCHS,
    analysis_arrays as analysis_arrays,
    analysis_records as analysis_records,
    analysis_summary as analysis_summary,
    cast_floats as cast_floats,
    flow_inputs as flow_inputs,
    load_hf_flow as load_hf_flow,
    model_from_module as model_from_module,
    model_source as model_source,
    no_order_reason as no_order_reason,
    random_module as random_module,
    refinement_identities as refinement_identities,
)
from ._study import analyze as analyze, project_2d as project_2d

__all__ = [
    "STEP_QUANTITIES",
    "SUPPORTED_MODELS",
    "Flow",
    "StepRecord",
    "analyze",
    "as_flow",
    "control_blocks",
    "control_increments",
    "control_path",
    "cosine_matrix",
    "count_clusters",
    "depth_scaling",
    "distance_to_s1",
    "effective_rank",
    "fit_order",
    "increment_scaling",
    "iter_steps",
    "lyapunov_exponent",
    "model_output",
    "project_2d",
    "refine",
    "refine_controls",
    "refinement_study",
    "step_diagnostics",
    "substep_parents",
    "trajectory",
]
