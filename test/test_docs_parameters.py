"""docs/node.md's parameter table is the parameter table of the code: every parameter, its default, when a change
applies and its description. When they differ the failure prints the table to paste (or run this file:
``python test/test_docs_parameters.py``)."""

from __future__ import annotations

import json
from pathlib import Path

from wam_diff2_ros.ros.params import PARAMETER_SPECS, READ_ONLY_PARAMETERS, ParameterSpec, needs_reconfigure

NODE_DOC = Path(__file__).resolve().parents[1] / "docs" / "node.md"
HEADER = "| parameter | default | change | description |"


def when_applied(name: str) -> str:
    """'read-only', 'reconfigure' (refused on a configured node) or 'live' (the next plan)."""
    if name in READ_ONLY_PARAMETERS:
        return "read-only"
    return "reconfigure" if needs_reconfigure(name) else "live"


def table_row(spec: ParameterSpec) -> str:
    default = json.dumps(spec.default, ensure_ascii=False)
    description = spec.description.replace("|", "\\|")
    return f"| `{spec.name}` | `{default}` | {when_applied(spec.name)} | {description} |"


def expected_table() -> list[str]:
    return [HEADER, "| --- | --- | --- | --- |", *(table_row(spec) for spec in PARAMETER_SPECS)]


def documented_table(text: str) -> list[str]:
    """The table in ``text`` that starts with :data:`HEADER`, line by line."""
    lines = text.splitlines()
    start = lines.index(HEADER)
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return lines[start:end]


def test_node_doc_lists_every_parameter() -> None:
    expected = expected_table()
    documented = documented_table(NODE_DOC.read_text(encoding="utf-8"))
    assert documented == expected, "docs/node.md's parameter table is out of date; paste:\n" + "\n".join(expected)


def test_table_rows_name_each_parameter_once() -> None:
    rows = expected_table()[2:]
    assert len(rows) == len({spec.name for spec in PARAMETER_SPECS}) == len(PARAMETER_SPECS)
    assert any("| reconfigure |" in row for row in rows) and any("| live |" in row for row in rows)
    assert table_row(ParameterSpec("x.y", 1, "one | two")) == "| `x.y` | `1` | reconfigure | one \\| two |"


if __name__ == "__main__":
    print("\n".join(expected_table()))
