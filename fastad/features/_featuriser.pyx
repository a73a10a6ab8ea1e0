"""fa.features' compiled half: Vowpal Wabbit's hash of a name, and `Parser`, which parses
blocks of lines (VW's text format, CSV/TSV columns or JSON lines) in C, without the GIL and without
Python per line, into hashed CSR bags (featurise.h)."""
import numpy as np
cimport numpy as cnp
from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_New
from libc.stdint cimport int64_t, uint8_t, uint32_t
from libc.stdlib cimport free, realloc
from libc.string cimport memcpy, memset

cnp.import_array()

__all__ = ["hash_name", "Parser"]

cdef extern from "featurise.h" nogil:
    enum: FA_MAX_CROSSES
    ctypedef struct fa_featuriser:
        uint32_t mask
        int constant
        uint8_t ngram[256]
        uint8_t skip[256]
        uint8_t char_n[256]
        int n_quadratic, n_cubic
        uint8_t quadratic[64][2]
        uint8_t cubic[64][3]
        int n_columns
        uint8_t* col_kind
        uint8_t* col_index
        uint32_t* col_channel
        uint32_t* col_feature
        char delimiter
        const char** col_key
        size_t* col_key_len
        uint8_t* col_seen
        uint32_t* ids
        float* values
        uint8_t* fields
        size_t n_ids, cap_ids
        int64_t* offsets
        float* labels
        float* weights
        size_t n_examples, cap_examples
        int64_t error_column
        char error[400]
    uint32_t fa_hash_name(const char* s, size_t n, uint32_t seed)
    int fa_parse_vw_line(fa_featuriser* f, const char* line, size_t n)
    int fa_parse_csv_line(fa_featuriser* f, const char* line, size_t n)
    int fa_parse_json_line(fa_featuriser* f, const char* line, size_t n)
    int fa_reserve(fa_featuriser* f, size_t ids, size_t examples)
    void fa_free(fa_featuriser* f)

cdef extern from "stdlib.h" nogil:
    void* calloc(size_t n, size_t size)
cdef extern from "string.h" nogil:
    const void* memchr(const void* s, int c, size_t n)


def hash_name(name, unsigned int seed=0):
    """VW's hash of a feature or namespace name (its "strings" hasher): the name's
    surrounding whitespace trimmed, a name of decimal digits only is its number plus `seed`,
    any other is murmurhash3_x86_32 of its UTF-8 bytes with `seed`. A namespace's hash is
    `hash_name(name)`; a feature's, `hash_name(feature, namespace_hash)` (before the mask
    of the table's bits).
    """
    cdef bytes data = name.encode("utf-8") if isinstance(name, str) else bytes(name)
    return fa_hash_name(data, len(data), seed)


