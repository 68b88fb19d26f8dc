"""The study protocol: a multi-seed study declared before it runs, its cells and its claims.

A study (``experiment=depth``; other studies can adopt it) declares in its config, before
any compute (:class:`StudyConfig`, ``task.study`` in ``configs/experiment/<name>.yaml``):

- ``factors``: factor name → its levels, e.g. ``{path: [per_layer, legendre], T: [0.2, 4]}``;
- ``headline``: the level of every factor in the headline configuration;
- ``crossed``: the factors crossed with each other (every combination of their levels, the
  other factors at their headline level); every other factor is varied **one at a time**
  around the headline (its other levels, everything else at the headline);
- seeds: ``n_seeds`` per cell, ``headline_n_seeds`` for the cells in ``headline_cells``
  (``"headline"`` names the headline cell); the seeds of a cell are
  ``seed + seed_offset + i``, i = 0 … n − 1 (``seed`` the run's top-level seed, 0 by
  default): rerunning with ``task.study.seed_offset=3`` uses seeds 3, 4, 5 instead of 0, 1, 2;
- ``eval_grid`` (the evaluation depths or sizes) and ``fit_windows`` (name → ``[lo, hi]``,
  the range of the grid a fit or a change is measured over), fixed before the run;
- ``claims`` (:class:`ClaimSpec`): each names a metric of a cell's seed record, the cells it
  is about, and whether it is a statement about **all seeds** (``over: all``: every seed
  must satisfy it; the worst seed is reported), about the **mean** (``over: mean``) or about
  **mean and spread** (``over: mean_std``: mean − std ≥ bound, or mean + std ≤ bound). A
  claim is checked in every cell it names, and fails when it fails in any of them. With
  ``examples: true`` the metric is a fraction of the test examples, and its margin is also
  given as a count of examples (``n_examples``).
- ``cells``: run only these cells (names from :func:`design_cells`; ``[]``: all), so any
  single cell can be rerun from the command line
  (``task.study.cells=[legendre-0.2-random-prenorm]``).

The study then runs every (cell, seed) job, collects one record of metrics per job and
calls :func:`aggregate` (per cell and metric: mean ± std over its seeds) and
:func:`evaluate_claims`. This module imports neither JAX nor NumPy.

Example:
    >>> s = StudyConfig(factors={"a": [1, 2], "b": ["x", "y"], "c": [0, 9]},
    ...                 headline={"a": 1, "b": "x", "c": 0}, crossed=["a", "b"], n_seeds=2,
    ...                 headline_n_seeds=3, headline_cells=["headline"])
    >>> [(c.name, c.seeds) for c in design_cells(s)]  # doctest: +NORMALIZE_WHITESPACE
    [('1-x-0', [0, 1, 2]), ('1-y-0', [0, 1]), ('2-x-0', [0, 1]), ('2-y-0', [0, 1]),
     ('1-x-9', [0, 1])]
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass, field
from typing import Any

from ..context import FAILED, NOT_CHECKED, PASS

__all__ = [
    "OPS",
    "OVER",
    "Cell",
    "ClaimSpec",
    "StudyConfig",
    "aggregate",
    "check_claims",
    "digest",
    "mean_std",
    "mean_std_text",
    "reusable_record",
    "summarize_verdicts",
    "check_study",
    "design_cells",
    "evaluate_claim",
    "evaluate_claims",
    "level_name",
    "not_checked",
    "verdict_line",
    "verdicts_markdown",
    "window",
]

#: What a claim over seeds is about (:class:`ClaimSpec`).
OVER = ("all", "mean", "mean_std")
#: The comparisons of a claim.
OPS = (">=", ">", "<=", "<")


@dataclass
class ClaimSpec:
    """One declared claim (``task.study.claims``; see the module docstring)."""

    name: str = ""
    metric: str = ""  # a key of every seed record of the cells named
    cells: list[str] = field(default_factory=lambda: ["headline"])  # checked in each
    # "": the metric itself; a cell name: metric(cell) − metric(minus), paired by seed
    minus: str = ""
    center: float | None = None  # set: the value is |metric − center| (an order's error)
    over: str = "all"  # all | mean | mean_std (see OVER)
    op: str = ">="
    bound: float = 0.0
    examples: bool = False  # a fraction of the test examples: margin also as a count
    note: str = ""  # why this claim, stated before the run


@dataclass
class StudyConfig:
    """A study's design (``task.study``; see the module docstring)."""

    factors: dict[str, list[Any]] = field(default_factory=dict)
    headline: dict[str, Any] = field(default_factory=dict)
    crossed: list[str] = field(default_factory=list)
    n_seeds: int = 3
    headline_n_seeds: int = 5
    headline_cells: list[str] = field(default_factory=lambda: ["headline"])
    seed_offset: int = 0  # seeds of a cell: seed + seed_offset + 0, 1, ...
    eval_grid: list[int] = field(default_factory=list)
    fit_windows: dict[str, list[int]] = field(default_factory=dict)
    claims: list[ClaimSpec] = field(default_factory=list)
    cells: list[str] = field(default_factory=list)  # run only these ([]: every cell)


