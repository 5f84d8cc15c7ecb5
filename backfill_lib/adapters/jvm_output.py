"""The embedded JVM's stderr, copied to ours without the launch's noise.

Two things every local start printed before any output of ours, neither of them about the user's work:

- ``WARNING: Using incubator modules: jdk.incubator.vector``: the JVM's own line for the
  ``--add-modules=jdk.incubator.vector`` that Spark 4's launcher always passes (``JavaModuleOptions``); no JVM
  option turns it off;
- Ivy's report of the ``spark.jars.packages`` resolution (about 40 lines, from ``:: loading settings ::`` to
  ``N artifacts copied, M already retrieved``), on the first start only since :mod:`backfill_lib.adapters.delta_jars`.

The JVM's stderr is a pipe read by a daemon thread, which writes every other line to our stderr (file
descriptor 2) as it comes: log4j's warnings and errors, a Python worker's traceback, a JVM crash report. Ivy's
block is held back while it is written and dropped only once it ends with its ``artifacts copied`` line; when it
does not (a resolution that fails, a JVM that dies), everything held is written out at the end of the stream or
when the launch fails (:meth:`JvmStderr.flush_held`), so a failed start still shows Ivy's and the JVM's reasons.
"""

from __future__ import annotations

import os
import re
import threading

#: The JVM's line for Spark's ``--add-modules=jdk.incubator.vector``.
INCUBATOR_WARNING = "WARNING: Using incubator modules: jdk.incubator.vector"
#: The first line of Ivy's report in a spark-submit resolution, and its last.
IVY_FIRST = ":: loading settings :: "
IVY_LAST = re.compile(r"^\s*\d+ artifacts copied, \d+ already retrieved")
#: More held lines than this are not a resolution report: written out, and held no more.
MAX_HELD = 5000


class JvmStderr:
    """A pipe for a child's stderr (:attr:`write_fd`, to hand to ``Popen``) whose lines a daemon thread copies to
    file descriptor ``sink`` without the launch noise (module docstring).

    Call :meth:`close_writer` once the child holds the pipe (the parent's copy of the write end must go, or the
    stream never ends), and :meth:`flush_held` when the launch failed.
    """

    def __init__(self, sink: int = 2):
        self._read_fd, self.write_fd = os.pipe()
        self._sink = sink
        self._held: list[bytes] | None = None  # Ivy's report while it is being written
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._copy, name="jvm-stderr", daemon=True)
        self._thread.start()

    def close_writer(self) -> None:
        if self.write_fd >= 0:
            os.close(self.write_fd)
            self.write_fd = -1

    def flush_held(self, wait: float = 5.0) -> None:
        """After a failed launch: wait up to ``wait`` seconds for the rest of the stream (the child has exited or
        is exiting), then write out whatever is still held back."""
        self.close_writer()
        self._thread.join(wait)
        self._write_held()

    def _copy(self) -> None:
        with os.fdopen(self._read_fd, "rb") as stream:  # buffered: readline returns each line as it comes
            for line in iter(stream.readline, b""):
                self._take(line)
        self._write_held()

    def _take(self, line: bytes) -> None:
        text = line.decode("utf-8", "replace").rstrip("\r\n")
        with self._lock:
            if self._held is not None:
                self._held.append(line)
                if IVY_LAST.match(text):  # the resolution succeeded: its report is noise
                    self._held = None
                elif len(self._held) > MAX_HELD:
                    held, self._held = self._held, None
                    self._write(b"".join(held))
                return
            if text.startswith(IVY_FIRST):
                self._held = [line]
                return
        if text == INCUBATOR_WARNING:
            return
        self._write(line)

    def _write_held(self) -> None:
        with self._lock:
            held, self._held = self._held, None
        if held:
            self._write(b"".join(held))

    def _write(self, data: bytes) -> None:
        try:
            while data:
                data = data[os.write(self._sink, data):]
        except OSError:  # our stderr is gone (a closed pipe): nothing left to show the lines to
            pass
