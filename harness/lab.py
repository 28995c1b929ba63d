"""`./course lab`: JupyterLab on the course, with the lesson notebooks you run kept apart from the course's own.

The notebooks in lessons/ are the course's: their stored outputs are the reference GPU's recording (a GPU-less
machine shows them), and a `git pull` updates them. Opening one in Lab would rewrite it (Lab stamps its own kernel
name and Python version on open, and Run All re-saves every output), so git would show the lesson modified and the
next pull would conflict with work you never meant to make. Here a lesson notebook opens as *your copy*,
work/lessons/NN_name/NN_name.ipynb (made from the course's on first open, byte for byte; work/ is not tracked), and
every save goes there. The path in Lab stays lessons/NN_name/NN_name.ipynb, so the kernel starts in the lesson's
folder and figures, imports and the recorded outputs of `%%gpu` cells resolve as before.

    python -m harness.lab status         which lessons you have a copy of, and which have a newer course version
    python -m harness.lab reset N        start lesson N's notebook again from the course's (your copy is kept as .bak)
"""
from __future__ import annotations

import hashlib
import json
import re
import shutil
import sys
import time
from pathlib import Path

from . import build

ROOT = build.ROOT
WORK = ROOT / "work"  # your copies: work/lessons/NN_name/NN_name.ipynb
_LESSON_NB = re.compile(r"^lessons/(\d\d_[^/]+)/\1\.ipynb$")
_ORIGIN = "course_origin_sha256"  # in your copy's metadata: the course version it was made from

# JupyterLab settings the course ships (the venv's overrides.json): no news pop-up, no update check.
LAB_SETTINGS = {"@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False}}


def is_lesson_notebook(path: str) -> bool:
    """Is `path` (relative to the course root, as Lab names it) one of the course's lesson notebooks?"""
    return bool(_LESSON_NB.match(path.strip("/")))


def copy_path(path: str) -> Path:
    """Where your copy of the lesson notebook `path` lives."""
    return WORK / path.strip("/")


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def ensure_copy(path: str) -> Path:
    """Your copy of lesson notebook `path`, made from the course's (byte for byte) if you have none yet."""
    mine = copy_path(path)
    if not mine.exists():
        mine.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / path.strip("/"), mine)
    return mine


def _origin(mine: Path) -> str | None:
    try:
        return json.loads(mine.read_text()).get("metadata", {}).get(_ORIGIN)
    except (OSError, ValueError):
        return None


def status() -> list[tuple[str, str]]:
    """(lesson notebook, what state your copy is in) for every lesson notebook."""
    out = []
    for nb in sorted(ROOT.glob("lessons/[0-9][0-9]_*/[0-9][0-9]_*.ipynb")):
        rel = nb.relative_to(ROOT).as_posix()
        if not is_lesson_notebook(rel):
            continue
        mine = copy_path(rel)
        if not mine.exists():
            out.append((rel, "no copy yet: opens as the course's"))
            continue
        origin = _origin(mine)
        if mine.read_bytes() == nb.read_bytes():
            state = "your copy, unchanged"
        elif origin is not None and origin != _sha(nb):
            state = f"your copy, edited; the course's has changed since (python -m harness.lab reset {rel[8:10]})"
        else:
            state = "your copy, edited"
        out.append((rel, state))
    return out


def reset(lesson: int | str) -> Path:
    """Start a lesson's notebook again from the course's; your copy is kept beside it as NN_name.ipynb.bak-<time>."""
    found = [p.relative_to(ROOT).as_posix() for p in (ROOT / "lessons").glob(f"{int(lesson):02d}_*/*.ipynb")]
    found = [rel for rel in found if is_lesson_notebook(rel)]
    if not found:
        raise ValueError(f"lesson {lesson} has no notebook in lessons/")
    mine = copy_path(found[0])
    if mine.exists():
        mine.rename(mine.with_name(f"{mine.name}.bak-{time.strftime('%Y%m%d%H%M%S')}"))
    return ensure_copy(found[0])


def write_lab_settings(prefix: Path = Path(sys.prefix)) -> Path:
    """The venv's JupyterLab overrides.json, with the course's settings merged into what is there."""
    p = prefix / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
    p.parent.mkdir(parents=True, exist_ok=True)
    try:
        have = json.loads(p.read_text()) if p.exists() else {}
    except ValueError:
        have = {}
    for plugin, values in LAB_SETTINGS.items():
        have.setdefault(plugin, {}).update(values)
    text = json.dumps(have, indent=2) + "\n"
    if not p.exists() or p.read_text() != text:
        p.write_text(text)
    return p


LABEXT_SRC = Path(__file__).with_name("labextension")  # .cu/.cuh as CUDA (C++ highlighting): remoteEntry.js explains