@dataclass(frozen=True)
class Cell:
    """One configuration of the study: its name, the level of every factor, its seeds and
    its role (``"headline"``, ``"crossed"`` or ``"one at a time: <factor>"``)."""

    name: str
    levels: dict[str, Any]
    seeds: list[int]
    role: str


def level_name(level: Any) -> str:
    """A level as it appears in a cell name: ``0.2`` → ``'0.2'``, ``4.0`` → ``'4'``.

    Example:
        >>> level_name(4.0), level_name(0.2), level_name("legendre")
        ('4', '0.2', 'legendre')
    """
    if isinstance(level, float) and level.is_integer():
        return str(int(level))
    return str(level)


def _cell_name(factors: dict, levels: dict) -> str:
    return "-".join(level_name(levels[f]) for f in factors)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool):
        return float(a) == float(b)
    return a == b


def check_study(study: StudyConfig, key: str = "task.study") -> None:
    """Refuse an inconsistent design before any compute; each error names the key.

    Example:
        >>> check_study(StudyConfig(factors={"a": [1]}, headline={"a": 2}))
        Traceback (most recent call last):
        ...
        ValueError: task.study.headline.a = 2 is not a level of factor 'a' (levels [1]); ...
    """
    if not study.factors:
        raise ValueError(
            f"{key}.factors is empty: declare the study's factors (name → levels) in its "
            "experiment config (configs/experiment/<name>.yaml)."
        )
    for name, levels in study.factors.items():
        if not list(levels):
            raise ValueError(f"{key}.factors.{name} has no levels; give at least one.")
        if name not in study.headline:
            raise ValueError(
                f"{key}.headline has no level for factor '{name}'; give {key}.headline.{name}."
            )
        if not any(_same(study.headline[name], lv) for lv in levels):
            raise ValueError(
                f"{key}.headline.{name} = {study.headline[name]} is not a level of factor "
                f"'{name}' (levels {list(levels)}); choose one of them."
            )
    extra = sorted(set(study.headline) - set(study.factors))
    if extra:
        raise ValueError(
            f"{key}.headline.{extra[0]}: not a factor; the factors are {list(study.factors)}."
        )
    for f in study.crossed:
        if f not in study.factors:
            raise ValueError(f"{key}.crossed: '{f}' is not a factor ({list(study.factors)}).")
    for k in ("n_seeds", "headline_n_seeds"):
        if getattr(study, k) < 1:
            raise ValueError(f"{key}.{k} = {getattr(study, k)}: give at least 1 seed.")
    names = {c.name for c in design_cells(study, check=False)} | {"headline"}
    for c in [*study.headline_cells, *study.cells]:
        if c not in names:
            raise ValueError(
                f"{key}: cell '{c}' (in headline_cells or cells) is not a cell of the design; "
                f"the cells are {sorted(names)}."
            )
    grid = sorted(int(n) for n in study.eval_grid)
    for w, (lo, hi) in ((w, _pair(study, w, key)) for w in study.fit_windows):
        if grid and not (lo in grid and hi in grid):
            raise ValueError(
                f"{key}.fit_windows.{w} = [{lo}, {hi}]: both ends must be in "
                f"{key}.eval_grid = {grid}."
            )
    check_claims(study.claims, names, key)


