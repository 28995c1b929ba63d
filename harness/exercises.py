"""Exercise stubs in kernels/ are generated from marked regions of solutions/ (one source of truth).

In a solution file an exercise is a region (in Markdown, the same words inside <!-- -->):

    // BEGIN EXERCISE 01.a: one thread per output element
    //> // TODO: ... (lines starting with `//>`, or `#>` in Python, are the stub's text, uncommented)
    ...the solution's code (dropped from the stub)...
    // END EXERCISE

The stub keeps everything outside the regions and, inside each region, only the `//>` lines.
Outside the regions a learner's file must stay identical to the solution's; inside, it is theirs.

    python -m harness.exercises list [LESSON]   the exercises, per lesson, with their lines in kernels/
    python -m harness.exercises check           are kernels/ and solutions/ in sync?
    python -m harness.exercises sync [--force]  write missing stubs (maintainers: --force regenerates,
                                                keeping a .bak-<time> copy of every file it replaces)
    python -m harness.exercises reset LESSON    put back the stubs of one lesson (your files are kept
                                                as .bak-<time> copies first)
"""
from __future__ import annotations

import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .build import ROOT, lesson_dir, unknown_lessons
from .catalog import solution_only as _solution_only

SOL, EX = ROOT / "solutions", ROOT / "kernels"
# `//` comments in .cu files, `#` in .py files (stub lines `#>`), `<!-- -->` in Markdown (the Nsight
# questions and their answers).
BEGIN = re.compile(r"^\s*(?://|#|<!--)\s*BEGIN EXERCISE\s+(\S+?):?\s+(.*?)\s*(?:-->)?$")
END = re.compile(r"^\s*(?://|#|<!--)\s*END EXERCISE\b")
STUB = re.compile(r"^(\s*)(?://|#)> ?(.*)$")


class ExerciseError(ValueError):
    pass


@dataclass
class Region:
    ident: str
    title: str
    file: Path
    line: int


def _split(text: str, path: Path):
    """[(outside_lines, region or None, inside_lines)] pieces of a file."""
    pieces, outside, inside, region = [], [], [], None
    for n, line in enumerate(text.splitlines(keepends=True), 1):
        if region is None:
            m = BEGIN.match(line)
            if m:
                region = Region(m.group(1), m.group(2).strip(), path, n)
                outside.append(line)
                pieces.append((outside, None, []))
                outside = []
            else:
                outside.append(line)
        else:
            if END.match(line):
                pieces.append(([], region, inside))
                region, inside = None, []
                outside.append(line)
            elif BEGIN.match(line):
                raise ExerciseError(f"{path}:{n}: BEGIN EXERCISE inside exercise {region.ident} (no END)")
            else:
                inside.append(line)
    if region is not None:
        raise ExerciseError(f"{path}:{region.line}: exercise {region.ident} has no END EXERCISE")
    pieces.append((outside, None, []))
    return pieces


def regions(path: Path) -> list[Region]:
    return [r for _, r, _ in _split(path.read_text(), path) if r is not None]


def stub_text(solution_text: str, path: Path = Path("<solution>")) -> str:
    out = []
    for outside, region, inside in _split(solution_text, path):
        out += outside
        for line in inside:
            m = STUB.match(line)
            if m:
                out.append(m.group(1) + m.group(2) + ("\n" if line.endswith("\n") else ""))
    return "".join(out)


def _skeleton(text: str, path: Path):
    """The parts a learner must not change: text outside regions, and the regions' order."""
    outs, ids = [], []
    for outside, region, _ in _split(text, path):
        outs.append("".join(outside))
        if region is not None:
            ids.append(region.ident)
    return "".join(outs), ids


def solution_only() -> list[Path]:
    """Solution files with no stub by design: the lessons' fast kernels (catalog stub=False)."""
    found = []
    for lesson, stem in sorted(_solution_only()):
        found += sorted(SOL.glob(f"{lesson:02d}_*/{stem}.cu"))
    return found


def pairs():
    """(solution file, its stub in kernels/) for every solution file that has a stub."""
    skip = set(solution_only())
    for sol in sorted(SOL.rglob("*")):
        if sol.is_file() and "__pycache__" not in sol.parts and sol.suffix != ".pyc" and sol not in skip:
            yield sol, EX / sol.relative_to(SOL)


