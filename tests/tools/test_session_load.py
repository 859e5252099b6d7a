from pathlib import Path

import pytest

from tests.scripts import load_script
from tests.ui.browser_app import serve_app

pytestmark = pytest.mark.e2e
session_load = load_script("tools/session_load")


def test_a_bare_websocket_client_times_a_new_sessions_first_run(tmp_path):
    with serve_app(tmp_path) as (url, _log):
        pid = int((tmp_path / "server.pid").read_text())
        assert session_load.rss_mb(pid) > 50
        times = [session_load.render(url) for _ in range(2)]
    assert all(0 < t < 120 for t in times)
    # both sessions ran to the end of a render, and visits that change nothing save nothing
    assert not list(Path(tmp_path, "data", "autosave").glob("*.pt"))