def check_claims(claims: list[ClaimSpec], cells, key: str = "task.study") -> None:
    """Refuse a malformed claim before any compute: each needs a ``name`` and a
    ``metric``, ``over`` in :data:`OVER`, ``op`` in :data:`OPS`, and only cells (and a
    ``minus`` cell) of ``cells``; each error names ``<key>.claims[i]``. Used by
    :func:`check_study` and by studies whose cells are not a factorial design
    (``experiment=schemes``: ``task.claims``, cells ``<task>-<scheme>``).

    Example:
        >>> check_claims([ClaimSpec(name="c", metric="acc", cells=["x"])], {"y"}, "task")
        Traceback (most recent call last):
        ...
        ValueError: task.claims[0] (c): cell 'x' is not a cell of the design; the cells are ['y'].
    """
    names = set(cells)
    for i, c in enumerate(claims):
        ck = f"{key}.claims[{i}] ({c.name or 'unnamed'})"
        if not c.name or not c.metric:
            raise ValueError(f"{ck}: give its `name` and `metric`.")
        if c.over not in OVER:
            raise ValueError(f"{ck}.over = {c.over!r}: choose one of {', '.join(OVER)}.")
        if c.op not in OPS:
            raise ValueError(f"{ck}.op = {c.op!r}: choose one of {', '.join(OPS)}.")
        if not c.cells:
            raise ValueError(f"{ck}.cells is empty: name the cells the claim is about.")
        for cell in [*c.cells, *([c.minus] if c.minus else [])]:
            if cell not in names:
                raise ValueError(
                    f"{ck}: cell '{cell}' is not a cell of the design; the cells are "
                    f"{sorted(names)}."
                )


def _pair(study: StudyConfig, name: str, key: str) -> tuple[int, int]:
    w = [int(n) for n in study.fit_windows[name]]
    if len(w) != 2 or not 0 < w[0] < w[1]:
        raise ValueError(
            f"{key}.fit_windows.{name} = {w}: give [lo, hi] with 0 < lo < hi "
            f"(e.g. {key}.fit_windows.{name}=[16,256])."
        )
    return w[0], w[1]


def window(study: StudyConfig, name: str) -> list[int]:
    """The points of ``eval_grid`` inside the declared window ``fit_windows[name]``.

    Example:
        >>> window(StudyConfig(eval_grid=[1, 2, 4, 8], fit_windows={"fit": [2, 8]}), "fit")
        [2, 4, 8]
    """
    if name not in study.fit_windows:
        raise KeyError(
            f"task.study.fit_windows has no window '{name}'; declare it (its windows: "
            f"{sorted(study.fit_windows)})."
        )
    lo, hi = _pair(study, name, "task.study")
    return [int(n) for n in study.eval_grid if lo <= int(n) <= hi]


