"""A headless Chromium driven through the DevTools protocol, with tornado's websocket client (Jupyter's own
dependency): enough for tests/test_lab.py to open Lab as a learner would. No browser is downloaded; the tests that
use it skip where no `chromium` is installed (Debian: apt-get install chromium)."""
import asyncio
import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request


def find() -> str | None:
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


class Browser:
    def __init__(self, exe: str):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.dir = tempfile.mkdtemp(prefix="course-chromium-")
        self.proc = subprocess.Popen([exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                                      "--disable-dev-shm-usage", f"--remote-debugging-port={port}",
                                      f"--user-data-dir={self.dir}", "--window-size=1400,900", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(150):
            try:
                pages = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=2))
                self.ws_url = next(p["webSocketDebuggerUrl"] for p in pages if p["type"] == "page")
                return
            except (OSError, StopIteration, ValueError):
                time.sleep(0.2)
        self.close()
        raise RuntimeError("chromium did not start")

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


class Page:
    def __init__(self, ws):
        self.ws, self.n = ws, 0

    @classmethod
    async def open(cls, ws_url: str) -> "Page":
        from tornado.websocket import websocket_connect
        return cls(await websocket_connect(ws_url, max_message_size=1 << 28))

    async def send(self, method: str, **params):
        self.n += 1
        await self.ws.write_message(json.dumps({"id": self.n, "method": method, "params": params}))
        while True:
            msg = json.loads(await self.ws.read_message())
            if msg.get("id") == self.n:
                if "error" in msg:
                    raise RuntimeError(msg["error"])
                return msg.get("result", {})

    async def eval(self, expr: str):
        r = await self.send("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(r["exceptionDetails"])
        return r["result"].get("value")

    async def wait_for(self, expr: str, timeout: float = 90):
        t0 = time.time()
        while time.time() - t0 < timeout:
            v = await self.eval(expr)
            if v:
                return v
            await asyncio.sleep(0.5)
        return None


def run(exe: str, steps):
    """Run `await steps(page)` in a fresh headless Chromium and return its result."""
    async def go():
        b = Browser(exe)
        try:
            return await steps(await Page.open(b.ws_url))
        finally:
            b.close()
    return asyncio.run(go())
