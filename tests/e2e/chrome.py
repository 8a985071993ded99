"""A real headless Chromium for the web tests: Debian's ``chromium`` driven through Debian's
``chromium-driver`` by Selenium. Nothing is downloaded at run time: the driver's path is given and
Selenium Manager is told to stay offline.

Missing, the tests skip and say how to install it, except under ``CI=true``, where ``.ci/run``
installs it: there they fail, so a broken install never passes as skipped tests.

Selenium blocks; the fakes run on the test's event loop, so every browser call runs in a thread
(:meth:`Chrome.call`) and the loop keeps answering the browser's requests to the fake Discord.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

__all__ = ["CHROME_FLAGS", "Chrome", "chrome_paths"]

T = TypeVar("T")

#: No network of its own (updates, sync, QUIC), no GPU, a fresh profile added per run.
CHROME_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def chrome_paths() -> tuple[str, str]:
    """Debian's chromium and chromedriver, or skip (fail under ``CI=true``)."""
    browser = shutil.which("chromium")
    driver = shutil.which("chromedriver")
    if browser is not None and driver is not None:
        return browser, driver
    why = "chromium or chromedriver is not installed (apt-get install chromium chromium-driver)"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{why}; CI installs them in .ci/run, so that step failed")
    pytest.skip(why)


class Chrome:
    """One headless Chromium with an empty profile of its own."""

    def __init__(self, profile: Path, *, width: int = 1280, height: int = 900) -> None:
        pytest.importorskip("selenium")
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        browser, driver = chrome_paths()
        os.environ["SE_OFFLINE"] = "true"  # Selenium Manager: never look for a browser or driver online
        options = webdriver.ChromeOptions()
        options.binary_location = browser
        for flag in CHROME_FLAGS:
            options.add_argument(flag)
        profile.mkdir(parents=True, exist_ok=True)
        options.add_argument(f"--user-data-dir={profile}")
        options.add_argument(f"--window-size={width},{height}")
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        self.driver = webdriver.Chrome(service=Service(executable_path=driver), options=options)
        self.driver.set_page_load_timeout(30)

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run one blocking browser step off the event loop."""
        return await asyncio.to_thread(fn, *args)

    async def open(self, url: str) -> str:
        """Go to `url`; the page's source once loaded."""
        await self.call(self.driver.get, url)
        return await self.page()

    async def page(self) -> str:
        """The current page's HTML."""
        return await self.call(lambda: self.driver.page_source)

    @property
    def url(self) -> str:
        return str(self.driver.current_url)

    async def texts(self, css: str) -> list[str]:
        """The visible text of every element matching `css`."""
        from selenium.webdriver.common.by import By

        return await self.call(lambda: [e.text for e in self.driver.find_elements(By.CSS_SELECTOR, css)])

    def _navigating(self, act: Callable[[], object]) -> None:
        # Wait until the page `act` leads to has replaced this one (the old root goes stale).
        from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import WebDriverWait

        old = self.driver.find_element(By.TAG_NAME, "html")

        def replaced(_driver: object) -> bool:
            try:
                old.is_enabled()
            except StaleElementReferenceException:
                return True
            except WebDriverException as exc:
                # Asked while the old document is being torn down, Chromium answers that the node
                # "does not belong to the document" instead of calling it stale: it is gone all the same.
                if "does not belong to the document" in (exc.msg or ""):
                    return True
                raise
            return False

        act()
        WebDriverWait(self.driver, 20).until(replaced)

    async def click(self, css: str) -> None:
        """Click the first element matching `css` and wait for the page it leads to."""
        from selenium.webdriver.common.by import By

        await self.call(self._navigating, lambda: self.driver.find_element(By.CSS_SELECTOR, css).click())

    async def fill(self, css: str, text: str, *, submit: bool = False) -> None:
        """Type `text` into the field matching `css` (cleared first); `submit`: then press Enter and
        wait for the page the form leads to."""
        from selenium.webdriver.common.by import By
        from selenium.webdriver.common.keys import Keys

        def fill() -> None:
            field = self.driver.find_element(By.CSS_SELECTOR, css)
            field.clear()
            field.send_keys(text)

        await self.call(fill)
        if submit:
            field = await self.call(self.driver.find_element, By.CSS_SELECTOR, css)
            await self.call(self._navigating, lambda: field.send_keys(Keys.ENTER))

    async def run_script(self, script: str, *, navigates: bool = False) -> None:
        """Run `script` in the page (WebDriver's own channel; the page's CSP allows no script of its own)."""
        if navigates:
            await self.call(self._navigating, lambda: self.driver.execute_script(script))
        else:
            await self.call(self.driver.execute_script, script)

    async def tab_stops(self, count: int) -> list[str]:
        """Press Tab `count` times from the top of the page; what had the focus each time."""
        from selenium.webdriver.common.action_chains import ActionChains
        from selenium.webdriver.common.keys import Keys

        def walk() -> list[str]:
            seen = []
            for _ in range(count):
                ActionChains(self.driver).send_keys(Keys.TAB).perform()
                element = self.driver.switch_to.active_element
                seen.append(f"{element.tag_name}:{element.get_attribute('name') or element.text}")
            return seen

        return await self.call(walk)

    async def screenshot(self, path: Path, width: int, height: int = 900) -> None:
        """A screenshot of the page at `width` CSS pixels wide."""

        def shoot() -> None:
            self.driver.set_window_size(width, height)
            self.driver.save_screenshot(str(path))

        await self.call(shoot)

    async def cookies(self) -> list[dict[str, Any]]:
        """The browser's cookies for the current site."""
        return await self.call(self.driver.get_cookies)

    async def wait_until(self, script: str, timeout: float = 15.0) -> bool:  # noqa: ASYNC109 (the browser's own wait)
        """Whether `script` (which returns a truth value) came true in the page within `timeout` s."""
        from selenium.common.exceptions import TimeoutException
        from selenium.webdriver.support.ui import WebDriverWait

        def wait() -> bool:
            try:
                WebDriverWait(self.driver, timeout, poll_frequency=0.05).until(
                    lambda d: d.execute_script(script)
                )
            except TimeoutException:
                return False
            return True

        return await self.call(wait)

    async def console(self) -> list[str]:
        """What the page's console said (CSP refusals, media errors)."""
        return [entry["message"] for entry in await self.call(self.driver.get_log, "browser")]

    async def close(self) -> None:
        await self.call(self.driver.quit)
