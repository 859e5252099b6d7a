"""Two tabs on one session id, driven headless with ``AppTest``: neither loses the other's work."""

from designer.storage import DesignStore
from tests.ui.test_app import current, data_dir, open_app, unescaped  # noqa: F401  (fixture)
from ui import keys, state
from ui.text import plain


def test_the_second_tab_to_save_goes_on_as_a_copy(data_dir):  # noqa: F811
    first = open_app()
    session = first.query_params[keys.SESSION_QUERY_PARAM]
    second = open_app({keys.SESSION_QUERY_PARAM: session})
    assert second.session_state[keys.HISTORY].session_id == session
    first.text_input(key=keys.NAME).input("first tab").run()
    second.text_input(key=keys.NAME).input("second tab").run()
    copy = second.query_params[keys.SESSION_QUERY_PARAM]
    assert copy != session and second.session_state[keys.HISTORY].session_id == copy
    assert plain(state.FORKED) in [e.value for e in second.error]
    store = DesignStore(data_dir)
    assert store.restore(session).name == "first tab"
    assert store.restore(copy).name == "second tab" == current(second).name
    first.text_input(key=keys.NAME).input("first tab again").run()
    assert store.restore(session).name == "first tab again" and not first.error
