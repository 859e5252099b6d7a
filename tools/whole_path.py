"""One input's whole path through the app, measured in this process (``bounded_cost.py``).

``run(spec)`` drives ``app.py`` headless with ``AppTest`` as a user would (the Files tab's
uploader, a widget, the Paint tab's strokes, a library button) and measures each step the user
waits for: the rerun that reads, builds, analyses, draws and autosaves, then each other tab's
first render, and every download's bytes. Per step: CPU seconds (user + system, all threads) and
the growth of peak RSS over the process before the step (the kernel's high-water mark is reset
first, ``/proc/self/clear_refs``). It also collects what the page says (errors, warnings,
notices, toasts) and what it should never show: an exception, a message over 400 characters, a
server path, a Markdown image or an icon shortcode taken from user text.

Only public functions that older checkouts have too are used, so one script compares versions.
"""

from __future__ import annotations

import functools
import io
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
TABS = ("Patterns", "Paint", "Analysis")
#: Steps the user asks for, under a progress bar: they may take longer than 2 s of CPU.
ON_DEMAND = "on demand: "
#: What the page may show at most in one message.
MAX_MESSAGE_CHARS = 400
_ESCAPE = re.compile(r"\\(.)")
#: Markdown that fetches from the network, and shortcodes Streamlit turns into icons or emoji.
_IMAGE = re.compile(r"!\[[^\]]*\]\(")
_SHORTCODE = re.compile(r":(?:material/)?[a-z_]+:")


