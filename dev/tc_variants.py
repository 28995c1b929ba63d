"""Lesson 04's fast kernel with parts of it switched off or swapped: the named variants dev/tune_tc.py --ablate times.

The shipped kernel (solutions/04_tensor_cores/tc_fast.cu) has one code path. A variant is that file with named edits
applied: each edit replaces one piece of text that must occur in the file exactly once, so a change to the kernel
that moves or rewrites a piece makes the variant fail to build here (tests/test_kernel_switches.py builds each)
instead of silently timing the shipped code. Variants are written to build/dev/04_tensor_cores/ and built from there.

    python dev/tc_variants.py              list the variants and the edits each applies
    python dev/tc_variants.py NAME         write NAME's source and print where
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "solutions" / "04_tensor_cores" / "tc_fast.cu"
OUT = ROOT / "build" / "dev" / "04_tensor_cores"

# edit -> [(text of the shipped file, its replacement)]. "if (false)" keeps a statement's text and drops what it does.
EDITS = {
    # the launcher never takes the copy-engine kernel: the math warps' cp.async copies on every GPU
    "no copy engine": [("        return cudaFuncGetAttributes(&attr, tma_kernel)",
                        "        return false && cudaFuncGetAttributes(&attr, tma_kernel)")],
    # the copy engine fills padded 144-byte rows (no swizzle): mma.sync kernel, then WMMA (API only, load_matrix_sync)
    "mma padded rows": [("using MmaTmaCfg = Cfg<MMA_BN, 128, TMA_STAGES, true>;",
                         "using MmaTmaCfg = Cfg<MMA_BN, 128, TMA_STAGES, false>;")],
    "wmma padded rows": [("using WmmaTmaCfg = Cfg<WMMA_TMA_BN, 128, TMA_STAGES, true>;",
                          "using WmmaTmaCfg = Cfg<WMMA_TMA_BN, 128, TMA_STAGES, false>;")],
    # the swizzled WMMA kernel writes y through store_matrix_sync, as the API-only one does
    "wmma store_matrix_sync epilogue": [("    if constexpr (C::SWZ) {\n        store_tiles<FM, 2 * FN>",
                                         "    if constexpr (false) {\n        store_tiles<FM, 2 * FN>")],
    # The three below make the results wrong (timed, never checked): what each part of the K loop costs.
    # No refills: after the first STAGES tiles no copy is issued and the stages keep their old tiles.
    "no refills": [("        char* a = smem + st * C::STAGE_BYTES;\n",
                    "        char* a = smem + st * C::STAGE_BYTES;\n"
                    "        if (kt >= C::STAGES) {  // no copy: the stage keeps its old tiles\n"
                    "            mbar_arrive(full + st);\n"
                    "            return;\n"
                    "        }\n"),
                   ("if (nt < ktiles) load_stage(nt % C::STAGES, nt);", "if (false) load_stage(nt % C::STAGES, nt);")],
    # Each tile's fragments loaded once (step 0's), every K step's MMAs from that one buffer.
    "fragments once": [("                load_step((s + 1) % 2, rs, s + 1);",
                        "                if (false) load_step((s + 1) % 2, rs, s + 1);"),
                       ("            math(s % 2);", "            math(0);")],
    # No waits: no stage released or waited for (copy engine), no barrier between tiles (cp.async).
    "no waits": [("            mbar_wait(empty + st, ((kt - 1) / C::STAGES) & 1);",
                  "            if (false) mbar_wait(empty + st, ((kt - 1) / C::STAGES) & 1);"),
                 ("            pipe.release(rs);", "            if (false) pipe.release(rs);"),
                 ("if (kt + 1 < ktiles) pipe.wait(rs, ph);", "if (false) pipe.wait(rs, ph);"),
                 ("            cp_async_wait<C::STAGES - 2>();\n            __syncthreads();\n            rs = rs + 1",
                  "            cp_async_wait<C::STAGES - 2>();\n            if (false) __syncthreads();\n            rs = rs + 1")],
}

# The variants dev/tune_tc.py --ablate times, by the names its recorded rows carry (results/04.json "ablate"):
# variant -> the edits it applies. Each is the build that the -D switch named in the comment gave before the kernel
# file lost its switches (the same PTX: dev/compare_ptx.py's comparison, run when they moved here).
VARIANTS = {
    "shipped": [],
    "cp.async copies": ["no copy engine"],                                          # TC_TMA=0
    "copy engine, padded rows": ["mma padded rows", "wmma padded rows"],            # MMA_SWZ=0 WMMA_SWZ=0
    "copy engine, store_matrix_sync epilogue": ["wmma store_matrix_sync epilogue"],  # WMMA_REG_EPI=0
    "no refills": ["no refills"],                                                   # TC_ABLATE=1
    "fragments once per tile": ["fragments once"],                                  # TC_ABLATE=2
    "no waits": ["no waits"],                                                       # TC_ABLATE=4
    "none of the three": ["no refills", "fragments once", "no waits"],              # TC_ABLATE=7
}
CHECKED = {"shipped", "cp.async copies", "copy engine, padded rows", "copy engine, store_matrix_sync epilogue"}
WMMA_ONLY = {"copy engine, store_matrix_sync epilogue"}  # an edit of the WMMA kernel alone


def source(name: str, consts: dict[str, int] | None = None) -> str:
    """The text of variant `name` (a VARIANTS name, or one edit's name): the shipped file with its edits applied,
    and with `consts` (the tile configuration's constexpr ints, e.g. {"MMA_BN": 128}) set."""
    text = SHIPPED.read_text()
    for edit in VARIANTS.get(name, [name] if name in EDITS else None) or []:
        for old, new in EDITS[edit]:
            n = text.count(old)
            if n != 1:
                raise ValueError(f"tc_fast variant {name!r}, edit {edit!r}: the text to replace occurs {n} times in "
                                 f"{SHIPPED.relative_to(ROOT)} (must be once): {old.strip()[:80]!r}")
            text = text.replace(old, new)
    for k, v in (consts or {}).items():  # a name of the configuration lines: `constexpr int ... K = 128, ...;`
        pat = re.compile(rf"^(constexpr int [^;\n]*\b{k} = )\d+", re.M)
        if len(pat.findall(text)) != 1:
            raise ValueError(f"tc_fast: no single constexpr int {k} in {SHIPPED.relative_to(ROOT)}")
        text = pat.sub(rf"\g<1>{int(v)}", text)
    return text


def path(name: str, consts: dict[str, int] | None = None) -> Path:
    """Variant `name` (with `consts`) written to build/dev/04_tensor_cores/; the shipped file itself for "shipped"."""
    if name == "shipped" and not consts:
        return SHIPPED
    tag = name + "".join(f"_{k}{v}" for k, v in sorted((consts or {}).items()))
    p = OUT / f"tc_fast_{re.sub(r'[^a-z0-9]+', '_', tag.lower()).strip('_')}.cu"
    text = source(name, consts)
    p.parent.mkdir(parents=True, exist_ok=True)
    if not p.exists() or p.read_text() != text:
        p.write_text(text)
    return p


if __name__ == "__main__":
    if len(sys.argv) > 1:
        print(path(" ".join(sys.argv[1:])))
    else:
        for v, edits in VARIANTS.items():
            print(f"{v:<42} {', '.join(edits) or '(the shipped file)'}")
