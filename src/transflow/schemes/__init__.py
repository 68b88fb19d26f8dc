"""Splitting schemes: one time step of the continuous model = one layer.

One module per family, as diffrax keeps its solvers, all on one base class
(:class:`AbstractScheme`: ``step``, the abstract ``advance`` and ``substep_names``, the
declared ``nodes``). What a consumer may do with a scheme is declared by the capability
classes it inherits (:data:`CAPABILITIES`: :class:`AbstractODEScheme` with its ``order``
and ``vector_field``, :class:`AbstractLinearStability`, :class:`AbstractShardable`,
:class:`AbstractMaskable`, :class:`AbstractCausal`, …); :func:`require` refuses a scheme
without the one a consumer needs, in one line (docs/scheme-capabilities.md). Every
concrete scheme is final.

- ``_base``: the abstraction, the capabilities, the operators a step is written in
  (:class:`DenseOperators`; ``transflow.parallel`` passes sharded ones) and the shared
  sub-steps (attention, projection, FFN branch);
- ``_lie``: :class:`LieScheme` (the paper's post-LN splitting) and
  :class:`RelaxedLieScheme` (its projections relaxed at rate 1/τ), siblings on
  :class:`AbstractLieScheme`;
- ``_causal``: :class:`CausalScheme` (a wrapper: every attention causal);
- ``_conv``: :class:`ConvPreNormScheme` (CvT); ``_rms``: :class:`RMSPreNormScheme` (Llama);
- ``_prenorm``: :class:`PreNormScheme` (pre-LN, explicit Euler on composite operators);
- ``_strang``: :class:`StrangScheme` (Strang splitting, the Macaron layer);
- ``_runge_kutta``: :class:`RungeKuttaScheme` with :class:`ButcherTableau` data;
- ``_imex``: :class:`IMEXScheme` (implicit linear FFN sub-steps);
- ``_subfields``: the sub-fields a, g the Strang and Runge–Kutta steps are written in;
- ``_registry``: the one table of schemes by name (:func:`make_scheme`,
  :func:`register_scheme`, :data:`SCHEME_NAMES`), :func:`declared_order`,
  :func:`stage_controls`;
- ``_stability``: linear stability (amplification factors, step matrices, stable Δt).
- ``_analysis``: the numerical analysis a study records (measured orders on an
  :class:`OrderProblem`, the stability-function identity, a layer's confirmed stable Δt,
  the IMEX solve; :func:`measure_orders`, :func:`stability_function_error`,
  :func:`layer_stable_dt`, :func:`stability_survey`, :func:`implicit_solve_check`,
  :func:`imex_step_check`).

Every name is also exported by :mod:`transflow`. The sub-model splittings of
:mod:`transflow.continuous` (``lie``, ``strang``, … as :class:`~transflow.continuous.
SplittingScheme` data over abstract flows) are the same compositions of sub-flows,
written for the convergence studies of the well-posed sub-models (docs/architecture.md).
"""

from ._analysis import (
    OrderMeasurement as OrderMeasurement,
    OrderProblem as OrderProblem,
    convergence_errors as convergence_errors,
    empirical_order as empirical_order,
    imex_step_check as imex_step_check,
    implicit_solve_check as implicit_solve_check,
    layer_stable_dt as layer_stable_dt,
    measure_order as measure_order,
    measure_orders as measure_orders,
    order_table as order_table,
    stability_function_error as stability_function_error,
    stability_survey as stability_survey,
    stable_dt_table as stable_dt_table,
    step_cpu_seconds as step_cpu_seconds,
)
from ._base import (
    CAPABILITIES as CAPABILITIES,
    AbstractAttentionChoice as AbstractAttentionChoice,
    AbstractCausal as AbstractCausal,
    AbstractImplicitFFN as AbstractImplicitFFN,
    AbstractLinearStability as AbstractLinearStability,
    AbstractMaskable as AbstractMaskable,
    AbstractODEScheme as AbstractODEScheme,
    AbstractOperators as AbstractOperators,
    AbstractPostNorm as AbstractPostNorm,
    AbstractScheme as AbstractScheme,
    AbstractShardable as AbstractShardable,
    AbstractWrapper as AbstractWrapper,
    DenseOperators as DenseOperators,
    MissingCapability as MissingCapability,
    check_consistent as check_consistent,
    check_masks as check_masks,
    ffn_branch as ffn_branch,
    has as has,
    require as require,
)
from ._causal import CausalScheme as CausalScheme
from ._conv import ConvPreNormScheme as ConvPreNormScheme
from ._imex import IMEXScheme as IMEXScheme
from ._lie import (
    AbstractLieScheme as AbstractLieScheme,
    LieScheme as LieScheme,
    RelaxedLieScheme as RelaxedLieScheme,
)
from ._prenorm import PreNormScheme as PreNormScheme, pre_ln_step as pre_ln_step
from ._registry import (
    SCHEME_NAMES as SCHEME_NAMES,
    declared_order as declared_order,
    make_scheme as make_scheme,
    register_scheme as register_scheme,
    scheme_options as scheme_options,
    stage_controls as stage_controls,
)
from ._rms import RMSPreNormScheme as RMSPreNormScheme
from ._runge_kutta import (
    TABLEAUS as TABLEAUS,
    ButcherTableau as ButcherTableau,
    RungeKuttaScheme as RungeKuttaScheme,
)
from ._stability import (
    amplification_factor as amplification_factor,
    confirm_stable_dt as confirm_stable_dt,
    largest_stable_dt as largest_stable_dt,
    linear_run_growth as linear_run_growth,
    linear_step_matrix as linear_step_matrix,
    linearised_stability as linearised_stability,
    perturbation_growth as perturbation_growth,
    reference_solution as reference_solution,
    spectral_radius as spectral_radius,
    stability_function as stability_function,
    sub_field_jacobians as sub_field_jacobians,
)
from ._strang import StrangScheme as StrangScheme
from ._subfields import (
    AbstractExplicitScheme as AbstractExplicitScheme,
    SubFields as SubFields,
    linear_sub_fields as linear_sub_fields,
)
