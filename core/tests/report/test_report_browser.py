"""`charter report` in a real browser: headless Chromium (Debian's package, driven by
Playwright with `executable_path`; no browser is ever downloaded) opens reports built by the
real command from a real `charter demo` run and from hostile records, and the tests click,
filter and search as a person would. A screenshot of every page is kept in pytest's temporary
directory (printed at the end of each test).

Chromium missing is a failure, not a skip: CI installs it (`.ci/run`), and so can you with
`apt-get install -y chromium`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

try:
    from playwright.sync_api import expect
except ImportError:  # the browser fixture fails with how to install it
    expect = None

# Only the test of this very rule points it elsewhere.
CHROMIUM = Path(os.environ.get("CHARTER_TEST_CHROMIUM", "/usr/bin/chromium"))
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


_WAIT_MS = 30_000


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A Chromium context with a fresh profile; every request leaving file:// is refused and
    remembered (`context.outside`)."""
    if not CHROMIUM.exists():
        pytest.fail(
            f"the report's browser tests need Chromium at {CHROMIUM}, and it is not installed: "
            "run `apt-get install -y chromium` (.ci/run installs it on CI)",
            pytrace=False,
        )
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail(
            "the report's browser tests need Playwright's Python package: uv sync --all-packages",
            pytrace=False,
        )
    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(profile), executable_path=str(CHROMIUM), args=FLAGS, headless=True
        )
        outside: list[str] = []

        def guard(route: Any) -> None:
            url = route.request.url
            if url.startswith(("file:", "data:", "about:")):
                route.continue_()
            else:
                outside.append(url)
                route.abort()

        context.route("**/*", guard)
        # Waits, not sleeps: a page on a loaded two-core CI machine can take seconds to draw.
        context.set_default_timeout(_WAIT_MS)
        if expect is not None:
            expect.set_options(timeout=_WAIT_MS)
        context.outside = outside
        yield context
        context.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("report-screenshots")


class Page:
    """One open page that fails the test on any script error or console error."""

    def __init__(self, context: Any, html: Path, shots: Path) -> None:
        self.page = context.new_page()
        self.errors: list[str] = []
        self.page.on("pageerror", lambda exc: self.errors.append(f"page error: {exc}"))
        self.page.on(
            "console",
            lambda m: (
                self.errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None
            ),
        )
        self.shots = shots
        self.page.goto(html.as_uri())

    def shot(self, name: str) -> Path:
        path = self.shots / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        print(f"screenshot: {path}")
        return path

    def close(self) -> None:
        self.page.close()
        assert self.errors == []


@pytest.fixture
def demo_page(browser: Any, demo_report: Any, shots: Path) -> Iterator[Page]:
    assert demo_report.run.code == 0, demo_report.run
    page = Page(browser, demo_report.html, shots)
    yield page
    page.close()
    assert browser.outside == []


def test_the_overview_shows_agents_decisions_approvals_and_verification(demo_page: Page) -> None:
    page = demo_page.page
    assert page.title() == "Charter audit report"
    cards = {
        page.locator(".card .l").nth(i).inner_text(): page.locator(".card .n").nth(i).inner_text()
        for i in range(page.locator(".card").count())
    }
    assert cards["tasks"] == "2" and cards["records"] == "22" and cards["blocked"] == "3"
    assert cards["approvals asked"] == "3" and cards["approved"] == "2" and cards["denied"] == "1"
    assert cards["2 chains, 22 records"] == "verified"
    agents = page.locator("[data-panel='Tasks per agent'] tr").all_inner_texts()
    assert any(row.startswith("demo-coder\t1\t12") for row in agents), agents
    assert (
        page.locator("[data-panel='Decisions over time'] svg rect[data-decision=block]").count()
        >= 1
    )
    approvals = page.locator("[data-panel='Approvals']").inner_text()
    assert approvals.count("demo-approver (scripted)") == 3 and "denied" in approvals
    assert "send_email" in approvals
    policies = page.locator("[data-panel='Policies that fired most']").inner_text()
    assert "no-recursive-delete-of-system-or-home" in policies
    chains = page.locator("[data-panel='Verification of every chain']").inner_text()
    assert chains.count("verified") >= 3
    assert "No gaps" in page.locator("[data-panel='Gaps']").inner_text()
    assert demo_page.shot("overview").stat().st_size > 10_000


