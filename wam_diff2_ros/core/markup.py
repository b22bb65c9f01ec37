"""Text that no string can turn into markup, for every page and report the package writes: data embedded in a
page (:func:`embed_json`), text in HTML (:func:`escape_text`), a Markdown table cell or line
(:func:`markdown_cell`), template fields (:func:`fill_template`), plot text (:func:`plot_text`, no mathtext) and
the page's file itself (:func:`write_page`: whole or absent, never empty).

Whatever a string holds (markup, ``|``, newlines, lone surrogates such as ``"\\ud800"``) and whatever a number is
(NaN, infinities), the result is a page: surrogates become escapes (JSON) or U+FFFD (text), non-finite numbers
become ``null``, and texts longer than :data:`PAGE_TEXT_CHARS` are shortened on the page (:func:`shorten`); the
records (jsonl / json) keep the full text.
"""

from __future__ import annotations

import html
import json
import math
import os
import re
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: The longest text a page or a Markdown table shows of one field; the rest is cut with a note of its length.
PAGE_TEXT_CHARS = 1000

_SURROGATES = re.compile("[\ud800-\udfff]")
#: Characters that could end or comment out the element around embedded JSON, start markup, or end a JavaScript
#: line; JSON has them only inside strings, where the ``\\uXXXX`` form means the same character.
_JSON_ESCAPES = {ord(c): f"\\u{ord(c):04x}" for c in "<>&\u2028\u2029"}


def shorten(text: str, max_chars: int | None = PAGE_TEXT_CHARS) -> str:
    """``text`` cut to ``max_chars`` characters plus ``… (N more characters)``; unchanged when it fits or when
    ``max_chars`` is None."""
    if max_chars is None or len(text) <= max_chars:
        return text
    return f"{text[:max_chars]}… ({len(text) - max_chars} more characters)"


def plain_text(value: Any, max_chars: int | None = PAGE_TEXT_CHARS) -> str:
    """``str(value)`` shortened (:func:`shorten`) with every lone surrogate as U+FFFD, so it encodes as UTF-8."""
    return _SURROGATES.sub("\ufffd", shorten(str(value), max_chars))


def escape_text(value: Any, max_chars: int | None = PAGE_TEXT_CHARS) -> str:
    """Plain text in HTML (an element or an attribute): :func:`plain_text` with ``&``, ``<``, ``>`` and quotes as
    HTML entities."""
    return html.escape(plain_text(value, max_chars), quote=True)


def markdown_cell(value: Any, max_chars: int | None = PAGE_TEXT_CHARS) -> str:
    """Text for a Markdown table cell or a line of a Markdown report: :func:`plain_text` with ``&``, ``<``, ``>`` as
    HTML entities (Markdown passes raw HTML through), ``|`` escaped and line breaks as spaces, so it can neither
    start markup, end a cell nor start a heading or row."""
    text = html.escape(plain_text(value, max_chars), quote=False).replace("|", "\\|")
    return re.sub(r"[\r\n\v\f\x1c-\x1e\x85\u2028\u2029]", " ", text)


def plot_text(value: Any, max_chars: int | None = 200) -> str:
    """Text for a matplotlib title, label or tick: :func:`plain_text` with ``$`` escaped (no mathtext)."""
    return plain_text(value, max_chars).replace("$", r"\$")


def page_data(data: Any, max_chars: int | None = PAGE_TEXT_CHARS) -> Any:
    """``data`` as plain JSON values for a page: non-finite numbers as None, numpy values as Python ones, strings
    shortened (:func:`shorten`), mapping keys as strings, anything else as its ``str``."""
    if data is None or isinstance(data, bool | int):
        return data
    if isinstance(data, float):
        return float(data) if math.isfinite(data) else None
    if isinstance(data, str):
        return shorten(data, max_chars)
    if isinstance(data, Mapping):
        return {shorten(str(k), max_chars): page_data(v, max_chars) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [page_data(v, max_chars) for v in data]
    if hasattr(data, "tolist"):  # numpy arrays and scalars
        return page_data(data.tolist(), max_chars)
    return shorten(str(data), max_chars)


def embed_json(data: Any, max_chars: int | None = PAGE_TEXT_CHARS) -> str:
    """``data`` (through :func:`page_data`) as JSON that can sit inside any HTML element, ``<script>`` included: no
    ``<``, ``>``, ``&``, U+2028 or U+2029 appears in it (each is written ``\\u003c`` etc.), so no string changes how
    the page parses; a lone surrogate is written as its ``\\udXXX`` escape (valid JSON, encodable)."""
    text = json.dumps(page_data(data, max_chars), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return _SURROGATES.sub(lambda m: f"\\u{ord(m.group()):04x}", text.translate(_JSON_ESCAPES))


def fill_template(template: str, values: dict[str, str]) -> str:
    """``template`` with each ``__NAME__`` of ``values`` replaced in one pass (no value is read again, so a value
    holding ``__DATA__`` stays text). The values must already be escaped (:func:`escape_text`, :func:`embed_json`)."""
    pattern = "__(" + "|".join(map(re.escape, values)) + ")__"
    return re.sub(pattern, lambda m: values[m.group(1)], template)


def write_page(path: Path, text: str) -> Path:
    """Write ``text`` (a page or a report) to ``path`` atomically: a temporary file beside it, renamed into place
    once whole, so a failure leaves the earlier file or none, never an empty or partial one. Lone surrogates are
    written as U+FFFD."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        tmp.write_text(_SURROGATES.sub("\ufffd", text), encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
