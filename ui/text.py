"""Text from users (design names, file names, messages quoting them) shown as text, not Markdown.

Streamlit renders titles, toasts, captions and messages as Markdown, so a design named
``![p](http://host/pixel.png)`` would make every viewer's browser fetch that address. ``plain``
escapes every character Markdown (and Streamlit's ``:color[...]`` directives and ``$math$``)
could read, so the name shows exactly as typed. Icon and emoji shortcodes (``:material/home:``,
``:smile:``) are matched in the text itself, escapes or not, so a word joiner (U+2060, invisible
and unbreakable) goes between such a colon and the word after it.
"""

from __future__ import annotations

import re

_MARKDOWN = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:&\"'=^])")
#: An escaped colon that a shortcode could start with: one before a letter, digit, ``_+-``.
_SHORTCODE_COLON = re.compile(r"\\:(?=[\w+\-\\])")
WORD_JOINER = "\u2060"


def plain(text: object) -> str:
    """``text`` with every Markdown-active character backslash-escaped, newlines as spaces, and
    no colon that could start an icon or emoji shortcode.

    >>> print(plain("![p](x.png) *big*"))
    \\!\\[p\\]\\(x\\.png\\) \\*big\\*
    >>> plain(":smile:") == "\\\\:" + WORD_JOINER + "smile\\\\:"
    True
    """
    escaped = _MARKDOWN.sub(r"\\\1", " ".join(str(text).splitlines()))
    return _SHORTCODE_COLON.sub(lambda match: match[0] + WORD_JOINER, escaped)
