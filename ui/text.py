"""Text from users (design names, file names, messages quoting them) shown as text, not Markdown.

Streamlit renders titles, toasts, captions and messages as Markdown, so a design named
``![p](http://host/pixel.png)`` would make every viewer's browser fetch that address. ``plain``
escapes every character Markdown (and Streamlit's ``:icon:``/``:color[...]`` directives and
``$math$``) could read, so the name shows exactly as typed.
"""

from __future__ import annotations

import re

_MARKDOWN = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:&\"'=^])")


def plain(text: object) -> str:
    """``text`` with every Markdown-active character backslash-escaped, newlines as spaces.

    >>> print(plain("![p](x.png) *big*"))
    \\!\\[p\\]\\(x\\.png\\) \\*big\\*
    """
    return _MARKDOWN.sub(r"\\\1", " ".join(str(text).splitlines()))
