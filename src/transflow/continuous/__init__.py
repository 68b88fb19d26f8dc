"""The continuous-time limit: splitting schemes as data, continuous controls and kernels,
diffrax reference solves of the well-posed sub-models, and convergence studies.

Also the public face of the continuous-time core that :func:`transflow.evolve` builds on
(control paths, ``transflow._paths``; the adaptive solve, ``transflow._solve``) and of
:func:`evolve_path`: this package sits above ``transflow._evolve``, those modules below it.

See ``docs/continuous.md`` and docs/spec/continuous-model.md §3, §7 (Q9, Q10), §8.4, §8.10.
"""

from .._evolve import evolve_path as evolve_path
from .._integrate import SOLVERS as SOLVERS, AdaptiveResult as AdaptiveResult
from .._paths import (
    PATH_KINDS as PATH_KINDS,
    READINGS as READINGS,
    BasisExpansion as BasisExpansion,
    ControlPath as ControlPath,
    PiecewiseConstant as PiecewiseConstant,
    PiecewiseLinear as PiecewiseLinear,
    TimeEmbeddingNet as TimeEmbeddingNet,
    init_path as init_path,
    stack_leading as stack_leading,
)
from .._solve import (
    compare_adjoints as compare_adjoints,
    solve_adaptive as solve_adaptive,
    vector_field as vector_field,
)
from ..schemes._lie import RelaxedLieScheme as RelaxedLieScheme
from ._controls import (
    KernelAttention as KernelAttention,
    KernelLinear as KernelLinear,
    SmoothPath as SmoothPath,
)
from ._flows import (
    euler_flow as euler_flow,
    linear_flow_exact as linear_flow_exact,
    make_flow as make_flow,
    projection_flow as projection_flow,
    rk4_flow as rk4_flow,
)
from ._models import (
    SubModel as SubModel,
    full_model_flows as full_model_flows,
    tangent_s1 as tangent_s1,
    y_mean as y_mean,
)
from ._reference import (
    reference_error_estimate as reference_error_estimate,
    reference_solve as reference_solve,
)
from ._schemes import (
    Flow as Flow,
    SplittingScheme as SplittingScheme,
    Stage as Stage,
    hybrid as hybrid,
    integrate as integrate,
    lie as lie,
    paper_lie as paper_lie,
    parallel as parallel,
    strang as strang,
)
from ._solver import (
    ProjectionTerm as ProjectionTerm,
    SplittingSolver as SplittingSolver,
    flows_from_terms as flows_from_terms,
)
from ._studies import (
    NONCONVERGENCE_CASES as NONCONVERGENCE_CASES,
    SCHEMES as SCHEMES,
    SUBMODELS as SUBMODELS,
    ConvergenceResult as ConvergenceResult,
    clustering_trajectory as clustering_trajectory,
    convergence_study as convergence_study,
    default_submodel as default_submodel,
    dt_convergence as dt_convergence,
    expected_order as expected_order,
    fit_slope as fit_slope,
    full_model_controls as full_model_controls,
    full_model_refinement as full_model_refinement,
    grid_convergence as grid_convergence,
    grid_refinement_study as grid_refinement_study,
    nonconvergence_study as nonconvergence_study,
    s2_active_fraction as s2_active_fraction,
    scheme_for as scheme_for,
    smooth_kernel_model as smooth_kernel_model,
)

__all__ = [
    "KernelAttention",
    "KernelLinear",
    "PiecewiseConstant",
    "READINGS",
    "SmoothPath",
    "PATH_KINDS",
    "BasisExpansion",
    "ControlPath",
    "PiecewiseLinear",
    "TimeEmbeddingNet",
    "init_path",
    "stack_leading",
    "SOLVERS",
    "AdaptiveResult",
    "RelaxedLieScheme",
    "compare_adjoints",
    "evolve_path",
    "solve_adaptive",
    "vector_field",
    "euler_flow",
    "linear_flow_exact",
    "make_flow",
    "projection_flow",
    "rk4_flow",
    "SubModel",
    "full_model_flows",
    "tangent_s1",
    "y_mean",
    "reference_error_estimate",
    "reference_solve",
    "Flow",
    "SplittingScheme",
    "Stage",
    "hybrid",
    "integrate",
    "lie",
    "paper_lie",
    "parallel",
    "strang",
    "ProjectionTerm",
    "SplittingSolver",
    "flows_from_terms",
    "NONCONVERGENCE_CASES",
    "SCHEMES",
    "SUBMODELS",
    "ConvergenceResult",
    "clustering_trajectory",
    "convergence_study",
    "default_submodel",
    "dt_convergence",
    "expected_order",
    "fit_slope",
    "full_model_controls",
    "full_model_refinement",
    "grid_convergence",
    "grid_refinement_study",
    "nonconvergence_study",
    "s2_active_fraction",
    "scheme_for",
    "smooth_kernel_model",
]
