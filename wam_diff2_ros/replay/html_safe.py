"""Text that no string can turn into markup: data embedded in a page (:func:`embed_json`) and text placed in
HTML or Markdown (:func:`escape_text`). Every page or HTML-capable report the package writes goes through these.
"""

from __future__ import annotations

import html
import json
import re
from typing import Any

#: Characters that could end or comment out the element around embedded JSON, start markup, or end a JavaScript
#: line; JSON has them only inside strings, where the ``\\uXXXX`` form means the same character.
_JSON_ESCAPES = {ord(c): f"\\u{ord(c):04x}" for c in "<>&\u2028\u2029"}


def embed_json(data: Any) -> str:
    """``data`` as JSON that can sit inside any HTML element, ``<script>`` included: no ``<``, ``>``, ``&``,
    U+2028 or U+2029 appears in it (each is written ``\\u003c`` etc.), so no string changes how the page parses.
    NaN and infinities are refused (they are not JSON)."""
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.translate(_JSON_ESCAPES)


def escape_text(text: Any) -> str:
    """``str(text)`` with ``&``, ``<``, ``>`` and quotes as HTML entities: plain text in HTML (an element or an
    attribute) and in Markdown (which would pass raw HTML through)."""
    return html.escape(str(text), quote=True)


def fill_template(template: str, values: dict[str, str]) -> str:
    """``template`` with each ``__NAME__`` of ``values`` replaced in one pass (no value is read again, so a value
    holding ``__DATA__`` stays text)."""
    pattern = "__(" + "|".join(map(re.escape, values)) + ")__"
    return re.sub(pattern, lambda m: values[m.group(1)], template)
