"""The user documents hold together: every relative link in README.md and docs/*.md names a file that exists and,
where it has one, an anchor that a heading of that file produces (GitHub's rule); the README stays a short guide.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.core

REPO_ROOT = Path(__file__).resolve().parent.parent
README_MAX_LINES = 300
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"`[^`]*`")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def user_documents() -> list[Path]:
    """README.md and every Markdown file under docs/."""
    return [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("**/*.md"))]


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, with inline code removed."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), start=1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, INLINE_CODE.sub("", line)))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces become hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    text = text.replace("`", "").strip().lower()
    text = "".join(ch for ch in text if ch.isalnum() or ch in " -_")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor the headings of ``path`` produce, repeated headings numbered as GitHub does."""
    seen: dict[str, int] = {}
    found = set()
    text = path.read_text(encoding="utf-8")
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else HEADING.match(line)
        if match:
            base = slug(match.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(path: Path, root: Path = REPO_ROOT) -> list[str]:
    """The relative links of ``path`` whose file or anchor does not exist, as 'file:line: target (why)' (file
    relative to ``root``)."""
    problems = []
    for number, line in prose_lines(path.read_text(encoding="utf-8")):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            linked = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(root)}:{number}: {target}"
            if not linked.exists():
                problems.append(f"{where} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                problems.append(f"{where} (no heading gives #{anchor})")
    return problems


def test_slug_follows_github() -> None:
    assert slug("Replay: `wam-diff2-replay`") == "replay-wam-diff2-replay"
    assert slug("GPU: one NVIDIA H200") == "gpu-one-nvidia-h200"
    assert slug("Exact, fast and fused engines (2026-12-04, runs 4 and 5)") == (
        "exact-fast-and-fused-engines-2026-12-04-runs-4-and-5"
    )


def test_broken_links_are_found(tmp_path: Path) -> None:
    """The checker itself: a missing file and a missing anchor are reported, good links are not."""
    doc = tmp_path / "a.md"
    (tmp_path / "b.md").write_text("# Title\n\n## Some section\n\n## Some section\n", encoding="utf-8")
    doc.write_text(
        "# A\n\n[ok](b.md#some-section) [ok2](b.md#some-section-1) [self](#a) `[code](nowhere.md)`\n"
        "[gone](missing.md) [bad anchor](b.md#other)\n```\n[fenced](nowhere.md)\n```\n",
        encoding="utf-8",
    )
    assert broken_links(doc, tmp_path) == [
        "a.md:4: missing.md (no such file)",
        "a.md:4: b.md#other (no heading gives #other)",
    ]


@pytest.mark.parametrize("path", user_documents(), ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_relative_links_resolve(path: Path) -> None:
    assert broken_links(path) == []


def test_readme_is_a_short_guide() -> None:
    lines = (REPO_ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail into docs/"
