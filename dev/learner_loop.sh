#!/usr/bin/env bash
# Replays a new learner's first hour on a fresh clone, on a CPU machine: list the exercises, break a multi-exercise
# file, grade it (one lesson, then all), rebuild in one process, fix it, run a notebook as JupyterLab does, open Lab,
# ask for lessons that do not exist. Every step checks what the learner sees; the script stops at the first failure.
#
#   dev/learner_loop.sh [CLONE_DIR]     (default: a new temporary folder; the clone is removed on success)
#
# The clone uses this checkout's interpreter (COURSE_PYTHON, default .venv/bin/python here) instead of a new .venv,
# with the clone's own harness first on the path; its kernel cache is the clone's own build/cache (cold compiles).
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
PY=${COURSE_PYTHON:-$SRC/.venv/bin/python}
CLONE=${1:-$(mktemp -d)/course}
step=0
ok()   { step=$((step + 1)); echo "[$step] ok: $*"; }
fail() { echo "FAILED at step $((step + 1)): $*" >&2; exit 1; }

git clone -q "$SRC" "$CLONE"
cd "$CLONE"
export COURSE_PYTHON=$PY PYTHONPATH=$CLONE COURSE_CACHE=
unset COURSE_SOLUTIONS REQUIRE_GPU
where=$("$PY" -c "import harness.build as b; print(b.ROOT)")
[ "$where" = "$CLONE" ] || fail "the clone's harness is not the one imported ($where)"
before=$( (ls ~/.cache/gpu-kernel-course/build 2>/dev/null || true) | wc -l)
ok "fresh clone in $CLONE"

# exercises list: lines of the learner's file
out=$(./course exercises list 1)
line=$(echo "$out" | awk '$1 == "01.b" { split($2, a, ":"); print a[2] }')
file=$(echo "$out" | awk '$1 == "01.b" { split($2, a, ":"); print a[1] }')
[ "$file" = kernels/01_naive/naive_gemm.cu ] || fail "exercises list names $file, not the learner's file"
sed -n "${line}p" "$file" | grep -q "BEGIN EXERCISE 01.b" || fail "01.b is not at line $line of $file"
ok "exercises list: 01.b at $file:$line"

# a missing semicolon inside exercise 01.a
F=kernels/01_naive/naive_gemm.cu
at=$(grep -n "BEGIN EXERCISE 01.a" $F | cut -d: -f1)
sed -i "${at}a\\    float acc = 0.f\\n    (void)acc;" $F
for try in 1 2; do
  set +e; out=$(./course grade 1 2>&1); rc=$?; set -e
  [ $rc -eq 1 ] || fail "grade 1 with a compile error exited $rc:\n$out"
  echo "$out" | grep -q "Traceback\|ImportError" && fail "grade 1 shows a traceback:\n$out"
  [ "$(echo "$out" | grep -c 'naive_gemm.cu did not compile')" -eq 1 ] || fail "the compile error is not shown once:\n$out"
  echo "$out" | grep -q "$CLONE/$F($((at + 1))): error\|$CLONE/$F($((at + 2))): error" || fail "no file(line) in:\n$out"
  echo "$out" | grep -q ">> .* | " || fail "no excerpt in:\n$out"
  echo "$out" | grep -q "^01.a .*COMPILE ERROR" || fail "the table does not say COMPILE ERROR:\n$out"
  ok "grade 1 with a broken file (try $try): reported once, file, line and excerpt"
done
leftover=$( (find build/cache/build -maxdepth 1 -name 'l01_naive_gemm_ex_*' 2>/dev/null || true) | while read -r d; do
  [ -f "$d/complete" ] || echo "$d"; done)
[ -z "$leftover" ] || fail "failed builds left folders: $leftover"
ok "no build folder (or lock) left by the failed builds"

"$PY" - <<'PY' || fail "building twice in one process (as a notebook cell run twice)"
from harness import build
msgs = []
for _ in range(2):
    try:
        build.load(1)
    except build.CompileError as e:
        msgs.append(str(e))