# --------------------------------------------------------------------------- measuring
def _kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def cpu_seconds() -> float:
    """CPU seconds of this process so far: user and system, all threads."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(action) -> tuple[Any, dict[str, float]]:
    """``action()`` and what it cost: CPU and wall seconds, extra peak memory in MB."""
    Path("/proc/self/clear_refs").write_text("5")
    rss, cpu, wall = _kib("VmRSS"), cpu_seconds(), time.perf_counter()
    value = action()
    cost = {
        "cpu_s": round(cpu_seconds() - cpu, 3),
        "wall_s": round(time.perf_counter() - wall, 3),
        "extra_peak_mb": round((_kib("VmHWM") - rss) / 1024, 1),
    }
    return value, cost


# --------------------------------------------------------------------------- the page
def page_texts(at) -> dict[str, list[str]]:
    """What the page shows, as the viewer reads it (Markdown escapes undone)."""
    shown = {
        "exception": [e.value for e in at.exception],
        "message": [m.value for kind in ("error", "warning", "info", "success", "toast")
                    for m in getattr(at, kind)],
        "text": [t.value for kind in ("title", "caption", "markdown") for t in getattr(at, kind)],
    }  # fmt: skip
    return {kind: [str(text) for text in texts] for kind, texts in shown.items()}


def problems(texts: dict[str, list[str]], data_dir: str, user_text: str = "") -> list[str]:
    """What the page shows that it should not; ``user_text`` is what the case typed, whose
    icon shortcodes must show as typed."""
    found = [f"exception: {text[:120]}" for text in texts["exception"]]
    for text in texts["message"]:
        readable = _ESCAPE.sub(r"\1", text)
        if len(readable) > MAX_MESSAGE_CHARS:
            found.append(f"message of {len(readable):,} characters: {readable[:80]}")
        if data_dir in text or data_dir in readable:
            found.append(f"server path in a message: {readable[:120]}")
    for text in texts["message"] + texts["text"]:
        if _IMAGE.search(text):
            found.append(f"Markdown image in the page: {text[:120]}")
        if any(code in user_text for code in _SHORTCODE.findall(_ESCAPE.sub(r"\1", text))):
            found.append(f"a shortcode the user typed renders as an icon: {text[:120]}")
    return found


def current(at):
    from ui import keys

    return at.session_state[keys.HISTORY].present


def digest(design) -> str:
    from designer.analysis import design_digest

    return design_digest(design) + design.name


def new_app_test(timeout: float):
    """A new session of ``app.py`` under ``AppTest``, handed the installed components found
    once, as a server looks for them at its start (AppTest otherwise reads every installed
    package's metadata at each new session: 0.2-0.4 s of CPU no server spends on a page)."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=timeout)
    at._bidi_component_manager = _components()
    return at


@functools.cache
def _components():
    from streamlit.components.v2.component_manager import BidiComponentManager

    manager = BidiComponentManager()
    manager.discover_and_register_components(start_file_watching=False)
    return manager


def open_app(
    data_dir: str, tab: str, *, start: str | bytes | None = None, session=None, query=None
):
    """The app with ``tab`` open: a new session, or one restored from the autosave of
    ``session``, or of ``start`` (a design file's bytes or JSON text) written first; ``query``
    adds to the address (``{"snapshot": id}``)."""
    from designer.formats import read_design_file
    from designer.storage import DesignStore, new_session_id
    from ui import keys

    os.environ["BSD_DATA_DIR"] = data_dir
    at = new_app_test(600)
    if start is not None:
        design = read_design_file(start.encode() if isinstance(start, str) else start).design
        session = new_session_id()
        DesignStore(data_dir).autosave(session, design)
    if session is not None:
        at.query_params[keys.SESSION_QUERY_PARAM] = session
    at.query_params.update(query or {})
    at.session_state["tab"] = tab
    at.run()
    return at


def open_tab(at, tab: str) -> None:
    at.session_state["tab"] = tab
    at.run()


# --------------------------------------------------------------------------- the kinds
def _upload(spec: dict, result: dict) -> Any:
    from ui import keys

    data = Path(spec["data_path"]).read_bytes()
    at = open_app(spec["data_dir"], "Files")
    before = digest(current(at))

    def upload() -> None:
        at.file_uploader(key=keys.UPLOAD).upload(spec["file_name"], data).run()
        if at.session_state.get(keys.UPLOAD_PENDING):
            at.button(key="upload_bare").click().run()

    _, result["steps"]["read, build, analyse, draw, autosave"] = measure(upload)
    result["outcome"] = "accepted" if digest(current(at)) != before else "refused"
    offered = [b for b in at.button if (b.key or "").startswith("analyse_")]
    if spec["options"].get("analyse") and offered:
        _, result["steps"][ON_DEMAND + "segment and lint"] = measure(
            lambda: offered[0].click().run()
        )
    return at


def _widget(spec: dict, result: dict) -> Any:
    options = spec["options"]
    tab = "Patterns" if options["key"].startswith("step") else "Files"
    at = open_app(spec["data_dir"], tab, start=options.get("start"))
    before = digest(current(at))
    widget = getattr(at, options["widget"])(key=options["key"])
    _, result["steps"]["change, build, analyse, draw, autosave"] = measure(
        lambda: widget.set_value(options["value"]).run()
    )
    result["outcome"] = "accepted" if digest(current(at)) != before else "refused"
    return at


def _lasso(spec: dict, result: dict) -> Any:
    import numpy as np

    from designer import changes
    from designer.edit import EditOp
    from designer.storage import DesignStore
    from ui import state
    from ui.canvas.strokes import mask_region

    store = DesignStore(spec["data_dir"])
    at = open_app(spec["data_dir"], "Paint", start=spec["options"]["start"])
    for i, stroke in enumerate(spec["options"]["strokes"]):
        radius = stroke["radius"]
        rows, cols = np.ogrid[-radius : radius + 1, -radius : radius + 1]
        disc = rows**2 + cols**2 <= radius**2

        def paint(stroke=stroke, disc=disc, radius=radius) -> None:
            region = mask_region(disc, stroke["row"] - radius, stroke["col"] - radius)
            session = at.session_state
            new = changes.edit(state.design(session), EditOp(stroke["action"], region, (0,)))
            state.commit(session, new, store)
            at.run()

        _, result["steps"][f"stroke {i + 1} ({int(disc.sum()):,} cells)"] = measure(paint)
    result["outcome"] = "accepted"
    _saves_read_back(at, store, result)
    return at


def _saves_read_back(at, store, result: dict) -> None:
    """The library save and the ``.pt`` download of the current design must read back."""
    from designer.analysis import design_digest
    from designer.formats import read_design_file
    from designer.formats.exports import exports
    from ui import keys

    open_tab(at, "Files")
    at.text_input(key=keys.LIBRARY_NAME).set_value("kept").run()
    _, result["steps"]["save to the library"] = measure(
        lambda: at.button(key="library_save").click().run()
    )
    design = current(at)
    try:  # a copy saved under a name leaves the design's own name alone
        kept = store.load("kept")
        if kept.name != "kept" or design_digest(kept) != design_digest(design):
            result["problems"].append("the library copy reads back a different design")
    except ValueError as error:
        result["problems"].append(f"the library copy does not read back: {str(error)[:160]}")
    download = exports(design)[0]
    built, result["steps"]["download the .pt"] = measure(download.build)
    try:
        if digest(read_design_file(built).design) != digest(design):
            result["problems"].append("the .pt download reads back a different design")
    except ValueError as error:
        result["problems"].append(f"the .pt download does not read back: {str(error)[:160]}")


def _startup(spec: dict, result: dict) -> Any:
    options = spec["options"]
    session = options.get("session")
    at, result["steps"]["first page"] = measure(
        lambda: open_app(spec["data_dir"], "Patterns", session=session)
    )
    _, result["steps"]["another session"] = measure(lambda: open_app(spec["data_dir"], "Patterns"))
    result["outcome"] = "accepted" if not at.exception else "refused"
    expected = options.get("expect_digest")
    if expected and digest(current(at)) != expected:
        result["problems"].append("a reload brings back a different design: the work is lost")
    return at


def _library_ui(spec: dict, result: dict) -> Any:
    import unicodedata

    from designer.storage import DesignStore
    from ui import keys

    options = spec["options"]
    store = DesignStore(spec["data_dir"])
    at = open_app(spec["data_dir"], "Files")
    if options["action"] == "delete":
        at.selectbox(key=keys.LIBRARY_PICK).set_value(options["names"][0]).run()

        def delete() -> None:
            at.button(key="library_delete").click().run()
            at.button(key="library_confirm").click().run()

        _, result["steps"]["delete"] = measure(delete)
        result["outcome"] = "accepted" if not store.names() else "refused"
        return at
    names = [options["name"]] if options["action"] == "save" else options["names"]
    for i, name in enumerate(names):

        def save(name=name) -> None:
            at.text_input(key=keys.LIBRARY_NAME).set_value(name).run()
            at.button(key="library_save").click().run()

        _, result["steps"][f"save {i + 1}"] = measure(save)
    saved = store.names()
    folded = {unicodedata.normalize("NFKC", name).casefold() for name in saved}
    if len(folded) < len(saved):
        result["problems"].append(f"look-alike names coexist in the library: {saved}")
    for name in saved:
        store.load(name)  # raises if a saved name does not read back
    result["outcome"] = "accepted" if saved else "refused"
    return at


def _library(spec: dict, result: dict) -> None:
    from designer.formats import read_design_file

    data = Path(spec["data_path"]).read_bytes()

    def read() -> str:
        try:
            return "accepted: " + read_design_file(data).describe()
        except ValueError as error:
            return f"refused: {error}"

    outcome, result["steps"]["read_design_file"] = measure(read)
    result["outcome"], _, result["message"] = outcome.partition(": ")


def _export(spec: dict, result: dict) -> Any:
    from designer.formats import read_design_file
    from designer.formats.exports import exports
    from designer.formats.reader import MAX_FILE_BYTES

    data = Path(spec["data_path"]).read_bytes()
    at = open_app(spec["data_dir"], "Files", start=data)
    design = current(at)
    result["exports"] = {}
    for export in exports(design):
        if export.unavailable:
            result["exports"][export.file_name] = f"unavailable: {export.unavailable}"
            continue
        built, cost = measure(export.build)
        result["steps"][f"download {export.label}"] = cost
        note = f"{len(built):,} bytes"
        if export.file_name.endswith((".pt", ".json")):
            try:
                loaded = read_design_file(built, bare_block_size=design.layout.block_size)
                same = loaded.design.layout == design.layout
                note += ", reads back" if same else ", reads back DIFFERENT"
                if not same:
                    result["problems"].append(f"{export.file_name} reads back different")
            except ValueError as error:
                says = getattr(export, "note", None) or ""
                note += f", refused on upload: {str(error)[:100]}"
                if len(built) > MAX_FILE_BYTES and not says:
                    result["problems"].append(
                        f"{export.file_name} ({len(built):,} bytes) cannot be uploaded back "
                        "and the Files tab does not say what to use instead"
                    )
        result["exports"][export.file_name] = note
        del built
    result["outcome"] = "accepted"
    return at


def _model_upload(spec: dict, result: dict) -> Any:
    """A model design file loaded on the Model tab: read, checked, kept, drawn."""
    from ui import keys
    from ui.sessions import UNREAD

    data = Path(spec["data_path"]).read_bytes()
    at = open_app(spec["data_dir"], "Model")
    _, result["steps"]["read, check, autosave, draw"] = measure(
        lambda: at.file_uploader(key=keys.LAYERS_UPLOAD).upload(spec["file_name"], data).run()
    )
    model = at.session_state[keys.HISTORY].model
    result["outcome"] = "accepted" if model not in (None, UNREAD) else "refused"
    return at


def _snapshot(spec: dict, result: dict) -> Any:
    """A snapshot link opened: the design of ``data`` shared first, or the link's ``id`` as
    given (a hostile one)."""
    from designer.formats import read_design_file
    from designer.storage import DesignStore
    from ui import keys

    data = Path(spec["data_path"]).read_bytes()
    snapshot_id = spec["options"].get("id")
    if data:
        snapshot_id = DesignStore(spec["data_dir"]).snapshot(read_design_file(data).design)
    at, result["steps"]["open the link: read, draw"] = measure(
        lambda: open_app(spec["data_dir"], "Patterns", query={"snapshot": snapshot_id})
    )
    result["outcome"] = "accepted" if at.session_state.get(keys.SNAPSHOT) else "refused"
    return at


KINDS = {
    "upload": _upload,
    "snapshot": _snapshot,
    "model_upload": _model_upload,
    "widget": _widget,
    "lasso": _lasso,
    "startup": _startup,
    "library_ui": _library_ui,
    "export": _export,
    "restore": _startup,
}


# --------------------------------------------------------------------------- data folders
@contextmanager
def data_folder(spec: dict):
    """The case's data folder, set up as it asks (a read-only one is a read-only bind mount)."""
    from designer.formats import save_design
    from designer.storage import DesignStore, load_default_design, new_session_id

    folder = Path(spec["data_dir"])
    options = spec.get("options", {})
    setup = options.get("setup")
    old = time.time() - 90 * 86400
    if setup == "autosave_directory":
        (folder / "autosave" / "x.pt").mkdir(parents=True)
        os.utime(folder / "autosave" / "x.pt", (old, old))
    if setup == "broken_autosave":
        options["session"] = new_session_id()
        (folder / "autosave").mkdir(parents=True)
        (folder / "autosave" / f"{options['session']}.pt").write_bytes(b"not a design")
    for name in options.get("names", []) if options.get("action") == "delete" else []:
        DesignStore(folder).save(name, load_default_design())
    if setup == "read_only_stale_tmp":
        (folder / "library").mkdir(parents=True)
        stale = folder / "library" / ".x.pt.abcdefgh.tmp"
        buffer = io.BytesIO()
        save_design(load_default_design(), buffer)
        stale.write_bytes(buffer.getvalue())
        os.utime(stale, (old, old))
    read_only = setup == "read_only_stale_tmp" or options.get("read_only")
    if not read_only:
        yield True
        return
    done = subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True)
    if done.returncode == 0:
        done = subprocess.run(["mount", "-o", "remount,bind,ro", str(folder)], capture_output=True)
    if done.returncode != 0:
        yield False
        return
    try:
        yield True
    finally:
        subprocess.run(["umount", str(folder)], capture_output=True)