cdef class Parser:
    """The C state of one featuriser: its hashing settings, its columns (CSV, JSON lines), and
    the examples parsed since the last `take`. Made by fa.features' readers: `configure`
    once, `columns` for CSV or `keys` for JSON lines, then `feed` blocks of the file and
    `take` the arrays."""
    cdef fa_featuriser f
    cdef int mode               # 0: VW's text format, 1: CSV, 2: JSON lines
    cdef tuple names
    cdef tuple encoded          # JSON lines: the keys' UTF-8, which f.col_key points into
    cdef int bits
    cdef readonly Py_ssize_t skipped

    def __cinit__(self):
        memset(&self.f, 0, sizeof(fa_featuriser))
        if fa_reserve(&self.f, 1, 1):
            raise MemoryError("fa.features: no memory for the parser's buffers")
        self.f.offsets[0] = 0

    def __dealloc__(self):
        fa_free(&self.f)

    def configure(self, int bits, bint constant, dict ngram, dict skip, dict char_n, list quadratic,
                  list cubic):
        """bits: ids are masked to `bits` bits; constant: VW's constant feature in each bag;
        ngram, skip, char_n: {namespace index (a byte): n}; quadratic, cubic: lists of
        tuples of namespace indexes (checked by fa.features.Hasher)."""
        cdef int k
        self.bits = bits
        self.f.mask = <uint32_t>((1 << bits) - 1) if bits < 32 else <uint32_t>0xFFFFFFFF
        self.f.constant = constant
        for index, n in ngram.items():
            self.f.ngram[index] = n
        for index, n in skip.items():
            self.f.skip[index] = n
        for index, n in char_n.items():
            self.f.char_n[index] = n
        if len(quadratic) > FA_MAX_CROSSES or len(cubic) > FA_MAX_CROSSES:
            raise ValueError(f"fa.features: at most {FA_MAX_CROSSES} quadratic and {FA_MAX_CROSSES} cubic "
                             f"crosses, got {len(quadratic)} and {len(cubic)}")
        self.f.n_quadratic = len(quadratic)
        for k, cross in enumerate(quadratic):
            self.f.quadratic[k][0], self.f.quadratic[k][1] = cross
        self.f.n_cubic = len(cubic)
        for k, cross in enumerate(cubic):
            self.f.cubic[k][0], self.f.cubic[k][1], self.f.cubic[k][2] = cross

    def columns(self, tuple names, list kinds, list indexes, list channels, list features, str delimiter):
        """CSV/TSV: each column's name (for errors), kind (featurise.h's FA_COL_*), namespace
        index, namespace hash and (numeric columns) feature hash; the one-byte delimiter."""
        self._columns(names, kinds, indexes, channels, features)
        self.mode = 1
        self.f.delimiter = ord(delimiter)

    def keys(self, tuple names, list kinds, list indexes, list channels, list features):
        """JSON lines: each column's key and, as `columns`, its kind, namespace index and hash
        and feature hash."""
        cdef Py_ssize_t n = len(names), k
        self._columns(names, kinds, indexes, channels, features)
        self.mode = 2
        self.encoded = tuple(name.encode("utf-8") for name in names)
        self.f.col_key = <const char**>calloc(max(n, 1), sizeof(char*))
        self.f.col_key_len = <size_t*>calloc(max(n, 1), sizeof(size_t))
        self.f.col_seen = <uint8_t*>calloc(max(n, 1), sizeof(uint8_t))
        if not (self.f.col_key and self.f.col_key_len and self.f.col_seen):
            raise MemoryError("fa.features: no memory for the keys")
        for k in range(n):
            self.f.col_key[k] = <const char*>self.encoded[k]
            self.f.col_key_len[k] = len(self.encoded[k])

    cdef _columns(self, tuple names, list kinds, list indexes, list channels, list features):
        cdef Py_ssize_t n = len(names), k
        self.names = names
        self.f.n_columns = <int>n
        self.f.col_kind = <uint8_t*>calloc(n, sizeof(uint8_t))
        self.f.col_index = <uint8_t*>calloc(n, sizeof(uint8_t))
        self.f.col_channel = <uint32_t*>calloc(n, sizeof(uint32_t))
        self.f.col_feature = <uint32_t*>calloc(n, sizeof(uint32_t))
        if not (self.f.col_kind and self.f.col_index and self.f.col_channel and self.f.col_feature):
            raise MemoryError("fa.features: no memory for the columns")
        for k in range(n):
            self.f.col_kind[k] = kinds[k]
            self.f.col_index[k] = indexes[k]
            self.f.col_channel[k] = channels[k]
            self.f.col_feature[k] = features[k]

    @property
    def examples(self):
        """The examples parsed since the last take."""
        return self.f.n_examples

    def feed(self, const unsigned char[::1] data, Py_ssize_t start, bint final, Py_ssize_t limit,
             int64_t line, bint skip_errors, str source):
        """Parse the lines of data[start:] (the last one only when `final`: otherwise it may be
        cut) until `limit` examples are held. Returns (the offset parsed to, the number of the
        next line). A bad line raises ValueError naming `source`, its line and column, or,
        with skip_errors, is left out and counted in `skipped`."""
        cdef Py_ssize_t n = data.shape[0], pos = start, stop
        cdef const char* base = <const char*>&data[0] if n else NULL
        cdef const char* nl
        cdef int status = 0
        cdef size_t limit_examples = <size_t>limit
        cdef Py_ssize_t skipped = 0
        nl = NULL
        with nogil:
            while pos < n and self.f.n_examples < limit_examples:
                nl = <const char*>memchr(base + pos, b'\n', <size_t>(n - pos))
                if nl == NULL:
                    if not final:
                        break
                    stop = n
                else:
                    stop = nl - base
                if self.mode == 1:
                    status = fa_parse_csv_line(&self.f, base + pos, <size_t>(stop - pos))
                elif self.mode == 2:
                    status = fa_parse_json_line(&self.f, base + pos, <size_t>(stop - pos))
                else:
                    status = fa_parse_vw_line(&self.f, base + pos, <size_t>(stop - pos))
                if status < 0 and not (status == -1 and skip_errors):
                    break
                skipped += status == -1
                status = 0
                pos = stop + 1
                line += 1
        self.skipped += skipped
        if status == -2:
            raise MemoryError(f"fa.features: no memory to hold the features of {source}")
        if status == -1:
            raise ValueError(self._describe(source, line))
        return min(pos, n), line

    cdef str _describe(self, str source, int64_t line):
        message = self.f.error.decode("utf-8", "replace")
        if self.mode == 2:
            where = (f"key {self.names[self.f.error_column]!r}" if 0 <= self.f.error_column < len(self.names)
                     else "")
            return f"{source}: line {line}{', ' if where else ''}{where}: {message}"
        if self.mode == 1:
            name = self.names[self.f.error_column] if self.f.error_column < len(self.names) else None
            where = (f"column {name!r} (field {self.f.error_column + 1})" if name is not None
                     else f"field {self.f.error_column + 1}")
        else:
            where = f"column {self.f.error_column}"
        return f"{source}: line {line}, {where}: {message}"

    def take(self, bint last=False):
        """(ids, offsets, values, labels, weights, fields) of the examples parsed since the last
        take (ids int32 for bits <= 31, else int64; fields uint8), and the parser emptied: new
        arrays, or with `last` (nothing more will be parsed) the parser's own buffers, shrunk
        to them, which the arrays free when collected (no copy)."""
        cdef Py_ssize_t n_ids = self.f.n_ids, n_ex = self.f.n_examples
        if last:
            arrays = (_handed(<void**>&self.f.ids, n_ids, sizeof(uint32_t), cnp.NPY_UINT32),
                      _handed(<void**>&self.f.offsets, n_ex + 1, sizeof(int64_t), cnp.NPY_INT64),
                      _handed(<void**>&self.f.values, n_ids, sizeof(float), cnp.NPY_FLOAT32),
                      _handed(<void**>&self.f.labels, n_ex, sizeof(float), cnp.NPY_FLOAT32),
                      _handed(<void**>&self.f.weights, n_ex, sizeof(float), cnp.NPY_FLOAT32),
                      _handed(<void**>&self.f.fields, n_ids, sizeof(uint8_t), cnp.NPY_UINT8))
            self.f.cap_ids = self.f.cap_examples = 0
            if fa_reserve(&self.f, 1, 1):
                raise MemoryError("fa.features: no memory for the parser's buffers")
            self.f.offsets[0] = 0
        else:
            arrays = (np.empty(n_ids, np.uint32), np.empty(n_ex + 1, np.int64), np.empty(n_ids, np.float32),
                      np.empty(n_ex, np.float32), np.empty(n_ex, np.float32), np.empty(n_ids, np.uint8))
            if n_ids:
                memcpy(cnp.PyArray_DATA(arrays[0]), self.f.ids, n_ids * sizeof(uint32_t))
                memcpy(cnp.PyArray_DATA(arrays[2]), self.f.values, n_ids * sizeof(float))
                memcpy(cnp.PyArray_DATA(arrays[5]), self.f.fields, n_ids * sizeof(uint8_t))
            memcpy(cnp.PyArray_DATA(arrays[1]), self.f.offsets, (n_ex + 1) * sizeof(int64_t))
            if n_ex:
                memcpy(cnp.PyArray_DATA(arrays[3]), self.f.labels, n_ex * sizeof(float))
                memcpy(cnp.PyArray_DATA(arrays[4]), self.f.weights, n_ex * sizeof(float))
        self.f.n_ids = 0
        self.f.n_examples = 0
        ids32, offsets, values, labels, weights, fields = arrays
        ids = ids32.view(np.int32) if self.bits <= 31 else ids32.astype(np.int64)
        return ids, offsets, values, labels, weights, fields


cdef void _free_capsule(object capsule) noexcept:
    free(PyCapsule_GetPointer(capsule, NULL))


cdef object _handed(void** data, Py_ssize_t n, size_t item, int typenum):
    """A 1-D array of the n items at *data, a malloc'd buffer shrunk to them, which the array
    frees when collected; *data becomes NULL."""
    cdef void* p = data[0]
    cdef void* shrunk
    cdef cnp.npy_intp size = n
    data[0] = NULL
    if n == 0:
        free(p)
        return cnp.PyArray_EMPTY(1, &size, typenum, 0)
    shrunk = realloc(p, n * item)
    if shrunk != NULL:
        p = shrunk
    try:
        array = cnp.PyArray_SimpleNewFromData(1, &size, typenum, p)
        cnp.set_array_base(array, PyCapsule_New(p, NULL, _free_capsule))
    except BaseException:
        free(p)
        raise
    return array
