"""Where BLAS starts to beat fastad's C loops for one matmul (forward + backward replay).

Prints, per shape (m, k, n), the replay time with the C loops and with BLAS,
measured alternately in one process, and their ratio. The crossover in
multiply-adds (m*n*k) sets fastad.ops.linalg.BLAS_MIN_WORK.

    python bench/matmul_crossover.py
"""
import timeit

import numpy as np

import fastad as fa
from fastad.ops.linalg import _set_blas_min_work, matmul

SHAPES = ([(s, s, s) for s in (2, 4, 5, 6, 7, 8, 10, 12, 16, 24, 32)]
          + [(1, s, s) for s in (8, 12, 16, 24, 32, 64, 128)]
          + [(s, 2, 2) for s in (16, 32, 64, 128)]
          + [(s, 4, 4) for s in (8, 16, 32)]
          + [(4, 8, 8), (8, 8, 4), (2, 16, 16), (1, 8, 32)])
C_LOOPS, BLAS = 10**18, 0


def replay_seconds(m, k, n, dtype, threshold):
    rng = np.random.default_rng(0)
    old = _set_blas_min_work(threshold)
    try:
        a = fa.Parameter(rng.standard_normal((m, k)), dtype=dtype)
        b = fa.Parameter(rng.standard_normal((k, n)), dtype=dtype)
        c = matmul(a, b)
    finally:
        _set_blas_min_work(old)
    seed = np.ones(c.shape, dtype=dtype)

    def step():
        c.forward()
        c.backward(seed)

    number = max(50, 2_000_000 // (m * n * k + 200))
    return min(timeit.repeat(step, number=number, repeat=7)) / number


def main():
    for dtype in (np.float64, np.float32):
        print(f"{np.dtype(dtype).name}: m k n, work m*n*k, C loops us, BLAS us, loops/BLAS")
        for m, k, n in SHAPES:
            loops = blas = float("inf")
            for _ in range(3):      # alternate the two, keep the best of each
                loops = min(loops, replay_seconds(m, k, n, dtype, C_LOOPS))
                blas = min(blas, replay_seconds(m, k, n, dtype, BLAS))
            print(f"  {m:3d} {k:3d} {n:3d} {m * n * k:8d} {loops * 1e6:9.2f} {blas * 1e6:9.2f}"
                  f" {loops / blas:6.2f}")


if __name__ == "__main__":
    main()
