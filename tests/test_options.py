"""Every option of every experiment, as a user gives it on the command line (issue 48).

(a) Under ``debug=smoke`` a value given on the command line reaches the run: the smoke
sizes (``configs/sizes/smoke/<task>.yaml``) are merged below the command line, so every
option the experiment reads, given at once with a new value, arrives in the composed
config the job runs with; for a representative few it changes a result.
(b) A bad value of any option (NaN, ±inf, 0 or negative, a wrong type, an unknown name, an
unwritable path, a contradicting pair) stops before any work with one line naming the
option and what is allowed; on the command line that is exit status 2, within 10 s of
CPU, and no directory.
"""

from __future__ import annotations

import copy
import json
import math
import resource
import time

import numpy as np
import pytest
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from test_experiments import EXPERIMENTS, _transflow_run

#: Options without a simple value to vary: structured lists (declared claims) and the
#: free-form mesh assignments (a dict of dicts, checked by the task's constraint).
_SKIP = ("claims", "assignments")
_SPECIAL = set(" ,[]{}()=:'\"*|$\\")
_ONE_VALUE = object()  # an option with a single allowed value (model.source)


def _module(task: str):
    from transflow.experiments.tasks import discover

    return discover()[0][task]


def _named(task: str, key: str):
    """The allowed names of option ``key`` (a task's CHOICES or a RULES OneOf), or None."""
    from transflow.experiments.validate import OneOf, rule_for

    choices = getattr(_module(task), "CHOICES", {})
    path = key.removeprefix("task.")
    if key.startswith("task.") and path in choices:
        return OneOf(choices[path]).allowed()
    rule = rule_for(task if key.startswith("task.") else "", key.rsplit(".", 1)[-1])
    return rule.allowed() if isinstance(rule, OneOf) else None


def _leaves(node, prefix: str):
    """``(key, value node)`` of every option below ``node`` (dict keys of lists included)."""
    for k in node.keys():
        key = f"{prefix}.{k}"
        if str(k) in _SKIP:
            continue
        child = node._get_node(k)
        if isinstance(child, DictConfig):
            yield from _leaves(child, key)
        else:
            yield key, child


def _options(name: str) -> tuple[DictConfig, str, list[tuple[str, object]]]:
    """The smoke config of experiment ``name``, its task and every option it reads."""
    from transflow.experiments.run import compose, prune

    cfg, task = compose([f"experiment={name}", "debug=smoke"])
    pruned = prune(cfg, task)
    opts = [(k, pruned._get_node(k)) for k in ("seed", "precision", "claims")]
    for group in ("grid", "model", "task"):
        if group in pruned:
            opts += list(_leaves(pruned[group], group))
    return pruned, task, opts


def _resolved(node):
    if isinstance(node, ListConfig):
        return OmegaConf.to_container(node, resolve=True)
    return node._dereference_node()._value()


