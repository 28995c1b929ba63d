#!/usr/bin/env bash
# A maintainer's recording on a GPU machine that has python3, torch and nvcc but no Jupyter (the course's lent GPU
# machine): installs the wheels in .gpu-wheels/ (../shared/gpu/fetch-wheels.sh), then records the lessons named
# into results/<this GPU>/ (tables, ceilings, Nsight reports) and the notebooks' stored outputs, in place.
#
#   bash dev/record_gpu.sh [--probes] LESSON...   e.g. bash dev/record_gpu.sh --probes 0 1 2 3 4 5
#
# --probes also records the sections a notebook reads but does not measure itself, before the notebooks run:
# lesson 04's instruction probe (dev/probe_mma.py, "mma_peak") and K-loop ablation (dev/tune_tc.py, "ablate"), and
# lesson 12's read probe (dev/probe_stream.py, "stream"). Each lesson named also gets, before its notebook runs, the
# tables its benchmark module records as a script and its notebook only reads (06 "table"; 10 "table", "ladder",
# "block_cost"; 12 "table").
# Lesson 00 must be recorded first on a new GPU: it
# measures the ceilings every other lesson's tables divide by. Logs go to $OUT (or build/record/).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-build/record}
mkdir -p "$out"
. dev/gpu_wheels.sh || exit 1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 COURSE_RECORD=1 REQUIRE_GPU=1 COURSE_SOLUTIONS=1
probes=0
if [ "${1:-}" = "--probes" ]; then probes=1; shift; fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,utilization.gpu --format=csv \
  | tee "$out/gpu.txt"
rc=0
run() { echo "== $*" | tee -a "$out/record.log"; "$@" 2>&1 | tee -a "$out/record.log"; [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1; }
lessons=("$@")
if [ "${lessons[0]:-}" = 0 ]; then  # the ceilings first: every section stores them
  run python3 -m harness.run 0 --in-place
  lessons=("${lessons[@]:1}")
fi
if [ $probes = 1 ]; then
  run python3 dev/probe_mma.py --record
  run python3 dev/tune_tc.py --ablate --record
  run python3 dev/probe_stream.py --record
fi
for n in "${lessons[@]}"; do
    case $n in
      6) run python3 lessons/06_fused_int8/bench_06.py --record ;;
      10) run python3 lessons/10_pipelined_w4a16/bench_10.py --record
          run python3 lessons/10_pipelined_w4a16/bench_10.py --ladder --record
          run python3 lessons/10_pipelined_w4a16/bench_10.py --block-cost --record ;;
      12) run python3 lessons/12_hopper_wgmma/bench_12.py --record ;;
    esac
done
[ ${#lessons[@]} -gt 0 ] && run python3 -m harness.run "${lessons[@]}" --in-place
exit $rc