def warm_up() -> None:
    """Imports, compiled code and caches as on a running server: every tab of a fresh session
    on a data folder of its own (the server's tidy of the case's folder is still to come), and
    the imports a first page starts on threads of their own done (their CPU is the server's
    start, not the case's)."""
    import threading

    with tempfile.TemporaryDirectory() as folder:
        at = open_app(folder, "Patterns")
        for tab in (*TABS, "Files"):
            open_tab(at, tab)
    for thread in threading.enumerate():
        if thread.name.startswith("warm-"):
            thread.join()


def run(spec: dict) -> dict:
    """Run one case (see ``cost_cases.Case``) and return what it cost and showed."""
    if spec["kind"] != "library":
        warm_up()
    os.environ.update(spec.get("options", {}).get("env", {}))
    os.environ["BSD_DATA_DIR"] = spec["data_dir"]
    result: dict[str, Any] = {"steps": {}, "problems": [], "outcome": None, "message": ""}
    with data_folder(spec) as ready:
        if not ready:
            return {**result, "outcome": "skipped", "message": "needs a read-only bind mount"}
        if spec["kind"] == "library":
            _library(spec, result)
            return result
        try:
            at = KINDS[spec["kind"]](spec, result)
        except Exception as error:  # an uncaught error in the app is itself a finding
            result["problems"].append(f"uncaught {type(error).__name__}: {str(error)[:200]}")
            return result
        texts = page_texts(at)
        user_text = str(spec["options"].get("value", ""))
        result["problems"] += problems(texts, spec["data_dir"], user_text)
        result["message"] = " | ".join(texts["message"])[:600]
        if result["outcome"] == "accepted" and spec["kind"] in ("upload", "widget", "lasso"):
            for tab in TABS:
                _, result["steps"][f"open {tab}"] = measure(lambda tab=tab: open_tab(at, tab))
                result["problems"] += problems(page_texts(at), spec["data_dir"], user_text)
            from ui import keys

            result["session"] = at.session_state[keys.HISTORY].session_id
            result["digest"] = digest(current(at))
    result["problems"] = list(dict.fromkeys(result["problems"]))
    return result


if __name__ == "__main__":  # pragma: no cover (bounded_cost.py runs it in a subprocess)
    import json

    sys.path.insert(0, str(ROOT))
    with tempfile.TemporaryDirectory():
        spec = json.loads(Path(sys.argv[1]).read_text())
        print(json.dumps(run(spec)))