def install_labextension(prefix: Path = Path(sys.prefix)) -> Path:
    """The course's prebuilt JupyterLab extension in the environment's share/jupyter/labextensions/, where Lab finds
    prebuilt extensions. Its script is named by its content (what a webpack build does), so a browser never runs a
    cached older one; rewritten only when it changed."""
    pkg = json.loads((LABEXT_SRC / "package.json").read_text())
    js = (LABEXT_SRC / "remoteEntry.js").read_bytes()
    load = f"static/remoteEntry.{hashlib.sha256(js).hexdigest()[:20]}.js"
    pkg["jupyterlab"]["_build"]["load"] = load
    dest = prefix / "share" / "jupyter" / "labextensions" / pkg["name"]
    (dest / "static").mkdir(parents=True, exist_ok=True)
    for old in (dest / "static").glob("remoteEntry.*.js"):
        if old.name != Path(load).name:
            old.unlink()
    if not (dest / load).exists():
        (dest / load).write_bytes(js)
    install = {"packageManager": "course", "packageName": pkg["name"],
               "uninstallInstructions": "./course lab installs it on every start (harness/lab.py)"}
    for name, data in (("package.json", pkg), ("install.json", install)):
        text = json.dumps(data, indent=2) + "\n"
        if not (dest / name).exists() or (dest / name).read_text() != text:
            (dest / name).write_text(text)
    return dest


try:  # only `./course lab` needs these (jupyter_server comes with JupyterLab)
    from jupyter_server.services.contents.filemanager import FileContentsManager
except ImportError:  # pragma: no cover
    FileContentsManager = None

if FileContentsManager is not None:
    class CourseContentsManager(FileContentsManager):
        """Lab's files as they are, except the lesson notebooks: read from your copy when you have one, and always
        saved to your copy (made from the course's first)."""

        def _get_os_path(self, path):
            rel = path.strip("/")
            if Path(self.root_dir).resolve() == ROOT.resolve() and is_lesson_notebook(rel) and copy_path(rel).exists():
                return str(copy_path(rel))
            return super()._get_os_path(path)

        def mark_trusted_cells(self, nb, path=""):
            """The course's own notebook (or your copy while it is still byte for byte the course's) opens trusted:
            its stored outputs are the course's recording. Any other notebook, your edited copy included, is trusted
            as Jupyter trusts any notebook: when its signature is in your notary database (every save from Lab
            signs what Lab shows as trusted)."""
            rel = path.strip("/")
            if Path(self.root_dir).resolve() == ROOT.resolve() and is_lesson_notebook(rel):
                mine = copy_path(rel)
                if not mine.exists() or mine.read_bytes() == (ROOT / rel).read_bytes():
                    self.notary.mark_cells(nb, True)
                    return
            super().mark_trusted_cells(nb, path)

        def save(self, model, path=""):
            rel = path.strip("/")
            if Path(self.root_dir).resolve() == ROOT.resolve() and is_lesson_notebook(rel):
                fresh = not copy_path(rel).exists()
                ensure_copy(rel)
                if fresh and model.get("type") == "notebook" and isinstance(model.get("content"), dict):
                    model["content"].setdefault("metadata", {})[_ORIGIN] = _sha(ROOT / rel)
            return super().save(model, path)


# Lesson figures at the server's root. Lab renders a markdown cell by setting the HTML first and rewriting its
# relative image paths afterwards (@jupyterlab/rendermime's renderHTML: innerHTML, then handleUrls), so the browser
# starts fetching `figures/x.png` against the page's own URL before the rewrite. On /lab/tree/... that lands on Lab's
# page; on /lab, the URL a restored layout opens with, it is GET /figures/x.png: a 404 in the log for every figure,
# while the rewritten request that follows loads the image. This server extension (./course lab enables it) answers
# those early requests: with the figure where one lesson has that name, with nothing (204) where several do.
_FIGURE = r"[A-Za-z0-9_][A-Za-z0-9_.-]*\.(?:png|svg|jpg|jpeg|gif)"


def figure_for(name: str, root: Path = ROOT) -> list[Path]:
    """The lesson figures named `name` (lessons/NN_*/figures/NAME), in lesson order."""
    if not re.fullmatch(_FIGURE, name):
        return []
    return sorted((root / "lessons").glob(f"[0-9][0-9]_*/figures/{name}"))


def _jupyter_server_extension_points():
    return [{"module": "harness.lab"}]


def _load_jupyter_server_extension(serverapp):
    from jupyter_server.base.handlers import JupyterHandler
    from jupyter_server.utils import url_path_join
    from tornado import web

    root = Path(serverapp.root_dir)

    class FigureHandler(JupyterHandler):
        @web.authenticated
        def get(self, name):
            found = figure_for(name, root)
            if not found:
                raise web.HTTPError(404)
            if len(found) > 1:
                self.set_status(204)
                return self.finish()
            url = url_path_join(self.base_url, "files", found[0].relative_to(root).as_posix())
            self.redirect(url + ("?" + self.request.query if self.request.query else ""))

    serverapp.web_app.add_handlers(".*$", [(url_path_join(serverapp.base_url, f"/figures/({_FIGURE})"), FigureHandler)])


def main(argv: list[str]) -> int:
    cmd = argv[0] if argv else "status"
    if cmd == "status":
        for rel, state in status():
            print(f"{rel:<58} {state}")
        return 0
    if cmd == "reset" and len(argv) == 2:
        why = build.unknown_lessons(argv[1:2])
        if why:
            print(f"lab reset: {why}", file=sys.stderr)
            return 3
        print(f"lesson {argv[1]} opens from the course's notebook again: {reset(argv[1]).relative_to(ROOT)}")
        return 0
    if cmd == "settings":
        try:
            print(write_lab_settings())
            print(install_labextension())
        except OSError as e:  # a read-only environment (a shared conda install): Lab works, news on, .cu plain text
            print(f"lab settings: {e}", file=sys.stderr)
            return 1
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
