# ruff: noqa: E501  (lists of public names, one group per reason)
"""Public callables that tests/test_public_inputs.py does not call with bad values, each
with the reason. The coverage test there fails when a public name is neither in its
table nor here, when a name here is no longer public, or when a name here is covered.

``NOT_YET`` was the honest remainder of issue 49 (entry points whose argument checks the
table did not exercise yet); it is empty now that the training configs have their cases.
A name may enter it only with an issue that says when it leaves.
"""

from __future__ import annotations

_NO_NUMBERS = "an exception, an abstract base or a result record: no user numbers to check"
_PLOTTING = "draws the records of a study run (figures are checked by the figure checker's tests, tests/test_plotting*.py); takes no user numbers"
_TASKS = "discovers experiment task modules on disk (the CLI boundary is checked by tests/test_cli.py); no numeric arguments"
_TABLES = "formats the results of a study as a markdown table (records it was given); takes no user numbers"
_CAPABILITY_QUERY = "asks or records what a scheme declares (a name and a class, no numbers); refusals are tested in tests/test_scheme_contract.py"
_ALIAS = "a type alias for annotations (typing.Callable[...]): it is not called"
_BUILT = "a model that a checked public function builds and names in its docstring (its case is in the table); its field constructor takes the builder's output, not user numbers"
NOT_YET = "NOT YET in the table (issue 49 follow-up): its arguments are not exercised with bad values here"

_GROUPS: dict[str, list[str]] = {
    _NO_NUMBERS: [
        "transflow.AbstractScheme",
        "transflow.continuous.ControlPath",
        "transflow.continuous.AdaptiveResult",
        "transflow.continuous.ConvergenceResult",
        "transflow.control.CheckpointError",
        "transflow.control.TrainResult",
        "transflow.expressivity.CertificationError",
        "transflow.expressivity.AbstractPiecewiseLinear",
        "transflow.expressivity.RegionCount",
        "transflow.expressivity.SavedModel",
        "transflow.analysis.StepRecord",
        "transflow.models.AbstractLanguageModel",  # a capability: declares `logits`
        # result records (NamedTuples): load_text_split's split, a scheme's sub-field functions
        "transflow.control.TextSplit",
        "transflow.schemes.SubFields",
        "transflow.schemes.OrderMeasurement",
        # capabilities (abstract classes a scheme or a countable model inherits) and the
        # refusal of a missing one: no constructor a user calls with numbers
        *(
            f"transflow.schemes.{n}"
            for n in "AbstractAttentionChoice AbstractCausal AbstractExplicitScheme AbstractImplicitFFN AbstractLieScheme AbstractLinearStability AbstractMaskable AbstractODEScheme AbstractOperators AbstractPostNorm AbstractShardable AbstractWrapper MissingCapability".split()
        ),
        *(
            f"transflow.expressivity.{n}"
            for n in "AbstractAffineLogits AbstractAttention AbstractBoundedEval AbstractExactEval AbstractExactProgram AbstractIntervalForward AbstractProvenance AbstractRestricted".split()
        ),
    ],
    _BUILT: ["transflow.expressivity.MaxoutTransformer"],  # maxout_to_transformer
    _ALIAS: ["transflow.continuous.Flow"],
    _TABLES: [
        "transflow.schemes.order_table",
        "transflow.schemes.stable_dt_table",
        "transflow.control.baselines_table",
    ],
    _CAPABILITY_QUERY: [
        "transflow.schemes.has",
        "transflow.schemes.require",
        "transflow.schemes.scheme_options",
        "transflow.register_scheme",
    ],
    _PLOTTING: [
        f"transflow.plotting.{n}"
        for n in "integer_axis smoke_mark threshold_line tick_gaps figure_smoke save_figure check_figure FigureProblems LogTicks figure_problems figure_style new_figure smoke_note plot_convergence plot_grid plot_nonconvergence plot_clustering plot_partition plot_regions plot_slice plot_softmax plot_trained_partition plot_trained_regions plot_benchmarks plot_agreement plot_substeps plot_vit_attention plot_sharded_memory plot_training_curves plot_depth_factorial plot_schemes plot_control_smoothness plot_cosine_matrices plot_flow_clustering plot_refinement plot_substep_budgets plot_token_geometry plot_token_trajectories".split()
    ],
    _TASKS: ["transflow.experiments.tasks.discover", "transflow.experiments.tasks.register_tasks"],
}

#: public name -> why tests/test_public_inputs.py does not call it with bad values
EXEMPT: dict[str, str] = {name: reason for reason, names in _GROUPS.items() for name in names}
