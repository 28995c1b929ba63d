#!/usr/bin/env bash
# Which of the metrics the Nsight exercises use does this GPU's ncu know? (device-machine probe)
ncu --version | tail -1
ncu --query-metrics --chip gh100 > /tmp/metrics.txt 2>&1 || ncu --query-metrics > /tmp/metrics.txt 2>&1
for m in dram__bytes_read dram__bytes_write dram__throughput l1tex__t_sectors_pipe_lsu_mem_global_op_ld \
         l1tex__t_requests_pipe_lsu_mem_global_op_ld l1tex__t_sector_hit_rate lts__t_sector_hit_rate \
         l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st \
         l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st \
         smsp__inst_executed_op_shared_ld sm__sass_inst_executed_op_shared_ld smsp__sass_inst_executed_op_shared_ld \
         smsp__sass_thread_inst_executed_op_ffma_pred_on smsp__inst_executed sm__warps_active \
         smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active smsp__average_warp_latency_issue_stalled \
         smsp__pcsamp_warps_issue_stalled launch__registers_per_thread launch__occupancy_limit_registers \
         sm__pipe_fma_cycles_active smsp__issue_active sm__throughput gpu__time_duration \
         smsp__warp_issue_stalled_mio_throttle smsp__average_warps_issue_stalled_mio_throttle; do
  printf '%-70s %s\n' "$m" "$(grep -c "^$m" /tmp/metrics.txt)"
done
grep -E "^smsp__average_warps_issue_stalled_[a-z_]+_per_issue_active" /tmp/metrics.txt | awk '{print $1}' | head -30