def check(strict: bool = False) -> list[str]:
    """Problems found (empty: in sync). strict: stubs must equal the generated text exactly."""
    problems = []
    for sol, ex in pairs():
        rel = ex.relative_to(ROOT)
        if not ex.exists():
            problems.append(f"{rel} is missing (python -m harness.exercises sync writes it)")
            continue
        stext = sol.read_text()
        regs = regions(sol)
        want = stub_text(stext, sol) if regs else stext
        have = ex.read_text()
        if have == want:
            continue
        if strict or not regs:
            problems.append(f"{rel} differs from the stub generated from {sol.relative_to(ROOT)}")
            continue
        try:
            sk_have, ids_have = _skeleton(have, ex)
        except ExerciseError as e:
            problems.append(str(e))
            continue
        sk_want, ids_want = _skeleton(want, sol)
        if ids_have != ids_want:
            problems.append(f"{rel}: exercise regions {ids_have} differ from the solution's {ids_want}")
        elif sk_have != sk_want:
            problems.append(f"{rel} was changed outside its EXERCISE regions (only the regions are yours to edit)")
    for ex in sorted(EX.rglob("*")):
        if ex.is_file() and "__pycache__" not in ex.parts and not (SOL / ex.relative_to(EX)).exists() \
                and not re.search(r"\.(bak-\d+|new)$", ex.name):
            problems.append(f"{ex.relative_to(ROOT)} has no counterpart in solutions/")
    return problems


def _backup(p: Path) -> Path:
    b = p.with_name(f"{p.name}.bak-{time.strftime('%Y%m%d%H%M%S')}")
    shutil.copy2(p, b)
    return b


def sync(force: bool = False, only: Path | None = None) -> list[str]:
    done = []
    for sol, ex in pairs():
        if only is not None and not sol.is_relative_to(only):
            continue
        want = stub_text(sol.read_text(), sol) if regions(sol) else sol.read_text()
        if ex.exists() and ex.read_text() == want:
            continue
        ex.parent.mkdir(parents=True, exist_ok=True)
        if not ex.exists():
            ex.write_text(want)
            done.append(f"wrote {ex.relative_to(ROOT)}")
        elif force:
            b = _backup(ex)
            ex.write_text(want)
            done.append(f"regenerated {ex.relative_to(ROOT)} (your version kept as {b.name})")
        else:
            new = ex.with_name(ex.name + ".new")
            new.write_text(want)
            done.append(f"kept your {ex.relative_to(ROOT)}; the fresh stub is in {new.name}")
    return done


def main(argv: list[str]) -> int:
    cmd = argv[0] if argv else "list"
    if cmd == "list":  # where each exercise is in the file the learner edits (kernels/), lesson by lesson
        only = argv[1:]
        why = unknown_lessons(only)
        if why:
            print(f"exercises: {why}", file=sys.stderr)
            return 3
        # The learner's files (kernels/), and the stubs solutions/ would give where one is missing: a copy of the
        # course without solutions/ still lists every exercise.
        files = {ex: sol for sol, ex in pairs()}
        files.update({p: SOL / p.relative_to(EX) for p in EX.rglob("*")
                      if p.is_file() and p not in files and "__pycache__" not in p.parts
                      and p.suffix in (".cu", ".py", ".md") and ".bak-" not in p.name})
        for ex, sol in sorted(files.items()):
            if only and int(ex.relative_to(EX).parts[0][:2]) not in {int(n) for n in only}:
                continue
            try:
                regs = regions(ex) if ex.exists() else []
            except ExerciseError:  # the learner's file lost a marker: show where the solution has it
                regs = []
            shown = ex if regs or not sol.exists() else sol
            for r in regs or (regions(sol) if sol.exists() else []):
                print(f"{r.ident:<8} {shown.relative_to(ROOT)}:{r.line}  {r.title}")
        return 0
    if cmd == "check":
        probs = check(strict="--strict" in argv)
        print("\n".join(probs) if probs else "kernels/ and solutions/ are in sync")
        return 1 if probs else 0
    if cmd == "sync":
        print("\n".join(sync(force="--force" in argv)) or "nothing to do")
        return 0
    if cmd == "reset" and len(argv) > 1:
        why = unknown_lessons(argv[1:2])
        if why:
            print(f"exercises reset: {why}", file=sys.stderr)
            return 3
        d = lesson_dir(argv[1], solution=True)
        print("\n".join(sync(force=True, only=d)) or "already the original stubs")
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
