"""Browser tests: Debian's Chromium driven by pytest-playwright, against the real processes
(batch-console server, collect and serve) started here."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright

from tests.processes import CLI, free_port, wait_collecting, wait_http
from tests.waits import poll_until

CHROMIUM = "/usr/bin/chromium"
# An assertion without its own timeout waits 15 s, not Playwright's 5: three parallel workers on two cores
# drew a page's own content 5 s and more after its frame (test_reconnect's refused name, once)
expect.set_options(timeout=15_000)


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    return {
        **browser_type_launch_args,
        "executable_path": CHROMIUM,
        "args": ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking"],
    }


# Playwright and its browser for one module at a time, not the session: its sync API keeps an event loop
# marked running in the thread while it is started, so a pytest-asyncio test after a browser test on the
# same worker could not run ("Cannot run the event loop while another loop is running"). Stopped at each
# module's end, the worker takes any group next: the browser tests need not all wait for the last.
@pytest.fixture(scope="module")
def playwright(_pw_api_request_contexts):
    pw = sync_playwright().start()
    if _pw_api_request_contexts:
        _pw_api_request_contexts.instrument(pw)
    yield pw
    pw.stop()


@pytest.fixture(scope="module")
def browser_type(playwright, browser_name):
    return getattr(playwright, browser_name)


@pytest.fixture(scope="module")
def launch_browser(browser_type_launch_args, browser_type):
    return lambda **kwargs: browser_type.launch(**{**browser_type_launch_args, **kwargs})


@pytest.fixture(scope="module")
def browser(launch_browser):
    launched = launch_browser()
    yield launched
    launched.close()


@pytest.fixture(scope="module")
def browser_context_args():
    """Nothing but what scripts/screenshots.sh asks for once, the dark theme: the frame's cookie, set before
    any page (pytest-playwright's own reads --device, --base-url and --video, which no test here takes,
    from a Playwright of the session's)."""
    if os.environ.get("BATCH_CONSOLE_SCREENSHOT_THEME") != "dark":
        return {}
    cookie = {"name": "bc_theme", "value": "dark", "domain": "127.0.0.1", "path": "/", "expires": -1,
              "httpOnly": False, "secure": False, "sameSite": "Strict"}
    return {"storage_state": {"cookies": [cookie], "origins": []}}


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory) -> Path:
    """Where tests save what they show: a temp folder, or assets/ when scripts/screenshots.sh asks,
    so that a test run never rewrites the README's pictures."""
    chosen = os.environ.get("BATCH_CONSOLE_SCREENSHOTS")
    return Path(chosen) if chosen else tmp_path_factory.mktemp("screenshots")


@pytest.fixture(scope="session")
def read_only_url(console):
    return console_urls["read_only"]


@pytest.fixture(scope="session")
def data_dir(console):
    """Where the web app reads console.db; the analytics job writes it when a test runs the job."""
    return console_urls["data_dir"]


console_urls: dict[str, str] = {}
console_logs: list[Path] = []
LOG_TAIL = 6_000  # characters of each process's log shown beside a failure


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test on the shared console carries the end of each of its processes' logs: a failure
    seen once in CI explains itself."""
    report = (yield).get_result()
    if report.failed and "console" in getattr(item, "fixturenames", ()):
        for log in console_logs:
            report.sections.append((f"console {log.name}", log.read_text(errors="replace")[-LOG_TAIL:]))


ALERTS_TO_LOOPBACK = {**os.environ, "BATCH_CONSOLE_WEBHOOK_HOSTS": "127.0.0.1"}  # the pages' rules' receivers


@pytest.fixture(scope="session")
def console(tmp_path_factory):
    """A nats-server (1 s batch timeout), a collector and the web app; yields (nats URL, web URL)."""
    tmp = tmp_path_factory.mktemp("console")
    procs = []

    def start(args, name):
        log = open(tmp / f"{name}.log", "w")
        procs.append(subprocess.Popen([CLI, *args], stdout=log, stderr=subprocess.STDOUT, env=ALERTS_TO_LOOPBACK))
        return procs[-1], tmp / f"{name}.log"

    server, server_log = start(["server", "--port", "0", "--data-dir", str(tmp), "--batch-timeout", "1",
                                "--nats-sync", "default"], "nats")  # the search tests seed 200,000 messages
    def started():
        assert server.poll() is None, server_log.read_text()
        return re.search(r"nats://[\d.]+:\d+", server_log.read_text())

    nats_url = poll_until(started, 30, "the nats-server printed no URL", every=0.05).group(0)
    monitor_url = re.search(r"monitor (http://\S+?),", server_log.read_text()).group(1)  # its limits, for Streams
    collector, collector_log = start(["collect", "--server", nats_url, "--data-dir", str(tmp),  # the web's event key
                                      "--tap-publish-side", "ui.inc"], "collector")  # the incident's messages
    port = free_port()
    web, web_log = start(["serve", "--server", nats_url, "--port", str(port), "--data-dir", str(tmp),
                          "--monitor-url", monitor_url], "web")
    web_url = f"http://127.0.0.1:{port}/"
    wait_http(web_url, web, web_log)
    ro_port = free_port()
    read_only, ro_log = start(["serve", "--server", nats_url, "--port", str(ro_port), "--read-only",
                               "--data-dir", str(tmp)], "web-read-only")
    read_only_url = f"http://127.0.0.1:{ro_port}/"
    wait_http(read_only_url, read_only, ro_log)
    wait_collecting(collector, collector_log)  # its taps in place before a test's fast batch
    console_urls["read_only"] = read_only_url
    console_urls["data_dir"] = str(tmp)
    console_logs.extend([server_log, tmp / "collector.log", web_log, ro_log])
    yield nats_url, web_url
    for proc in reversed(procs):
        proc.terminate()
        proc.wait(timeout=20)
