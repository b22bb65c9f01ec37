"""core.safe_names and core.markup: names from inputs as folder names that stay inside the output folder, and text
that no string turns into markup, a broken table or a failed page."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from wam_diff2_ros.core.markup import (
    PAGE_TEXT_CHARS,
    embed_json,
    escape_text,
    markdown_cell,
    plot_text,
    shorten,
    write_page,
)
from wam_diff2_ros.core.safe_names import MAX_NAME_CHARS, UnsafeNameError, child_folders, child_path, safe_name

pytestmark = pytest.mark.core

HOSTILE_NAMES = [
    "../victim",
    "..",
    ".",
    "...",
    "a/b",
    "a\\b",
    "/etc/passwd",
    "x" * 1000,
    "Straße ünïcödé 日本",
    "\ud800",
    "-rf",
    ".hidden",
    "a\nb",
    "a\x00b",
    "<script>",
    "CON",
]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_every_name_becomes_one_plain_folder_inside_out(tmp_path: Path, name: str) -> None:
    slug = safe_name(name)
    assert slug == safe_name(name)  # deterministic
    assert 0 < len(slug) <= MAX_NAME_CHARS and slug.isascii()
    assert "/" not in slug and "\\" not in slug and "\0" not in slug and not slug.startswith((".", "-"))
    path = child_path(tmp_path, name)
    assert path.parent == tmp_path and path.resolve().parent == tmp_path.resolve()
    path.mkdir()  # a real folder can be made under that name
    assert path.is_dir()


def test_safe_names_stay_and_changed_names_never_meet() -> None:
    for kept in ("straight_5", "left_r20", "bag.2024-01-01", "_x", "CON"):
        assert safe_name(kept) == kept
    # names that differ only in the characters the rule replaces get different slugs (the name's digest)
    variants = ["a/b", "a b", "a:b", "a_b-", "a//b", "a\\b", "ä_b"]
    slugs = [safe_name(v) for v in variants]
    assert len(set(slugs)) == len(variants) and all(s.startswith(("a_b-", "b-")) for s in slugs)
    long_a, long_b = "x" * 200 + "a", "x" * 200 + "b"
    assert safe_name(long_a) != safe_name(long_b) and len(safe_name(long_a)) == MAX_NAME_CHARS
    for bad in ("", None):
        with pytest.raises(UnsafeNameError, match="empty name"):
            safe_name(bad)  # type: ignore[arg-type]


def test_child_folders_refuse_clashes_and_links_out(tmp_path: Path) -> None:
    folders = child_folders(tmp_path, ["one", "../one", "Two"])
    assert folders["one"] == tmp_path / "one" and folders["../one"].name.startswith("one-")
    with pytest.raises(UnsafeNameError, match=r"'two'.*'Two'|'Two'.*'two'"):
        child_folders(tmp_path, ["Two", "two"])  # one folder on a case-insensitive file system
    with pytest.raises(UnsafeNameError, match=r"the output scores\.md"):
        child_folders(tmp_path, ["scores.md"], reserved=["scores.md"])
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    (tmp_path / "linked").symlink_to(outside)
    with pytest.raises(UnsafeNameError, match="leads outside"):
        child_path(tmp_path, "linked")


def test_markdown_cell_keeps_a_cell_a_cell() -> None:
    cell = markdown_cell('a|b\n# heading\r\n<script>alert(1)</script> <img src=x onerror="y"> \u2028x')
    assert "|" not in cell.replace("\\|", "") and "\n" not in cell and "\r" not in cell and "\u2028" not in cell
    assert "<" not in cell and ">" not in cell and '&lt;img src=x onerror="y"&gt;' in cell
    assert markdown_cell("\ud800").encode("utf-8") == "\ufffd".encode()
    assert len(markdown_cell("y" * 10**6)) < PAGE_TEXT_CHARS + 50
    assert plot_text("$\\frac{\ud800") == "\\$\\frac{\ufffd"  # no mathtext, encodable


def test_embed_json_takes_any_value_and_stays_data() -> None:
    data = {
        "nan": float("nan"),
        "inf": [float("inf"), -float("inf")],
        "surrogate": "\ud800 and \udfff",
        "markup": "</script><script>alert(1)</script><!--",
        "lines": "a\u2028b\u2029c",
        "long": "z" * 10**6,
        "\ud800key": 1,
    }
    text = embed_json(data)
    assert not any(c in text for c in "<>&\u2028\u2029")
    text.encode("utf-8")  # no lone surrogate left
    back = json.loads(text)
    assert back["nan"] is None and back["inf"] == [None, None]
    assert back["surrogate"] == "\ud800 and \udfff" and back["markup"].startswith("</script>")
    assert back["long"] == shorten("z" * 10**6) and len(back["long"]) < PAGE_TEXT_CHARS + 50
    assert escape_text("<b>\ud800") == "&lt;b&gt;\ufffd"


def test_write_page_is_whole_or_absent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    page = tmp_path / "report.html"
    write_page(page, "first \ud800")
    assert page.read_text(encoding="utf-8") == "first \ufffd"

    def disk_full(src: object, dst: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", disk_full)
    with pytest.raises(OSError, match="disk full"):  # the earlier page stays whole, no temporary file is left
        write_page(page, "second")
    assert page.read_text(encoding="utf-8") == "first \ufffd"
    assert os.listdir(tmp_path) == ["report.html"]
