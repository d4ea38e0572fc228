"""A real headless Chromium for tests, driven through chromedriver's W3C WebDriver HTTP protocol with
urllib (no Selenium): open a page, run a script in it, read its console, list what it fetched, take a
full-page screenshot.

The browser runs with `--headless --no-sandbox --disable-gpu --disable-background-networking`, a fresh
profile, and every host name unresolvable, so a page that needs the network shows it as a failed
request and a console error instead of quietly loading from it.
"""

from __future__ import annotations

import base64
import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--host-resolver-rules=MAP * ~NOTFOUND",  # no name resolves: offline for real
)
START_TIMEOUT_S = 20
REQUEST_TIMEOUT_S = 120


def find_chromium() -> tuple[str, str] | None:
    """(chromium, chromedriver) paths, or None when either is missing."""
    browser = next((path for name in CHROMIUM_NAMES if (path := shutil.which(name))), None)
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


class BrowserError(RuntimeError):
    """chromedriver refused a command or never started."""


class Browser:
    """One WebDriver session of headless Chromium."""

    def __init__(self, base_url: str, session_id: str):
        self._session = f"{base_url}/session/{session_id}"

    def open(self, url: str) -> None:
        """Navigate and wait for the page's load event (what WebDriver's navigate does)."""
        _call("POST", f"{self._session}/url", {"url": url})

    def script(self, source: str, *args):
        """Run `source` as a function body in the page; its return value, JSON-decoded."""
        return _call("POST", f"{self._session}/execute/sync", {"script": source, "args": list(args)})

    def wait_for(self, source: str, timeout_s: float = 30.0, poll_s: float = 0.2):
        """Run `source` until it returns something truthy; that value (or the last one on timeout)."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = self.script(source)
            if value or time.monotonic() > deadline:
                return value
            time.sleep(poll_s)

    def console(self) -> list[dict]:
        """Console messages and uncaught errors since the last call: [{level, message, source}]."""
        return _call("POST", f"{self._session}/se/log", {"type": "browser"})

    def requested_urls(self) -> list[str]:
        """Every URL the browser asked for since the last call (from its performance log)."""
        urls = []
        for entry in _call("POST", f"{self._session}/se/log", {"type": "performance"}):
            message = json.loads(entry["message"])["message"]
            if message["method"] == "Network.requestWillBeSent":
                urls.append(message["params"]["request"]["url"])
        return urls

    def screenshot(self, path: Path) -> Path:
        """The whole page, not only the window, as a PNG (Chrome DevTools' captureBeyondViewport)."""
        shot = _call(
            "POST",
            f"{self._session}/goog/cdp/execute",
            {"cmd": "Page.captureScreenshot", "params": {"format": "png", "captureBeyondViewport": True}},
        )
        path.write_bytes(base64.b64decode(shot["data"]))
        return path


@contextmanager
def headless_chromium(user_data_dir: Path, *, window: tuple[int, int] = (1400, 1000)) -> Iterator[Browser]:
    """Start chromedriver and one headless Chromium session; both stop on every exit path."""
    found = find_chromium()
    if found is None:
        raise BrowserError("chromium and chromedriver are needed: apt-get install chromium chromium-driver")
    browser_path, driver_path = found
    port = _free_port()
    driver = subprocess.Popen([driver_path, f"--port={port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base_url = f"http://127.0.0.1:{port}"
    session_id = None
    try:
        _wait_until_up(base_url, driver)
        args = [*CHROMIUM_ARGS, f"--user-data-dir={user_data_dir}", f"--window-size={window[0]},{window[1]}"]
        capabilities = {
            "alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": {"binary": browser_path, "args": args},
                "goog:loggingPrefs": {"browser": "ALL", "performance": "ALL"},
            }
        }
        session_id = _call("POST", f"{base_url}/session", {"capabilities": capabilities})["sessionId"]
        yield Browser(base_url, session_id)
    finally:
        if session_id is not None:
            try:
                _call("DELETE", f"{base_url}/session/{session_id}")
            except (BrowserError, OSError):
                pass
        driver.terminate()
        try:
            driver.wait(timeout=10)
        except subprocess.TimeoutExpired:
            driver.kill()
            driver.wait()


def _call(method: str, url: str, body: dict | None = None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
            return json.loads(response.read())["value"]
    except urllib.error.HTTPError as exc:
        value = json.loads(exc.read() or b"{}").get("value", {})
        raise BrowserError(f"{method} {url}: {value.get('error')}: {value.get('message', '')[:500]}") from exc


def _wait_until_up(base_url: str, driver: subprocess.Popen) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if driver.poll() is not None:
            raise BrowserError(f"chromedriver exited with {driver.returncode}")
        try:
            if _call("GET", f"{base_url}/status").get("ready"):
                return
        except (OSError, BrowserError):
            pass
        time.sleep(0.1)
    raise BrowserError(f"chromedriver did not answer within {START_TIMEOUT_S} s")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
