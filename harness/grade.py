"""Grade exercises, each check in a child process: a kernel that faults or hangs is reported with its
lesson and exercise, and takes down neither the notebook nor the grading run.

    python -m harness.grade [LESSON ...] [--solutions] [--sanitize memcheck|racecheck] [--no-racecheck] [--timeout S]
                            [--jobs N]

In a notebook: `grade.check_isolated(lesson, launcher)` returns the same report as `check.check`, or says
how the child died (an illegal address, a time-out) instead of leaving a dead CUDA context behind.
With sanitize="memcheck" or "racecheck" the child runs under compute-sanitizer and its findings are shown.
Races are looked for by default: an exercise whose kernel file uses shared memory is, once its check passes, checked
again under compute-sanitizer racecheck on its small shapes (and synccheck where the file uses __syncwarp or barrier
instructions), since a missing __syncthreads() can give right values in every run. Every kernel is built with
-lineinfo, so a hazard is reported with the file and line of each access. --no-racecheck skips these runs.
Without a GPU each kernel file is still compiled, so a compile error is reported; the checks are "not run".
Exit status: 0 when every exercise passed, 1 when any failed (wrong results, a crash, a hang, a compile error),
2 when none failed but some could not run (no GPU, no compute-sanitizer), 3 for a lesson that does not exist.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from . import build, catalog, check, exercises, problems, quant, toolchain

PROBLEMS = {"linear": problems.Linear, "scale_add": problems.ScaleAdd}
SMALL = {"linear": ((17, 33, 65), (64, 96, 256)), "scale_add": ((1000,), (4099,))}  # for sanitizer runs
MARK = "@@RESULT@@"


@dataclass
class Outcome:
    """What happened to one isolated check."""
    name: str
    status: str  # "pass", "fail", "crash", "timeout", "compile-error", "not-run"
    text: str
    findings: list[str] = field(default_factory=list)  # compute-sanitizer's, if it ran
    notes: list[str] = field(default_factory=list)  # one-line remarks: what could not be looked for here

    @property
    def ok(self) -> bool:
        return self.status == "pass"

    def __str__(self):
        out = [f"{self.status.upper()}  {self.name}", self.text]
        if self.findings:
            out.append("compute-sanitizer found:\n  " + "\n  ".join(self.findings[:12]))
        return "\n".join(t for t in out if t)

    def _repr_pretty_(self, p, cycle):
        p.text(str(self))


def _child(argv: list[str]) -> int:
    """Runs in the child process: build, check, print one JSON line."""
    a = argparse.ArgumentParser()
    a.add_argument("--file", required=True)
    a.add_argument("--launcher", required=True)
    a.add_argument("--problem", default="linear")
    a.add_argument("--lesson", type=int, help="take the problem from the catalog entry of this lesson's launcher")
    a.add_argument("--solution", action="store_true")
    a.add_argument("--small", action="store_true")
    a.add_argument("--repeats", type=int, default=3)
    o = a.parse_args(argv)
    try:
        mod = build.load_file(Path(o.file), solution=o.solution)
    except build.BuildError as e:
        print(MARK + json.dumps({"status": "compile-error", "text": str(e)}), flush=True)
        return 0
    entry = next((k for k in catalog.kernels(o.lesson) if k.launcher == o.launcher), None) \
        if o.lesson is not None else None
    if entry is not None:  # the catalog knows the launcher's problem (dtypes, formats, shapes)
        prob = entry.problem
        small = prob.check_shapes[:2]
        # refusing the shapes the kernel does not take (a special input with K off its 16-byte rule) as the catalog does
        op = catalog.constrained(prob, prob.bind(getattr(mod, o.launcher)), catalog.shapes(entry))
    else:
        prob, small = PROBLEMS[o.problem](), SMALL[o.problem]
        op = prob.bind(getattr(mod, o.launcher))
    try:
        res = check.check(prob, op, small if o.small else None, repeats=o.repeats)
    except check.KernelHang as e:  # the GPU is still running it: report, and leave without waiting for it
        print(MARK + json.dumps({"status": "timeout", "text": str(e).split(" The GPU is still running it")[0]}),
              flush=True)
        os._exit(1)
    except Exception as e:  # a failed launch raises: the parent reports its message, not a line of the traceback
        traceback.print_exc()
        while e.__cause__ is not None:  # check's advice to restart a notebook's kernel wraps the launch's own error
            e = e.__cause__
        why = str(e) if isinstance(e, RuntimeError) else f"{type(e).__name__}: {e}"
        print(MARK + json.dumps({"status": "crash", "text": why}), flush=True)
        return 1
    print(MARK + json.dumps({"status": "pass" if res.ok else "fail", "text": str(res)}), flush=True)
    return 0


def _sanitizer() -> str | None:
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    home = os.environ.get("CUDA_HOME")
    cand = Path(home or "/usr/local/cuda") / "bin" / "compute-sanitizer"
    return str(cand) if cand.exists() else None


def check_isolated(lesson: int | None = None, launcher: str | None = None, *, file: str | Path | None = None,
                   problem: str = "linear", solution: bool | None = None, timeout: float | None = None,
                   sanitize: str | None = None) -> Outcome:
    """Check one launcher in a child process (lesson + launcher from the catalog, or file + problem). The child
    reports a hang itself once one launch runs past check.hang_limit_s() (four times that under compute-sanitizer);
    `timeout` (default: that limit plus two minutes for starting up and compiling) is the backstop."""
    solution = build.use_solutions() if solution is None else solution
    if timeout is None:
        timeout = (4 if sanitize else 1) * check.hang_limit_s() + 120
    if file is None:
        k = next((k for k in catalog.kernels(lesson) if k.launcher == launcher), None)
        if k is None:
            raise ValueError(f"lesson {lesson} has no launcher {launcher!r}; "
                             f"it has {[k.launcher for k in catalog.kernels(lesson)]}")
        file = build.source_path(k.lesson, k.file, solution)
    name = f"{launcher} ({Path(file).relative_to(build.ROOT) if Path(file).is_relative_to(build.ROOT) else file})"
    if not toolchain.gpu_available():
        # Compiling needs no GPU: a learner without one still learns whether the file builds.
        try:
            build.load_file(Path(file), solution=solution)
        except build.BuildError as e:
            return Outcome(name, "compile-error", str(e))
        return Outcome(name, "not-run", f"compiles; running its check {toolchain.NO_GPU_REASON}")
    cmd = [sys.executable, "-m", "harness.grade", "--child", "--file", str(file), "--launcher", launcher,
           "--problem", problem] + (["--solution"] if solution else []) + \
          (["--lesson", str(int(lesson))] if lesson is not None and launcher else [])
    if sanitize:
        if sanitize not in ("memcheck", "racecheck", "synccheck", "initcheck"):
            raise ValueError(f"sanitize must be memcheck, racecheck, synccheck or initcheck, not {sanitize!r}")
        tool = _sanitizer()
        if tool is None:
            return Outcome(name, "not-run", "compute-sanitizer is not installed (it ships with the CUDA toolkit)")
        cmd = [tool, "--tool", sanitize, "--print-limit", "20"] + cmd + ["--small", "--repeats", "1"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(build.ROOT), os.environ.get("PYTHONPATH", "")]),
               PYTHONUNBUFFERED="1", COURSE_SYNC="1")
    if sanitize:  # a kernel runs many times slower under compute-sanitizer
        env["COURSE_CHECK_TIMEOUT"] = str(4 * check.hang_limit_s())
    if sanitize == "memcheck":  # each tensor its own allocation: a read or write past it is then past the allocation
        env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=build.ROOT)
    except subprocess.TimeoutExpired:
        return Outcome(name, "timeout", f"no result after {timeout:.0f} s: the kernel hangs (an endless loop, or "
                                        "a __syncthreads() that some threads of a block never reach)")
    findings, found = sanitizer_report(p.stdout + p.stderr) if sanitize else ([], False)
    line = next((l for l in p.stdout.splitlines()[::-1] if l.startswith(MARK)), None)
    r = json.loads(line[len(MARK):]) if line is not None else None
    if r is None or r["status"] == "crash":
        why = r["text"] if r is not None else crash_message(p.stderr + "\n" + p.stdout, p.returncode)
        return Outcome(name, "crash", f"the kernel crashed: {why}\n(the check ran in a separate process, so this "
                                      "session is unharmed; COURSE_SYNC=1 was set, so the error is the launch's own)",
                       findings)
    status = r["status"]
    text = r["text"]
    if sanitize and status == "pass" and found:
        status = "fail"  # right answers by luck: the sanitizer's hazards still fail the exercise
        text = (f"every value was right, but compute-sanitizer {sanitize} found "
                + ("a race on shared memory (a missing or misplaced __syncthreads())" if sanitize == "racecheck"
                   else "a misused barrier" if sanitize == "synccheck" else "errors")
                + ":\n" + where(findings) + "\n" + text)
    return Outcome(name, status, text, findings)


def crash_message(output: str, returncode: int) -> str:
    """Why a child died, from its output: the message of the last exception its traceback shows (a traceback's
    source lines are code, not the error), else a line naming a CUDA error, else its exit code."""
    lines = [l.strip() for l in output.splitlines()]
    exc = [l for l in lines if re.match(r"[A-Za-z_][\w.]*(Error|Exception|Interrupt): ", l)]
    if exc:
        name, _, msg = exc[-1].partition(": ")
        return msg if name.endswith("RuntimeError") else exc[-1]
    err = [l for l in lines if "CUDA error" in l and not l.startswith(("raise ", "File "))]
    return err[-1] if err else f"the child process exited with code {returncode}"


# compute-sanitizer's summary lines: "ERROR SUMMARY: 2 errors" (memcheck, synccheck, initcheck) and
# "RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)" (racecheck, printed even when it found nothing).
_SUMMARY = re.compile(r"\b(?:ERROR|RACECHECK) SUMMARY:\s*(\d+) (?:errors?|hazards?)"
                      r"(?: displayed)?(?: \((\d+) errors?, (\d+) warnings?\))?")
# A record of something found: a race between two accesses, a hazard, an invalid access, a misused barrier.
_RECORD = re.compile(r"Race reported|[Hh]azard detected|Invalid __(?:global|shared|local)__|Invalid \w+ access"
                     r"|Barrier error|Uninitialized __global__|^(?:ERROR|Error|Warning|WARN):")


def sanitizer_report(output: str) -> tuple[list[str], bool]:
    """compute-sanitizer's lines in a child's output, without its banner and clean summaries, and whether they report
    anything: a summary that counts a hazard or an error, or a record of one. A clean run prints "RACECHECK SUMMARY:
    0 hazards displayed (0 errors, 0 warnings)", which is no race."""
    findings, found = [], False
    for raw in output.splitlines():
        if not raw.startswith("========="):
            continue
        l = raw.removeprefix("=========").strip()
        if not l or l.startswith("COMPUTE-SANITIZER"):
            continue
        m = _SUMMARY.search(l)
        if m:
            if any(int(g) for g in m.groups() if g is not None):
                findings.append(l)
                found = True
            continue
        findings.append(l)
        found = found or bool(_RECORD.search(l))
    return findings, found


