"""Numbers the lessons' prose quotes must be the reference GPU's recorded ones (results/<reference>/NN.json and its
ceilings.json), so a new
recording that moves them makes this fail instead of leaving the text behind. Each quote is a regex over the
lesson's markdown with one group, and the function that formats the recorded value the way the text does."""
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REF = ROOT / "results" / "H200"  # the reference GPU's recording (harness.roofline.REFERENCE_GPU)


def markdown(lesson: str) -> str:
    nb = next(ROOT.glob(f"lessons/{lesson}_*/{lesson}_*.ipynb"))
    cells = json.loads(nb.read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def rows(lesson: str, section: str = "bench") -> list[dict]:
    return json.loads((REF / f"{lesson}.json").read_text())["sections"][section]["rows"]


def row(lesson: str, op: str, shape: list[int]) -> dict:
    hits = [r for r in rows(lesson) if r["op"] == op and r["shape"] == shape]
    assert len(hits) == 1, f"results/{lesson}.json: no single row for {op} at {shape}"
    return hits[0]


def fmt(section: str, name: str, **match) -> dict:
    """Lesson 05's recorded row of one format (and, for the error table, one group size)."""
    hits = [r for r in rows("05", section) if r["format"] == name and all(r[k] == v for k, v in match.items())]
    assert len(hits) == 1, f"results/05.json: no single {section} row for {name} {match}"
    return hits[0]


def w4a16_row(route: str, shape=(1, 8192, 8192)) -> dict:
    """Lesson 07's recorded row of one route at one shape (M, N, K)."""
    hits = [r for r in rows("07", "table") if r["route"] == route and r["shape"] == list(shape)]
    assert len(hits) == 1, f"results/07.json: no single row for {route} at {shape}"
    return hits[0]


def floor07(problem: str, shape) -> float:
    """µs to move a problem's minimum bytes at the reference GPU's recorded read bandwidth (lesson 07, section 1)."""
    from harness import catalog
    prob = {"w4a16": catalog.W4A16, "linear_f16": catalog.FP16, "dequant_w4": catalog.DEQUANT_W4}[problem]
    from harness import roofline
    return prob.bytes(shape) / roofline.bandwidth(ceilings())[0] / 1e3


def ceilings() -> dict:
    return json.loads((REF / "ceilings.json").read_text())


def section_bw(lesson: str, section: str) -> float:
    """The bandwidth a recorded section's tables divide by (its stored ceilings' read bandwidth:
    harness.results.floor_GBps)."""
    from harness import results
    return results.floor_GBps(json.loads((REF / f"{lesson}.json").read_text())["sections"][section])


N26, N28 = [1 << 26], [1 << 28]
OURS00, BASE00 = "ours: scale_add", "torch.add(b, x, alpha=a)"


def h100(what: str):
    """The H100 recording (lesson 00's two-GPU section quotes it): its ceilings, or a lesson's JSON."""
    return json.loads((ROOT / "results" / "H100_80GB_HBM3" / f"{what}.json").read_text())


def h100_00(op: str) -> dict:
    return next(r for r in h100("00")["sections"]["bench"]["rows"] if r["op"] == op and r["shape"] == N28)
G4096 = [4096, 4096, 4096]
QUOTES = {
    "00": [
        (r"our kernel moves (\d+) GB/s", lambda: f"{row('00', 'ours: scale_add', N26)['gbs']:.0f}"),
        (r"(\d+)% of torch's `add`", lambda: f"{row('00', 'ours: scale_add', N26)['pct_baseline']:.0f}"),
        (r"which moves (\d+) GB/s", lambda: f"{row('00', 'torch.add(b, x, alpha=a)', N26)['gbs']:.0f}"),
        (r"only reads, with plain 16-byte loads, reaches ([\d,]+) GB/s", lambda: f"{ceilings()['read_GBps']:,.0f}"),
        (r"even reaches (\d+)% of the copy roofline",
         lambda: f"{row('00', 'torch.add(b, x, alpha=a)', N26)['pct_roofline']:.0f}"),
        (r"(\d+) bytes of DRAM traffic for \d+ FLOPs", lambda: "12"),  # 4 B read of x, of b, written to out
        (r"overflow the (\d+) MiB L2 cache", lambda: f"{ceilings()['env']['l2_mib']:.0f}"),
        # section 7: the two recorded GPUs
        (r"should gain up to ([\d.]+)×", lambda: f"{ceilings()['copy_GBps'] / h100('ceilings')['copy_GBps']:.2f}"),
        (r"same rate on both \(([\d.]+)×\)", lambda: f"{ceilings()['fp16_TFLOPs'] / h100('ceilings')['fp16_TFLOPs']:.2f}"),
        (r"copy bandwidth grew ([\d.]+)×", lambda: f"{ceilings()['copy_GBps'] / h100('ceilings')['copy_GBps']:.2f}"),
        (r"from (\d+) to \d+ FLOP per byte in FP16",
         lambda: f"{h100('ceilings')['fp16_TFLOPs'] * 1e3 / h100('ceilings')['copy_GBps']:.0f}"),
        (r"from \d+ to (\d+) FLOP per byte in FP16", lambda: f"{ceilings()['fp16_TFLOPs'] * 1e3 / ceilings()['copy_GBps']:.0f}"),
        (r"torch's `add` gains ([\d.]+)×", lambda: f"{h100_00(BASE00)['us'] / row('00', BASE00, N28)['us']:.2f}"),
        (r"torch's `add` gains [\d.]+× \(([\d,]+) →", lambda: f"{h100_00(BASE00)['us']:,.0f}"),
        (r"torch's `add` gains [\d.]+× \([\d,]+ → ([\d,]+) µs", lambda: f"{row('00', BASE00, N28)['us']:,.0f}"),
        (r"Ours gains only ([\d.]+)×", lambda: f"{h100_00(OURS00)['us'] / row('00', OURS00, N28)['us']:.2f}"),
        (r"Ours gains only [\d.]+×\s+\(([\d,]+) →", lambda: f"{h100_00(OURS00)['us']:,.0f}"),
        (r"Ours gains only [\d.]+×\s+\([\d,]+ → ([\d,]+) µs", lambda: f"{row('00', OURS00, N28)['us']:,.0f}"),
        (r"reaches (\d+)% of `torch.add` on the H200", lambda: f"{row('00', OURS00, N28)['pct_baseline']:.0f}"),
        (r"on the H200 and (\d+)% on the H100", lambda: f"{h100_00(OURS00)['pct_baseline']:.0f}"),
        # section 7's profile reading: DRAM % of peak of scale_add at 2^26 on the H200 (results/H200/ncu)
        (r"DRAM at (\d+)% of its peak on the H200",
         lambda: f"{ncu_num(ncu_rows('00_scale_add')[0], 'dram__throughput.avg.pct_of_peak_sustained_elapsed'):.0f}"),
    ],
    "01": [
        (r"cuBLAS reaches (\d+)% of the FP32 roofline",
         lambda: f"{row('01', 'cuBLAS FP32', G4096)['pct_roofline']:.0f}"),
        (r"naive kernel reaches ([\d.]+)% of cuBLAS",
         lambda: f"{row('01', '01 naive (thread/output)', G4096)['pct_baseline']:.1f}"),
        (r"the coalesced\s+one ([\d.]+)%", lambda: f"{row('01', '01 coalesced (warp/output)', G4096)['pct_baseline']:.1f}"),
        (r"makes it ([\d.]+)× faster", lambda: f"{row('01', '01 naive (thread/output)', G4096)['us'] / row('01', '01 coalesced (warp/output)', G4096)['us']:.1f}"),
    ],
    "02": [
        (r"makes the kernel ([\d.]+)× faster", lambda: f"{row('02', '02 smem tiled, bank conflicts', G4096)['us'] / row('02', '02 smem tiled, padded', G4096)['us']:.1f}"),
        (r"reaches only ([\d.]+)% of cuBLAS", lambda: f"{row('02', '02 smem tiled, padded', G4096)['pct_baseline']:.1f}"),
        # step 4's side effect: registers of the unpadded (<0>) and padded (<1>) kernels, from the recorded profile
        (r"unpadded kernel (\d+) registers instead", lambda: ncu_rows('02_tiled')[0]['launch__registers_per_thread']),
        (r"registers instead of (\d+), so one block", lambda: ncu_rows('02_tiled')[1]['launch__registers_per_thread']),
    ],
    "03": [  # steps 1 and 2 against the tile arithmetic (bench_03.TILES) and lesson 02's recorded profile, 4096³
        (r"Its profile counts ([\d.]+) shared-load instructions per FMA", lambda: f"{smem_ld_per_ffma02():.2f}"),
        (r"0\.375 load instructions per FMA against lesson\s+02's (\d\.\d+)", lambda: f"{smem_ld_per_ffma02():.2f}"),
        (r"reads ([\d.]+)× fewer shared-memory values per FMA", lambda: f"{tile03(0) / tile03(1):.1f}"),
        (r"it should be about ([\d.]+)× faster", lambda: f"{tile03(0) / tile03(1):.1f}"),
        (r"lesson 02's kernel: ([\d.]+)×, more than predicted",
         lambda: f"{row('03', '02 smem tiled, padded', G4096)['us'] / row('03', '03.1 1-D register tile (8x1)', G4096)['us']:.2f}"),
        (r"Shared loads per FMA fell ([\d.]+)×", lambda: f"{tile03(1) / tile03(2):.1f}"),
        (r"the time only ([\d.]+)×",
         lambda: f"{row('03', '03.1 1-D register tile (8x1)', G4096)['us'] / row('03', '03.2 2-D register tile (8x8)', G4096)['us']:.2f}"),
    ],
    "04": [  # step 3's reading of step 4's recorded table, the instruction probe (section mma_peak)
        (r"adds little, ([\d.]+)× in FP16 at 4096³", lambda: f"{db_gain04(4096):.2f}"),
        (r"× in FP16 at 4096³ and ([\d.]+)× at 8192³", lambda: f"{db_gain04(8192):.2f}"),
        (r"step 4's INT8 kernel runs (above) it",
         lambda: "above" if step04('04 mma.sync INT8', 8192)['tflops'] > ceilings()['int8_TOPs'] else "below"),
        (r"probe reaches a (\w+) of its peak",  # one warp per scheduler, one chain, against the best
         lambda: {1: "quarter", 2: "half"}.get(round(4 * probe04(4, 1)['ops_per_clk_per_sm'] / probe04()['ops_per_clk_per_sm']), "?")),
        (r"with two warps of (\d) chains each",  # the fewest chains at 8 warps per SM that reach the best
         lambda: str(min(i for i in (1, 2, 4, 8) if probe04(8, i)['ops_per_clk_per_sm'] >= probe04()['ops_per_clk_per_sm']))),
        (r"no memory traffic: (\d+) TFLOP/s", lambda: f"{probe04()['tops']:.0f}"),
        (r"against cuBLAS's (\d+) and", lambda: f"{gemm04('cuBLAS FP16 (F.linear)')['tops']:.0f}"),
        (r"the fast kernel's (\d+) at 4096³", lambda: f"{gemm04('04 mma.sync FP16')['tops']:.0f}"),
        (r"explains\s+at most (\d+) of the", lambda: f"{gemm04('cuBLAS FP16 (F.linear)')['tops'] - probe04()['tops']:.0f}"),
        (r"of the (\d+) TFLOP/s gap", lambda: f"{gemm04('cuBLAS FP16 (F.linear)')['tops'] - gemm04('04 mma.sync FP16')['tops']:.0f}"),
        (r"the kernel runs at (\d+)% of what", lambda: f"{gemm04('04 mma.sync FP16')['pct_of_probe']:.0f}"),
    ],
    "05": [
        (r"16 / 128 = ([\d.]+) extra bits per weight", lambda: f"{fmt('memory', 'INT8 group 128')['bits_per_weight'] - 8:.3f}"),
        (r"8 / 128 = ([\d.]+) bits per weight",
         lambda: f"{fmt('memory', 'INT4 asym group 128')['bits_per_weight'] - fmt('memory', 'INT4 sym group 128')['bits_per_weight']:.4f}"),
        (r"\(([\d.]+) bits per weight at group 32\)", lambda: f"{fmt('error_vs_group', 'INT8 sym', group=32)['bits_per_weight'] - 8:.1f}"),
        (r"\| INT8, group 128 \| ([\d.]+) \|", lambda: f"{fmt('memory', 'INT8 group 128')['bits_per_weight']:.3f}"),
        (r"\| INT4 sym, group 128 \| ([\d.]+) \|", lambda: f"{fmt('memory', 'INT4 sym group 128')['bits_per_weight']:.3f}"),
        (r"\| INT4 asym, group 128 \| ([\d.]+) \|", lambda: f"{fmt('memory', 'INT4 asym group 128')['bits_per_weight']:.2f}"),
        (r"\| NF4, block 64 \| ([\d.]+) \|", lambda: f"{fmt('memory', 'NF4 block 64')['bits_per_weight']:.1f}"),
        (r"127 / 7 ≈ (\d+) times coarser", lambda: f"{127 / 7:.0f}"),  # INT8's largest level over INT4's
    ],
    "07": [  # 8192 × 8192 at one token, the recorded table; the floors from the recorded ceilings
        (r"INT4 floor at 8192 × 8192 is ([\d.]+) µs", lambda: f"{floor07('w4a16', (1, 8192, 8192)):.1f}"),
        (r"FP16 weights needs at least (\d+) µs", lambda: f"{floor07('linear_f16', (1, 8192, 8192)):.0f}"),
        (r"time from 2.5 bytes per weight at the copy bandwidth: about (\d+) µs",
         lambda: f"{floor07('dequant_w4', (8192, 8192)):.0f}"),
        (r"the fused kernel takes ([\d.]+) µs", lambda: f"{w4a16_row('w4a16.fused')['us']:.1f}"),
        (r"against ([\d.]+) µs for cuBLAS", lambda: f"{w4a16_row('cublas_fp16')['us']:.1f}"),
        (r"µs for cuBLAS: ([\d.]+)× faster, where",
         lambda: f"{w4a16_row('cublas_fp16')['us'] / w4a16_row('w4a16.fused')['us']:.2f}"),
        (r"where the\s+bytes allow ([\d.]+)×",  # FP16's floor over INT4's at one token
         lambda: f"{floor07('linear_f16', (1, 8192, 8192)) / floor07('w4a16', (1, 8192, 8192)):.1f}"),
        (r"the tiles take ([\d.]+) µs", lambda: f"{w4a16_row('w4a16.gemv_tiles')['us']:.1f}"),
        (r"µs: ([\d.]+)× faster than cuBLAS",
         lambda: f"{w4a16_row('cublas_fp16')['us'] / w4a16_row('w4a16.gemv_tiles')['us']:.2f}"),
        (r"GEMV on tiles takes ([\d.]+) µs in a\s+graph", lambda: f"{w4a16_row('w4a16.gemv_tiles')['graph_us']:.1f}"),
        # the takeaway: the fast GEMV's lane-instructions per weight at M = 1 (its profile, launch 1) against
        # section 1's budget at 100% issue (128 lane-instructions per SM and cycle, at the INT4 floor's pace)
        (r"GEMV executes ([\d.]+)\s+lane-instructions per weight",
         lambda: f"{32 * ncu_num(ncu_rows('07_by_m')[1], 'smsp__inst_executed.sum') / 8192 ** 2:.1f}"),
        (r"per weight of the ([\d.]+) section 1 allows", lambda: f"""{128 * ceilings()['sms'] * ceilings()['clock_MHz']
         * floor07('w4a16', (1, 8192, 8192)) / 8192 ** 2:.1f}"""),
        (r"lesson 04's `mma.sync` GEMM reached (\d+)% of cuBLAS at 4096³", lambda: f"""{next(
            r['pct_baseline'] for r in rows('04', 'steps') if r['route'] == '04_mma_sync_fp16' and r['shape'] == G4096):.0f}"""),
    ],
    "08": [  # step 2 (dequantize, 8192 × 8192) and step 4 (the GEMV at M = 1 on 8192²) of the recorded table
        (r"the decision tree takes ([\d.]+) µs", lambda: f"{nf4_us('dequant', 'nf4.dequant_nf4_branchy'):g}"),
        (r"the shared-memory codebook takes ([\d.]+) µs", lambda: f"{nf4_us('dequant', 'nf4.dequant_nf4_smem'):g}"),
        (r"the floor\s+([\d.]+) µs", lambda: f"{nf4_us('dequant', 'nf4.floor'):g}"),
        (r"global-memory table takes only ([\d.]+) µs", lambda: f"{nf4_us('dequant', 'nf4.dequant_nf4_global'):g}"),
        (r"bitsandbytes' own kernel takes ([\d.]+) µs", lambda: f"{nf4_us('dequant', 'bnb.dequantize_4bit'):g}"),
        (r"cuBLAS FP16 takes ([\d.]+) µs", lambda: f"{nf4_us('gemv', 'cublas_fp16'):g}"),
        (r"dequantize \+ cuBLAS ([\d.]+) µs", lambda: f"{nf4_us('gemv', 'nf4.dequant_cublas'):g}"),
        (r"The lesson's fast GEMV takes\s+([\d.]+) µs", lambda: f"{nf4_us('gemv', 'nf4.gemv_tiles'):g}"),
        (r"`matmul_4bit` ([\d.]+) µs", lambda: f"{nf4_us('gemv', 'bnb.matmul_4bit'):g}"),
        (r"Row-major\s+the fast GEMV takes ([\d.]+) µs", lambda: f"{nf4_us('gemv', 'nf4.gemv'):g}"),
        (r"on tiles, ([\d.]+) µs", lambda: f"{nf4_us('gemv', 'nf4.gemv_tiles'):g}"),
        (r"8% fewer bytes, yet ([\d.]+) µs", lambda: f"{nf4_us('gemv', 'nf4.gemv_tiles_dq'):g}"),
        (r"grows from ([\d.]+) µs at M = 1", lambda: f"{nf4_row('gemv', 'nf4.gemv_warp', [1, 8192, 8192])['us']:g}"),
        (r"to ([\d.]+) µs at M = 16", lambda: f"{nf4_row('gemv', 'nf4.gemv_warp', [16, 8192, 8192])['us']:g}"),
        (r"reaches (\d+)% of\s+the copy bandwidth on this traffic",  # the table's %: lesson 00's copy bandwidth
         lambda: f"{nf4_row('dequant', 'nf4.floor', [8192, 8192])['gbs'] / ceilings()['copy_GBps'] * 100:.0f}"),
        # Nsight question 3: the four tables' mean time in step 2's table, the five dequantize launches' DRAM bytes
        (r"move 172 MB in about (\d+) µs", lambda: f"{sum(nf4_us('dequant', f'nf4.dequant_nf4_{t}') for t in ('global', 'smem', 'shfl', 'pairs')) / 4:.0f}"),
        (r"The profile counts about (\d+) MB", lambda: f"{sum(ncu_num(r, 'dram__bytes_read.sum') + ncu_num(r, 'dram__bytes_write.sum') for r in ncu_rows('08_kernels')[:5]) / 5e6:.0f}"),
    ],
    "09": [  # section 5's reading of the recorded table, 8192 × 8192
        (r"W4A8 is ([\d.]+)× faster than cuBLAS FP16", lambda: f"{w4a8_row('w4a8', 64)['speedup_vs_cublas']:.2f}"),
        (r"FP16 \(([\d.–]+)× on the other two shapes\)",  # both print the same, or the test shows both
         lambda: "–".join(sorted({f"{w4a8_row('w4a8', 64, kn)['speedup_vs_cublas']:.2f}" for kn in ((14336, 4096), (4096, 14336))}))),
        (r"([\d.]+)× faster than\s+lesson 07's W4A16", lambda: f"{w4a8_row('w4a16_07', 64)['w4a8_speedup']:.2f}"),
        (r"([\d.]+)× faster than\s+lesson 06's W8A8", lambda: f"{w4a8_row('w8a8_06', 64)['w4a8_speedup']:.2f}"),
        (r"W4A8 at ([\d.]+)× of it", lambda: f"{w4a8_row('w4a8', 256)['speedup_vs_cublas']:.2f}"),
        (r"GEMV is faster \(([\d.]+) against", lambda: f"{w4a8_row('w4a16_07', 16)['us']:.2f}"),
        (r"GEMV is faster \([\d.]+ against ([\d.]+) µs\)", lambda: f"{w4a8_row('w4a8', 16)['us']:.2f}"),
        # section 4: the teaching grid at N = 4096 against the recorded GPU's SMs
        (r"64 blocks per 32 tokens for (\d+) SMs", lambda: f"{ceilings()['sms']}"),
    ],
    "06": [  # the floors of step 1's traffic table (recorded ceilings), then going further's reading of the table
        (r"the fused GEMV's ([\d.]+) µs", lambda: f"{floor06('(d) fused'):.1f}"),
        (r"M = 1: \(a\) (\d+) µs", lambda: f"{floor06('(a) unfused Python'):.0f}"),
        (r"\(b\) and \(c\) (\d+), cuBLAS", lambda: f"{floor06('(b) dequant + cuBLAS'):.0f}"),
        (r"cuBLAS on FP16 weights (\d+),\s+\(d\)", lambda: f"{floor06('cuBLAS, FP16 weights'):.0f}"),
        (r"\(d\) (\d+)\. The weights rotate", lambda: f"{floor06('(d) fused'):.0f}"),
        (r"a floor near (\d+) µs at M = 64", lambda: f"{floor06('W8A8', (64, 8192, 8192)):.0f}"),
        (r"GEMV to ([\d.]+) µs on row-major", lambda: f"{w8a16_row('w8a16.gemv')['us']:.2f}"),
        (r"row-major\s+weights, ([\d.]+)% of the read", lambda: f"{w8a16_row('w8a16.gemv')['pct_bw']:.1f}"),
        (r"take it to ([\d.]+) µs", lambda: f"{w8a16_row('w8a16.gemv_tiles')['us']:.2f}"),
        (r"take it to [\d.]+ µs,\s+([\d.]+)%", lambda: f"{w8a16_row('w8a16.gemv_tiles')['pct_bw']:.1f}"),
        (r"cuBLAS on FP16 weights takes\s+([\d.]+) µs", lambda: f"{w8a16_row('cublas_fp16')['us']:.2f}"),
        (r"the tiled GEMV\s+reads at ([\d.]+)% of the read bandwidth",  # graph_markdown's % for the graph time,
         # against the read bandwidth the table's section stores (as its % column)
         lambda: f"{100 * w8a16_row('w8a16.gemv_tiles')['gbs'] / section_bw('06', 'table') * w8a16_row('w8a16.gemv_tiles')['us'] / w8a16_row('w8a16.gemv_tiles')['graph_us']:.1f}"),
        # Nsight question 1: the recorded GPU's L2
        (r"L2 is (\d+) MiB", lambda: f"{ceilings()['env']['l2_mib']:.0f}"),
        # Nsight question 3: the ceilings, and the M where 2·M FLOP per weight byte reaches each ridge
        (r"FP16 ([\d.]+) TFLOP/s, INT8", lambda: f"{ceilings()['fp16_TFLOPs']:.1f}"),
        (r"INT8 ([\d.]+) TOP/s, copy", lambda: f"{ceilings()['int8_TOPs']:.1f}"),
        (r"TOP/s, copy (\d+) GB/s", lambda: f"{ceilings()['copy_GBps']:.0f}"),
        (r"ridge at M ≈ (\d+) and", lambda: f"{ceilings()['fp16_TFLOPs'] * 1e3 / ceilings()['copy_GBps'] / 2:.0f}"),
        (r"ridge at M ≈ \d+ and (\d+)", lambda: f"{ceilings()['int8_TOPs'] * 1e3 / ceilings()['copy_GBps'] / 2:.0f}"),
    ],
    "10": [  # "going further": the fast kernel in the recorded table and its own ladder, 8192 × 8192
        (r"it takes ([\d.]+) µs per call", lambda: f"{pipe_row('table', 'w4a16_pipe', 1)['us']:.2f}"),
        (r"([\d.]+)× faster than cuBLAS FP16 and", lambda: f"{pipe_row('table', 'w4a16_pipe', 1)['speedup_vs_cublas']:.2f}"),
        (r"([\d.]+)× faster than Marlin", lambda: f"{pipe_row('table', 'w4a16_pipe', 1)['speedup_vs_marlin']:.2f}"),
        (r"it is slower than cuBLAS \(([\d.]+)×\)", lambda: f"{pipe_row('table', 'w4a16_pipe', 128)['speedup_vs_cublas']:.2f}"),
        (r"went from ([\d.]+) µs \(write-back\)",
         lambda: f"{pipe_row('ladder', 'w4a16_pipe_fast.gemm_w4a16_writeback', 16)['us']:.2f}"),
        (r"to ([\d.]+) µs \(split-K\)", lambda: f"{pipe_row('ladder', 'w4a16_pipe_fast.gemm_w4a16_frag_split', 16)['us']:.2f}"),
        # "going further": the fast kernel's H200 profile at M = 128 (results/H200/ncu/12_kernels.csv)
        (r"tensor pipe (\d+)% busy, \d+% of issue slots used", lambda: f"{ncu12('sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active'):.0f}"),
        (r"busy, (\d+)% of issue slots used", lambda: f"{ncu12('smsp__issue_active.avg.pct_of_peak_sustained_active'):.0f}"),
        # section 6, Little's law: lesson 12's read probe bounds the round trip (FP16 8192², 2 loads of 16 bytes in
        # flight per thread, 256 threads, one block per SM); per K tile and SM at M = 16 on 8192²: step 4's 64 tiles
        # on 64 SMs, step 5's and the fast kernel's split step's 64 tiles × 4 parts × 16 K tiles over all the SMs
        (r"reads (\d+) MB at", lambda: f"{probe12()['bytes'] / 1e6:.0f}"),
        (r"reads \d+ MB at\s+([\d,]+) GB/s", lambda: f"{probe12_GBps():,.0f}"),
        (r"(\d+) × 8 KB = [\d.]+ MB in flight", lambda: f"{ceilings()['sms']}"),
        (r"× 8 KB = ([\d.]+) MB in flight", lambda: f"{ceilings()['sms'] * 8192 / 1e6:.2f}"),
        (r"L ≤ (\d+) ns", lambda: f"{probe12_L_ns():.0f}"),
        (r"At ([\d,]+) GB/s that asks", lambda: f"{ceilings()['read_GBps']:,.0f}"),
        (r"asks for about ([\d.]+) MB in flight", lambda: f"{ceilings()['read_GBps'] * probe12_L_ns() / 1e6:.1f}"),
        (r"a K tile every ([\d.]+) µs \([\d.]+ µs / 64\)",
         lambda: f"{pipe_row('steps', 'w4a16_pipe.w4a16_regs_pipe', 16)['us'] / 64:.2f}"),
        (r"a K tile every [\d.]+ µs \(([\d.]+) µs / 64\)", lambda: f"{pipe_row('steps', 'w4a16_pipe.w4a16_regs_pipe', 16)['us']:.2f}"),
        (r"step 5's (\d+) every", lambda: f"{ceilings()['sms']}"),
        (r"step 5's \d+ every ([\d.]+) µs",
         lambda: f"{pipe_row('steps', 'w4a16_pipe.w4a16_regs_split', 16)['us'] * ceilings()['sms'] / 4096:.2f}"),
        (r"step 5's \d+ every [\d.]+ µs \(([\d.]+) µs / \d+\)", lambda: f"{pipe_row('steps', 'w4a16_pipe.w4a16_regs_split', 16)['us']:.2f}"),
        (r"step 5's \d+ every [\d.]+ µs \([\d.]+ µs / (\d+)\)", lambda: f"{4096 / ceilings()['sms']:.0f}"),
        (r"needs ([\d.]+) µs\s+\([\d.]+ µs\)",
         lambda: f"{pipe_row('ladder', 'w4a16_pipe_fast.gemm_w4a16_frag_split', 16)['us'] * ceilings()['sms'] / 4096:.2f}"),
        (r"needs [\d.]+ µs\s+\(([\d.]+) µs\)", lambda: f"{pipe_row('ladder', 'w4a16_pipe_fast.gemm_w4a16_frag_split', 16)['us']:.2f}"),
    ],
    "11": [  # sections 5 and 6: the recorded decode step at batch 1
        (r"W4A16 step runs at (\d+) tok/s", lambda: f"{decode_row('w4a16')['tok_s']:.0f}"),
        (r"([\d.]+)× FP16's \d+", lambda: f"{decode_row('w4a16')['speedup_vs_fp16']:.2f}"),
        (r"× FP16's (\d+)", lambda: f"{decode_row('fp16')['tok_s']:.0f}"),
        (r"linear layers got ([\d.]+)× faster", lambda: f"{decode_row('fp16')['us_gemm'] / decode_row('w4a16')['us_gemm']:.2f}"),
        (r"it takes (\d+) µs of\s+the W4A16 step", lambda: f"{rest_us('w4a16', pdl=False):.0f}"),
        (r"µs of\s+the W4A16 step and (\d+) of FP16's", lambda: f"{rest_us('fp16', pdl=False):.0f}"),
        (r"(\d+)\s+µs\s+in the W4A16 step", lambda: f"{rest_us('w4a16'):.0f}"),
        (r"against (\d+) in FP16's", lambda: f"{rest_us('fp16'):.0f}"),
        (r"That\s+is (\d+)% of an FP16 step", lambda: f"{100 * rest_us('fp16') / decode_row('fp16')['us_graph']:.0f}"),
        (r"but (\d+)% of a W4A16 step", lambda: f"{100 * rest_us('w4a16') / decode_row('w4a16')['us_graph']:.0f}"),
        (r"fit\s+in the H200's (\d+) MB L2", lambda: f"{ceilings()['env']['l2_mib']:.0f}"),  # going further
        # section 8: the real model
        (r"W8A16 costs ([\d.]+)% of perplexity", lambda: f"{100 * (real_row('w8a16')['ppl_vs_fp16'] - 1):.1f}"),
        (r"4-bit formats (\d+)% \(NF4\)", lambda: f"{100 * (real_row('nf4')['ppl_vs_fp16'] - 1):.0f}"),
        (r"to (\d+)% \(W4A16\)", lambda: f"{100 * (real_row('w4a16')['ppl_vs_fp16'] - 1):.0f}"),
        (r"W4A16's step takes (\d+) µs", lambda: f"{real_row('w4a16')['us_graph']:.0f}"),
        (r"against a\s+(\d+) µs floor",
         lambda: f"{real_row('w4a16')['step_bytes'] / (section_bw('11', 'real_model') * 1e3):.0f}"),
        (r"without PDL (\d+), \d+ of them", lambda: f"{real_row('w4a16')['us_graph_nopdl']:.0f}"),
        (r"without PDL \d+, (\d+) of them", lambda: f"{real_row('w4a16')['kernels_us']:.0f}"),
        (r"inside its (\d+) kernels", lambda: f"{real_row('w4a16')['kernels_per_step']:.0f}"),
        (r"The graph buys W4A16 (\d+)× over eager", lambda: f"{real_row('w4a16')['us_eager'] / real_row('w4a16')['us_graph']:.0f}"),
    ],
    "12": [  # "going further": the fast kernel in the recorded table, 8192 × 8192
        (r"M = 128 on 8192 × 8192 it takes ([\d.]+) µs", lambda: f"{wgmma_row('w4a16_wgmma', 128)['us']:.1f}"),
        (r"against cuBLAS's ([\d.]+) µs", lambda: f"{wgmma_row('cublas_fp16', 128)['us']:.1f}"),
        (r"cuBLAS's [\d.]+ µs \(([\d.]+)×\)", lambda: f"{wgmma_row('w4a16_wgmma', 128)['speedup_vs_cublas']:.2f}"),
        (r"\([\d.]+×\) and lesson 10's ([\d.]+) µs", lambda: f"{wgmma_row('w4a16_pipe_mma', 128)['us']:.1f}"),
        (r"the steps table above has ([\d.]+) µs", lambda: f"{step12_row('w4a16_wgmma', 128)['us']:.1f}"),
        (r"The teaching kernel stays near ([\d–]+) µs at every M",  # every M of the steps table rounds to it
         lambda: "–".join(sorted({f"{r['us']:.0f}" for r in rows('12', 'steps') if r['route'] == 'w4a16_wgmma_basic'}))),
        # section 1: lesson 00's read bandwidth
        (r"B beats lesson 00's ([\d,]+) GB/s", lambda: f"{ceilings()['read_GBps']:,.0f}"),
        (r"lesson 10's kernel \(([\d.]+) against", lambda: f"{wgmma_row('w4a16_wgmma', 1)['us']:.1f}"),
        (r"lesson 10's kernel \([\d.]+ against ([\d.]+) µs\)", lambda: f"{wgmma_row('w4a16_pipe_mma', 1)['us']:.1f}"),
    ],
}


def smem_ld_per_ffma02() -> float:
    """Shared-load warp instructions per FFMA warp instruction of lesson 02's padded kernel, its recorded profile."""
    r = next(r for r in ncu_rows('02_tiled') if "<1>" in r["Kernel Name"])
    return ncu_num(r, "smsp__inst_executed_op_shared_ld.sum") / (ncu_num(r, "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum") / 32)


def tile03(i: int) -> float:
    """Shared-memory values a thread reads per FMA in lesson 03's tile table (0: lesson 02's tile, 1: step 1, ...)."""
    from harness import bench
    return bench.lesson_module(3).TILES[i].smem_loads_per_fma()


def step04(op: str, n: int, on_h100: bool = False) -> dict:
    """Lesson 04's recorded step-4 table (section steps): one kernel at n³, on the H200 or in the H100's recording."""
    sec = (h100("04") if on_h100 else json.loads((REF / "04.json").read_text()))["sections"]["steps"]
    hits = [r for r in sec["rows"] if r["op"] == op and r["shape"] == [n, n, n]]
    assert len(hits) == 1, f"04.json: no single steps row for {op} at {n}³"
    return hits[0]


def db_gain04(n: int) -> float:
    """What lesson 04's double buffer buys in FP16 at n³ (step 4's `x row before`)."""
    return step04('04.2 mma.sync FP16', n)['us'] / step04('04.3 + cp.async double buffer FP16', n)['us']


def probe04(warps: int | None = None, ilp: int | None = None) -> dict:
    """Lesson 04's register-only mma.sync m16n8k16 FP16->FP32 probe (section mma_peak): its best, or one row."""
    sec = json.loads((REF / "04.json").read_text())["sections"]["mma_peak"]
    kind = "mma.sync m16n8k16 FP16->FP32"
    if warps is None:
        return sec["best"][kind]
    return next(r for r in sec["rows"] if r["kind"] == kind and r["warps_per_sm"] == warps and r["ilp"] == ilp)


def gemm04(op: str, n: int = 4096) -> dict:
    """A GEMM timed beside lesson 04's probe (section mma_peak, gemms)."""
    sec = json.loads((REF / "04.json").read_text())["sections"]["mma_peak"]
    return next(r for r in sec["gemms"] if r["op"] == op and r["n"] == n)


def pipe_row(section: str, route: str, M: int) -> dict:
    """Lesson 10's recorded row of one route at M tokens on 8192 × 8192."""
    hits = [r for r in rows("10", section) if r["route"] == route and r["shape"] == [M, 8192, 8192]]
    assert len(hits) == 1, f"results/10.json: no single {section} row for {route} at M = {M}"
    return hits[0]


def probe12() -> dict:
    """Lesson 12's read probe, FP16 8192 × 8192, two 16-byte loads per thread, one block of 256 threads per SM."""
    hits = [r for r in rows("12", "stream") if r["size"] == "FP16 8192x8192" and r["variant"] == "ldg U=2 grid=1xSM"]
    assert len(hits) == 1, "results/12.json: no single stream row for FP16 8192x8192, ldg U=2 grid=1xSM"
    return hits[0]


def probe12_GBps() -> float:
    return probe12()["bytes"] / probe12()["graph_us"] / 1e3


def probe12_L_ns() -> float:
    """Little's law: at most sms × 256 threads × 2 × 16 bytes in flight, divided by the rate they are read at."""
    return ceilings()["sms"] * 256 * 2 * 16 / probe12_GBps()


def ncu12(metric: str) -> float:
    """Lesson 10's fast kernel at M = 128 in the H200's profile of lesson 12 (results/H200/ncu/12_kernels.csv)."""
    from harness import nsight
    found, _ = nsight.parse_raw_csv((REF / "ncu" / "12_kernels.csv").read_text())
    hits = [r for r in found if r["Kernel Name"].startswith("void w4a16_kernel<2, 128,")]
    assert len(hits) == 1, "results/H200/ncu/12_kernels.csv: no single profile of lesson 10's M = 128 kernel"
    return float(hits[0][metric].replace(",", ""))


def real_row(fmt: str) -> dict:
    """Lesson 11's recorded real-model row of one format (harness.real_model.run on the GPU)."""
    hits = [r for r in rows("11", "real_model") if r["format"] == fmt]
    assert len(hits) == 1, f"results/11.json: no single real_model row for {fmt}"
    return hits[0]


def decode_row(fmt: str, batch: int = 1) -> dict:
    """Lesson 11's recorded decode step of one weight format at one batch size."""
    hits = [r for r in rows("11", "decode") if r["format"] == fmt and r["batch"] == batch]
    assert len(hits) == 1, f"results/11.json: no single decode row for {fmt} at batch {batch}"
    return hits[0]


def rest_us(fmt: str, pdl: bool = True) -> float:
    """µs of lesson 11's batch-1 step outside its linear layers (the step's graph, with programmatic dependent launch
    or without, minus the linear layers alone)."""
    r = decode_row(fmt)
    return r["us_graph" if pdl else "us_graph_nopdl"] - r["us_gemm"]


def wgmma_row(route: str, M: int) -> dict:
    """Lesson 12's recorded row of one route at M tokens on 8192 × 8192 (the fast kernel's table)."""
    hits = [r for r in rows("12", "table") if r["route"] == route and r["shape"] == [M, 8192, 8192]]
    assert len(hits) == 1, f"results/12.json: no single row for {route} at M = {M}"
    return hits[0]


def step12_row(route: str, M: int) -> dict:
    """Lesson 12's recorded steps table: one route at M tokens on 8192 × 8192."""
    hits = [r for r in rows("12", "steps") if r["route"] == route and r["shape"] == [M, 8192, 8192]]
    assert len(hits) == 1, f"results/12.json: no single steps row for {route} at M = {M}"
    return hits[0]


def w8a16_row(route: str, shape=(1, 8192, 8192)) -> dict:
    """Lesson 06's recorded row of one route at one shape (M, N, K)."""
    hits = [r for r in rows("06", "table") if r["route"] == route and r["shape"] == list(shape)]
    assert len(hits) == 1, f"results/06.json: no single row for {route} at {shape}"
    return hits[0]


def floor06(route: str, shape=(1, 8192, 8192)) -> float:
    """µs to move a lesson 06 route's bytes at the reference GPU's recorded bandwidth: step 1's table
    (bench_06.traffic: read or copy bandwidth, as the route's kernels read or also write), or W8A8's minimum bytes."""
    from harness import bench, catalog, roofline
    if route == "W8A8":
        return catalog.W8A8.bytes(shape) / roofline.bandwidth(ceilings())[0] / 1e3
    line = next(l for l in bench.lesson_module(6).traffic(shape).splitlines() if l.startswith(route))
    return float(line.split()[-2])


def ncu_rows(name: str) -> list[dict]:
    """The launches of a recorded Nsight Compute report (results/<reference>/ncu/NAME.csv), in order."""
    import csv
    with open(REF / "ncu" / f"{name}.csv", newline="") as f:
        table = list(csv.reader(f))
    return [dict(zip(table[0], r)) for r in table[2:]]  # row 1 holds the units


def ncu_num(launch: dict, metric: str) -> float:
    return float(launch[metric].replace(",", ""))


def nf4_row(section: str, route: str, shape: list[int]) -> dict:
    """Lesson 08's recorded row of one route at one shape."""
    hits = [r for r in rows("08", section) if r["route"] == route and r["shape"] == shape]
    assert len(hits) == 1, f"results/08.json: no single {section} row for {route} at {shape}"
    return hits[0]


def nf4_us(section: str, route: str) -> float:
    """Lesson 08's recorded µs of one route on 8192 × 8192 (the GEMV's at M = 1)."""
    shape = [8192, 8192] if section == "dequant" else [1, 8192, 8192]
    hits = [r for r in rows("08", section) if r["route"] == route and r["shape"] == shape]
    assert len(hits) == 1, f"results/08.json: no single {section} row for {route} at {shape}"
    return hits[0]["us"]


def w4a8_row(route: str, M: int, kn=(8192, 8192)) -> dict:
    """Lesson 09's recorded row of one route at M tokens on a shape [M, *kn] (8192 × 8192 unless told)."""
    hits = [r for r in rows("09", "table") if r["route"] == route and r["shape"] == [M, *kn]]
    assert len(hits) == 1, f"results/09.json: no single row for {route} at M = {M}, {kn}"
    return hits[0]


@pytest.mark.parametrize("lesson,pattern,recorded", [(n, p, f) for n, qs in QUOTES.items() for p, f in qs],
                         ids=[f"{n}:{p[:40]}" for n, qs in QUOTES.items() for p, _ in qs])
def test_prose_quotes_the_recorded_number(lesson, pattern, recorded):
    text = markdown(lesson)
    found = re.findall(pattern, text)
    assert found, f"lesson {lesson}: the prose no longer says {pattern!r}; update the quote here with the text"
    assert all(f == recorded() for f in found), \
        f"lesson {lesson}: the prose says {found} for {pattern!r}, the recorded table gives {recorded()}"


def test_lesson00_picture_uses_the_recorded_ceilings():
    """The memory picture is drawn from the recorded files: the script reads them, it types no number."""
    src = (ROOT / "lessons" / "00_setup_and_roofline" / "figures" / "draw.py").read_text()
    c = ceilings()
    for v in (c["copy_GBps"], c["fp32_TFLOPs"], row("00", "ours: scale_add", N26)["gbs"]):
        assert str(v) not in src and f"{v:.0f}" not in src.replace("2²⁶", "")


def test_lesson02_race_text_agrees_with_its_recorded_output():
    """The prose quotes the recorded racy run: one shape with some elements wrong, the other passing, and racecheck
    naming the hazard either way. The stored output must show exactly that."""
    nb = json.loads(next(ROOT.glob("lessons/02_*/02_*.ipynb")).read_text())
    race = [c for c in nb["cells"] if c["cell_type"] == "code" and "gemm_xchunk" in "".join(c["source"])]
    assert len(race) == 1
    out = "".join("".join(o.get("text", "")) for o in race[0]["outputs"])
    wrong = re.findall(r"FAIL .*: (\d+) of (\d+) elements wrong", out)
    assert len(wrong) == 1, f"lesson 02 says one shape came out wrong; the stored output shows {wrong}"
    assert re.search(r"^PASS  gemm_xchunk ", out, re.M), "lesson 02 says the other shape passed"
    assert "Race reported between Write access" in out and "RACECHECK SUMMARY" in out
    text = markdown("02").split("## 5.")[1].split("##")[0]
    assert f"{wrong[0][0]} of {wrong[0][1]} elements wrong" in text and "the other shape passed" in text
    assert "usually" not in text


def test_lesson05_nf4_claims_hold_in_the_recorded_errors():
    """'NF4 beats symmetric INT4 at the same block size ... at group 128 and below it comes close to asymmetric INT4'."""
    text = markdown("05")
    assert "NF4 beats symmetric INT4 at the same block size" in text
    assert "At group 128 and below it comes\nwithin 6% of asymmetric INT4" in text and "at larger groups it beats it" in text
    err = lambda name, g: fmt("error_vs_group", name, group=g)["output_rel_error"]
    groups = sorted({r["group"] for r in rows("05", "error_vs_group")})
    assert all(err("NF4", g) < err("INT4 sym", g) for g in groups)
    assert all(abs(err("NF4", g) / err("INT4 asym", g) - 1) < 0.06 for g in groups if g <= 128)
    assert all(err("NF4", g) < err("INT4 asym", g) for g in groups if g > 128)


def test_lesson10_and_12_comparisons_hold_in_the_recorded_tables():
    """Lesson 10: at M = 128 on 8192², "lesson 12's `wgmma` kernel matches cuBLAS there". Lesson 12: "A serving engine
    would take lesson 10's kernel up to M = 16 and this one from M = 32, except at M = 64 on 4096 × 4096"."""
    assert "lesson 12's `wgmma` kernel matches cuBLAS there" in " ".join(markdown("10").split())
    assert abs(wgmma_row('w4a16_wgmma', 128)['speedup_vs_cublas'] - 1) <= 0.03  # "matches": within 3%
    assert ("lesson 10's kernel up to M = 16 and this one from M = 32, except at M = 64 on 4096 × 4096"
            in " ".join(markdown("12").split()))
    us = {(r["route"], tuple(r["shape"])): r["us"] for r in rows("12", "table")}
    shapes = {s for route, s in us if route == "w4a16_wgmma"}
    assert len(shapes) > 8
    for M, N, K in shapes:
        faster12 = us[("w4a16_wgmma", (M, N, K))] < us[("w4a16_pipe_mma", (M, N, K))]
        assert faster12 == (M >= 32 and (M, N, K) != (64, 4096, 4096)), f"lesson 12 at M = {M}, N = {N}, K = {K}"