def design_cells(study: StudyConfig, *, seed: int = 0, check: bool = True) -> list[Cell]:
    """Every cell of the design, in order: the crossed product (headline first), then each
    other factor's non-headline levels one at a time. ``study.cells`` is not applied here
    (the caller selects); ``seed`` is the run's top-level seed."""
    if check:
        check_study(study)
    factors, head = study.factors, study.headline
    crossed = [f for f in factors if f in study.crossed]
    others = {f: [v for v in factors[f] if not _same(v, head[f])] for f in factors}
    combos = [
        ({**head, **dict(zip(crossed, values))}, "crossed")
        for values in itertools.product(*([head[f], *others[f]] for f in crossed))
    ]
    combos += [
        ({**head, f: v}, f"one at a time: {f}")
        for f in factors
        if f not in crossed
        for v in others[f]
    ]
    head_name = _cell_name(factors, head)
    main = {head_name} | {c for c in study.headline_cells if c != "headline"}
    first = int(seed) + int(study.seed_offset)
    out: dict[str, Cell] = {}  # a name reached twice keeps its first role
    for levels, role in combos:
        name = _cell_name(factors, levels)
        n = study.headline_n_seeds if name in main else study.n_seeds
        role = "headline" if name == head_name else role
        out.setdefault(name, Cell(name, levels, list(range(first, first + n)), role))
    return list(out.values())


def resolve_cell(study: StudyConfig, name: str) -> str:
    """``"headline"`` → the headline cell's name; other names unchanged."""
    return _cell_name(study.factors, study.headline) if name == "headline" else name


def mean_std(xs: list[float]) -> tuple[float, float]:
    """The mean and the sample standard deviation (n − 1) of ``xs``; NaN where undefined.

    Example:
        >>> mean_std([1.0, 3.0]), mean_std([2.0])
        ((2.0, 1.4142135623730951), (2.0, nan))
    """
    n = len(xs)
    if n == 0:
        return math.nan, math.nan
    m = sum(xs) / n
    if n < 2:
        return m, math.nan
    return m, math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1))


def aggregate(records: dict[str, dict[int, dict[str, float]]]) -> dict[str, dict[str, dict]]:
    """Per cell and metric: ``{"mean", "std", "n", "values"}`` over the cell's seeds
    (std: the sample standard deviation, ddof = 1; NaN for one seed). Non-numeric and
    missing values are left out.

    Example:
        >>> a = aggregate({"c": {0: {"acc": 0.9}, 1: {"acc": 0.8}}})["c"]["acc"]
        >>> round(a["mean"], 6), round(a["std"], 6), a["n"]
        (0.85, 0.070711, 2)
    """
    out: dict[str, dict[str, dict]] = {}
    for cell, by_seed in records.items():
        keys = dict.fromkeys(k for rec in by_seed.values() for k in rec)  # first-seen order
        cell_out = {}
        for k in keys:
            vals = [
                float(r[k])
                for _, r in sorted(by_seed.items())
                if isinstance(r.get(k), int | float) and not isinstance(r.get(k), bool)
            ]
            m, s = mean_std(vals)
            cell_out[k] = {"mean": m, "std": s, "n": len(vals), "values": vals}
        out[cell] = cell_out
    return out


def _claim_name(spec: ClaimSpec, key: str, cell: str) -> str:
    """A verdict's name: the claim's, ``<claim> [<cell>]`` when it names several cells or
    its cell as ``headline``."""
    return f"{spec.name} [{cell}]" if len(spec.cells) > 1 or key != cell else spec.name


def _holds(value: float, op: str, bound: float) -> bool:
    if not isinstance(value, int | float) or math.isnan(value):
        return False
    return {">=": value >= bound, ">": value > bound, "<=": value <= bound, "<": value < bound}[op]


