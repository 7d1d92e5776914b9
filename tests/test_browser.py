"""The report in a real headless browser (Chromium from the distribution's packages),
driven over the Chrome DevTools protocol: no console errors, the head view answers a
real mouse click, screenshots of index.html and of a head page.

Screenshots go to the test's temporary directory, and also to ``$PROBE_SCREENSHOTS``
when set (``docs/screenshots`` is made that way).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (apt-get install chromium; .ci/run does)")]


class Page:
    """A minimal DevTools-protocol client for one page (tornado's websocket client)."""

    def __init__(self, ws):
        self.ws, self.next_id, self.events = ws, 0, []

    async def send(self, method, **params):
        self.next_id += 1
        my = self.next_id
        await self.ws.write_message(json.dumps({"id": my, "method": method, "params": params}))
        while True:
            msg = json.loads(await asyncio.wait_for(self.ws.read_message(), 60))
            if msg.get("id") == my:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    async def wait_event(self, method, timeout=60):
        for e in self.events:
            if e.get("method") == method:
                self.events.remove(e)
                return e
        while True:
            msg = json.loads(await asyncio.wait_for(self.ws.read_message(), timeout))
            if msg.get("method") == method:
                return msg
            self.events.append(msg)

    async def js(self, expr):
        r = await self.send("Runtime.evaluate", expression=expr, returnByValue=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expr}: {r['exceptionDetails']}")
        return r["result"].get("value")

    async def goto(self, url):
        await self.send("Page.navigate", url=url)
        await self.wait_event("Page.loadEventFired")

    async def click(self, x, y):
        for kind in ("mousePressed", "mouseReleased"):
            await self.send("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    async def screenshot(self, path: Path):
        r = await self.send("Page.captureScreenshot", format="png")
        path.write_bytes(base64.b64decode(r["data"]))
        return path

    def errors(self):
        """Console errors and uncaught exceptions seen so far."""
        out = []
        for e in self.events:
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.exceptionThrown":
                out.append(p["exceptionDetails"].get("text", "exception"))
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(" ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
            elif m == "Log.entryAdded" and p["entry"].get("level") == "error":
                out.append(p["entry"].get("text", ""))
        return out


@pytest.fixture
def browser(tmp_path):
    proc = subprocess.Popen([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                             "--disable-dev-shm-usage", "--remote-debugging-port=0", "--remote-allow-origins=*",
                             f"--user-data-dir={tmp_path / 'chrome-profile'}", "--window-size=1280,900",
                             "about:blank"], stderr=subprocess.PIPE, text=True)
    try:
        port = None
        for line in proc.stderr:
            m = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
            if m:
                port = int(m.group(1))
                break
        assert port, "Chromium did not start its DevTools endpoint"
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


async def _open_page(port):
    from tornado.websocket import websocket_connect

    targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10).read())
    url = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
    page = Page(await websocket_connect(url, max_message_size=64 * 2**20))
    for domain in ("Page", "Runtime", "Log"):
        await page.send(f"{domain}.enable")
    await page.send("Emulation.setDeviceMetricsOverride", width=1280, height=900, deviceScaleFactor=1, mobile=False)
    return page


def _save(path: Path):
    dest = os.environ.get("PROBE_SCREENSHOTS")
    if dest:
        Path(dest).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(dest) / path.name)


def test_report_in_headless_chromium(minilm, tmp_path, browser):
    from probe.app.report.build import build_report

    data = build_report(tmp_path / "rep", adapter=minilm, limit=8, sections=["syntax", "roles", "rollout"],
                        strict=True)
    out = data.path
    # a head page worth showing: a previous-token head, else a syntactic one, else a sink
    pick = next(k for prefix in ("attends to the previous", "looks syntactic", "attends to")
                for k, v in sorted(data.verdicts.items()) if v.startswith(prefix))

    async def run():
        page = await _open_page(browser)
        await page.goto((out / "index.html").as_uri())
        assert await page.js("document.querySelectorAll('table.grid td a').length") == 72
        root = "document.querySelector('[data-probe-head-view]')"
        assert await page.js(f"{root}.getAttribute('data-mounted')") == "1"
        before = int(await page.js(f"{root}.getAttribute('data-lines')"))
        assert before > 0 and await page.js(f"{root}.getAttribute('data-selected')") == ""
        # a real mouse click on the 3rd query token ("is")
        await page.js(f"{root}.querySelectorAll('text[data-side=q]')[2].scrollIntoView({{block: 'center'}})")
        box = await page.js(f"JSON.stringify({root}.querySelectorAll('text[data-side=q]')[2].getBoundingClientRect())")
        box = json.loads(box)
        await page.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        assert await page.js(f"{root}.getAttribute('data-selected')") == "q2"
        after = int(await page.js(f"{root}.getAttribute('data-lines')"))
        assert 0 < after < before  # only the clicked token's lines remain
        # switching the head redraws
        await page.js(f"var s = {root}.querySelectorAll('select')[1]; s.value = '3'; "
                      "s.dispatchEvent(new Event('change'))")
        assert await page.js(f"{root}.getAttribute('data-head')") == "3"
        await page.js("window.scrollTo(0, 0)")
        shot = await page.screenshot(tmp_path / "index.png")
        _save(shot)
        await page.goto((out / "heads" / f"L{pick[0]}H{pick[1]}.html").as_uri())
        assert await page.js("document.querySelector('.verdict').textContent") == data.verdicts[pick]
        assert await page.js("Array.from(document.images).every(i => i.complete && i.naturalWidth > 0)")
        shot2 = await page.screenshot(tmp_path / "head.png")
        _save(shot2)
        errors = page.errors()
        page.ws.close()
        return errors

    errors = asyncio.run(run())
    assert errors == []
    assert (tmp_path / "index.png").stat().st_size > 10_000 and (tmp_path / "head.png").stat().st_size > 10_000