def where(findings: list[str], context: int = 0) -> str:
    """The source lines compute-sanitizer's findings name (file:line, from -lineinfo), each once, with its text."""
    seen, out = set(), []
    for f in findings:
        for path, line in re.findall(r"(/[^\s:]+\.(?:cu|cuh|h)):(\d+)", f):
            if (path, line) in seen:
                continue
            seen.add((path, line))
            n = int(line)
            try:
                src = Path(path).read_text().splitlines()
                text = src[n - 1].strip() if 0 < n <= len(src) else ""
            except OSError:
                text = ""
            out.append(f"  {build._show(Path(path))}, line {n}: {text}")
    return "\n".join(out[:8]) if out else "  (no source line in the report: was the file built with -lineinfo?)"


# Tools that look for races, and when each applies to a kernel file.
def race_tools(path: Path) -> list[str]:
    """racecheck for a file that uses shared memory; synccheck too where it uses __syncwarp or barrier instructions
    (whose misuse racecheck does not report)."""
    try:
        src = Path(path).read_text()
    except OSError:
        return []
    if "__shared__" not in src:
        return []
    return ["racecheck"] + (["synccheck"] if re.search(r"__syncwarp|\bbar\.(sync|arrive)|\bbarrier\.sync", src) else [])


def look_for_races(out: Outcome, lesson: int | None, launcher: str, *, file: Path, problem: str = "linear",
                   solution: bool, timeout: float | None = None, skip: tuple = ()) -> Outcome:
    """After a passing check, the same launcher under race_tools(file) on its small shapes: the first that finds
    something makes the outcome; where nothing can run, the outcome gets a note that says so."""
    if out.status == "not-run":
        return out if not race_tools(file) else Outcome(out.name, out.status, out.text, out.findings,
                                                         out.notes + ["races not looked for: no GPU here"])
    if not out.ok:
        return out
    for tool in race_tools(file):
        if tool in skip:
            continue
        r = check_isolated(lesson, launcher, file=file, problem=problem, solution=solution, timeout=timeout,
                           sanitize=tool)
        if r.status == "not-run":
            return Outcome(out.name, out.status, out.text, out.findings,
                           out.notes + ["races not looked for: compute-sanitizer is not installed"])
        if not r.ok:
            return r
    return out


