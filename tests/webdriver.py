"""A small W3C WebDriver client over httpx, driving Debian's headless Chromium for the console tests.

    with Browser.start() as browser:
        browser.get("http://127.0.0.1:8080/")
        browser.wait("#results .result")
        browser.screenshot(Path("search.png"))

Only what the tests use: open a page, find elements, click, type, read text, run a script, size
the window, take a screenshot. Chromium is started with every background service off (no update
checks, no sync, no QUIC), since a closed network refuses them and they only slow it down.
"""

from __future__ import annotations

import base64
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

CHROMEDRIVER = Path("/usr/bin/chromedriver")
CHROMIUM_BINARIES = (Path("/usr/lib/chromium/chromium"), Path("/usr/bin/chromium"))
CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--hide-scrollbars",
    "--force-device-scale-factor=1",
)
ELEMENT = "element-6066-11e4-a52e-4f735466cecf"
"""The key under which W3C WebDriver returns an element reference."""
DRIVER_START_S = 20.0
WAIT_S = 15.0
POLL_S = 0.05
FULL_PAGE_MAX_PX = 5000


class WebDriverError(Exception):
    """WebDriver answered an error (its `error` code and message)."""


def chromium_binary() -> Path | None:
    return next((p for p in CHROMIUM_BINARIES if p.exists()), None)


def available() -> bool:
    return CHROMEDRIVER.exists() and chromium_binary() is not None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Browser:
    """One chromedriver process and one browser session in it."""

    def __init__(self, driver: subprocess.Popen, client: httpx.Client, profile: Path) -> None:
        self._driver = driver
        self._client = client
        self._profile = profile
        self.session = self._call("POST", "/session", {"capabilities": self._capabilities()})[
            "sessionId"
        ]

    @classmethod
    def start(cls) -> Browser:
        port = free_port()
        driver = subprocess.Popen(
            [str(CHROMEDRIVER), f"--port={port}", "--allowed-ips=127.0.0.1"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60.0)
        deadline = time.monotonic() + DRIVER_START_S
        while True:
            try:
                if client.get("/status").json()["value"]["ready"]:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or driver.poll() is not None:
                driver.kill()
                raise WebDriverError("chromedriver did not start")
            time.sleep(POLL_S)
        profile = Path(tempfile.mkdtemp(prefix="metis-chromium-"))
        return cls(driver, client, profile)

    def _capabilities(self) -> dict[str, Any]:
        options = {
            "binary": str(chromium_binary()),
            "args": [*CHROMIUM_ARGS, f"--user-data-dir={self._profile}"],
        }
        return {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": options}}

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        if body is None and method == "POST":
            body = {}  # chromedriver refuses a POST without a JSON body
        response = self._client.request(method, path, json=body)
        value = response.json().get("value")
        if response.status_code >= 400:
            raise WebDriverError(f"{value.get('error')}: {value.get('message', '')[:500]}")
        return value

    def _session(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        return self._call(method, f"/session/{self.session}{path}", body)

    def close(self) -> None:
        try:
            self._session("DELETE", "")
        finally:
            self._client.close()
            self._driver.terminate()
            try:
                self._driver.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._driver.kill()
            shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- pages and windows ------------------------------------------------------------------

    def get(self, url: str) -> None:
        self._session("POST", "/url", {"url": url})

    def size(self, width: int, height: int) -> None:
        self._session("POST", "/window/rect", {"width": width, "height": height})

    def viewport(self, width: int, height: int) -> None:
        """Size the window so that the page sees `width` × `height` CSS pixels (innerWidth and
        innerHeight): a window's size counts the browser's own bars too."""
        self.size(width, height)
        inner = self.execute("return [window.innerWidth, window.innerHeight]")
        self.size(2 * width - inner[0], 2 * height - inner[1])

    def execute(self, script: str, *args: Any) -> Any:
        return self._session("POST", "/execute/sync", {"script": script, "args": list(args)})

    def log(self) -> list[dict[str, Any]]:
        """The browser console's entries since the last call (chromedriver's log endpoint)."""
        return self._session("POST", "/se/log", {"type": "browser"})

    def screenshot(self, path: Path, *, full_page: bool = True) -> None:
        """A PNG of the window; with `full_page`, the window is made as tall as the page first."""
        rect = self._session("GET", "/window/rect")
        if full_page:
            height = self.execute("return document.documentElement.scrollHeight")
            self.size(rect["width"], min(FULL_PAGE_MAX_PX, max(rect["height"], height + 140)))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(self._session("GET", "/screenshot")))
        if full_page:
            self.size(rect["width"], rect["height"])

    # -- elements ---------------------------------------------------------------------------

    def find_all(self, css: str) -> list[str]:
        found = self._session("POST", "/elements", {"using": "css selector", "value": css})
        return [item[ELEMENT] for item in found]

    def find(self, css: str) -> str:
        return self._session("POST", "/element", {"using": "css selector", "value": css})[ELEMENT]

    def click(self, css: str) -> None:
        self._session("POST", f"/element/{self.find(css)}/click")

    def type(self, css: str, text: str, *, clear: bool = True) -> None:
        element = self.find(css)
        if clear:
            self._session("POST", f"/element/{element}/clear")
        self._session("POST", f"/element/{element}/value", {"text": text})

    def press(self, keys: str) -> None:
        """Keys typed on whatever has the focus (W3C actions), as a person's keyboard would."""
        actions = []
        for key in keys:
            actions += [{"type": "keyDown", "value": key}, {"type": "keyUp", "value": key}]
        self._session(
            "POST", "/actions", {"actions": [{"type": "key", "id": "kb", "actions": actions}]}
        )

    def text(self, css: str) -> str:
        return self._session("GET", f"/element/{self.find(css)}/text")

    def texts(self, css: str) -> list[str]:
        return [self._session("GET", f"/element/{e}/text") for e in self.find_all(css)]

    def active(self) -> str:
        """The id attribute of the focused element."""
        return self.execute("return document.activeElement && document.activeElement.id")

    def wait(self, css: str, *, visible: bool = True, timeout: float = WAIT_S) -> None:
        """Until an element matching `css` exists (and is shown, unless `visible` is False)."""
        script = (
            "const e = document.querySelector(arguments[0]);"
            "return !!e && (!arguments[1] || !!(e.offsetWidth || e.offsetHeight));"
        )
        self.wait_for(script, css, visible, timeout=timeout, what=css)

    def wait_for(self, script: str, *args: Any, timeout: float = WAIT_S, what: str = "") -> Any:
        """Until `script` returns something truthy; returns it."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.execute(script, *args)
            if value:
                return value
            if time.monotonic() > deadline:
                raise WebDriverError(f"waited {timeout:.0f} s for {what or script}")
            time.sleep(POLL_S)
