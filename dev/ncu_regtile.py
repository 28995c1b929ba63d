"""Stall reasons, bank conflicts and pipe use of lesson 03's kernels at 4096³ (device-machine probe)."""
import sys

from harness import nsight

STALLS = [f"smsp__average_warps_issue_stalled_{s}_per_issue_active.ratio" for s in
          ("barrier", "long_scoreboard", "short_scoreboard", "mio_throttle", "math_pipe_throttle",
           "not_selected", "selected", "wait", "dispatch_stall", "lg_throttle", "no_instruction")]
METRICS = STALLS + ["sm__warps_active.avg.pct_of_peak_sustained_active", "smsp__inst_executed.sum",
                    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum", "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",
                    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
                    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum", "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum", "smsp__inst_executed_op_shared_ld.sum",
                    "dram__bytes_read.sum", "lts__t_sector_hit_rate.pct", "gpu__time_duration.sum", "launch__registers_per_thread"]
flags = sys.argv[1:]
p = nsight.profile(3, "probe", kernel="regtile", metrics=METRICS, launch_count=2, setup=f"""
from harness import build, catalog
mod = build.load(3, "regtile_fast", solution=True, extra_cuda_flags={flags!r})
teach = build.load(3, "regtile_gemm", solution=True)
prob = catalog.FP32
x, W = prob.make_inputs((4096, 4096, 4096))
a, b = prob.bind(teach.gemm_regtile_db), prob.bind(mod.gemm_regtile_wide)
a(x, W); b(x, W)
""", run="a(x, W); b(x, W)")
print(p.table(METRICS))
