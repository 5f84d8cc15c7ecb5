"""Great Expectations, imported ahead of need.

A new process spends seconds of single-threaded Python importing GX, and a run needs GX only when it loads the
suite, after the session has started and the plan is built. A run starts the import in a background thread
(:func:`import_early`) while its main thread waits on the JVM (the session's start, the Delta log, the ledger),
and every use of GX goes through :func:`great_expectations`, which waits for that import to end first: the
main thread never imports GX beside the background thread.
"""

from __future__ import annotations

import atexit
import importlib
import sys
import threading
from types import ModuleType

_lock = threading.Lock()
_thread: threading.Thread | None = None


def import_early() -> None:
    """Start importing ``great_expectations`` in a daemon thread, once per process; return at once. The process
    waits for that import at its exit.

    Does nothing when GX is imported already or being imported. An import that fails in the thread is
    not reported there: :func:`great_expectations` imports again in the caller's thread, which raises it."""
    global _thread
    with _lock:
        if _thread is not None or "great_expectations" in sys.modules:
            return
        _thread = threading.Thread(target=_import, name="gx-import", daemon=True)
        _thread.start()
        # A process ending early (a refused request) waits for the import rather than stopping it halfway,
        # holding module locks its own exit may need.
        atexit.register(_thread.join)


def _import() -> None:
    try:
        importlib.import_module("great_expectations")
    except BaseException:  # noqa: BLE001 - raised again where GX is used (great_expectations())
        pass


def great_expectations() -> ModuleType:
    """The ``great_expectations`` module, once an import started by :func:`import_early` has ended."""
    thread = _thread
    if thread is not None:
        thread.join()
    import great_expectations as gx

    return gx
