"""Issue #40's suspected mechanism, run directly: the old doctest-harness restore
(``os.environ.clear(); os.environ.update(saved)``) in the main thread while another thread
calls glibc's ``getenv`` in a loop (as XLA's threads read ``SLINKY_VERBOSE``).

Not a test (it passes whether or not the race crashes here); a tool to rerun the check::

    LD_PRELOAD=.venv/segv_backtrace.so .venv/bin/python tests/tools/environ_race.py old 20
    .venv/bin/python tests/tools/environ_race.py new 20    # the restore tests/_environ.py does

It prints the number of restores and ``getenv`` calls and "clean exit"; a crash prints the
native backtrace of the crashing thread when the handler is preloaded. On glibc 2.36
(2026-12-03) three 20-second ``old`` runs made about 300 000 restores against 550 000 to
760 000 ``getenv`` calls each and did not crash.
"""

import ctypes
import os
import sys
import threading
import time


def main(mode: str, seconds: float) -> None:
    libc = ctypes.CDLL(None)
    libc.getenv.restype = ctypes.c_char_p
    stop = threading.Event()
    calls = [0]

    def reader() -> None:
        while not stop.is_set():
            libc.getenv(b"SLINKY_VERBOSE")  # ctypes releases the GIL around the call
            calls[0] += 1

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    saved = dict(os.environ)
    t0, restores = time.time(), 0
    while time.time() - t0 < seconds:
        if mode == "old":  # the whole environment emptied and rebuilt
            os.environ.clear()
            os.environ.update(saved)  # the pattern under test (tests/test_environ_safety.py)
        else:  # only the variable an example changed is put back
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = "x"
            del os.environ["TORCHINDUCTOR_CACHE_DIR"]
        restores += 1
    stop.set()
    t.join()
    print(f"mode {mode}: {restores} restores, {calls[0]} getenv calls, clean exit")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("old", "new"):
        sys.exit("usage: environ_race.py old|new SECONDS")
    main(sys.argv[1], float(sys.argv[2]))
