"""Helpers for the console's browser tests: a ``relay console`` process, logins, waits on the page, shots.

The browser is Debian's chromium (``relay/dev/programs.py``; ``playwright install`` cannot download one
here), launched once per test session by pytest-playwright with the flags ``../shared/ENVIRONMENT.md``
names (tests/integration/conftest.py). Nothing here is a fake: the console is the ``relay console``
command, serving real relays; the page is the one a person sees.
"""

from __future__ import annotations

import contextlib
import http.server
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from playwright.sync_api import Page

from relay.console.users import User, UsersFile, hash_password
from tests.integration.relay_harness import REPO_ROOT

CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PASSWORDS = {"admin": "admin-pw-1", "viewer": "viewer-pw-1"}
_SERVING = re.compile(r"relay console: serving .* on (http://\S+?)/?$", re.MULTILINE)


def users_file(path: Path) -> Path:
    UsersFile(path).save(
        {
            "admin": User("admin", "operator", hash_password(PASSWORDS["admin"])),
            "viewer": User("viewer", "viewer", hash_password(PASSWORDS["viewer"])),
        }
    )
    return path


class ConsoleProcess:
    """``relay console ARGS --port 0`` as a child process; ``url`` once it says where it listens."""

    def __init__(self, args: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.args, self.log, self.env = args, log, env
        self.popen: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self, timeout: float = 60.0) -> ConsoleProcess:
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "relay.cli", "console", *self.args, "--port", "0"],
                cwd=REPO_ROOT,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = _SERVING.search(self.text())
            if found:
                self.url = found.group(1).rstrip("/")
                return self
            if self.popen.poll() is not None:
                raise AssertionError(f"relay console exited with {self.popen.returncode}:\n{self.text()}")
            time.sleep(0.1)
        raise AssertionError(f"relay console did not say where it listens:\n{self.text()}")

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> int:
        """SIGTERM (a graceful stop), its exit status."""
        assert self.popen is not None
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
        try:
            return self.popen.wait(30)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(10)
            raise AssertionError(f"relay console did not stop on SIGTERM:\n{self.text()[-3000:]}") from None


def login(page: Page, url: str, user: str) -> None:
    page.goto(f"{url}/")
    assert "/login" in page.url
    page.fill("input[name=user]", user)
    page.fill("input[name=password]", PASSWORDS[user])
    page.click("button[type=submit]")
    page.wait_for_selector("#who")
    assert page.inner_text("#who") == user


def wait_page(page: Page, probe: Callable[[], bool], timeout: float, what: str) -> None:
    """Until ``probe`` (reading the page) holds, the page's own script refreshing it; no reload."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if probe():
            return
        page.wait_for_timeout(250)
    raise AssertionError(
        f"{what}: not seen within {timeout:.0f} s; the page shows:\n{page.inner_text('main')}"
    )


def number(text: str) -> float:
    """A cell's number as the page shows it (``1,234``, ``0.0``; ``-``: none)."""
    cleaned = text.strip().replace(",", "")
    return float(cleaned) if cleaned not in ("", "-") else -1.0


def screenshots() -> Path:
    """Where the tests photograph the pages: ``$RELAY_TEST_SCREENSHOTS``, else ``test-screenshots/console``
    in the checkout (not pytest-playwright's ``test-results/``, which every pytest session empties)."""
    return Path(os.environ.get("RELAY_TEST_SCREENSHOTS") or REPO_ROOT / "test-screenshots") / "console"


class Shots:
    """Screenshots of each page, into ``folder`` (kept after the run; the README shows two of them)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)

    def take(self, page: Page, name: str) -> Path:
        path = self.folder / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path


@contextlib.contextmanager
def other_site(html: str) -> Iterator[str]:
    """A page served from another origin (another port of this host): what a hostile site would send."""
    body = html.encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, name="other-site", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
