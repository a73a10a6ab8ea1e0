# NumPy-style broadcasting for C loops. A Bcast walks an output shape row by
# row (the last axis is the row) and tracks where each position lies in two
# operands (three for where's condition) whose element strides are 0 along
# broadcast axes. Axes of length 1
# are dropped and adjacent axes merged first, so the common cases collapse to
# one or two loops.

from libc.stdlib cimport malloc

cdef enum:
    MAX_DIMS = 32

cdef struct Bcast:
    int nd                          # axes after collapsing (>= 1)
    Py_ssize_t rows                 # product of shape[:nd-1]
    Py_ssize_t shape[MAX_DIMS]
    Py_ssize_t sa[MAX_DIMS]         # element strides of operand a along each axis
    Py_ssize_t sb[MAX_DIMS]
    Py_ssize_t sc[MAX_DIMS]         # of a third operand c; all 0 when there is none

cdef struct BcastPos:
    Py_ssize_t idx[MAX_DIMS]
    Py_ssize_t oa, ob, oc           # element offsets of the current row's start in a, b and c


cdef inline tuple broadcast_shapes(str op, tuple a, tuple b):
    """The broadcast shape of a and b, or a ValueError that names both."""
    cdef Py_ssize_t na = len(a), nb = len(b), n = na if na > nb else nb, i, da, db
    if a == b:
        return a
    out = [0] * n
    for i in range(n):
        da = a[na - n + i] if na - n + i >= 0 else 1
        db = b[nb - n + i] if nb - n + i >= 0 else 1
        if da == db or db == 1:
            out[i] = da
        elif da == 1:
            out[i] = db
        else:
            raise ValueError(f"{op}: shapes {a} and {b} cannot be broadcast together "
                             f"(axis {i - n}: {da} vs {db})")
    return tuple(out)


cdef inline int _operand_strides(tuple out, tuple shape, Py_ssize_t* strides) except -1:
    """Element strides of a C-contiguous operand of `shape` seen in `out`'s index space."""
    cdef Py_ssize_t n = len(out), k = len(shape), i, step = 1, d
    for i in range(n - 1, -1, -1):
        d = shape[k - n + i] if k - n + i >= 0 else 1
        strides[i] = step if d != 1 else 0
        step *= d
    return 0


cdef inline int bcast_setup(Bcast** slot, tuple out, tuple a, tuple b, tuple c) except -1:
    """Allocates in *slot (a node's, which frees it) a walk over `out` for operands of shapes
    a, b and c (c == (): no third operand)."""
    slot[0] = <Bcast*>malloc(sizeof(Bcast))
    if slot[0] == NULL:
        raise MemoryError()
    cdef Bcast* it = slot[0]
    cdef Py_ssize_t n = len(out), i, m = 0
    cdef Py_ssize_t sa[MAX_DIMS]
    cdef Py_ssize_t sb[MAX_DIMS]
    cdef Py_ssize_t sc[MAX_DIMS]
    if n > MAX_DIMS:
        raise ValueError(f"broadcasting supports at most {MAX_DIMS} dimensions, got {n}")
    _operand_strides(out, a, sa)
    _operand_strides(out, b, sb)
    _operand_strides(out, c, sc)
    for i in range(n):
        if out[i] == 1:
            continue
        if (m and it.sa[m - 1] == sa[i] * out[i] and it.sb[m - 1] == sb[i] * out[i]
                and it.sc[m - 1] == sc[i] * out[i]):
            it.shape[m - 1] *= out[i]          # merge with the previous axis
            it.sa[m - 1] = sa[i]
            it.sb[m - 1] = sb[i]
            it.sc[m - 1] = sc[i]
        else:
            it.shape[m] = out[i]
            it.sa[m] = sa[i]
            it.sb[m] = sb[i]
            it.sc[m] = sc[i]
            m += 1
    if m == 0:
        it.shape[0] = 1
        it.sa[0] = 0
        it.sb[0] = 0
        it.sc[0] = 0
        m = 1
    it.nd = m
    it.rows = 1
    for i in range(m - 1):
        it.rows *= it.shape[i]
    for i in range(m):                  # an empty output has no rows at all
        if it.shape[i] == 0:
            it.rows = 0
    return 0


cdef inline void bcast_start(const Bcast* it, BcastPos* p) noexcept nogil:
    cdef int d
    for d in range(it.nd):              # only the axes in use: most walks have one or two
        p.idx[d] = 0
    p.oa = 0
    p.ob = 0
    p.oc = 0


cdef inline void bcast_next_row(const Bcast* it, BcastPos* p) noexcept nogil:
    cdef int d = it.nd - 2
    while d >= 0:
        p.idx[d] += 1
        p.oa += it.sa[d]
        p.ob += it.sb[d]
        p.oc += it.sc[d]
        if p.idx[d] < it.shape[d]:
            return
        p.oa -= it.sa[d] * it.shape[d]
        p.ob -= it.sb[d] * it.shape[d]
        p.oc -= it.sc[d] * it.shape[d]
        p.idx[d] = 0
        d -= 1
