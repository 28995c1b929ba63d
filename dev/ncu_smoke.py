"""Does harness.nsight.profile work on this machine? (device-machine probe)"""
from harness import nsight

p = nsight.profile(1, "smoke", kernel="gemm_naive", metrics=["dram__bytes_read.sum", "gpu__time_duration.sum",
                   "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"],
                   setup="""
from harness import catalog
k = catalog.kernels(1)[0]
op = catalog.op(k, solution=True)
x, W = k.problem.make_inputs((256, 512, 1024))
op(x, W)
""", run="op(x, W)")
print(p.table())