def test_a_task_filtered_to_blocked_steps_shows_why_they_were_blocked(demo_page: Page) -> None:
    page = demo_page.page
    page.click("header nav >> text=Tasks")
    expect(page.locator("#task-list tr.click")).to_have_count(2)
    demo_page.shot("tasks")
    page.click("#task-list >> text=coding_agent_session")
    assert page.locator("#task-title").inner_text().startswith("coding_agent_session")
    expect(page.locator("#timeline .step")).to_have_count(12)
    page.select_option("select[name=decision]", "block")
    steps = page.locator("#timeline .step")
    expect(steps).to_have_count(2)
    assert page.locator("#timeline [data-count]").inner_text() == "2 of 12 records match"
    assert all(
        d == "block" for d in (steps.nth(i).get_attribute("data-decision") for i in range(2))
    )
    steps.first.locator("summary").click()
    detail = steps.first.locator(".detail").inner_text()
    assert "no-recursive-delete-of-system-or-home" in detail
    assert "rm -rf ~/ .pytest_cache" in detail
    assert "none: the step never ran" in detail
    demo_page.shot("task-blocked")


def test_search_finds_the_approved_step_and_who_approved_it(demo_page: Page) -> None:
    page = demo_page.page
    page.click("header nav >> text=Tasks")
    page.click("#task-list >> text=coding_agent_session")
    page.fill("input[name=q]", "--force")
    steps = page.locator("#timeline .step")
    steps.first.wait_for()
    push = steps.filter(has_text="approved").first
    push.locator("summary").click()
    detail = push.locator(".detail").inner_text()
    assert "approved by demo-approver (scripted)" in detail
    assert "git push --force" in detail
    page.fill("input[name=q]", "STRIPE_SECRET_KEY")
    read = page.locator("#timeline .step").first
    read.locator("summary").click()
    assert "STRIPE_SECRET_KEY=[REDACTED:stripe_key]" in read.locator(".detail").inner_text()
    demo_page.shot("task-search")
    page.fill("input[name=q]", "no step says this")
    assert "No step matches these filters." in page.locator("#timeline").inner_text()


def test_every_blocked_step_across_agents_leads_to_its_task(demo_page: Page) -> None:
    page = demo_page.page
    page.click("header nav >> text=Steps")
    page.select_option("select[name=decision]", "block")
    rows = page.locator("#step-list tr.click")
    expect(rows).to_have_count(3)
    assert {rows.nth(i).locator("td").nth(1).inner_text() for i in range(3)} == {
        "demo-coder",
        "demo-assistant",
    }
    page.select_option("select[name=agent]", "demo-assistant")
    expect(rows).to_have_count(1)
    demo_page.shot("steps-blocked")
    rows.first.click()
    opened = page.locator("#timeline details.step[open]")
    expect(opened).to_have_count(1)
    assert "message-recipients-from-the-user" in opened.inner_text()
    assert "denied by demo-approver (scripted)" in opened.inner_text()
    demo_page.shot("steps-to-task")


def test_hostile_records_are_shown_as_text_and_never_run(
    browser: Any, hostile_report: Any, hostile: list[str], shots: Path
) -> None:
    assert hostile_report.run.code == 0, hostile_report.run
    view = Page(browser, hostile_report.html, shots)
    page = view.page
    page.click("header nav >> text=Tasks")
    page.click("#task-list tr.click")
    steps = page.locator("#timeline .step")
    expect(steps).to_have_count(6)
    for i in range(6):
        steps.nth(i).locator("summary").click()
        steps.nth(i).locator(".detail").wait_for()
    text = page.locator("#timeline").inner_text()
    assert page.evaluate("typeof window.__pwned") == "undefined"
    expect(page.locator("#timeline img, #timeline b, #timeline script")).to_have_count(0)
    assert hostile[0] in text and hostile[1] in text and "<b>bold</b>" in text
    error = page.locator("#timeline .error")
    assert error.inner_text() == "RuntimeError: deploy failed: " + hostile[1]
    groups = [
        " ".join(g.split())
        for g in page.locator("#timeline details.group > summary").all_inner_texts()
    ]
    assert groups == [
        "node & &amp; <b>bold</b>",
        "run run-agent",
        "crew research crew",
        "crew task write the summary",
    ]
    view.shot("hostile-task")
    view.close()
    assert browser.outside == []


def test_a_missing_chromium_fails_the_browser_tests_and_says_how_to_install_it(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "CHARTER_TEST_CHROMIUM": str(tmp_path / "no-chromium")}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--import-mode=importlib",
            f"{__file__}::test_the_overview_shows_agents_decisions_approvals_and_verification",
            "-q",
            "--basetemp",
            str(tmp_path / "run"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 error" in done.stdout and "skipped" not in done.stdout
    assert "apt-get install -y chromium" in done.stdout
