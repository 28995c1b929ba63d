"""Numbers the lessons' prose quotes must be the recorded ones (results/NN.json, results/ceilings/), so a new
recording that moves them makes this fail instead of leaving the text behind. Each quote is a regex over the
lesson's markdown with one group, and the function that formats the recorded value the way the text does."""
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def markdown(lesson: str) -> str:
    nb = next(ROOT.glob(f"lessons/{lesson}_*/{lesson}_*.ipynb"))
    cells = json.loads(nb.read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def rows(lesson: str, section: str = "bench") -> list[dict]:
    return json.loads((ROOT / "results" / f"{lesson}.json").read_text())["sections"][section]["rows"]


def row(lesson: str, op: str, shape: list[int]) -> dict:
    hits = [r for r in rows(lesson) if r["op"] == op and r["shape"] == shape]
    assert len(hits) == 1, f"results/{lesson}.json: no single row for {op} at {shape}"
    return hits[0]


def ceilings() -> dict:
    return json.loads((ROOT / "results" / "ceilings" / "NVIDIA_H100_80GB_HBM3.json").read_text())


N26 = [1 << 26]
G4096 = [4096, 4096, 4096]
QUOTES = {
    "00": [
        (r"our kernel moves (\d+) GB/s", lambda: f"{row('00', 'ours: scale_add', N26)['gbs']:.0f}"),
        (r"(\d+)% of torch's `add`", lambda: f"{row('00', 'ours: scale_add', N26)['pct_baseline']:.0f}"),
        (r"which moves (\d+) GB/s", lambda: f"{row('00', 'torch.add(b, x, alpha=a)', N26)['gbs']:.0f}"),
        (r"even reaches (\d+)% of the copy roofline",
         lambda: f"{row('00', 'torch.add(b, x, alpha=a)', N26)['pct_roofline']:.0f}"),
        (r"(\d+) bytes of DRAM traffic for \d+ FLOPs", lambda: "12"),  # 4 B read of x, of b, written to out
    ],
    "01": [
        (r"cuBLAS reaches (\d+)% of the FP32 roofline",
         lambda: f"{row('01', 'cuBLAS FP32', G4096)['pct_roofline']:.0f}"),
        (r"naive kernel reaches ([\d.]+)% of cuBLAS",
         lambda: f"{row('01', '01 naive (thread/output)', G4096)['pct_baseline']:.1f}"),
        (r"the coalesced\s+one ([\d.]+)%", lambda: f"{row('01', '01 coalesced (warp/output)', G4096)['pct_baseline']:.1f}"),
        (r"makes it ([\d.]+)× faster", lambda: f"{row('01', '01 naive (thread/output)', G4096)['us'] / row('01', '01 coalesced (warp/output)', G4096)['us']:.1f}"),
    ],
}


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