def _compile_once(solution: bool, lessons: list[int] | None) -> dict[tuple[int, str], Outcome]:
    """Build every kernel file of the graded lessons once, here (compiling needs no GPU): a file that does not compile
    is then reported once for all its exercises, and the checks' children find the others in the cache."""
    failed = {}
    for k in catalog.kernels():
        if (lessons and k.lesson not in lessons) or (k.lesson, k.file) in failed or not k.exercises:
            continue
        path = build.source_path(k.lesson, k.file, solution)
        try:
            build.load_file(path, solution=solution)
        except build.BuildError as e:
            failed[(k.lesson, k.file)] = Outcome(build._show(path), "compile-error", str(e))
    return failed


def default_jobs() -> int:
    """Checks graded at once: each is a child process on the same GPU (a few hundred MB each), so a few at a time
    where there is a GPU; one where there is none (each then only compiles)."""
    return min(4, os.cpu_count() or 1) if toolchain.gpu_available() else 1


def grade(lessons: list[int] | None = None, solution: bool = False, sanitize: str | None = None,
          timeout: float | None = None, races: bool = True, jobs: int | None = None,
          progress=None) -> list[tuple[str, int, list[str], Outcome]]:
    """Every exercise of the given lessons, in lesson order: (exercise id, lesson, launchers, outcome of the worst).
    A file that does not compile gives all its exercises one shared compile-error outcome; the other files are
    graded all the same. `jobs` checks run at once (default_jobs()); `progress(line)`, if given, hears of each
    launcher as its check ends."""
    why = build.unknown_lessons(lessons or [])
    if why:
        raise ValueError(why)
    broken = _compile_once(solution, lessons)
    todo = [k for k in catalog.kernels()  # a fast kernel or a step to read has nothing to grade
            if (not lessons or k.lesson in lessons) and k.exercises]

    def one(k) -> Outcome:
        how = sanitize or k.stub_check
        out = broken.get((k.lesson, k.file)) or check_isolated(k.lesson, k.launcher, solution=solution,
                                                               timeout=timeout, sanitize=how if how != "check" else None)
        if races and sanitize is None and out.status in ("pass", "not-run"):  # a race can give right values
            out = look_for_races(out, k.lesson, k.launcher, file=build.source_path(k.lesson, k.file, solution),
                                 solution=solution, timeout=timeout, skip=(k.stub_check,))
        if progress is not None:
            progress(f"  {', '.join(k.exercises)} ({k.launcher}): {out.status}")
        return out

    with ThreadPoolExecutor(max(1, jobs or default_jobs())) as pool:
        outcomes = list(pool.map(one, todo))
    rows = []
    for k, out in zip(todo, outcomes):
        for ex in k.exercises:
            rows.append((ex, k.lesson, [k.launcher], out))
    if not lessons or 5 in lessons:  # lesson 05's exercises are Python: checked in-process, on the CPU
        try:
            checks = quant.check_formats(build.load_python(5, "formats", solution=solution))
            for r in checks:
                ex, fn = r.exercise.split()
                rows.append((ex, 5, [fn], Outcome(fn, "pass" if r.ok else "fail", r.message)))
        except Exception as e:  # a syntax error in the learner's file: say so, grade the rest
            rows.append(("05", 5, ["formats.py"], Outcome("formats.py", "fail", f"{type(e).__name__}: {e}")))
    if not lessons or 10 in lessons:  # lesson 10's exercise 10.a (the offline reorder) is Python too
        try:
            for r in quant.check_fragments(build.load_python(10, "reorder", solution=solution)):
                ex, fn = r.exercise.split()
                rows.append((ex, 10, [fn], Outcome(fn, "pass" if r.ok else "fail", r.message)))
        except Exception as e:
            rows.append(("10.a", 10, ["reorder.py"], Outcome("reorder.py", "fail", f"{type(e).__name__}: {e}")))
    merged: dict[str, tuple] = {}
    for ex, lesson, launchers, out in rows:  # an exercise passes when every kernel that uses it passes
        if ex in merged:
            _, _, ls, prev = merged[ex]
            merged[ex] = (ex, lesson, ls + launchers, prev if not prev.ok else out)
        else:
            merged[ex] = (ex, lesson, launchers, out)
    return sorted(merged.values(), key=lambda r: (r[1], r[0]))


