"""Bring the lesson notebooks to the notebook extension (harness.notebook), in place, idempotently:

- the first code cell loads it (`%load_ext harness.notebook`), after `%matplotlib inline`;
- every cell tagged `gpu` starts with `%%gpu`, so JupyterLab without a GPU shows its recorded outputs;
- stored outputs name repository paths relative to the course root, not the recording machine's folders;
- stored Nsight tables made by the recording run are labelled as the recorded report they are.

    python dev/fix_notebooks.py [--check]     (--check: change nothing, exit 1 if a notebook needs it)
"""
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOAD = "%load_ext harness.notebook"
MAGIC = "%%gpu"


def _lines(src):
    return src if isinstance(src, list) else src.splitlines(keepends=True)


def fix_text(text: str) -> str:
    # PosixPath('/any/checkout/results/01.json') -> PosixPath('results/01.json')
    text = re.sub(r"(\w*Path\(')/[^']*?/((?:results|build|lessons|kernels|solutions)/[^']*)'\)", r"\1\2')", text)
    # "06_by_m: your profile (build/ncu/06_by_m.csv)": the recording run's own profile, kept in results/ncu/
    return re.sub(r"(\d\d_\w+): your profile \(build/ncu/(\d\d_\w+\.csv)\)",
                  r"\1: recorded on the reference H100 (results/ncu/\2)", text)


def fix(nb: dict) -> bool:
    changed = False
    codes = [c for c in nb["cells"] if c["cell_type"] == "code"]
    first = _lines(codes[0]["source"])
    if not any(l.strip() == LOAD for l in first):
        at = 1 if first and first[0].startswith("%matplotlib") else 0
        first.insert(at, LOAD + "\n")
        codes[0]["source"] = first
        changed = True
    for c in codes:
        src = _lines(c["source"])
        if "gpu" in c.get("metadata", {}).get("tags", []) and (not src or src[0].strip() != MAGIC):
            c["source"] = [MAGIC + "\n"] + src
            changed = True
        for o in c.get("outputs", []):
            for holder, key in ([(o, "text")] if "text" in o else []) + [(o.get("data", {}), k) for k in o.get("data", {})
                                                                      if k.startswith("text/")]:
                v = holder[key]
                new = [fix_text(s) for s in v] if isinstance(v, list) else fix_text(v)
                if new != v:
                    holder[key] = new
                    changed = True
    return changed


def main(argv):
    check = "--check" in argv
    todo = []
    for p in sorted(ROOT.glob("lessons/[0-9][0-9]_*/[0-9][0-9]_*.ipynb")):
        raw = p.read_text()
        nb = json.loads(raw)
        if fix(nb):
            todo.append(p.relative_to(ROOT))
            if not check:
                indent = 1 if raw.startswith('{\n "') else 2
                p.write_text(json.dumps(nb, indent=indent, ensure_ascii=False) + "\n")
    print(("needs fixing: " if check else "fixed: ") + (", ".join(map(str, todo)) or "none"))
    return 1 if check and todo else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