assert len(msgs) == 2 and msgs[0] == msgs[1], msgs
PY
ok "build.load(1) twice in one process: the same compile error twice, no ImportError"

set +e; out=$(./course grade 2>&1); rc=$?; set -e
[ $rc -eq 1 ] || fail "grade (all lessons) with one broken file exited $rc:\n$out"
echo "$out" | grep -q "Traceback\|ImportError" && fail "grade shows a traceback:\n$out"
table=$(echo "$out" | sed -n '/^exercise  lesson/,/^$/p' | tail -n +2 | grep -E '^[0-9]')
lessons=$(echo "$table" | cut -c11-12 | uniq | tr '\n' ' ')
[ "$lessons" = "00 01 02 03 04 05 06 07 08 09 10 11 12 " ] || fail "grade table lessons in order: $lessons"
echo "$table" | grep -v "^01\." | grep -q "COMPILE ERROR" && fail "other lessons report a compile error:\n$table"
ok "grade (all lessons) with one broken file: every lesson reported, in order"

git checkout -q -- $F
set +e; out=$(./course grade 1 2>&1); rc=$?; set -e
[ $rc -eq 2 ] && echo "$out" | grep -q "0 passed, 0 failed, 2 not run" || fail "fixed file: grade 1 exited $rc:\n$out"
ok "fixed: grade 1 compiles, checks not run without a GPU (exit 2)"

for args in "run 99" "grade 99" "demo 99" "exercises reset 99" "exercises list 99"; do
  set +e; err=$(./course $args 2>&1 >/dev/null); rc=$?; set -e
  [ $rc -ne 0 ] && [ "$(echo "$err" | wc -l)" -eq 1 ] && echo "$err" | grep -q "no lesson 99" || fail "$args: rc $rc, $err"
done
ok "run/grade/demo/exercises refuse lesson 99 with one line"

"$PY" - <<'PY' || fail "lesson 01 run as JupyterLab runs it, without a GPU"
import os, nbformat
from nbclient import NotebookClient
os.environ["CUDA_VISIBLE_DEVICES"] = ""
p = "lessons/01_naive_gemm/01_naive_gemm.ipynb"
stored = nbformat.read(p, as_version=4)
nb = nbformat.read(p, as_version=4)
NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": os.path.dirname(p)}}).execute()
for a, b in zip(stored.cells, nb.cells):
    if "gpu" in a.metadata.get("tags", []):
        assert b.outputs[0].text.startswith("[skipped here"), b.outputs
        assert not [o for o in b.outputs if o.output_type == "error"]
PY
ok "lesson 01 top to bottom in the Lab kernel: no error, GPU cells show their recorded outputs"

out=$(./course run 1 2>&1) || fail "./course run 1:\n$out"
echo "$out" | grep -q "without encryption" && fail "./course run prints the kernel's TCP warning"
echo "$out" | grep -q "01_naive_gemm.ipynb .*: ok" || fail "./course run 1:\n$out"
ok "./course run 1: ok, no kernel warnings"

set +e; timeout 25 ./course lab --no-browser --port 0 > lab.log 2>&1; set -e
grep -q "Serving notebooks from local directory: $CLONE\$" lab.log || fail "lab did not open at the course root:\n$(cat lab.log)"
[ "$(id -u)" != 0 ] || grep -q "running as root" lab.log || fail "lab as root did not say so"
ok "./course lab serves the course root"

[ -d build/cache/build ] || fail "the kernel cache is not in build/cache"
after=$( (ls ~/.cache/gpu-kernel-course/build 2>/dev/null || true) | wc -l)
[ "$after" -eq "$before" ] || fail "something still compiled into ~/.cache/gpu-kernel-course"
ok "one kernel cache, in the clone's build/cache"

[ -n "${1:-}" ] || rm -rf "$(dirname "$CLONE")"
echo "learner loop: all $step steps passed"
