"""`./course lab` keeps the lesson notebooks you open and run apart from the course's: opening, running and saving a
lesson in Lab leaves lessons/ as shipped (git status clean), your work lands in work/, and nothing of it is lost."""
import hashlib
import json

import pytest

from harness import build, lab

pytest.importorskip("jupyter_server")
NB = "lessons/01_naive_gemm/01_naive_gemm.ipynb"


def _sha(p):
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture
def tmp_path(tmp_path_factory):
    """Your copies must sit under the course root (Lab serves nothing outside it): a fresh folder in build/."""
    import shutil
    import uuid
    d = build.ROOT / "build" / f"test_lab_{uuid.uuid4().hex[:8]}"
    d.mkdir(parents=True)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def cm(tmp_path, monkeypatch):
    monkeypatch.setattr(lab, "WORK", tmp_path / "work")
    return lab.CourseContentsManager(root_dir=str(build.ROOT))


def test_saving_a_lesson_in_lab_leaves_the_course_notebook_as_shipped(cm, tmp_path):
    shipped = build.ROOT / NB
    before = _sha(shipped)
    model = cm.get(NB)
    assert model["type"] == "notebook" and not (tmp_path / "work").exists()  # opening writes nothing
    nb = model["content"]
    nb["metadata"]["kernelspec"]["display_name"] = "Python 3 (ipykernel)"  # what Lab stamps on open
    nb["cells"][0]["source"] = "my note\n" + "".join(nb["cells"][0]["source"])
    cm.save({"type": "notebook", "format": "json", "content": nb}, NB)
    assert _sha(shipped) == before
    mine = tmp_path / "work" / NB
    saved = json.loads(mine.read_text())
    assert "".join(saved["cells"][0]["source"]).startswith("my note") and saved["metadata"][lab._ORIGIN] == before
    again = cm.get(NB)  # the next open shows your copy
    assert "".join(again["content"]["cells"][0]["source"]).startswith("my note")
    assert dict(lab.status())[NB] == "your copy, edited"


def test_reset_keeps_your_copy_and_starts_again(cm, tmp_path):
    model = cm.get(NB)
    model["content"]["cells"][0]["source"] = "mine"
    cm.save({"type": "notebook", "format": "json", "content": model["content"]}, NB)
    fresh = lab.reset(1)
    assert fresh.read_bytes() == (build.ROOT / NB).read_bytes()
    kept = list((tmp_path / "work" / "lessons" / "01_naive_gemm").glob("01_naive_gemm.ipynb.bak-*"))
    assert len(kept) == 1 and "".join(json.loads(kept[0].read_text())["cells"][0]["source"]) == "mine"


def test_other_files_save_where_they_are(cm, tmp_path):
    rel = "build/lab_probe.txt"
    try:
        cm.save({"type": "file", "format": "text", "content": "x"}, rel)
        assert (build.ROOT / rel).read_text() == "x" and not (tmp_path / "work" / rel).exists()
    finally:
        (build.ROOT / rel).unlink(missing_ok=True)


def test_lab_settings_turn_off_the_news(tmp_path):
    p = lab.write_lab_settings(tmp_path)
    s = json.loads(p.read_text())
    assert s["@jupyterlab/apputils-extension:notification"]["fetchNews"] == "false"
    assert lab.write_lab_settings(tmp_path).read_text() == p.read_text()  # idempotent


def test_every_lesson_notebook_is_recognised():
    found = [p.relative_to(build.ROOT).as_posix() for p in build.ROOT.glob("lessons/*/*.ipynb")]
    assert len([f for f in found if lab.is_lesson_notebook(f)]) == 13
    assert not lab.is_lesson_notebook("lessons/01_naive_gemm/other.ipynb")


# --- trust, figures, the .cu extension ------------------------------------------------------------------------------

@pytest.fixture
def notary_cm(cm):
    from nbformat.sign import NotebookNotary
    cm.notary = NotebookNotary(db_file=":memory:", secret=b"test")  # not your notary database
    return cm


def _trusted(model):
    return all(c.get("metadata", {}).get("trusted") for c in model["content"]["cells"] if c["cell_type"] == "code")


