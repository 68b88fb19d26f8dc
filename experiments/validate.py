"""Every option's allowed values, checked before any compute and before any directory.

Hydra and the structured schemas already reject unknown keys and values of the wrong type
at composition time (``transflow-run`` shows Hydra's cause and the allowed values). This
module declares what the types cannot express, once per option:

- :data:`RULES`, keyed by field name (so a field that appears in several tasks,
  ``n_tokens``, ``dt``, ``batch_size``, ``checkpoint_dir``, has one declaration): a
  :class:`Rule` (a numeric range; ±inf and NaN are out of range unless the rule says
  ``finite=False``), a :class:`OneOf` (allowed names) or a :class:`WritableDir` (a
  directory the run will create or write). :data:`TASK_RULES` overrides one for a single
  task; a task's ``CHOICES`` (names keyed by option path) take precedence over both.
- A task's ``CONSTRAINTS``: :class:`Constraint` objects over several options
  (``task.dt <= task.t1``), and its ``check(cfg)`` for the study designs they cannot
  express.

Lists are checked element-wise; nested dataclasses (``task.parallel``, ``task.digits``)
are checked too. A violation raises :class:`ConfigValueError`, one line naming the key,
the value and what is allowed::

    task.n_tokens = -3 is out of range: expected a finite value > 0 (experiments/validate.py).

This module imports neither JAX nor torch.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

__all__ = [
    "RULES",
    "TASK_RULES",
    "ConfigValueError",
    "Constraint",
    "OneOf",
    "Rule",
    "WritableDir",
    "check_constraints",
    "validate",
    "writable_dir_problem",
]


class ConfigValueError(ValueError):
    """A config value outside its allowed range (raised before any compute)."""


@dataclasses.dataclass(frozen=True)
class Rule:
    """``lo <(=) value <(=) hi``; ``None`` for an open end. ±inf and NaN are out of range
    unless ``finite=False`` (NaN always is).

    Example:
        >>> Rule(0, False).check(3), Rule(0, False).check(0), Rule(0, False).check(float("inf"))
        (True, False, False)
        >>> Rule(0, False).describe()
        '> 0'
    """

    lo: float | None = None
    lo_incl: bool = True
    hi: float | None = None
    hi_incl: bool = True
    finite: bool = True

    def check(self, value: float) -> bool:
        if isinstance(value, float) and (math.isnan(value) or (self.finite and math.isinf(value))):
            return False
        if self.lo is not None and (value < self.lo or (value == self.lo and not self.lo_incl)):
            return False
        if self.hi is not None and (value > self.hi or (value == self.hi and not self.hi_incl)):
            return False
        return True

    def describe(self) -> str:
        parts = []
        if self.lo is not None:
            parts.append(f"{'>=' if self.lo_incl else '>'} {self.lo:g}")
        if self.hi is not None:
            parts.append(f"{'<=' if self.hi_incl else '<'} {self.hi:g}")
        return " and ".join(parts) or "any value"

    def violation(self) -> float:
        """A value that breaks the rule (for tests and error examples)."""
        if self.lo is not None:
            return self.lo - 3
        assert self.hi is not None
        return self.hi + 3

    def problem(self, key: str, value: Any) -> str | None:
        """The one-line error for ``key = value``, or ``None`` when it is allowed."""
        for v in value if isinstance(value, list) else [value]:
            if _is_number(v) and not self.check(v):
                shown = value if not isinstance(value, list) else f"{value} (element {v})"
                what = ("a finite value " if self.finite else "a value ") + self.describe()
                return (
                    f"{key} = {shown} is out of range: expected {what}. Fix the override "
                    f"(e.g. {key}={_example(self, v)}); the ranges are listed in "
                    "experiments/validate.py (RULES)."
                )
        return None


@dataclasses.dataclass(frozen=True)
class OneOf:
    """Allowed names (a tuple, or a callable returning one, so a registry is read when the
    check runs); a list value is checked element-wise.

    Example:
        >>> OneOf(("dt", "2dt")).problem("task.ffn_branch_dt", "3dt")[:53]
        "task.ffn_branch_dt: '3dt' is not allowed; choose from"
    """

    names: Any

    def allowed(self) -> tuple:
        return tuple(self.names() if callable(self.names) else self.names)

    def describe(self) -> str:
        return "one of " + ", ".join(map(str, self.allowed()))

    def problem(self, key: str, value: Any) -> str | None:
        values = list(value) if isinstance(value, list | tuple) else [value]
        allowed = self.allowed()
        bad = [v for v in values if v not in allowed]
        if not bad:
            return None
        shown = "[" + ",".join(map(str, values)) + "]" if isinstance(value, list | tuple) else value
        return (
            f"{key}: {', '.join(repr(b) for b in bad)} {'is' if len(bad) == 1 else 'are'} not "
            f"allowed; choose from {', '.join(map(str, allowed))} (got {key}={shown})."
        )


def writable_dir_problem(key: str, path: str) -> str | None:
    """Why the directory ``path`` could not be created or written (``None``: it can be).

    The nearest existing ancestor must be a directory in which a directory can be created
    (tried with a temporary one, removed at once, so root's permissions and read-only or
    virtual file systems such as ``/proc`` are judged by what happens, not by mode bits).
    Nothing is left behind.

    Example:
        >>> writable_dir_problem("task.checkpoint_dir", "/proc/nope")[:54]
        'task.checkpoint_dir = /proc/nope: cannot create a dire'
        >>> writable_dir_problem("task.checkpoint_dir", "outputs/checkpoints/x") is None
        True
    """
    import os
    import pathlib
    import tempfile

    p = pathlib.Path(os.path.expanduser(str(path)))
    if p.exists() and not p.is_dir():
        return f"{key} = {path}: exists and is not a directory; give a directory to write to."
    anc = p
    while not anc.exists():
        anc = anc.parent
    why = "is not a directory"
    if anc.is_dir():
        try:
            tempfile.TemporaryDirectory(dir=anc, prefix=".transflow-probe-").cleanup()
            return None
        except OSError as e:
            why = e.strerror or type(e).__name__
    return (
        f"{key} = {path}: cannot create a directory there ({anc}: {why}); give a writable "
        "directory."
    )


@dataclasses.dataclass(frozen=True)
class WritableDir:
    """A directory the run creates or writes, unless the value is one of ``special``
    (``"auto"``, ``"none"``, ...: the task picks or skips the directory)."""

    special: tuple[str, ...] = ()

    def describe(self) -> str:
        return "a writable directory" + (
            f" or one of {', '.join(repr(s) for s in self.special)}" if self.special else ""
        )

    def problem(self, key: str, value: Any) -> str | None:
        if not isinstance(value, str) or value in self.special:
            return None
        return writable_dir_problem(key, value)


@dataclasses.dataclass(frozen=True)
class Constraint:
    """A rule over several options of one task (its module's ``CONSTRAINTS``).

    ``keys`` are full config keys (``task.dt``, ``task.digits.patch``, ``precision``);
    ``test`` receives their values in that order and returns whether they are allowed;
    ``expect`` says what is required, for the error line.

    Example:
        >>> c = Constraint(("task.dt", "task.t1"), lambda dt, t1: dt <= t1, "task.dt <= task.t1")
        >>> c.problem({"task.dt": 5.0, "task.t1": 1.0})
        'task.dt = 5.0, task.t1 = 1.0: expected task.dt <= task.t1; change one of them.'
    """

    keys: tuple[str, ...]
    test: Any
    expect: str

    def problem(self, values: Mapping[str, Any]) -> str | None:
        args = [values[k] for k in self.keys]
        if self.test(*args):
            return None
        shown = ", ".join(f"{k} = {plain(values[k])}" for k in self.keys)
        fix = "change one of them" if len(self.keys) > 1 else "change it"
        return f"{shown}: expected {self.expect}; {fix}."


def plain(v: Any) -> str:
    """A value as a command line writes it: ``[4,8]``, ``{"a":1}``, ``fp32``."""
    if isinstance(v, dict):
        return json.dumps(v, separators=(",", ":"), default=str)  # a display string
    if isinstance(v, list | tuple):
        return "[" + ",".join(map(str, v)) + "]"
    return str(getattr(v, "value", v))


POSITIVE = Rule(0, False)
NON_NEGATIVE = Rule(0, True)
UNIT_OPEN = Rule(0, False, 1, False)
UNIT_CLOSED = Rule(0, True, 1, True)


def _train_schemes() -> tuple[str, ...]:
    from transflow import SCHEME_NAMES

    return tuple(
        dict.fromkeys(("lie", "prenorm", "relaxed", "imex", "imex_dissipative", *SCHEME_NAMES))
    )


def _each(rule: Rule, names: str) -> dict[str, Rule]:
    """``{name: rule}`` for each of the whitespace-separated field ``names`` (each once)."""
    listed = names.split()
    if len(set(listed)) != len(listed):
        raise ValueError(
            f"validate.RULES: {sorted({n for n in listed if listed.count(n) > 1})} twice"
        )
    return dict.fromkeys(listed, rule)


def _once(*groups: dict[str, Any]) -> dict[str, Any]:
    """The groups of :data:`RULES` merged, refusing a field in two (the later would win)."""
    merged: dict[str, Any] = {}
    for group in groups:
        twice = sorted(set(merged) & set(group))
        if twice:
            raise ValueError(f"validate.RULES: {twice} declared in two groups; keep one rule each")
        merged.update(group)
    return merged


#: Field name → rule, for every numeric field of the top-level groups and of every task,
#: and for the names and paths shared by several tasks (the training options of
#: :class:`transflow.control.TrainConfig`).
RULES: dict[str, Rule | OneOf | WritableDir] = _once(
    # > 0: the sizes, counts, steps, rates and tolerances of the top level, grid, model,
    # the tasks, training (TrainConfig), the study protocol (task.study) and the order
    # study's problems (task.problem_a/problem_b of experiment=schemes)
    _each(
        POSITIVE,
        """
        n_tokens n_features dx dy height width d_model nhead dim_feedforward num_layers
        dt temperature d t1 n_layers n_heads seq_len image_size patch_size patch
        n_inputs factors n_steps batch batch_size tol_fp64 tol_fp32 n_points
        softmax_tokens lambdas tokens_a tokens_b max_regions teeth_log2 zigzag_depth
        depths_2d head_dim ffn_width lam_start lam_end grid_1d count_time_budget
        partition_tokens partition_depth grid_2d precision_rank precision_depths
        slice_width slice_depth slice_dense sizes n_ref n_time_steps n_configs
        refinements query_block key_block memory_n_tokens memory_token_devices
        memory_ratio_factor timeout_s devices mesh steps lr log_every checkpoint_every
        length vocab n_test path_size train_depths path_dt depths rtol atol relax_tau
        max_cpu_ratio sequence_n_steps n_sensitivity order_tol scale grid window_order1
        window_order2 window_order4 adjoint_rtol checkpoints memory_depths memory_batch
        max_memory_ratio text_steps text_seeds text_T text_eval_depths max_bpc_change
        second_order_depths n_seeds headline_n_seeds eval_grid random_depths ref_rtol
        context n_val
        """,
    ),
    _each(
        NON_NEGATIVE,
        "seed init_seed path_seed state_seed seeds layer_norm_eps warmup_steps weight_decay "
        "throttle smoothness ref_check_max",
    ),
    _each(UNIT_OPEN, "threshold test_fraction val_fraction"),
    _each(UNIT_CLOSED, "min_test_accuracy min_sequence_accuracy min_accuracy max_drop"),
    _each(Rule(2, True), "softmax_grid precision_grid"),
    {
        # >= 0 where 0 (or null) means "none", "all" or "the default"
        "d_ff": NON_NEGATIVE,  # 0 (or null): the task's default width
        "encoder_layers": NON_NEGATIVE,  # 0: no encoder stacks
        "max_chars": NON_NEGATIVE,  # text corpus cap (0: the whole corpus)
        "large_regions": NON_NEGATIVE,  # 0: no large count (expressivity)
        "first_configs": NON_NEGATIVE,  # 0: every configuration (hf_equivalence)
        "eval_every": NON_NEGATIVE,  # 0: evaluate only at the end
        "test_subset": NON_NEGATIVE,  # 0: the whole test split
        "test_examples": NON_NEGATIVE,  # 0: the whole test split (experiment=depth)
        "adjoint_relu_rtol": NON_NEGATIVE,  # 0: skip the ReLU contrast
        "seed_offset": NON_NEGATIVE,  # task.study.seed_offset, also task.seed_offset (schemes)
        "ref_check_rtol": NON_NEGATIVE,  # 0: no estimate of the reference's error
        "ref_check_coarse_rtol": NON_NEGATIVE,  # 0: the v1 estimate (the loose distance)
        "ref_refine": NON_NEGATIVE,  # 0: no refinement of the reference (design v2)
        "min_seeds": Rule(2, True),  # a std needs two seeds (trained_regions)
        "beta_depth": Rule(9, True),  # strides 1, 2, 4, 8 need at least 9 samples
        # names and paths
        "scheme": OneOf(_train_schemes),
        "ffn_branch_dt": OneOf(("dt", "2dt")),
        "remat": OneOf(("none", "step", "nested")),
        "pool": OneOf(("mean", "cls")),
        "kind": OneOf(("sort", "reverse")),
        "checkpoint_dir": WritableDir(special=("auto", "run", "none", "")),
    },
)

#: ``(task, field)`` → rule, where a task reads a field differently from :data:`RULES`.
TASK_RULES: dict[tuple[str, str], Rule | OneOf | WritableDir] = {
    ("sharded", "d_ff"): POSITIVE,  # null (not 0) selects the square FFN there
}


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _items(node: Any) -> Iterator[tuple[str, Any]]:
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        for f in dataclasses.fields(node):
            yield f.name, getattr(node, f.name)
    elif isinstance(node, Mapping) or hasattr(node, "items"):
        yield from node.items()


def _is_leaf(value: Any) -> bool:
    if _is_number(value) or isinstance(value, str):
        return True
    if isinstance(value, list | tuple) or type(value).__name__ == "ListConfig":
        return any(_is_number(v) or isinstance(v, str) for v in value)
    return False


def option_values(node: Any, prefix: str) -> Iterator[tuple[str, str, Any]]:
    """``(key, field name, value)`` of every number, name, or list of them under ``node``.

    Descends into nested dataclasses/mappings (``task.parallel.mesh``); ``None`` values,
    booleans and enums (typed by the schema) are skipped.
    """
    for name, value in _items(node):
        key = f"{prefix}.{name}" if prefix else str(name)
        if _is_leaf(value):
            yield key, str(name), list(value) if not isinstance(value, str | int | float) else value
        elif (dataclasses.is_dataclass(value) and not isinstance(value, type)) or (
            type(value).__name__ == "DictConfig" and str(name) != "assignments"
        ):
            yield from option_values(value, key)


def rule_for(task: str, name: str) -> Rule | OneOf | WritableDir | None:
    """The rule of field ``name`` (in task ``task``), or ``None`` when it has none."""
    return TASK_RULES.get((task, name), RULES.get(name))


def option_check(
    task: str, key: str, name: str, value: Any, choices: Mapping[str, Any] = {}
) -> Rule | OneOf | WritableDir | None:
    """The one check of option ``key`` (field ``name``, current ``value``), used alike by
    :func:`validate` and by the help (``transflow-run help <experiment>``): the task's
    declared names (``choices``: its ``CHOICES``, by path below ``task``) first, else the
    rule of :func:`rule_for` (a name rule only for a name or a list of names: an enum or a
    number under a name another task uses for names has none); ``None``: unchecked.

    Example:
        >>> option_check("", "grid.n_tokens", "n_tokens", 8).describe()
        '> 0'
        >>> option_check("x", "task.f", "f", "a", {"f": ("a", "b")}).describe()
        'one of a, b'
    """
    path = key.split(".", 1)[1] if key.startswith("task.") else None
    if path is not None and path in choices:
        return OneOf(choices[path])
    rule = rule_for(task if key.startswith("task.") else "", name)
    names = isinstance(value, str) or (
        isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)
    )
    return None if isinstance(rule, OneOf) and not names else rule


def _get(cfg: Any, key: str) -> Any:
    return cfg.get(key) if hasattr(cfg, "get") else getattr(cfg, key, None)


def validate(
    cfg: Any, task_name: str, task_obj: Any = None, *, choices: Mapping[str, Any] = {}
) -> None:
    """Check every value of ``cfg`` (and of the task's dataclass ``task_obj``) against its
    :func:`option_check`: the task's declared names (``choices``, its ``CHOICES``) or its
    rule in :data:`RULES` / :data:`TASK_RULES`.

    Raises :class:`ConfigValueError` naming the first key out of range. Fields without a
    rule are not checked (``tests/test_cli.py`` checks that every numeric field of every
    task has one).

    Example:
        >>> from omegaconf import OmegaConf
        >>> cfg = OmegaConf.create({"seed": 0, "grid": {"n_tokens": -3}, "task": {}})
        >>> validate(cfg, "equivalence")
        Traceback (most recent call last):
        ...
        transflow.experiments.validate.ConfigValueError: grid.n_tokens = -3 is out of range: ...
    """
    checks = [("seed", "seed", _get(cfg, "seed"))]
    for g in ("grid", "model"):  # their names are enums, typed by the schema: numbers only
        node = _get(cfg, g)
        checks += [
            (key, name, value)
            for key, name, value in (option_values(node, g) if node is not None else ())
            if _is_number(value) or (isinstance(value, list) and any(map(_is_number, value)))
        ]
    task_node = task_obj if task_obj is not None else _get(cfg, "task")
    if task_node is not None:
        checks.extend(option_values(task_node, "task"))
    for key, name, value in checks:
        rule = option_check(task_name, key, name, value, choices)
        problem = None if rule is None else rule.problem(key, value)
        if problem is not None:
            raise ConfigValueError(problem)


def check_constraints(constraints: Iterable[Constraint], cfg: Any, task_obj: Any) -> None:
    """Check a task's ``CONSTRAINTS`` on the composed config (top-level keys such as
    ``precision``) and the task's dataclass (``task.*`` keys); raises the first violation
    as :class:`ConfigValueError`."""
    for c in constraints:
        values = {}
        for key in c.keys:
            parts = key.split(".")
            obj = task_obj if parts[0] == "task" else cfg
            for part in parts[1:] if parts[0] == "task" else parts:
                obj = _get(obj, part)
            values[key] = getattr(obj, "value", obj)
        problem = c.problem(values)
        if problem is not None:
            raise ConfigValueError(problem)


def _example(rule: Rule, v: float) -> str:
    if rule.lo is not None and rule.hi is not None:
        return f"{(rule.lo + rule.hi) / 2:g}"
    if rule.lo is not None:
        return f"{rule.lo + 1:g}"
    return f"{rule.hi - 1:g}"