def _fmt(v) -> str:
    """``v`` as a Hydra override value."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, list):
        return "[" + ",".join(_fmt(x) for x in v) + "]"
    if isinstance(v, str):
        return f"'{v}'" if (set(v) & _SPECIAL or not v) else v
    return repr(v)


def _new_value(task: str, key: str, node):
    """A value of option ``key`` different from its smoke value (same type)."""
    value = _resolved(node)
    if hasattr(value, "value") and not isinstance(value, str | int | float):  # an enum
        members = [m.value for m in type(value)]
        if len(members) == 1:
            return _ONE_VALUE
        return members[(members.index(value.value) + 1) % len(members)]
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value * 2 if value else 0.5
    if value is None:
        return 3
    names = _named(task, key)
    if isinstance(value, str):
        other = [n for n in names or () if n != value]
        return other[0] if other else value + "x"
    if isinstance(value, list):
        if not value:
            return [names[0] if names else ("x" if node._metadata.element_type is str else 1)]
        if isinstance(value[0], str):
            return [*value, value[0]]
        if isinstance(value[0], bool):
            return [not v for v in value]
        return [v + 1 if v is not None else 1 for v in value]
    raise AssertionError(f"{key}: no new value for {value!r}")


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_option_given_under_smoke_reaches_the_job(name):
    """All options at once, each with a value other than its smoke size, arrive in the
    config the job sees (the smoke file never replaces what the user typed)."""
    from transflow.experiments.run import compose, prune

    smoke, task, opts = _options(name)
    assert len(opts) >= 4
    new = {key: _new_value(task, key, node) for key, node in opts}
    new = {k: v for k, v in new.items() if v is not _ONE_VALUE}
    overrides = [f"{k}={_fmt(v)}" for k, v in new.items()]
    cfg, _ = compose([f"experiment={name}", "debug=smoke", *overrides])
    got = prune(cfg, task)
    for key, want in new.items():
        assert want != _plain(OmegaConf.select(smoke, key)), key  # a new value
        value = _plain(OmegaConf.select(got, key))
        assert value == want, f"{name}: {key}={_fmt(want)} arrived as {value!r}"


def _plain(value):
    value = OmegaConf.to_container(value) if isinstance(value, ListConfig) else value
    return getattr(value, "value", value)


def test_smoke_sizes_change_and_a_given_value_changes_the_result(tmp_path):
    """The issue's sweep: task.t1 given under debug=smoke is the horizon each job runs
    (it was replaced by the smoke size 4 before); the report says which."""
    from transflow.experiments.run import run_in_process

    out = {}
    for t1 in (1, 2):
        d = tmp_path / str(t1)
        summary, cfg = run_in_process(["experiment=clustering", "debug=smoke", f"task.t1={t1}"], d)
        assert cfg.task.t1 == t1 and cfg.task.n_tokens == 8  # given / smoke size
        report = (d / "report.md").read_text()
        assert f"at t = {t1}" in report and "Claims not enforced in this run" in report
        out[t1] = np.load(d / "trajectory.npz")["times"]
        assert summary["claims_not_enforced"] == ["min pairwise cosine at t = T"]
    assert out[1][-1] == pytest.approx(1) and out[2][-1] == pytest.approx(2)


def test_grid_refinement_sizes_given_under_smoke_are_the_sizes_run(tmp_path):
    from transflow.experiments.run import run_in_process

    slopes = {}
    for sizes, n_ref in (("[4,12]", 36), ("[4,12]", 108), ("[12,36]", 108)):
        d = tmp_path / f"{sizes}-{n_ref}"
        summary, _ = run_in_process(
            [
                "experiment=grid_refinement",
                "debug=smoke",
                f"task.sizes={sizes}",
                f"task.n_ref={n_ref}",
            ],
            d,
        )
        rec = [json.loads(ln) for ln in (d / "metrics.jsonl").read_text().splitlines()][0]
        assert rec["sizes"] == json.loads(sizes) and rec["n_ref"] == n_ref
        slopes[(sizes, n_ref)] = summary["slope_attention"]
    assert len(set(slopes.values())) == 3, slopes


# --------------------------------------------------------------------------- bad values
def _bad_values(task: str, key: str, node):
    """``(label, value)`` pairs outside what option ``key`` allows."""
    from transflow.experiments.validate import Rule, WritableDir, rule_for

    value = _resolved(node)
    is_list = isinstance(value, list)
    inner = node._metadata.element_type if is_list else node._metadata.ref_type
    one = value[0] if is_list and value else value
    rule = rule_for(task if key.startswith("task.") else "", key.rsplit(".", 1)[-1])
    out = []
    wrap = (lambda v: [v]) if is_list else (lambda v: v)
    numeric = inner in (int, float) or (isinstance(one, int | float) and not isinstance(one, bool))
    if numeric and isinstance(rule, Rule):
        out += [("nan", math.nan), ("inf", math.inf), ("-inf", -math.inf)]
        out += [("out of range", rule.violation()), ("wrong type", "abc")]
    names = _named(task, key)
    if names is not None and (isinstance(one, str) or (is_list and inner is str)):
        out.append(("unknown name", "no_such_name"))
    if isinstance(rule, WritableDir):
        out.append(("unwritable path", "/proc/nope"))
    return [(label, wrap(v)) for label, v in out]


#: A contradicting pair (or value) for every declared CONSTRAINTS entry, by experiment.
CONTRADICTIONS = {
    "clustering": [{"task.dt": 5.0, "task.t1": 1.0}],
    "grid_refinement": [{"task.sizes": [4, 8]}, {"task.n_ref": 48}],
    "convergence": [{"precision": "fp32"}],
    "train_digits": [{"task.patch": 3}],
    "analyze": [{"task.digits.patch": 3}, {"task.image_size": 16, "task.patch_size": 5}],
    "trained_regions": [{"task.seeds": [0]}],
    "sharded": [{"task.assignment_labels": ["no_such_label"]}],
}


def test_every_declared_constraint_has_a_contradiction_here():
    from transflow.experiments.run import compose

    for name in EXPERIMENTS:
        _, task = compose([f"experiment={name}"])
        n = len(getattr(_module(task), "CONSTRAINTS", ()))
        assert len(CONTRADICTIONS.get(name, [])) >= n, name


def _refused(cfg, task: str, mutate) -> str:
    """The one line ``transflow-run`` prints for ``cfg`` changed by ``mutate``."""
    from transflow.experiments.run import _say_error, check_config
    from transflow.experiments.validate import ConfigValueError

    try:
        mutate(cfg)  # a wrong type is refused here, as Hydra's merge refuses it
        check_config(cfg, task)
    except (ConfigValueError, OmegaConfBaseException) as e:
        return _say_error(e)
    return ""


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_bad_value_of_every_option_is_one_line_naming_it(name, tmp_path):
    from transflow.experiments.run import compose

    _, task, opts = _options(name)
    base, _ = compose([f"experiment={name}", "debug=smoke"])
    cases = [
        (f"{key}={label}", {key: v})
        for key, node in opts
        for label, v in _bad_values(task, key, node)
    ]
    cases += [(f"contradiction {c}", c) for c in CONTRADICTIONS.get(name, [])]
    assert len(cases) >= 5, name
    for label, change in cases:

        def mutate(cfg, change=change):
            for k, v in change.items():
                OmegaConf.update(cfg, k, v, merge=False)

        line = _refused(copy.deepcopy(base), task, mutate)
        assert line.startswith("transflow-run: invalid config: "), f"{name} {label}: {line!r}"
        assert "\n" not in line, f"{name} {label}"
        assert any(k in line for k in change), f"{name} {label}: names no option: {line}"
        assert any(w in line for w in ("expected", "allowed", "choose", "writable")), (
            f"{name} {label}: says nothing of what is allowed: {line}"
        )
    assert not any(tmp_path.iterdir())


#: The commands of issue 48 ("Options checked late or not at all", and the smoke
#: sweep whose sizes cannot nest), each with a word its one line must hold.
ISSUE_COMMANDS = [
    (["experiment=clustering", "task.t1=inf", "debug=smoke"], "task.t1 = inf"),
    (["experiment=clustering", "task.t1=inf"], "task.t1 = inf"),
    (["experiment=clustering", "task.t1=1", "task.dt=5"], "task.dt = 5.0, task.t1 = 1.0"),
    (["experiment=train_digits", "task.lr=inf", "debug=smoke"], "task.lr = inf"),
    (["experiment=train_digits", "task.scheme=liee"], "task.scheme: 'liee'"),
    (["experiment=train_digits", "task.patch=3"], "task.patch = 3"),
    (["experiment=train_digits", "task.checkpoint_dir=/proc/nope"], "task.checkpoint_dir"),
    (["experiment=equivalence", "hydra.run.dir=/proc/nope"], "hydra.run.dir = /proc/nope"),
    (["precision=fp16"], "expected one of [fp32, fp64, both]"),
    (["claims=enforced"], "expected one of [auto, enforce, record]"),
    (["experiment=clustering", "task.n_tokens=abc"], "task.n_tokens: "),
    (["experiment=equivalence", "grid.n_tokens=nan"], "grid.n_tokens: "),
    (
        ["-m", "experiment=grid_refinement", "debug=smoke", "task.sizes=[4,8],[4,16]"],
        "task.sizes = [4,8], task.n_ref = 36",
    ),
]


@pytest.mark.parametrize(("args", "expected"), ISSUE_COMMANDS, ids=lambda a: " ".join(a))
def test_issue_commands_exit_2_with_one_line_and_no_directory(args, expected, tmp_path):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = _transflow_run(*args, cwd=tmp_path, timeout=120)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("transflow-run: invalid config: "), lines
    assert expected in lines[0], lines[0]
    assert not any(tmp_path.iterdir()), sorted(map(str, tmp_path.rglob("*")))
    # 10 s of CPU (about 3 s on an idle core; the wall time depends on the machine's load)
    assert cpu < 10, (cpu, wall)


def test_a_field_declared_twice_in_the_rules_is_refused():
    """validate.RULES is built from groups; a field in two groups (or twice in one) would
    silently take the later rule, so building the table refuses it."""
    from transflow.experiments import validate as v

    with pytest.raises(ValueError, match=r"\['lr'\] declared in two groups"):
        v._once(v._each(v.POSITIVE, "lr steps"), {"lr": v.NON_NEGATIVE})
    with pytest.raises(ValueError, match=r"\['lr'\] twice"):
        v._each(v.POSITIVE, "lr steps lr")
