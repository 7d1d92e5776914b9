"""The default report (``probe report --out report``: the bundled model and sample, every
default section) in a real headless browser (Chromium from the distribution's packages),
driven over the Chrome DevTools protocol: the model view draws 72 thumbnails and a click
on one opens its head page; the head view's example selector changes the lines drawn;
the token filter and a click on a token narrow them; no console error; no request leaves
the page. And the pages stay small: index.html and every head page under 300 kB.

Screenshots go to the test's temporary directory, and also to ``$PROBE_SCREENSHOTS``
when set (``docs/screenshots`` is made that way:
``PROBE_SCREENSHOTS=docs/screenshots pytest tests/test_browser.py``).
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

pytestmark = [pytest.mark.slow]
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (apt-get install chromium; .ci/run does)")
#: the largest index.html / head page of the default report (issue 17)
MAX_PAGE_BYTES = 300_000


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

    def requests(self):
        """URLs of every request the pages made so far."""
        return [e["params"]["request"]["url"] for e in self.events if e.get("method") == "Network.requestWillBeSent"]

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
    proc = subprocess.Popen(
        [
            CHROMIUM,
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-dev-shm-usage",
            "--remote-debugging-port=0",
            "--remote-allow-origins=*",
            f"--user-data-dir={tmp_path / 'chrome-profile'}",
            "--window-size=1280,900",
            "about:blank",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
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
    for domain in ("Page", "Runtime", "Log", "Network"):
        await page.send(f"{domain}.enable")
    await page.send("Emulation.setDeviceMetricsOverride", width=1280, height=900, deviceScaleFactor=1, mobile=False)
    return page


def _save(path: Path):
    dest = os.environ.get("PROBE_SCREENSHOTS")
    if dest:
        Path(dest).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(dest) / path.name)


@pytest.fixture(scope="module")
def default_report(tmp_path_factory):
    """``probe report --out report`` with the bundled model and sample (all default sections)."""
    from probe.app.report.build import build_report
    from probe.models import load_model

    return build_report(tmp_path_factory.mktemp("default") / "report", adapter=load_model("minilm"))


def test_default_report_pages_are_small(default_report):
    out = default_report.path
    pages = [out / "index.html"] + sorted((out / "heads").glob("L*H*.html"))
    assert len(pages) == 73
    sizes = {p.name: p.stat().st_size for p in pages}
    heads = [v for k, v in sizes.items() if k != "index.html"]
    print(
        f"index.html {sizes['index.html'] / 1000:.0f} kB, head pages {min(heads) / 1000:.0f}–"
        f"{max(heads) / 1000:.0f} kB, model.html {(out / 'model.html').stat().st_size / 1000:.0f} kB, "
        f"compare.html {(out / 'compare.html').stat().st_size / 1000:.0f} kB"
    )
    big = {k: v for k, v in sizes.items() if v >= MAX_PAGE_BYTES}
    assert not big, f"pages over {MAX_PAGE_BYTES} bytes: {big}"
    # raw floats stay in the CSV and JSON, not in the pages
    head = (out / "heads" / "L0H0.html").read_text()
    assert not re.search(r"\d\.\d{8,}", head) and "faith_tau_ig_significant" not in head
    assert "ablation_clean" not in head and "syntax_offset" not in head


def _lines(page, root):
    return page.js(f"{root}.getAttribute('data-lines')")


@needs_chromium
def test_report_in_headless_chromium(default_report, tmp_path, browser):
    data = default_report
    out = data.path

    async def run():
        page = await _open_page(browser)
        # the model view: 72 thumbnails, drawn, and a real click opens the head's page
        await page.goto((out / "model.html").as_uri())
        root = "document.querySelector('[data-probe-model-view]')"
        assert await page.js("document.querySelectorAll('[data-probe-model-view] a.pmv-thumb canvas').length") == 72
        assert await page.js(f"{root}.getAttribute('data-thumbs')") == "72"
        # a thumbnail's pixels are painted (not all white): the vertical stripe of a sink head is dark
        dark = await page.js(
            "Array.from(document.querySelectorAll('a.pmv-thumb canvas')).filter(c => {"
            "const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
            "for (let i = 0; i < d.length; i += 4) if (d[i] < 100) return true; return false;"
            "}).length"
        )
        assert dark >= 36
        shot = await page.screenshot(tmp_path / "model_view.png")
        _save(shot)
        target = 'document.querySelector(\'a.pmv-thumb[data-layer="0"][data-head="2"] canvas\')'
        await page.js(f"{target}.scrollIntoView({{block: 'center'}})")
        box = json.loads(await page.js(f"JSON.stringify({target}.getBoundingClientRect())"))
        await page.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        await page.wait_event("Page.loadEventFired")
        assert (await page.js("location.href")).endswith("/heads/L0H2.html")

        # the head view: the example selector changes the sentence and the lines
        root = "document.querySelector('[data-probe-head-view]')"
        assert await page.js(f"{root}.getAttribute('data-head')") == "2"
        toks = f"Array.from({root}.querySelectorAll('text[data-side=q]')).map(t => t.textContent).join(' ')"
        before_tokens, before = await page.js(toks), int(await _lines(page, root))
        n_examples = await page.js(f"{root}.querySelectorAll('select[data-role=example] option').length")
        assert n_examples >= 2 and before > 0
        await page.js(
            f"var s = {root}.querySelector('select[data-role=example]'); s.value = '1'; "
            "s.dispatchEvent(new Event('change'))"
        )
        assert await page.js(f"{root}.getAttribute('data-example')") == "1"
        after_tokens, after = await page.js(toks), int(await _lines(page, root))
        assert after_tokens != before_tokens and after > 0
        # the token filter: hiding [CLS]/[SEP] and punctuation removes their lines
        await page.js(f"var b = {root}.querySelector('input[data-role=hide-trivial]'); b.click()")
        filtered = int(await _lines(page, root))
        assert 0 < filtered < after
        # a real mouse click on the 3rd query token leaves only its lines
        q = f"{root}.querySelectorAll('text[data-side=q]')[2]"
        await page.js(f"{q}.scrollIntoView({{block: 'center'}})")
        box = json.loads(await page.js(f"JSON.stringify({q}.getBoundingClientRect())"))
        await page.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        assert await page.js(f"{root}.getAttribute('data-selected')") == "q2"
        assert 0 < int(await _lines(page, root)) < filtered
        await page.js("window.scrollTo(0, 0)")
        _save(await page.screenshot(tmp_path / "head.png"))

        # the index: grid of 72 links, its head view mounted
        await page.goto((out / "index.html").as_uri())
        assert await page.js("document.querySelectorAll('table.grid td a').length") == 72
        assert await page.js("document.querySelector('[data-probe-head-view]').getAttribute('data-mounted')") == "1"
        # what a reader came for is above the fold: the head grid starts in the first screen
        assert await page.js("document.querySelector('table.grid').getBoundingClientRect().top") < 400
        _save(await page.screenshot(tmp_path / "index.png"))

        # compare: two panes on one shared copy of the data, and the rollout/flow bars
        await page.goto((out / "compare.html").as_uri())
        panes = "document.querySelectorAll('[data-probe-head-view]')"
        assert await page.js(f"Array.from({panes}).map(p => p.getAttribute('data-mounted')).join()") == "1,1"
        assert await page.js(f"Array.from({panes}).every(p => +p.getAttribute('data-lines') > 0)")
        await page.js("document.querySelectorAll('h2')[1].scrollIntoView({block: 'start'})")
        _save(await page.screenshot(tmp_path / "rollout_flow.png"))

        errors, urls = page.errors(), page.requests()
        page.ws.close()
        return errors, urls

    errors, urls = asyncio.run(run())
    assert errors == []
    left = [u for u in urls if not u.startswith(("file:", "data:", "about:"))]
    assert urls and not left, f"requests that leave the page: {left}"
    for name in ("model_view", "head", "index", "rollout_flow"):
        assert (tmp_path / f"{name}.png").stat().st_size > 10_000


@needs_chromium
def test_head_page_opens_with_its_claims_table(default_report, tmp_path, browser):
    """The MiniLM L5H10 page (issue 56: six claims as ~250 words of paragraphs before the
    evidence): a table of its six claims fills the first screen, each row a status, a plain
    sentence and a drawn interval; the statistics are folded and open with one real click."""
    out = default_report.path

    async def run():
        page = await _open_page(browser)
        await page.goto((out / "heads" / "L5H10.html").as_uri())
        rows = "document.querySelectorAll('table.ctab tr')"
        assert await page.js(f"{rows}.length") == 7  # a header and six claims
        assert await page.js("document.querySelectorAll('table.ctab svg.cbar circle').length") >= 4
        bottom = await page.js("document.querySelector('table.ctab').getBoundingClientRect().bottom")
        assert bottom < 900, bottom  # the whole table in the first screen (1280 × 900)
        folded = "document.querySelector('details.cstats')"
        height = f"{folded}.getBoundingClientRect().height"
        assert await page.js(f"{folded}.open") is False
        closed = await page.js(height)
        assert closed < 60, closed  # one line: its summary
        _save(await page.screenshot(tmp_path / "head_claims.png"))
        summary = f"{folded}.querySelector('summary')"
        box = json.loads(await page.js(f"JSON.stringify({summary}.getBoundingClientRect())"))
        await page.click(box["x"] + 20, box["y"] + box["height"] / 2)
        assert await page.js(f"{folded}.open") is True
        assert await page.js(height) > closed + 200  # the six evidence sentences, unfolded
        assert "p=" in await page.js(f"{folded}.querySelector('ul.claims').innerText")
        errors = page.errors()
        page.ws.close()
        return errors

    assert asyncio.run(run()) == []
    assert (tmp_path / "head_claims.png").stat().st_size > 10_000