def test_the_course_notebook_opens_trusted_and_an_edited_copy_as_jupyter_decides(notary_cm, tmp_path, caplog):
    with caplog.at_level("WARNING"):
        model = notary_cm.get(NB)
    assert _trusted(model) and "not trusted" not in caplog.text
    assert not (tmp_path / "work").exists()  # trusting writes nothing
    lab.ensure_copy(NB)  # a copy still byte for byte the course's (what reset makes): trusted too
    assert _trusted(notary_cm.get(NB))
    mine = tmp_path / "work" / NB
    nb = json.loads(mine.read_text())
    nb["cells"][0]["source"] = "changed outside Lab"
    mine.write_text(json.dumps(nb, indent=1))
    caplog.clear()
    with caplog.at_level("WARNING"):
        assert not _trusted(notary_cm.get(NB)) and "not trusted" in caplog.text  # unsigned: Jupyter's rule
    model = notary_cm.get(NB)
    for c in model["content"]["cells"]:  # what Lab sends back once you have run the cells
        if c["cell_type"] == "code":
            c.setdefault("metadata", {})["trusted"] = True
    notary_cm.save({"type": "notebook", "format": "json", "content": model["content"]}, NB)
    assert _trusted(notary_cm.get(NB))  # saved from Lab: signed, so trusted on the next open


def test_lesson_figures_are_found_by_name_alone():
    assert lab.figure_for("thread_map.png") == [build.ROOT / "lessons/01_naive_gemm/figures/thread_map.png"]
    assert len(lab.figure_for("gemv_lanes.png")) == 2  # lessons 06 and 07 share the name
    for bad in ("nope.png", "../README.md", "*.png", "draw.py", ""):
        assert lab.figure_for(bad) == [], bad


def test_labextension_installs_once_named_by_its_content(tmp_path):
    dest = lab.install_labextension(tmp_path)
    pkg = json.loads((dest / "package.json").read_text())
    load = pkg["jupyterlab"]["_build"]["load"]
    assert (dest / load).read_bytes() == (lab.LABEXT_SRC / "remoteEntry.js").read_bytes()
    assert pkg["jupyterlab"]["_build"]["extension"] == "./extension" and dest.name == pkg["name"]
    (dest / "static" / "remoteEntry.0000.js").write_text("stale")
    mtime = (dest / load).stat().st_mtime_ns
    assert lab.install_labextension(tmp_path) == dest and (dest / load).stat().st_mtime_ns == mtime
    assert [p.name for p in (dest / "static").iterdir()] == [load.split("/")[1]]


# Lab's loader as jupyterlab/staging/bootstrap.js and index.js run it (init with the share scope, get("./extension"),
# call the factory, take `default` of an ES module), with the share scope Lab's module federation gives a container
# and a language registry and document registry that behave as @jupyterlab/codemirror's and docregistry's do.
LOADER_JS = r"""
const fs = require("fs"), vm = require("vm");
const g = {console}; g.window = g; vm.createContext(g);
vm.runInContext(fs.readFileSync(process.argv[2], "utf8"), g);
const TOKEN = {name: "@jupyterlab/codemirror:IEditorLanguageRegistry"};
const scope = {"@jupyterlab/codemirror": {
  "4.0.0": {get: () => Promise.reject(new Error("an older version was taken")), from: "old", eager: 0},
  "4.6.6": {get: () => Promise.resolve(() => ({IEditorLanguageRegistry: TOKEN})), from: "@jupyterlab/application-top", eager: 0}}};
const cppSupport = {cpp: true};
const modes = [{name: "C++", mime: "text/x-c++src", extensions: ["cpp", "cc", "hpp"], load: () => Promise.resolve(cppSupport)}];
const languages = {
  findByName: n => modes.find(m => m.name.toLowerCase() === n.toLowerCase()) || null,
  findByMIME: t => modes.find(m => m.mime === t) || null,
  findByExtension: e => modes.find(m => m.extensions.some(x => x.toLowerCase() === e.toLowerCase())) || null,
  findByFileName(p) { const i = p.lastIndexOf("."); return i > -1 ? this.findByExtension(p.slice(i + 1)) : null; },
  addLanguage(l) { if (this.findByName(l.name) || this.findByMIME(l.mime)) throw new Error(l.mime + " already registered"); modes.push(l); }
};
const fileTypes = [];
const app = {docRegistry: {getFileType: n => fileTypes.find(f => f.name === n), addFileType: f => fileTypes.push(f)}};
(async () => {
  const name = Object.keys(g._JUPYTERLAB)[0], container = g._JUPYTERLAB[name];
  await container.init(scope);
  const factory = await container.get("./extension");
  const instance = factory(); instance.__scope__ = name;
  const exp = instance.hasOwnProperty("__esModule") ? instance.default : instance;
  const plugins = Array.isArray(exp) ? exp : [exp];
  let missing = null;
  try { await container.get("./nothing"); } catch (e) { missing = String(e.message); }
  for (const p of plugins) { p.activate(app, languages); p.activate(app, languages); }  // twice: no error
  const cu = languages.findByFileName("naive_gemm.cu"), cuh = languages.findByFileName("x.cuh");
  console.log(JSON.stringify({name, ids: plugins.map(p => p.id), autoStart: plugins.map(p => p.autoStart),
    token: plugins.every(p => p.requires.length === 1 && p.requires[0] === TOKEN), mime: cu && cu.mime,
    same: cu === cuh, cppStill: languages.findByFileName("a.cpp").name, support: (await cu.load()) === cppSupport,
    fileTypes: fileTypes.map(f => [f.name, f.extensions, f.mimeTypes]), missing}));
})().catch(e => { console.error(e); process.exit(1); });
"""


