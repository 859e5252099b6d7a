"""Numbers as people read them (no Streamlit: shared by views and pure helpers)."""

from __future__ import annotations


def bytes_text(n_bytes: int) -> str:
    """A byte count in binary units.

    >>> bytes_text(512), bytes_text(1536), bytes_text(3 << 30)
    ('512 B', '1.5 KiB', '3.0 GiB')
    """
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    value, power = float(n_bytes), 0
    while value >= 1024 and power < len(units) - 1:
        value, power = value / 1024, power + 1
    return f"{value:,.0f} B" if power == 0 else f"{value:,.1f} {units[power]}"
