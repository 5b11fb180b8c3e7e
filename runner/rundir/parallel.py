"""Bounded read-ahead for the data path: results in input order, memory flat in N.

Threads rather than processes: the heavy steps (zlib inflate, sha256, numpy's take, torch
ops) release the GIL, so threads use every core without pickling multi-megabyte images
between processes.
"""

from __future__ import annotations

import ctypes
import functools
import os
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")
_DONE = object()


def default_jobs() -> int:
    return max(1, len(os.sched_getaffinity(0)))


# glibc's mallopt parameters; 32 MiB is the largest mmap threshold it accepts on 64-bit.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_KEEP_FREED_BYTES = 32 << 20


@functools.cache
def keep_freed_memory() -> bool:
    """Makes glibc serve multi-megabyte arrays from memory freed earlier instead of fresh
    mmap()s. The data path allocates ~25 MB per 1024x1024 sample (file bytes, pixels, hex,
    numpy's index temporaries) and frees it a few samples later; by default each of those
    comes back as new zero-filled pages, which cost aggregation 100-400k page faults and
    1-3 s of kernel time per 256 samples against 15k and 0.3-0.5 s this way (measured by
    scripts/bench_scale.py). Memory stays bounded by the read-ahead window: freed chunks are
    reused, not accumulated. Process-wide and idempotent; False where the C library is not
    glibc (nothing changes there)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, _KEEP_FREED_BYTES)
                and mallopt(_M_TRIM_THRESHOLD, 4 * _KEEP_FREED_BYTES))


def ordered_map(fn: Callable[[Any], Any], items: Iterable[Any], jobs: int,
                ahead: int | None = None) -> Iterator[tuple[Any, Any]]:
    """(item, fn(item)) in input order, `fn` running on `jobs` threads with at most `ahead`
    (default 2 x jobs) results waiting."""
    ahead = ahead or 2 * jobs
    if jobs <= 1:
        for item in items:
            yield item, fn(item)
        return
    with ThreadPoolExecutor(jobs, thread_name_prefix="read-ahead") as pool:
        window: deque[tuple[Any, Future]] = deque()
        try:
            for item in items:
                window.append((item, pool.submit(fn, item)))
                if len(window) >= ahead:
                    first, fut = window.popleft()
                    yield first, fut.result()
            while window:
                first, fut = window.popleft()
                yield first, fut.result()
        finally:
            for _, fut in window:
                fut.cancel()


def prefetch(items: Iterable[T], depth: int) -> Iterator[T]:
    """Runs the producer `items` on a background thread, at most `depth` items ahead of the
    consumer; its exceptions are re-raised in the consumer. If the consumer stops early,
    the producer stops at its next item."""
    if depth < 1:
        yield from items
        return
    out: queue.Queue[Any] = queue.Queue(depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                while not stop.is_set():
                    try:
                        out.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            out.put(_DONE)
        except BaseException as e:  # handed to the consumer
            out.put(e)

    thread = threading.Thread(target=produce, name="prefetch", daemon=True)
    thread.start()
    try:
        while (item := out.get()) is not _DONE:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        thread.join()
