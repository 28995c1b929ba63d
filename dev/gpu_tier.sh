#!/usr/bin/env bash
# The GPU tier on a GPU machine that has python3, torch and nvcc but no Jupyter (the course's lent GPU machine):
# installs the wheels in .gpu-wheels/ (../shared/gpu/fetch-wheels.sh), then runs one part of `./course test` with
# REQUIRE_GPU=1, so a GPU test that cannot run fails instead of skipping. Logs go to $OUT (or build/gpu-tier/).
#
#   bash dev/gpu_tier.sh tests [FILES/ARGS...]        pytest tests (or the files given), 15 workers (about 9 minutes
#                                                     for all of tests/ on an H200)
#   bash dev/gpu_tier.sh notebooks [PYTEST ARGS...]   every lesson notebook under nbval, 6 workers (about 4 minutes)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-build/gpu-tier}
mkdir -p "$out"
. dev/gpu_wheels.sh || exit 1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 REQUIRE_GPU=1 COURSE_SOLUTIONS=1
part=${1:-tests}
[ $# -gt 0 ] && shift
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
case $part in
  tests) [ $# -gt 0 ] || set -- tests  # or the test files and options given
         python3 -m pytest -n 15 -p no:cacheprovider -q -rfE --durations=25 "$@" 2>&1 | tee "$out/tests.log" ;;
  notebooks) python3 -m pytest lessons --nbval-lax --nbval-sanitize-with tests/nbval_sanitize.cfg \
               --nbval-cell-timeout 1800 -n 6 --dist loadfile -p no:cacheprovider -q -rfE "$@" 2>&1 \
               | tee "$out/notebooks.log" ;;
  *) echo "usage: bash dev/gpu_tier.sh tests|notebooks [PYTEST ARGS...]" >&2; exit 2 ;;
esac
exit "${PIPESTATUS[0]}"
