"""processes/runtime/module_walk.py finds the modules imported since the template while other
threads build tuples from generators (a --ps coordinator's closure threads do, while autograph
converts a function and asks for them). A scan that holds a list of every object the collector
tracks, across a thread switch, makes such a thread's ``tuple(...)`` fail with ``SystemError:
Objects/tupleobject.c:927: bad argument to internal function``: measured 169 failures in 5 s of
scans with the former ``gc.get_objects()`` scan, and this test saw them with it."""

from __future__ import annotations

import sys
import threading
import time
import types
from collections.abc import Iterator

from mwnotebook.processes.runtime import module_walk

SECONDS = 3.0


def _slow_items() -> Iterator[int]:
    for i in range(25):  # more than tuple()'s first guess (10): the tuple is resized as it grows
        time.sleep(0.0005)  # lets the scanning thread run while the tuple is half built
        yield i


def test_scans_beside_threads_building_tuples_break_none_of_them(monkeypatch) -> None:
    monkeypatch.setattr(module_walk, "_template_names", frozenset(sys.modules))
    monkeypatch.setattr(module_walk, "_template_modules", dict(sys.modules))
    later = types.ModuleType("mwnotebook_test_later_module")
    monkeypatch.setitem(sys.modules, later.__name__, later)
    junk = [[i] for i in range(200_000)]  # objects the collector tracks, as in a worker after a few cells
    errors: list[BaseException] = []
    built = [0]
    stop = threading.Event()

    def build() -> None:
        while not stop.is_set():
            try:
                tuple(_slow_items())
                built[0] += 1
            except SystemError as exc:
                errors.append(exc)

    threads = [threading.Thread(target=build) for _ in range(3)]
    for thread in threads:
        thread.start()
    scans = 0
    try:
        deadline = time.monotonic() + SECONDS
        while time.monotonic() < deadline:
            assert module_walk._later_modules() == [later]  # noqa: SLF001 -- the scan autograph and the kernel use
            scans += 1
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    del junk
    assert built[0] > 0 and scans > 0, (built, scans)
    assert not errors, f"{len(errors)} tuple(...) calls failed beside {scans} scans: {errors[0]!r}"
