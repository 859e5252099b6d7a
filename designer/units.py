"""Numbers as people read them (no Streamlit: shared by views and pure helpers)."""

from __future__ import annotations


def flops_text(flops: float) -> str:
    """A FLOP count in decimal units.

    >>> flops_text(512), flops_text(2.5e9), flops_text(3e15)
    ('512 FLOP', '2.50 GFLOP', '3.00 PFLOP')
    """
    for unit, scale in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if flops >= scale:
            return f"{flops / scale:.2f} {unit}"
    return f"{flops:,.0f} FLOP"


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
