"""Range checks of a composed config, run before any compute.

Hydra and the structured schemas already reject unknown keys and values of the wrong type
at composition time. This module adds the *value* checks the types cannot express:
counts and sizes are positive, step sizes and temperatures positive, fractions inside
``(0, 1)``, tolerances positive. The rules are keyed by field name (:data:`RULES`), so a
field that appears in several tasks (``n_tokens``, ``dt``, ``batch_size``, ...) has one
rule; :data:`TASK_RULES` overrides one for a single task. Lists of numbers are checked
element-wise; nested dataclasses (``task.parallel``, ``task.digits``) are checked too.

A violated rule raises :class:`ConfigValueError` naming the key, the value and the range::

    task.n_tokens = -3 is out of range: expected an integer > 0 (experiments/validate.py).

This module imports neither JAX nor torch.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["RULES", "TASK_RULES", "ConfigValueError", "Rule", "numeric_fields", "validate"]


class ConfigValueError(ValueError):
    """A config value outside its allowed range (raised before any compute)."""


@dataclasses.dataclass(frozen=True)
class Rule:
    """``lo <(=) value <(=) hi``; ``None`` for an open end.

    Example:
        >>> Rule(0, False).check(3), Rule(0, False).check(0)
        (True, False)
        >>> Rule(0, False).describe()
        '> 0'
    """

    lo: float | None = None
    lo_incl: bool = True
    hi: float | None = None
    hi_incl: bool = True

    def check(self, value: float) -> bool:
        if isinstance(value, float) and math.isnan(value):
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


POSITIVE = Rule(0, False)
NON_NEGATIVE = Rule(0, True)
UNIT_OPEN = Rule(0, False, 1, False)
UNIT_CLOSED = Rule(0, True, 1, True)

#: Field name → rule, for every numeric field of the top-level groups and of every task.
RULES: dict[str, Rule] = {
    # top level, grid, model
    "seed": NON_NEGATIVE,
    "n_tokens": POSITIVE,
    "n_features": POSITIVE,
    "dx": POSITIVE,
    "dy": POSITIVE,
    "height": POSITIVE,
    "width": POSITIVE,
    "d_model": POSITIVE,
    "nhead": POSITIVE,
    "dim_feedforward": POSITIVE,
    "num_layers": POSITIVE,
    "layer_norm_eps": NON_NEGATIVE,
    "init_seed": NON_NEGATIVE,
    "dt": POSITIVE,
    "temperature": POSITIVE,
    # sizes and counts of the tasks
    "d": POSITIVE,
    "t1": POSITIVE,
    "n_layers": POSITIVE,
    "n_heads": POSITIVE,
    "d_ff": NON_NEGATIVE,  # 0 (or null): the task's default width
    "seq_len": POSITIVE,
    "image_size": POSITIVE,
    "patch_size": POSITIVE,
    "patch": POSITIVE,
    "n_inputs": POSITIVE,
    "factors": POSITIVE,
    "threshold": UNIT_OPEN,
    "n_steps": POSITIVE,
    "encoder_layers": NON_NEGATIVE,  # 0: no encoder stacks
    "batch": POSITIVE,
    "batch_size": POSITIVE,
    "tol_fp64": POSITIVE,
    "tol_fp32": POSITIVE,
    "n_points": POSITIVE,
    "softmax_tokens": POSITIVE,
    "lambdas": POSITIVE,
    "tokens_a": POSITIVE,
    "tokens_b": POSITIVE,
    "max_regions": POSITIVE,
    # text corpus cap (0: the whole corpus)
    "max_chars": NON_NEGATIVE,
    # trained_regions
    "teeth_log2": POSITIVE,
    "zigzag_depth": POSITIVE,
    "depths_2d": POSITIVE,
    "head_dim": POSITIVE,
    "ffn_width": POSITIVE,
    "lam_start": POSITIVE,
    "lam_end": POSITIVE,
    "grid_1d": POSITIVE,
    "count_time_budget": POSITIVE,
    "large_regions": POSITIVE,
    "partition_tokens": POSITIVE,
    "partition_depth": POSITIVE,
    "grid_2d": POSITIVE,
    "precision_rank": POSITIVE,
    "precision_depths": POSITIVE,
    "slice_width": POSITIVE,
    "slice_depth": POSITIVE,
    "slice_dense": POSITIVE,
    "sizes": POSITIVE,
    "n_ref": POSITIVE,
    "n_time_steps": POSITIVE,
    "n_configs": POSITIVE,
    "refinements": POSITIVE,
    "query_block": POSITIVE,
    "key_block": POSITIVE,
    "memory_n_tokens": POSITIVE,
    "memory_token_devices": POSITIVE,
    "memory_ratio_factor": POSITIVE,
    "timeout_s": POSITIVE,
    "devices": POSITIVE,
    "mesh": POSITIVE,
    # training
    "steps": POSITIVE,
    "lr": POSITIVE,
    "warmup_steps": NON_NEGATIVE,
    "weight_decay": NON_NEGATIVE,
    "log_every": POSITIVE,
    "eval_every": NON_NEGATIVE,  # 0: evaluate only at the end
    "checkpoint_every": POSITIVE,
    "throttle": NON_NEGATIVE,
    "test_fraction": UNIT_OPEN,
    "min_test_accuracy": UNIT_CLOSED,
    "min_sequence_accuracy": UNIT_CLOSED,
    "length": POSITIVE,
    "vocab": POSITIVE,
    "n_test": POSITIVE,
    # continuous depth (experiment=depth)
    "path_size": POSITIVE,
    "train_depths": POSITIVE,
    "smoothness": NON_NEGATIVE,
    "path_dt": POSITIVE,
    "depths": POSITIVE,
    "rtol": POSITIVE,
    "atol": POSITIVE,
    "relax_tau": POSITIVE,
    "min_accuracy": UNIT_CLOSED,
    "max_drop": UNIT_CLOSED,
    "max_cpu_ratio": POSITIVE,
    # layers designed by numerical analysis (experiment=schemes)
    "seeds": NON_NEGATIVE,
    "sequence_n_steps": POSITIVE,
    "n_sensitivity": POSITIVE,
    "order_tol": POSITIVE,
    # the order study's problems (task.problem_a/problem_b of experiment=schemes): path
    # weight scale, seeds, the step counts N measured and the declared fit windows
    "scale": POSITIVE,
    "path_seed": NON_NEGATIVE,
    "state_seed": NON_NEGATIVE,
    "grid": POSITIVE,
    "window_order1": POSITIVE,
    "window_order2": POSITIVE,
    "window_order4": POSITIVE,
    "adjoint_rtol": POSITIVE,
    "adjoint_relu_rtol": NON_NEGATIVE,  # 0: skip the ReLU contrast
    "checkpoints": POSITIVE,
    "memory_depths": POSITIVE,
    "memory_batch": POSITIVE,
    "max_memory_ratio": POSITIVE,
    "text_steps": POSITIVE,
    "text_seeds": POSITIVE,
    "text_T": POSITIVE,
    "text_eval_depths": POSITIVE,
    "max_bpc_change": POSITIVE,
    "second_order_depths": POSITIVE,
    # the study protocol (experiments/protocol.py, task.study)
    "n_seeds": POSITIVE,
    "headline_n_seeds": POSITIVE,
    "seed_offset": NON_NEGATIVE,  # also task.seed_offset of experiment=schemes
    "eval_grid": POSITIVE,
    "random_depths": POSITIVE,
    "ref_rtol": POSITIVE,
    "ref_check_rtol": NON_NEGATIVE,  # 0: no estimate of the reference's error
    "ref_check_coarse_rtol": NON_NEGATIVE,  # 0: the v1 estimate (the loose distance)
    "ref_check_max": NON_NEGATIVE,
    "ref_refine": NON_NEGATIVE,  # 0: no refinement of the reference (design v2)
    "beta_depth": Rule(9, True),  # strides 1, 2, 4, 8 need at least 9 samples
    # the text task (DepthTextConfig, task.text of experiment=schemes)
    "context": POSITIVE,
    "val_fraction": UNIT_OPEN,
    "n_val": POSITIVE,
}

#: ``(task, field)`` → rule, where a task reads a field differently from :data:`RULES`.
TASK_RULES: dict[tuple[str, str], Rule] = {
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


def numeric_fields(node: Any, prefix: str) -> Iterator[tuple[str, str, Any]]:
    """``(key, field name, value)`` of every number or list of numbers under ``node``.

    Descends into nested dataclasses/mappings (``task.parallel.mesh``); ``None`` values and
    ``None`` list elements are skipped.
    """
    for name, value in _items(node):
        key = f"{prefix}.{name}" if prefix else str(name)
        if _is_number(value):
            yield key, str(name), value
        elif isinstance(value, list | tuple) or type(value).__name__ == "ListConfig":
            if any(_is_number(v) for v in value):
                yield key, str(name), list(value)
        elif (dataclasses.is_dataclass(value) and not isinstance(value, type)) or (
            type(value).__name__ == "DictConfig" and str(name) != "assignments"
        ):
            yield from numeric_fields(value, key)


def rule_for(task: str, name: str) -> Rule | None:
    """The rule of field ``name`` (in task ``task``), or ``None`` when it has none."""
    return TASK_RULES.get((task, name), RULES.get(name))


def validate(cfg: Any, task_name: str, task_obj: Any = None) -> None:
    """Check every numeric value of ``cfg`` (and of the task's dataclass ``task_obj``).

    Raises :class:`ConfigValueError` naming the first key out of range. Fields without a
    rule are not checked (``tests/test_validate.py`` checks that every numeric field of
    every task has one).

    Example:
        >>> from omegaconf import OmegaConf
        >>> cfg = OmegaConf.create({"seed": 0, "grid": {"n_tokens": -3}, "task": {}})
        >>> validate(cfg, "equivalence")
        Traceback (most recent call last):
        ...
        transflow.experiments.validate.ConfigValueError: grid.n_tokens = -3 is out of range: ...
    """
    sources: list[tuple[Any, str]] = [
        (cfg.get(g) if hasattr(cfg, "get") else getattr(cfg, g, None), g) for g in ("grid", "model")
    ]
    seed = cfg.get("seed") if hasattr(cfg, "get") else getattr(cfg, "seed", None)
    checks: list[tuple[str, str, Any]] = [("seed", "seed", seed)] if _is_number(seed) else []
    for node, prefix in sources:
        if node is not None:
            checks.extend(numeric_fields(node, prefix))
    task_node = (
        task_obj if task_obj is not None else (cfg.get("task") if hasattr(cfg, "get") else None)
    )
    if task_node is not None:
        checks.extend(numeric_fields(task_node, "task"))
    for key, name, value in checks:
        rule = rule_for(task_name if key.startswith("task.") else "", name)
        if rule is None:
            continue
        for v in value if isinstance(value, list) else [value]:
            if _is_number(v) and not rule.check(v):
                shown = value if not isinstance(value, list) else f"{value} (element {v})"
                raise ConfigValueError(
                    f"{key} = {shown} is out of range: expected a value {rule.describe()}. "
                    f"Fix the override (e.g. {key}={_example(rule, v)}); the ranges are "
                    f"listed in experiments/validate.py (RULES)."
                )


def _example(rule: Rule, v: float) -> str:
    if rule.lo is not None and rule.hi is not None:
        return f"{(rule.lo + rule.hi) / 2:g}"
    if rule.lo is not None:
        return f"{rule.lo + 1:g}"
    return f"{rule.hi - 1:g}"