@pytest.fixture(scope="module")
def lab_server(tmp_path_factory):
    """`./course lab`'s server (the contents manager, the server extension, the course's Lab extension installed
    into a scratch JUPYTER_PATH), on a free port; yields (base URL, token, env, log path)."""
    import os
    import socket
    import subprocess
    import sys
    import time
    import urllib.request
    pytest.importorskip("jupyterlab")
    d = tmp_path_factory.mktemp("lab")
    lab.install_labextension(d / "prefix")
    env = dict(os.environ, PYTHONPATH=str(build.ROOT), JUPYTER_PATH=str(d / "prefix" / "share" / "jupyter"),
               JUPYTER_DATA_DIR=str(d / "data"), JUPYTER_RUNTIME_DIR=str(d / "runtime"),
               JUPYTER_CONFIG_DIR=str(d / "config"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token, log = "course-test", d / "server.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}",
                                 "--ip=127.0.0.1", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={build.ROOT}",
                                 "--ServerApp.contents_manager_class=harness.lab.CourseContentsManager",
                                 "--ServerApp.jpserver_extensions=harness.lab=True", "--allow-root"],
                                env=env, stdout=out, stderr=subprocess.STDOUT, cwd=build.ROOT)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail("jupyter lab exited:\n" + log.read_text()[-3000:])
                time.sleep(0.5)
        else:
            pytest.fail("jupyter lab did not start in 60 s:\n" + log.read_text()[-3000:])
        yield base, token, env, log
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def _get(url):
    import urllib.error
    import urllib.request
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read(), r.geturl()
    except urllib.error.HTTPError as e:
        return e.code, e.read(), url


