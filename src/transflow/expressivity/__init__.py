"""Expressivity: transformers that realize maxout networks and CPWL functions, and exact
linear-region counting (docs/spec/maxout-expressivity.md).

Public API:

- :class:`MaxoutNetwork` (+ :meth:`MaxoutNetwork.from_relu`), :func:`zigzag_maxout`,
  :func:`ibp_bounds`.
- :func:`maxout_to_transformer` → :class:`MaxoutTransformer` (Variants A and B, hardmax or
  softmax at scale λ, parameter counts, out-of-box check).
- CPWL routes: :func:`lattice_cpwl`, :func:`lattice_from_1d`, :func:`hinging_cpwl`.
- Softmax: :func:`softmax_max_constant` (``c_T = W((T−1)/e)``), :func:`softmax_error_bound`,
  :func:`lambert_w`.
- Regions: :func:`count_linear_regions` (exact and certified in 1-D and 2-D),
  :func:`grid_region_count` (pattern hashing, a lower bound), :class:`RegionCount`,
  :class:`CertificationError`, :func:`lp_region_count` (independent LP enumerator).
- Input-dependent hardmax attention: :class:`HardmaxTransformer` (queries and keys depend
  on x; quadratic frozen logits), :func:`exact_regions_1d` (exact 1-D count over exact
  roots of quadratics, :class:`QuadraticRoot`; used by :func:`count_linear_regions`).
- Slices and users' networks: :func:`restrict` (a line or plane of any input space),
  :meth:`MaxoutNetwork.from_torch`.
- The contract of a countable model: :class:`AbstractPiecewiseLinear` plus the capabilities
  it inherits (:class:`AbstractAffineLogits`, :class:`AbstractBoundedEval`,
  :class:`AbstractExactEval`, :class:`AbstractIntervalForward`,
  :class:`AbstractExactProgram`, :class:`AbstractAttention`, :class:`AbstractProvenance`);
  the counters dispatch on them (docs/expressivity.md, "Adding an architecture").
- Studies (records for the experiment task and the paper figures): :func:`softmax_rows`,
  :func:`region_rows`, :func:`partition_2d`, :func:`relu_and_cpwl_checks`,
  :func:`c8_regions`, :func:`precision_rows`, :func:`slice_study`, ….
- Trained expressivity (issue #39, docs/trained-regions.md): :func:`init_transformer`,
  :func:`init_mlp`, :func:`train_model` (softmax with annealed λ, read with hardmax),
  :func:`hardmax_reading` (:class:`ConstantQueryTransformer`), :func:`certified_regions`,
  :func:`sampling_estimate`, :func:`make_target`, :func:`constructed_capacity`, …;
  :func:`train_cell` (one (target, depth, seed) job of the study: both models trained,
  counted and saved);
  :func:`save_model` / :func:`load_model` (:class:`SavedModel`): a trained model kept on
  disk and reloaded without retraining.
"""

from ._budget import CertificationError as CertificationError
from ._construction import (
    MaxoutTransformer as MaxoutTransformer,
    maxout_to_transformer as maxout_to_transformer,
)
from ._cpwl import (
    hinging_cpwl as hinging_cpwl,
    lattice_cpwl as lattice_cpwl,
    lattice_eval as lattice_eval,
    lattice_from_1d as lattice_from_1d,
)
from ._exact1d import QuadraticRoot as QuadraticRoot, exact_regions_1d as exact_regions_1d
from ._hardmax import (
    ConstantQueryTransformer as ConstantQueryTransformer,
    HardmaxTransformer as HardmaxTransformer,
)
from ._lp import lp_region_count as lp_region_count
from ._maxout import (
    MaxoutNetwork as MaxoutNetwork,
    ibp_bounds as ibp_bounds,
    zigzag_maxout as zigzag_maxout,
)
from ._pwl import (
    AbstractAffineLogits as AbstractAffineLogits,
    AbstractAttention as AbstractAttention,
    AbstractBoundedEval as AbstractBoundedEval,
    AbstractExactEval as AbstractExactEval,
    AbstractExactProgram as AbstractExactProgram,
    AbstractIntervalForward as AbstractIntervalForward,
    AbstractPiecewiseLinear as AbstractPiecewiseLinear,
    AbstractProvenance as AbstractProvenance,
)
from ._regions import (
    RegionCount as RegionCount,
    count_linear_regions as count_linear_regions,
    grid_region_count as grid_region_count,
)
from ._saved import (
    SavedModel as SavedModel,
    load_model as load_model,
    save_model as save_model,
)
from ._slice import (
    AbstractRestricted as AbstractRestricted,
    Restricted as Restricted,
    restrict as restrict,
)
from ._softmax import (
    lambert_w as lambert_w,
    softmax_error_bound as softmax_error_bound,
    softmax_gap_error as softmax_gap_error,
    softmax_max_constant as softmax_max_constant,
)
from ._studies import (
    c8_regions as c8_regions,
    construction_checks as construction_checks,
    max_errors as max_errors,
    outside_box_errors as outside_box_errors,
    partition_2d as partition_2d,
    precision_rows as precision_rows,
    random_maxout as random_maxout,
    region_rows as region_rows,
    relu_and_cpwl_checks as relu_and_cpwl_checks,
    slice_study as slice_study,
    softmax_multilayer_rows as softmax_multilayer_rows,
    softmax_rows as softmax_rows,
)
from ._trained import (
    MODEL_KINDS as MODEL_KINDS,
    TARGETS as TARGETS,
    Target as Target,
    certified_regions as certified_regions,
    constructed_capacity as constructed_capacity,
    hardmax_reading as hardmax_reading,
    init_mlp as init_mlp,
    init_transformer as init_transformer,
    make_target as make_target,
    mlp_network as mlp_network,
    mlp_width_for as mlp_width_for,
    model_apply as model_apply,
    n_params as n_params,
    reading_gap as reading_gap,
    sampling_estimate as sampling_estimate,
    train_model as train_model,
)
from ._trained_cell import train_cell as train_cell