def evaluate_claim(
    spec: ClaimSpec,
    records: dict[str, dict[int, dict[str, float]]],
    *,
    study: StudyConfig | None = None,
    n_examples: int | None = None,
) -> list[dict[str, Any]]:
    """The verdict of ``spec`` in each of its cells (one dict per cell).

    ``records``: cell name → seed → metric → value. Each verdict has ``name``
    (``"<claim> [<cell>]"``), ``cell``, ``over``, ``seeds``, ``values`` (per seed, after
    ``minus``/``center``), ``mean``, ``std``, ``value`` (the statistic compared: the worst
    seed for ``all``, the mean, or mean ∓ std), ``op``, ``bound``, ``pass``,
    ``failing_seeds`` (seeds whose own value breaks the bound), ``margin`` (signed: > 0
    passes) and, with ``examples``, ``margin_examples`` (margin × ``n_examples``).

    Example:
        >>> recs = {"c": {0: {"acc": 0.97}, 1: {"acc": 0.95}, 2: {"acc": 0.96}}}
        >>> spec = ClaimSpec(name="acc", metric="acc", cells=["c"], op=">=", bound=0.955,
        ...                  examples=True)
        >>> v = evaluate_claim(spec, recs, n_examples=200)[0]
        >>> v["pass"], v["failing_seeds"], round(v["margin_examples"], 1)
        (False, [1], -1.0)
        >>> spec.over = "mean"
        >>> v = evaluate_claim(spec, recs, n_examples=200)[0]
        >>> v["pass"], round(v["margin_examples"], 1)
        (True, 1.0)
    """
    out = []
    for cell_key in spec.cells:
        cell = resolve_cell(study, cell_key) if study is not None else cell_key
        if cell not in records:
            raise KeyError(
                f"claim '{spec.name}': no results for cell '{cell}' (the cells run are "
                f"{sorted(records)}); run it or drop it from the claim."
            )
        own = records[cell]
        other = None
        if spec.minus:
            other_name = resolve_cell(study, spec.minus) if study is not None else spec.minus
            if other_name not in records:
                raise KeyError(
                    f"claim '{spec.name}': no results for cell '{other_name}' (minus); the "
                    f"cells run are {sorted(records)}."
                )
            other = records[other_name]
        seeds, values = [], []
        for s in sorted(own):
            if spec.metric not in own[s]:
                raise KeyError(
                    f"claim '{spec.name}': metric '{spec.metric}' is not in the record of "
                    f"cell '{cell}' seed {s}; its metrics are {sorted(own[s])}."
                )
            v = float(own[s][spec.metric])
            if other is not None:
                if s not in other:
                    continue  # paired by seed: only seeds run in both cells
                v -= float(other[s][spec.metric])
            if spec.center is not None:
                v = abs(v - float(spec.center))
            seeds.append(s)
            values.append(v)
        mean, std = mean_std(values)
        upper = spec.op in (">=", ">")
        if spec.over == "all":
            value = (min(values) if upper else max(values)) if values else math.nan
        elif spec.over == "mean":
            value = mean
        else:
            value = mean - std if upper else mean + std
        margin = (value - spec.bound) if upper else (spec.bound - value)
        verdict = {
            "name": _claim_name(spec, cell_key, cell),
            "claim": spec.name,
            "cell": cell,
            "metric": spec.metric + (f" − ({spec.minus})" if spec.minus else ""),
            "over": spec.over,
            "seeds": seeds,
            "values": values,
            "mean": mean,
            "std": std,
            "value": value,
            "op": spec.op,
            "bound": float(spec.bound),
            "pass": _holds(value, spec.op, spec.bound) and bool(values),
            "failing_seeds": [
                s for s, v in zip(seeds, values) if not _holds(v, spec.op, spec.bound)
            ],
            "margin": margin,
        }
        if spec.examples and n_examples:
            verdict["margin_examples"] = margin * n_examples
            verdict["n_examples"] = int(n_examples)
        out.append(verdict)
    return out


def not_checked(spec: ClaimSpec, missing: list[str]) -> dict[str, Any]:
    """The verdict of a declared claim about cells this run did not run (``missing``):
    ``skipped``, verdict ``not checked`` (never dropped, never counted as passing).

    Example:
        >>> v = not_checked(ClaimSpec(name="gap", metric="acc", bound=0.1), ["b"])
        >>> v["verdict"], v["missing"], v["pass"]
        ('not checked', ['b'], False)
    """
    return {
        "name": spec.name,
        "claim": spec.name,
        "skipped": True,
        "missing": list(missing),
        "op": spec.op,
        "bound": float(spec.bound),
        "pass": False,
        "verdict": NOT_CHECKED,
    }