def test_lab_lists_and_serves_the_cu_extension(lab_server, tmp_path):
    import re
    import shutil
    import subprocess
    import sys
    base, token, env, _ = lab_server
    listed = subprocess.run([sys.executable, "-m", "jupyter", "labextension", "list"], env=env, capture_output=True,
                            text=True, timeout=120)
    text = re.sub(r"\x1b\[[0-9;]*m", "", listed.stdout + listed.stderr)
    assert re.search(r"gpu-course-cuda v\S+ enabled OK", text), text
    status, page, _ = _get(f"{base}/lab?token={token}")
    config = json.loads(re.search(rb'<script id="jupyter-config-data" type="application/json">(.*?)</script>', page, re.S).group(1))
    ext = [e for e in config["federated_extensions"] if e["name"] == "gpu-course-cuda"]
    assert status == 200 and len(ext) == 1 and ext[0]["extension"] == "./extension", config["federated_extensions"]
    assert "gpu-course-cuda" not in config.get("disabledExtensions", [])
    status, js, _ = _get(f"{base}/lab/extensions/gpu-course-cuda/{ext[0]['load']}?token={token}")
    assert status == 200 and js == (lab.LABEXT_SRC / "remoteEntry.js").read_bytes()
    node = shutil.which("node")
    if node is None:
        pytest.skip("no node here: the extension is listed and served, its loading is not run")
    (tmp_path / "entry.js").write_bytes(js)
    (tmp_path / "loader.js").write_text(LOADER_JS)
    r = subprocess.run([node, str(tmp_path / "loader.js"), str(tmp_path / "entry.js")], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["name"] == "gpu-course-cuda" and got["ids"] == ["gpu-course-cuda:languages"] and got["autoStart"] == [True]
    assert got["token"] and got["mime"] == "text/x-cuda" and got["same"] and got["cppStill"] == "C++" and got["support"]
    assert got["fileTypes"] == [["cuda", [".cu", ".cuh"], ["text/x-cuda"]]]
    assert "does not exist in container" in got["missing"]


def test_lab_answers_early_figure_requests_and_opens_lessons_trusted(lab_server):
    base, token, _, log = lab_server
    status, body, url = _get(f"{base}/figures/thread_map.png?token={token}")  # what a restored /lab page asks first
    assert status == 200 and url.split("?")[0].endswith("/files/lessons/01_naive_gemm/figures/thread_map.png")
    assert body == (build.ROOT / "lessons/01_naive_gemm/figures/thread_map.png").read_bytes()
    assert _get(f"{base}/figures/gemv_lanes.png?token={token}")[0] == 204  # two lessons have one: no guess
    assert _get(f"{base}/figures/no_such_figure.png?token={token}")[0] == 404
    status, body, url = _get(f"{base}/figures/thread_map.png")  # without the token: the login page, not the figure
    assert "/login" in url and body != (build.ROOT / "lessons/01_naive_gemm/figures/thread_map.png").read_bytes()
    status, body, _ = _get(f"{base}/api/contents/{NB}?token={token}")
    assert status == 200 and json.loads(body)["type"] == "notebook"
    assert "is not trusted" not in log.read_text()


def _chromium():
    import lab_browser
    exe = lab_browser.find()
    if exe is None:
        pytest.skip("no chromium installed: Lab is not opened in a browser here (apt-get install chromium)")
    return lab_browser, exe


def test_in_a_browser_a_cu_file_is_highlighted_as_cpp(lab_server):
    """Chromium opens kernels/01_naive/naive_gemm.cu in Lab: its lines carry highlighting spans (Lab's plain-text mode
    has none), the #include a keyword's and the header name a string's."""
    lab_browser, exe = _chromium()
    base, token, _, _ = lab_server

    async def steps(p):
        await p.send("Page.navigate", url=f"{base}/lab/tree/kernels/01_naive/naive_gemm.cu?token={token}&reset")
        assert await p.wait_for("!!document.querySelector('.jp-FileEditor .cm-content .cm-line')")
        return await p.wait_for("""(() => {
          const spans = [...document.querySelectorAll('.jp-FileEditor .cm-content .cm-line span')];
          const cls = t => (spans.find(s => s.textContent === t) || {}).className;
          return spans.length > 20 && cls('#include') && {include: cls('#include'), header: cls('<cuda_runtime.h>'),
                 comment: cls(spans.find(s => s.textContent.startsWith('//')).textContent)};
        })()""", 60)
    got = lab_browser.run(exe, steps)
    assert got, "no highlighted spans: the .cu file opened as plain text"
    assert len({got["include"], got["header"], got["comment"]}) == 3, got  # three token kinds, three styles


def test_in_a_browser_a_restored_layout_shows_figures_without_404s(lab_server):
    """Open lesson 01, then reload Lab at /lab (a restored layout): the figures load and the server logs no 404 for
    them (Lab's early requests for figures/... against /lab are answered) and no untrusted notebook."""
    import asyncio
    lab_browser, exe = _chromium()
    base, token, _, log = lab_server
    before, start = _sha(build.ROOT / NB), len(log.read_text())
    count = "document.querySelectorAll('.jp-Notebook .jp-RenderedMarkdown img').length"

    async def steps(p):
        await p.send("Page.navigate", url=f"{base}/lab/tree/{NB}?token={token}")
        assert await p.wait_for(count)
        await asyncio.sleep(3)  # the layout is saved to the workspace
        await p.send("Page.navigate", url=f"{base}/lab")
        assert await p.wait_for(count)
        return await p.wait_for("""(() => { const imgs = [...document.querySelectorAll('.jp-Notebook .jp-RenderedMarkdown img')];
          return imgs.length && imgs.every(i => i.complete && i.naturalWidth > 0) && imgs.map(i => i.src.split('?')[0]); })()""", 60)
    srcs = lab_browser.run(exe, steps)
    assert srcs and all("/files/lessons/01_naive_gemm/figures/" in s for s in srcs), srcs
    text = log.read_text()[start:]  # what the server logged during this test
    assert "404 GET /figures/" not in text and "is not trusted" not in text
    assert "302 GET /figures/thread_map.png" in text  # the early request did come, and was answered
    assert _sha(build.ROOT / NB) == before  # opening and reloading rewrote no lesson
