"""`./course doctor`: what toolchain and GPU the course sees, and whether the third-party baselines can run.

    python -m harness.doctor
"""
from __future__ import annotations

from . import toolchain
from .baselines import bnb, marlin


def report() -> str:
    """toolchain.report() and one line per baseline (both are found without importing or building them)."""
    lines = [toolchain.report()]
    why = marlin.unavailable()  # the baseline of lessons 07, 10, 11 and 12 (its source comes from a package)
    lines.append("Marlin (baseline): " + (f"source in {marlin.kernel_dir()}" if why is None else "unavailable: " + why))
    why = bnb.unavailable()  # the baseline of lessons 08 and 11
    lines.append(f"bitsandbytes (baseline): {bnb.VERSION if why is None else 'unavailable: ' + why}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(report())
