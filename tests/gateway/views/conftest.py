"""Fixtures for the page's views in headless Chromium: a served gateway that
also knows a platform token, and a browser that records the page's errors."""

from __future__ import annotations

import pytest

from tests.gateway.cdp import Browser
from tests.gateway.conftest import TOKENS
from tests.gateway.views.pages import PLATFORM

# Recorded before any of the page's scripts run, in every document: what a
# person would see in the console (uncaught errors, failed script loads,
# rejected promises, CSP refusals, console.error).
ERROR_HOOK = """
window.__pageErrors = [];
window.addEventListener('error', (e) => window.__pageErrors.push(
  'error: ' + (e.message || (e.target && (e.target.src || e.target.href)) || e.type)), true);
window.addEventListener('unhandledrejection', (e) => window.__pageErrors.push('rejection: ' + e.reason));
document.addEventListener('securitypolicyviolation', (e) => window.__pageErrors.push(
  'csp: ' + e.violatedDirective + ' ' + e.blockedURI));
const consoleError = console.error;
console.error = (...args) => { window.__pageErrors.push('console: ' + args.join(' ')); consoleError(...args); };
"""

# Each machine's states, repeated from ten hours ago until now (minutes). The


@pytest.fixture
def served(gateway_server):
    """A served gateway that also knows a platform token."""
    return gateway_server(LINECTL_TOKENS=f"{TOKENS},platform:{PLATFORM}").base


@pytest.fixture
def browser(tmp_path):
    b = Browser(tmp_path / "chromium-profile")
    b.call("Page.enable")  # the hook below is only installed on an enabled page domain
    b.call("Page.addScriptToEvaluateOnNewDocument", source=ERROR_HOOK)
    yield b
    b.close()