def nsight_answers(lessons: list[int] | None = None) -> list[tuple[str, bool]]:
    """(exercise id, answered?) for the Nsight questions in kernels/*/nsight.md."""
    out = []
    for _, ex in exercises.pairs():
        if ex.name != "nsight.md" or not ex.exists() or (lessons and int(ex.parent.name[:2]) not in lessons):
            continue
        for _, region, inside in exercises._split(ex.read_text(), ex):
            if region is not None:
                out.append((region.ident, any(l.strip() for l in inside)))
    return out


_VERDICT = {"fail": "FAIL (see above)", "crash": "CRASH (see above)", "timeout": "TIMEOUT (see above)",
            "compile-error": "COMPILE ERROR (see above)", "not-run": "NOT RUN (compiles; no GPU here)"}


def table(rows) -> str:
    """The grade table: whole words only, the launchers wrapped inside their column."""
    import textwrap
    width = max([7] + [len(l) for *_, ls, _ in rows for l in ls])
    lines = [f"{'exercise':<9} {'lesson':<7} {'kernels':<{width}}  result"]
    for ex, lesson, launchers, out in rows:
        verdict = "PASS" if out.ok else _VERDICT.get(out.status, out.status.upper())
        if out.status == "not-run" and "compute-sanitizer" in out.text:
            verdict = "NOT RUN (no compute-sanitizer)"
        names = textwrap.wrap(", ".join(launchers), width, break_long_words=False, break_on_hyphens=False)
        lines.append(f"{ex:<9} {lesson:02d}      {names[0]:<{width}}  {verdict}")
        lines += [f"{'':<17} {n}" for n in names[1:]]
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return _child(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("lessons", nargs="*", type=int)
    ap.add_argument("--solutions", action="store_true", help="grade solutions/ (a self-test of the course)")
    ap.add_argument("--sanitize", choices=["memcheck", "racecheck", "synccheck", "initcheck"])
    ap.add_argument("--no-racecheck", action="store_true",
                    help="do not run the checks of shared-memory kernels again under compute-sanitizer racecheck "
                         "(and synccheck), which grading does by default")
    ap.add_argument("--timeout", type=float, default=None,
                    help="seconds a check's child process may take in all (default: the hang limit, "
                         "COURSE_CHECK_TIMEOUT or 30 s per launch, plus two minutes to start and compile)")
    ap.add_argument("--jobs", type=int, default=None, help="checks run at once (default: up to 4 with a GPU)")
    a = ap.parse_args(argv)
    why = build.unknown_lessons(a.lessons)
    if why:
        print(f"grade: {why}", file=sys.stderr)
        return 3
    build.ANNOUNCE_COMPILES = True
    if toolchain.gpu_available():
        print(f"checking each exercise in a child process, {a.jobs or default_jobs()} at a time "
              f"(a launch that runs past {check.hang_limit_s():.0f} s is reported as a hang):", flush=True)
    rows = grade(a.lessons or None, a.solutions, a.sanitize, a.timeout, races=not a.no_racecheck, jobs=a.jobs,
                 progress=(lambda line: print(line, flush=True)) if toolchain.gpu_available() else None)
    shown = set()
    for ex, lesson, launchers, out in rows:  # each problem once, with every exercise it concerns
        if out.ok or out.status == "not-run" or id(out) in shown:
            continue
        shown.add(id(out))
        same = [r for r in rows if r[3] is out]
        names = sorted({l for r in same for l in r[2]})
        print(f"--- {', '.join(r[0] for r in same)} ({', '.join(names)}) ---\n{out}\n")
    print(table(rows))
    answered = nsight_answers(a.lessons or None)
    if answered:
        print(f"\nNsight questions answered in kernels/*/nsight.md: {sum(a for _, a in answered)} of {len(answered)}"
              " (compare with solutions/*/nsight.md)")
    passed = sum(out.ok for *_, out in rows)
    not_run = sum(out.status == "not-run" for *_, out in rows)
    failed = len(rows) - passed - not_run
    print(f"\n{passed} passed, {failed} failed" + (f", {not_run} not run" if not_run else ""))
    if any(out.status == "not-run" and "compute-sanitizer" not in out.text for *_, out in rows):
        print(f"not run: their checks launch kernels, which {toolchain.NO_GPU_REASON}")
    for note in dict.fromkeys(n for *_, out in rows for n in out.notes):  # each once
        print(note)
    return 1 if failed else 2 if not_run else 0


if __name__ == "__main__":
    sys.exit(main())
