# The row checks of sparse.pyx that the other row gathers (gather_dot.pyx, ranking.pyx) share:
# check_ids inlines into their passes as into sparse's own.
from libc.stdint cimport uint64_t

from fastad._engine.graph cimport Variable, IndexInput

cdef extern from *:
    """
    #include "clones.h"
    /* 1 if an id is not below `rows`. The loop has no branch (an id below 0 is a huge
     * unsigned number) and its AVX2 clone compares four ids at a time. */
    static inline int fa_ids_out_of_range(const uint64_t* ids, Py_ssize_t n, Py_ssize_t rows) {
        int bad = 0;
        for (Py_ssize_t k = 0; k < n; k++) bad |= ids[k] >= (uint64_t)rows;
        return bad;
    }
    FA_CLONED int fa_ids_out_of_range_cloned(const uint64_t* ids, Py_ssize_t n, Py_ssize_t rows) {
        return fa_ids_out_of_range(ids, n, rows);
    }
    /* A few ids (one example's) are compared inline, without the call and the vector
     * loop's set-up, which cost more than the comparisons. */
    static inline int fa_any_id_out_of_range(const uint64_t* ids, Py_ssize_t n, Py_ssize_t rows) {
        return n > 4 ? fa_ids_out_of_range_cloned(ids, n, rows) : fa_ids_out_of_range(ids, n, rows);
    }
    """
    bint fa_ids_out_of_range(const uint64_t* ids, Py_ssize_t n, Py_ssize_t rows) noexcept nogil
    bint fa_any_id_out_of_range(const uint64_t* ids, Py_ssize_t n, Py_ssize_t rows) noexcept nogil


cdef inline int check_ids(Variable node, IndexInput ix, Py_ssize_t rows) except -1 nogil:
    """Every id must name a row: ids can change through set_value between passes. The
    bad id is looked for, in its own function, only when there is one."""
    if fa_any_id_out_of_range(<const uint64_t*>ix.val_ptr, ix.size, rows):
        return raise_bad_id(node, ix, rows)
    return 0


cdef int raise_bad_id(Variable node, IndexInput ix, Py_ssize_t rows) except -1 nogil

# `ids` as an IndexInput (integers become one on `device`), or a TypeError naming op and argname.
cdef IndexInput as_ids(str op, str argname, object ids, object device)

# (a, b) as float Variables: two 2-D tables of rows of one length and dtype, or an error.
cdef tuple row_tables(str op, str a_name, object a, str b_name, object b)