def _n_test(by_seed: dict[int, dict]) -> int | None:
    counts = {r.get("n_test") for r in by_seed.values()}
    return counts.pop() if len(counts) == 1 else None


def evaluate_claims(study: StudyConfig, records, *, n_examples: int | None = None) -> list[dict]:
    """:func:`evaluate_claim` of every declared claim in each of its cells; in a cell that
    was not run (``study.cells`` selects a subset), or whose ``minus`` cell was not, the
    claim is :func:`not_checked` there (``"skipped": True``, verdict ``not checked``, its
    ``missing`` cells). A claim over several cells is named ``<claim> [<cell>]`` in each.
    ``n_examples`` (a claim's margin in test examples): the same for every cell, or, when
    not given, each cell's own count, its records' ``n_test`` where all seeds agree.

    Example:
        >>> s = StudyConfig(factors={"a": [1, 2]}, headline={"a": 1}, claims=[
        ...     ClaimSpec(name="acc", metric="acc", cells=["1", "2"], bound=0.5)])
        >>> [(v["name"], v.get("verdict")) for v in evaluate_claims(s, {"1": {0: {"acc": 0.9}}})]
        [('acc [1]', None), ('acc [2]', 'not checked')]
    """
    out = []
    for spec in study.claims:
        minus = [resolve_cell(study, spec.minus)] if spec.minus else []
        for key in spec.cells:
            cell = resolve_cell(study, key)
            missing = [c for c in [cell, *minus] if c not in records]
            if missing:
                v = {**not_checked(spec, missing), "cell": cell}
            else:
                one = dataclasses.replace(spec, cells=[key])
                n = n_examples if n_examples is not None else _n_test(records[cell])
                (v,) = evaluate_claim(one, records, study=study, n_examples=n)
            v["name"] = _claim_name(spec, key, cell)
            out.append(v)
    return out


def _num(x: Any, signed: bool = False) -> str:
    if not isinstance(x, int | float) or math.isnan(x):
        return "n/a"
    return f"{x:+.4g}" if signed else f"{x:.4g}"


def verdict_line(v: dict[str, Any]) -> str:
    """One claim verdict as a markdown table row (claim, cell, over, per-seed values,
    statistic, bound, margin, result). The result is the verdict word the run recorded
    (``v["verdict"]``, set by ``RunContext.record_verdicts``: ``PASS``, ``FAILED``, ``not
    enforced`` or ``not checked``), else PASS or FAILED by whether the claim holds."""
    word = v.get("verdict") or (PASS if v.get("pass") else FAILED)
    if v.get("skipped"):
        return (
            f"| {v['name']} | (cells not run: {', '.join(v['missing'])}) | | | n/a | "
            f"{v.get('op', '')} {v.get('bound', 0):g} | | {word} |"
        )
    vals = ", ".join(_num(x) for x in v["values"])
    margin = _num(v["margin"], signed=True)
    if "margin_examples" in v and margin != "n/a":
        margin += f" ({v['margin_examples']:+.1f} of {v['n_examples']} examples)"
    stat = {"all": "worst seed", "mean": "mean", "mean_std": "mean ∓ std"}[v["over"]]
    fail = f" (seeds {v['failing_seeds']} fail)" if v["failing_seeds"] else ""
    return (
        f"| {v['name']} | {v['metric']} | {stat} | {vals} | {_num(v['value'])} | "
        f"{v['op']} {v['bound']:g} | {margin} | {word}{fail} |"
    )


def verdicts_markdown(verdicts: list[dict[str, Any]]) -> str:
    """The verdicts as a markdown table."""
    head = (
        "| claim | metric | over seeds | per seed | value | bound | margin | result |\n"
        "|---|---|---|---|---|---|---|---|"
    )
    return head + "\n" + "\n".join(verdict_line(v) for v in verdicts)


