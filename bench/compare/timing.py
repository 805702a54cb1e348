"""Timing shared by the compare scripts."""
import time


def block_seconds(fn, repeats=7, min_seconds=0.08, clock=time.perf_counter):
    """Seconds per call of fn in each of `repeats` blocks, every block enough calls (a power of two) to
    last at least min_seconds / 4 of wall time, measured on `clock`; one call first, to warm up."""
    fn()
    n = 1
    while True:
        t = time.perf_counter()
        for _ in range(n):
            fn()
        if time.perf_counter() - t > min_seconds / 4:
            break
        n *= 2
    times = []
    for _ in range(repeats):
        t = clock()
        for _ in range(n):
            fn()
        times.append((clock() - t) / n)
    return times
