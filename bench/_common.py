"""Helpers shared by the bench scripts (not part of the package)."""

from __future__ import annotations

import platform
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def machine_description() -> str:
    """One line naming the device the benchmark ran on."""
    import torch

    if torch.cuda.is_available():
        name = torch.cuda.get_device_name(0)
        return f"{name} ×{torch.cuda.device_count()}, torch {torch.__version__}, CUDA {torch.version.cuda}"
    return f"CPU {platform.processor() or platform.machine()}, torch {torch.__version__}"


def print_table(title: str, columns: list[str], rows: list[list[object]]) -> None:
    """Print a plain fixed-width table (readable in logs and easy to paste into markdown)."""
    cells = [[str(c) for c in columns]] + [[_fmt(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    print(f"\n{title}")
    print("| " + " | ".join(c.ljust(w) for c, w in zip(cells[0], widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in cells[1:]:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |")


def _fmt(value: object) -> str:
    if isinstance(value, float):
        if value != value:
            return "nan"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)