#: The fields of a claim verdict kept in a run's ``summary.json``.
VERDICT_FIELDS = (
    "name", "cell", "seeds", "values", "value", "op", "bound", "pass", "verdict",
    "failing_seeds", "margin", "margin_examples", "skipped", "missing",
)  # fmt: skip


def summarize_verdicts(verdicts: list[dict]) -> list[dict]:
    """The verdicts of :func:`evaluate_claims` reduced to :data:`VERDICT_FIELDS` (the
    summary's ``claims_verdicts``).

    Example:
        >>> summarize_verdicts([{"name": "c", "value": 1.0, "pass": True, "extra": 0}])[0]["pass"]
        True
    """
    return [{k: v.get(k) for k in VERDICT_FIELDS} for v in verdicts]


#: The identity fields of a job record (not metrics): dropped by :func:`reusable_record`.
RECORD_META = ("cell", "levels", "task", "scheme", "seed", "key")


def reusable_record(path, key: str, cell: str, seed: int) -> dict | None:
    """The metrics of the job record at ``path`` (a JSON file) if it was written for this
    ``cell`` (name), ``seed`` and configuration digest ``key``; else None (missing,
    unreadable, or written for something else). A study's rerun in the same folder then
    trains only the jobs without such a record.

    Example:
        >>> import json, pathlib, tempfile
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "record.json"
        >>> _ = p.write_text(json.dumps({"cell": "a", "seed": 0, "key": "k", "acc": 0.9}))
        >>> reusable_record(p, "k", "a", 0), reusable_record(p, "other", "a", 0)
        ({'acc': 0.9}, None)
    """
    import json
    from pathlib import Path

    path = Path(path)
    if not path.exists():
        return None
    try:
        rec = json.loads(path.read_text())
    except ValueError:
        return None
    if rec.get("key") != key or rec.get("cell") != cell or rec.get("seed") != seed:
        return None
    return {k: v for k, v in rec.items() if k not in RECORD_META}


#: Fields added to the training configs after records were stored, with the value every
#: stored record was made with: at that value a field stays out of a record key
#: (:func:`keyed_fields`), so the earlier records keep their digests.
ADDED_FIELDS: dict[str, Any] = {"activation": "relu", "theta_at": "midpoint"}


def keyed_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """A training config's fields (``dataclasses.asdict``) as they enter a record key:
    those of :data:`ADDED_FIELDS` only when they differ from the stored records' value.

    Example:
        >>> keyed_fields({"d": 8, "activation": "relu", "theta_at": "nodes"})
        {'d': 8, 'theta_at': 'nodes'}
    """
    return {k: v for k, v in fields.items() if not (k in ADDED_FIELDS and v == ADDED_FIELDS[k])}


def digest(content: Any) -> str:
    """A short, stable digest of ``content`` (JSON with sorted keys; what is not JSON is
    written with ``str``): the ``key`` of a job record, compared by :func:`reusable_record`.

    Example:
        >>> digest({"b": 1, "a": [1, 2]}) == digest({"a": [1, 2], "b": 1})
        True
    """
    import hashlib
    import json

    blob = json.dumps(content, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def mean_std_text(a: dict | None, fmt: str = ".3f") -> str:
    """``mean ± std`` of one :func:`aggregate` entry (sample std, n − 1), the mean alone
    for one seed, ``—`` for none or NaN.

    Example:
        >>> mean_std_text({"mean": 0.95, "std": 0.01, "n": 3}), mean_std_text(None)
        ('0.950 ± 0.010', '—')
    """
    if not a or a["n"] == 0 or math.isnan(a["mean"]):
        return "—"
    if a["n"] < 2 or math.isnan(a["std"]):
        return f"{a['mean']:{fmt}}"
    return f"{a['mean']:{fmt}} ± {a['std']:{fmt}}"
