"""The experiments table of the README (between ``<!-- --8<-- [start:experiments] -->``
and ``[end:experiments]``; docs/experiments-table.md includes it) is checked, not trusted.

Each row is ``| experiment | command | runtime | checked numbers | notes |``; the checked
numbers are ``; ``-separated items over keys of the run's ``summary.json``::

    `key` = 0.978 ± 0.02      the value within the tolerance
    `key` = 66                exactly (integers, counts)
    `key` ≤ 1e-13             a bound (also ≥)

Fast tier: every command is ``transflow-run experiment=<name> ...`` with an existing
experiment config, and every row has checked numbers in this syntax. Slow tier: every
command is run in a fresh directory and every item is checked against its
``summary.json`` (the number of the table must be what the command gives).
"""

from __future__ import annotations

import json
import re
import shlex

import pytest

from test_experiments import CONFIGS, REPO, _transflow_run

START, END = "<!-- --8<-- [start:experiments] -->", "<!-- --8<-- [end:experiments] -->"
ITEM = re.compile(
    r"^`(?P<key>[A-Za-z0-9_.-]+)`\s*(?P<op>=|≤|≥)\s*(?P<value>[-+0-9.e]+)"
    r"(?:\s*±\s*(?P<tol>[0-9.e+-]+))?$"
)
COMMAND = re.compile(r"^`(transflow-run experiment=(?P<name>\w+)(?: [^`]*)?)`$")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def table_rows() -> list[dict]:
    text = (REPO / "README.md").read_text()
    block = text[text.index(START) + len(START) : text.index(END)]
    lines = [ln for ln in block.splitlines() if ln.startswith("|")]
    header = _cells(lines[0])
    assert header[:4] == ["experiment", "command", "runtime (2 cores)", "checked numbers"], header
    rows = []
    for line in lines[2:]:
        cells = _cells(line)
        rows.append({"experiment": cells[0], "command": cells[1], "checks": cells[3]})
    return rows


def parse_checks(cell: str) -> list[dict]:
    items = []
    for part in cell.split(";"):
        m = ITEM.match(part.strip())
        assert m, f"not a checked number (`key` = v ± tol, `key` = n, `key` ≤ b): {part!r}"
        items.append(m.groupdict())
    return items


ROWS = table_rows()


def test_table_has_the_experiments():
    assert len(ROWS) >= 10
    names = [COMMAND.match(r["command"])["name"] for r in ROWS if COMMAND.match(r["command"])]
    assert "equivalence" in names and "train_digits" in names


@pytest.mark.parametrize("row", ROWS, ids=[r["experiment"] for r in ROWS])
def test_table_command_names_an_experiment_and_states_checked_numbers(row):
    m = COMMAND.match(row["command"])
    assert m, f"command must be `transflow-run experiment=<name> ...`: {row['command']}"
    assert (CONFIGS / "experiment" / f"{m['name']}.yaml").exists(), m["name"]
    items = parse_checks(row["checks"])
    assert items
    for it in items:
        float(it["value"])
        if it["tol"] is not None:
            assert it["op"] == "=" and float(it["tol"]) > 0


def check(summary: dict, item: dict) -> tuple[bool, str]:
    key, op, value = item["key"], item["op"], float(item["value"])
    assert key in summary, f"{key} is not in summary.json: {sorted(summary)}"
    got = float(summary[key])
    if op == "≤":
        ok = got <= value
    elif op == "≥":
        ok = got >= value
    elif item["tol"] is not None:
        ok = abs(got - value) <= float(item["tol"])
    else:
        ok = got == value
    return ok, f"{key}: got {got!r}, table says {op} {item['value']}" + (
        f" ± {item['tol']}" if item["tol"] else ""
    )


@pytest.mark.slow
@pytest.mark.parametrize("row", ROWS, ids=[r["experiment"] for r in ROWS])
def test_table_number_is_what_the_command_gives(row, tmp_path):
    """Run the command of the row as written (fresh directory: no old checkpoints) and
    check every number of the row against its summary.json."""
    m = COMMAND.match(row["command"])
    args = shlex.split(m.group(1))[1:]
    proc = _transflow_run(*args, cwd=tmp_path, timeout=3600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (summary_path,) = [
        p for p in (tmp_path / "outputs").rglob("summary.json") if "checkpoints" not in p.parts
    ]
    summary = json.loads(summary_path.read_text())
    results = [check(summary, it) for it in parse_checks(row["checks"])]
    bad = [msg for ok, msg in results if not ok]
    assert not bad, f"{row['command']}: " + "; ".join(bad)
