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
    # the package's folder, not the machine's path to it: this output is stored in lesson 00's notebook
    where = "/".join(marlin.kernel_dir().parts[-6:]) if why is None else ""
    lines.append("Marlin (baseline): " + (f"source in the installed package, .../{where}" if why is None else "unavailable: " + why))
    why = bnb.unavailable()  # the baseline of lessons 08 and 11
    lines.append(f"bitsandbytes (baseline): {bnb.VERSION if why is None else 'unavailable: ' + why}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(report())
