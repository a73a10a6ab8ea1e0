/* fa.features' compiled core: Vowpal Wabbit's feature hashing and the parsers of its text
 * format and of CSV/TSV columns, writing hashed CSR bags (one bag a line).
 *
 * The hashing is VW's (its rules, our code):
 *   - a name is hashed by VW's "strings" hasher: surrounding bytes <= 0x20 trimmed, a name of
 *     decimal digits only is its number plus the seed, any other name is
 *     murmurhash3_x86_32(name, seed);
 *   - a namespace's hash is its full name's hash with seed 0 (the default namespace, a '|'
 *     followed by a space, hashes to 0); a feature's is its name's hash seeded with its
 *     namespace's; a feature written ":value" without a name is the namespace's hash plus
 *     its rank among those of its namespace segment;
 *   - namespaces are grouped by their first byte (VW's namespace index): n-grams and crosses
 *     run over a group;
 *   - n-grams over a group's features (VW's --ngram/--skips): h = h * 27942141 + h', value 1;
 *   - crosses (VW's -q/--cubic): FNV_PRIME * h1 ^ h2, FNV_PRIME * (FNV_PRIME * h1 ^ h2) ^ h3,
 *     a group crossed with itself gives each pair once (j >= i), the value the product;
 *   - the constant feature 11650396;
 *   - every id masked to the table's bits last (VW's stride does not change the masked id).
 * All arithmetic is modulo 2^32: the masked ids are VW's for bits <= 32.
 */
#ifndef FASTAD_FEATURISE_H
#define FASTAD_FEATURISE_H

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FA_FNV_PRIME 16777619u
#define FA_NGRAM_CONSTANT 27942141u
#define FA_CONSTANT 11650396u
#define FA_MAX_CROSSES 64
#define FA_CONSTANT_FIELD 128       /* VW's constant_namespace */

/* ------------------------------------------------------------------ hashing */

static inline uint32_t fa_rotl32(uint32_t x, int r) { return (x << r) | (x >> (32 - r)); }

/* MurmurHash3_x86_32 (Austin Appleby's public-domain algorithm), little-endian blocks. */
static inline uint32_t fa_murmur3_32(const char* key, size_t len, uint32_t seed)
{
    const uint8_t* data = (const uint8_t*)key;
    const size_t nblocks = len / 4;
    const uint32_t c1 = 0xcc9e2d51u, c2 = 0x1b873593u;
    uint32_t h = seed, k;
    size_t i;
    for (i = 0; i < nblocks; i++) {
        memcpy(&k, data + 4 * i, 4);
        k *= c1; k = fa_rotl32(k, 15); k *= c2;
        h ^= k; h = fa_rotl32(h, 13); h = h * 5 + 0xe6546b64u;
    }
    const uint8_t* tail = data + 4 * nblocks;
    k = 0;
    switch (len & 3) {
        case 3: k ^= (uint32_t)tail[2] << 16; /* fall through */
        case 2: k ^= (uint32_t)tail[1] << 8;  /* fall through */
        case 1: k ^= tail[0]; k *= c1; k = fa_rotl32(k, 15); k *= c2; h ^= k;
    }
    h ^= (uint32_t)len;
    h ^= h >> 16; h *= 0x85ebca6bu; h ^= h >> 13; h *= 0xc2b2ae35u; h ^= h >> 16;
    return h;
}

/* VW's "strings" hasher (hashstring): trimmed, digits-only names are numbers. */
static inline uint32_t fa_hash_name(const char* s, size_t len, uint32_t seed)
{
    while (len > 0 && (signed char)s[0] >= 0 && s[0] <= 0x20) { s++; len--; }
    while (len > 0 && (signed char)s[len - 1] >= 0 && s[len - 1] <= 0x20) len--;
    uint32_t number = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return fa_murmur3_32(s, len, seed);
        number = number * 10u + (uint32_t)(s[i] - '0');
    }
    return number + seed;
}

/* ------------------------------------------------------------------ numbers */

static const double fa_pow10[23] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                                    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

static inline int fa_lower_is(const char* s, const char* end, const char* word)
{
    size_t n = strlen(word);
    if ((size_t)(end - s) < n) return 0;
    for (size_t i = 0; i < n; i++)
        if ((s[i] | 0x20) != word[i]) return 0;
    return 1;
}

/* Parse a decimal number at [s, end): sets *stop past it and returns 1, or returns 0 when no
 * number starts at s. "nan", "inf" and "infinity" (any case, signed) parse, to NaN and inf, so
 * that the callers can name them; a number beyond float's range is inf. */
static inline int fa_parse_number(const char* s, const char* end, const char** stop, double* out)
{
    const char* p = s;
    int negative = 0;
    if (p < end && (*p == '-' || *p == '+')) { negative = *p == '-'; p++; }
    if (fa_lower_is(p, end, "nan")) { *stop = p + 3; *out = NAN; return 1; }
    if (fa_lower_is(p, end, "inf")) {
        p += fa_lower_is(p, end, "infinity") ? 8 : 3;
        *stop = p; *out = negative ? -INFINITY : INFINITY; return 1;
    }
    uint64_t mantissa = 0;
    int digits = 0, exponent = 0, seen = 0;
    for (; p < end && *p >= '0' && *p <= '9'; p++, seen++) {
        if (digits < 19) { mantissa = mantissa * 10 + (uint64_t)(*p - '0'); if (mantissa) digits++; }
        else exponent++;
    }
    if (p < end && *p == '.') {
        for (p++; p < end && *p >= '0' && *p <= '9'; p++, seen++) {
            if (digits < 19) { mantissa = mantissa * 10 + (uint64_t)(*p - '0'); exponent--; if (mantissa) digits++; }
        }
    }
    if (!seen) return 0;
    if (p < end && (*p == 'e' || *p == 'E')) {
        const char* q = p + 1;
        int eneg = 0, e = 0, edigits = 0;
        if (q < end && (*q == '-' || *q == '+')) { eneg = *q == '-'; q++; }
        for (; q < end && *q >= '0' && *q <= '9'; q++, edigits++) if (e < 100000) e = e * 10 + (*q - '0');
        if (edigits) { exponent += eneg ? -e : e; p = q; }
    }
    double value;
    *stop = p;
    if (mantissa == 0) value = 0.0;
    else if (digits <= 15 && exponent >= -22 && exponent <= 22)    /* exact operands: one rounding */
        value = exponent < 0 ? (double)mantissa / fa_pow10[-exponent] : (double)mantissa * fa_pow10[exponent];
    else {                                                          /* rare: the C library's rounding */
        char buffer[64];
        size_t n = (size_t)(p - s);
        if (n >= sizeof(buffer)) { *out = (negative ? -1.0 : 1.0) * (double)mantissa * pow(10.0, exponent); return 1; }
        memcpy(buffer, s, n);
        buffer[n] = 0;
        *out = strtod(buffer, NULL);
        return 1;
    }
    *out = negative ? -value : value;
    return 1;
}

/* ------------------------------------------------------------------ UTF-8 */

/* The byte offset of the first invalid UTF-8 sequence in [s, s + n), or -1 when it is valid
 * (overlong forms, surrogates and code points past U+10FFFF are invalid). */
static inline int64_t fa_utf8_error(const char* s, size_t n)
{
    const uint8_t* p = (const uint8_t*)s;
    size_t i = 0;
    while (i < n) {
        if (i + 8 <= n) {
            uint64_t block;
            memcpy(&block, p + i, 8);
            if (!(block & 0x8080808080808080ull)) { i += 8; continue; }
        }
        uint8_t c = p[i];
        if (c < 0x80) { i++; continue; }
        size_t need;
        uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) { need = 1; cp = c & 0x1F; }
        else if (c >= 0xE0 && c <= 0xEF) { need = 2; cp = c & 0x0F; }
        else if (c >= 0xF0 && c <= 0xF4) { need = 3; cp = c & 0x07; }
        else return (int64_t)i;
        for (size_t k = 1; k <= need; k++) {
            if (i + k >= n || (p[i + k] & 0xC0) != 0x80) return (int64_t)i;
            cp = (cp << 6) | (p[i + k] & 0x3F);
        }
        if ((need == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (need == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return (int64_t)i;
        i += need + 1;
    }
    return -1;
}

/* ------------------------------------------------------------------ the featuriser */

typedef struct {
    uint32_t* h;
    float* v;
    size_t n, cap;
} fa_group;

/* What the CSV and JSON-lines parsers do with a column. */
enum { FA_COL_IGNORE = 0, FA_COL_LABEL, FA_COL_WEIGHT, FA_COL_CATEGORICAL, FA_COL_NUMERIC, FA_COL_TEXT };

typedef struct {
    /* settings */
    uint32_t mask;
    int constant;
    uint8_t ngram[256], skip[256], char_n[256];
    int n_quadratic, n_cubic;
    uint8_t quadratic[FA_MAX_CROSSES][2], cubic[FA_MAX_CROSSES][3];
    /* CSV columns: what each is, its namespace index and hash, a numeric column's feature hash */
    int n_columns;
    uint8_t* col_kind;
    uint8_t* col_index;
    uint32_t* col_channel;
    uint32_t* col_feature;
    char delimiter;
    /* JSON lines: each column's key (UTF-8, not owned), whether a line gave it, and the
     * buffer of unescaped strings */
    const char** col_key;
    size_t* col_key_len;
    uint8_t* col_seen;
    char* text;
    size_t text_cap;
    /* one line's feature groups, in the order they first appear */
    fa_group groups[256];
    uint8_t order[256];
    int n_order;
    size_t* gram_mask;
    size_t gram_mask_cap;
    /* the output: CSR bags, their values, labels and importance weights */
    uint32_t* ids;
    float* values;
    uint8_t* fields;            /* each id's field: its namespace index (a cross's, its first
                                   namespace's; the constant feature's, VW's 128) */
    size_t n_ids, cap_ids;
    int64_t* offsets;           /* n_examples + 1 entries */
    float* labels;
    float* weights;
    size_t n_examples, cap_examples;
    /* the error of the last line that failed: its 1-based byte column (VW) or 0-based field
     * (CSV), and what was wrong */
    int64_t error_column;
    char error[400];
} fa_featuriser;

static inline int fa_grow(void** p, size_t* cap, size_t need, size_t item)
{
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void* q = realloc(*p, c * item);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

/* Room in the output for `ids` ids and values and `examples` examples (offsets one more). */
static int fa_reserve(fa_featuriser* f, size_t ids, size_t examples)
{
    if (ids > f->cap_ids) {
        size_t cap = f->cap_ids ? f->cap_ids : 4096;
        while (cap < ids) cap *= 2;
        void* q = realloc(f->ids, cap * sizeof(uint32_t));
        if (!q) return -1;
        f->ids = (uint32_t*)q;
        q = realloc(f->values, cap * sizeof(float));
        if (!q) return -1;
        f->values = (float*)q;
        q = realloc(f->fields, cap * sizeof(uint8_t));
        if (!q) return -1;
        f->fields = (uint8_t*)q;
        f->cap_ids = cap;
    }
    if (examples > f->cap_examples) {
        size_t cap = f->cap_examples ? f->cap_examples : 256;
        while (cap < examples) cap *= 2;
        void* q = realloc(f->labels, cap * sizeof(float));
        if (!q) return -1;
        f->labels = (float*)q;
        q = realloc(f->weights, cap * sizeof(float));
        if (!q) return -1;
        f->weights = (float*)q;
        q = realloc(f->offsets, (cap + 1) * sizeof(int64_t));
        if (!q) return -1;
        f->offsets = (int64_t*)q;
        f->cap_examples = cap;
    }
    return 0;
}

/* Fails the line: records what was wrong (printf-style) and returns -1. */
#if defined(__GNUC__)
static int fa_fail(fa_featuriser* f, int64_t column, const char* format, ...)
    __attribute__((format(printf, 3, 4)));
#endif
static int fa_fail(fa_featuriser* f, int64_t column, const char* format, ...)
{
    va_list args;
    va_start(args, format);
    vsnprintf(f->error, sizeof(f->error), format, args);
    va_end(args);
    f->error_column = column;
    return -1;
}

/* A token for an error message: at most 40 bytes of it, printf'd as "%.*s". */
#define FA_SHOW(s, n) (int)((n) < 40 ? (n) : 40), (s)

static void fa_reset_line(fa_featuriser* f)
{
    for (int k = 0; k < f->n_order; k++) f->groups[f->order[k]].n = 0;
    f->n_order = 0;
}

static inline int fa_push(fa_featuriser* f, uint8_t index, uint32_t h, float v)
{
    fa_group* g = &f->groups[index];
    if (g->n == g->cap) {
        size_t cap = g->cap ? 2 * g->cap : 32;
        uint32_t* nh = (uint32_t*)realloc(g->h, cap * sizeof(uint32_t));
        if (!nh) return -1;
        g->h = nh;
        float* nv = (float*)realloc(g->v, cap * sizeof(float));
        if (!nv) return -1;
        g->v = nv;
        g->cap = cap;
    }
    if (g->n == 0) {
        int seen = 0;
        for (int k = 0; k < f->n_order; k++) seen |= f->order[k] == index;
        if (!seen) f->order[f->n_order++] = index;
    }
    g->h[g->n] = h;
    g->v[g->n] = v;
    g->n++;
    return 0;
}

/* The length in bytes of the UTF-8 character that starts with byte c (the text is valid). */
static inline size_t fa_char_bytes(uint8_t c) { return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4; }

/* A token's features in group `index`: its character n-grams (of "<token>", n characters each;
 * the whole "<token>" when shorter) when the group asks for them, else the token itself. */
static int fa_push_token(fa_featuriser* f, uint8_t index, uint32_t channel, const char* s, size_t len, float v)
{
    int n = f->char_n[index];
    if (!n) return fa_push(f, index, fa_hash_name(s, len, channel), v);
    char stack[256];
    char* padded = len + 2 <= sizeof(stack) ? stack : (char*)malloc(len + 2);
    if (!padded) return -1;
    padded[0] = '<';
    memcpy(padded + 1, s, len);
    padded[len + 1] = '>';
    size_t total = len + 2, start = 0;
    int status = 0;
    for (;;) {
        size_t end = start;
        int chars = 0;
        while (end < total && chars < n) { end += fa_char_bytes((uint8_t)padded[end]); chars++; }
        if (chars < n && start > 0) break;              /* past the last full n-gram */
        status = fa_push(f, index, fa_hash_name(padded + start, end - start, channel), v);
        if (status || end >= total) break;
        start += fa_char_bytes((uint8_t)padded[start]);
    }
    if (padded != stack) free(padded);
    return status;
}

/* VW's k-skip-n-grams of one group (its add_grams), over its first `length` features. */
static int fa_add_grams(fa_featuriser* f, fa_group* g, uint8_t index, size_t ngram, size_t skip_gram,
                        size_t length, size_t depth, size_t skips)
{
    if (ngram == 0 && f->gram_mask[depth - 1] < length) {
        size_t last = length - f->gram_mask[depth - 1];
        for (size_t i = 0; i < last; i++) {
            uint32_t h = g->h[i];
            for (size_t k = 1; k < depth; k++) h = h * FA_NGRAM_CONSTANT + g->h[i + f->gram_mask[k]];
            if (fa_push(f, index, h, 1.0f)) return -1;
        }
    }
    if (ngram > 0) {
        if (fa_grow((void**)&f->gram_mask, &f->gram_mask_cap, depth + 1, sizeof(size_t))) return -1;
        f->gram_mask[depth] = f->gram_mask[depth - 1] + 1 + skips;
        if (fa_add_grams(f, g, index, ngram - 1, skip_gram, length, depth + 1, 0)) return -1;
    }
    if (skip_gram > 0 && ngram > 0)
        return fa_add_grams(f, g, index, ngram, skip_gram - 1, length, depth, skips + 1);
    return 0;
}

/* Ends a parsed line: its n-grams, then its bag (each group in order, the constant, the
 * crosses), its label and weight appended to the output. */
static int fa_finish_line(fa_featuriser* f, float label, float weight)
{
    for (int k = 0; k < f->n_order; k++) {
        uint8_t index = f->order[k];
        size_t length = f->groups[index].n;
        for (size_t n = 1; n < f->ngram[index]; n++) {
            if (fa_grow((void**)&f->gram_mask, &f->gram_mask_cap, 1, sizeof(size_t))) return -1;
            f->gram_mask[0] = 0;
            if (fa_add_grams(f, &f->groups[index], index, n, f->skip[index], length, 1, 0)) return -1;
        }
    }
    size_t count = f->constant ? 1 : 0;
    for (int k = 0; k < f->n_order; k++) count += f->groups[f->order[k]].n;
    for (int c = 0; c < f->n_quadratic; c++) {
        const fa_group *a = &f->groups[f->quadratic[c][0]], *b = &f->groups[f->quadratic[c][1]];
        count += a == b ? a->n * (a->n + 1) / 2 : a->n * b->n;
    }
    for (int c = 0; c < f->n_cubic; c++) {
        const fa_group *a = &f->groups[f->cubic[c][0]], *b = &f->groups[f->cubic[c][1]], *d = &f->groups[f->cubic[c][2]];
        count += a->n * b->n * d->n;    /* an upper bound when groups repeat */
    }
    if (fa_reserve(f, f->n_ids + count, f->n_examples + 1)) return -1;
    const uint32_t mask = f->mask;
    uint32_t* ids = f->ids + f->n_ids;
    float* values = f->values + f->n_ids;
    uint8_t* fields = f->fields + f->n_ids;
    size_t out = 0;
    for (int k = 0; k < f->n_order; k++) {
        const fa_group* g = &f->groups[f->order[k]];
        memset(fields + out, f->order[k], g->n);
        for (size_t i = 0; i < g->n; i++) { ids[out] = g->h[i] & mask; values[out] = g->v[i]; out++; }
    }
    if (f->constant) { ids[out] = FA_CONSTANT & mask; values[out] = 1.0f; fields[out] = FA_CONSTANT_FIELD; out++; }
    for (int c = 0; c < f->n_quadratic; c++) {
        const fa_group *a = &f->groups[f->quadratic[c][0]], *b = &f->groups[f->quadratic[c][1]];
        const int same = a == b;
        memset(fields + out, f->quadratic[c][0], same ? a->n * (a->n + 1) / 2 : a->n * b->n);
        for (size_t i = 0; i < a->n; i++) {
            const uint32_t half = FA_FNV_PRIME * a->h[i];
            const float va = a->v[i];
            for (size_t j = same ? i : 0; j < b->n; j++) {
                ids[out] = (half ^ b->h[j]) & mask; values[out] = va * b->v[j]; out++;
            }
        }
    }
    for (int c = 0; c < f->n_cubic; c++) {
        const fa_group *a = &f->groups[f->cubic[c][0]], *b = &f->groups[f->cubic[c][1]], *d = &f->groups[f->cubic[c][2]];
        const int same_ab = a == b, same_bd = b == d;
        for (size_t i = 0; i < a->n; i++) {
            const uint32_t half1 = FA_FNV_PRIME * a->h[i];
            for (size_t j = same_ab ? i : 0; j < b->n; j++) {
                const uint32_t half = FA_FNV_PRIME * (half1 ^ b->h[j]);
                const float vab = a->v[i] * b->v[j];
                for (size_t l = same_bd ? j : 0; l < d->n; l++) {
                    ids[out] = (half ^ d->h[l]) & mask; values[out] = vab * d->v[l]; fields[out] = f->cubic[c][0];
                    out++;
                }
            }
        }
    }
    f->n_ids += out;
    f->labels[f->n_examples] = label;
    f->weights[f->n_examples] = weight;
    f->n_examples++;
    f->offsets[f->n_examples] = (int64_t)f->n_ids;
    return 0;
}

static inline int fa_space(char c) { return c == ' ' || c == '\t'; }

/* The end of a name in VW's format: the first byte of [p, end) that is a space, a tab, ':' or
 * '|', or end. Eight bytes at a time where the machine is little-endian: a byte equal to c is
 * a zero byte of w ^ (c in every byte), and the lowest set bit of (x - 0x01...) & ~x & 0x80...
 * marks x's first zero byte (bits above it may be set by the borrow, never below), so the
 * lowest bit of the four masks together is the first of the four bytes. */
static inline const char* fa_name_end(const char* p, const char* end)
{
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    while (end - p >= 8) {
        uint64_t w, a, b, c, d;
        memcpy(&w, p, 8);
        a = w ^ (ones * ' '); b = w ^ (ones * '\t'); c = w ^ (ones * ':'); d = w ^ (ones * '|');
        uint64_t found = (((a - ones) & ~a) | ((b - ones) & ~b) | ((c - ones) & ~c) | ((d - ones) & ~d)) & highs;
        if (found) return p + (__builtin_ctzll(found) >> 3);
        p += 8;
    }
#endif
    while (p < end && !fa_space(*p) && *p != ':' && *p != '|') p++;
    return p;
}

/* A label or importance weight: finite, and a weight >= 0. */
static int fa_label_token(fa_featuriser* f, const char* line, const char* s, const char* e, int is_weight, float* out)
{
    double x;
    const char* stop;
    const char* what = is_weight ? "importance weight" : "label";
    if (!fa_parse_number(s, e, &stop, &x) || stop != e)
        return fa_fail(f, s - line + 1, "the %s '%.*s' is not a number", what, FA_SHOW(s, (size_t)(e - s)));
    if (!isfinite((float)x))
        return fa_fail(f, s - line + 1, "the %s '%.*s' is not finite", what, FA_SHOW(s, (size_t)(e - s)));
    if (is_weight && x < 0)
        return fa_fail(f, s - line + 1, "the importance weight '%.*s' is negative", FA_SHOW(s, (size_t)(e - s)));
    *out = (float)x;
    return 0;
}

/* One line of VW's text format (without its newline): `label [importance] ['tag]|ns[:value]
 * feature[:value] ... |ns ...`. Returns 0 with the example appended, 1 for a blank line, -1
 * with f->error set (nothing appended). */
static int fa_parse_vw_line(fa_featuriser* f, const char* line, size_t len)
{
    fa_reset_line(f);
    if (len >= 3 && (uint8_t)line[0] == 0xEF && (uint8_t)line[1] == 0xBB && (uint8_t)line[2] == 0xBF) {
        line += 3; len -= 3;
    }
    if (len && line[len - 1] == '\r') len--;
    size_t blank = 0;
    while (blank < len && fa_space(line[blank])) blank++;
    if (blank == len) return 1;
    int64_t bad = fa_utf8_error(line, len);
    if (bad >= 0) return fa_fail(f, bad + 1, "invalid UTF-8 (byte 0x%02x)", (uint8_t)line[bad]);
    const char* end = line + len;
    const char* bar = memchr(line, '|', len);
    if (!bar) return fa_fail(f, (int64_t)len + 1, "no '|': a line is `label [importance] ['tag]|namespace features ...`");
    /* the label part: VW reads what follows a tab, and drops a tag (a last word starting with
     * ' or written against the '|') */
    const char* s = line;
    const char* tab = memchr(line, '\t', (size_t)(bar - line));
    if (tab) s = tab + 1;
    const char* words[3];
    const char* word_ends[3];
    int n_words = 0;
    const char* p = s;
    while (p < bar) {
        while (p < bar && *p == ' ') p++;
        if (p == bar) break;
        const char* w = p;
        while (p < bar && *p != ' ') p++;
        if (*w == '\'' || p == bar) continue;                  /* the tag */
        if (n_words == 2)
            return fa_fail(f, w - line + 1, "more than `label importance` before the first '|': '%.*s'",
                           FA_SHOW(w, (size_t)(p - w)));
        words[n_words] = w; word_ends[n_words] = p; n_words++;
    }
    float label = NAN, weight = 1.0f;
    if (n_words >= 1 && fa_label_token(f, line, words[0], word_ends[0], 0, &label)) return -1;
    if (n_words == 2 && fa_label_token(f, line, words[1], word_ends[1], 1, &weight)) return -1;
    /* the namespaces */
    p = bar;
    while (p < end) {
        /* *p == '|' */
        p++;
        uint8_t index = ' ';
        uint32_t channel = 0;
        float scale = 1.0f;
        uint32_t anonymous = 0;
        if (p < end && *p == ':')
            return fa_fail(f, p - line + 1, "a namespace value without a namespace name ('|:')");
        if (p < end && !fa_space(*p) && *p != '|') {
            const char* name = p;
            p = fa_name_end(p, end);
            index = (uint8_t)name[0];
            channel = fa_hash_name(name, (size_t)(p - name), 0);
            if (p < end && *p == ':') {
                const char* v = ++p;
                double x;
                const char* stop;
                if (!fa_parse_number(v, end, &stop, &x) || (stop < end && !fa_space(*stop) && *stop != '|')) {
                    const char* e = v;
                    while (e < end && !fa_space(*e) && *e != '|') e++;
                    return fa_fail(f, v - line + 1, "namespace '%.*s': its value '%.*s' is not a number",
                                   FA_SHOW(name, (size_t)(v - 1 - name)), FA_SHOW(v, (size_t)(e - v)));
                }
                if (!isfinite((float)x))
                    return fa_fail(f, v - line + 1, "namespace '%.*s': its value '%.*s' is not finite",
                                   FA_SHOW(name, (size_t)(v - 1 - name)), FA_SHOW(v, (size_t)(stop - v)));
                scale = (float)x;
                p = stop;
            }
        }
        /* its features */
        while (p < end && *p != '|') {
            if (fa_space(*p)) { p++; continue; }
            const char* name = p;
            p = fa_name_end(p, end);
            size_t name_len = (size_t)(p - name);
            double x = 1.0;
            if (p < end && *p == ':') {
                const char* v = ++p;
                const char* stop;
                if (!fa_parse_number(v, end, &stop, &x) || (stop < end && !fa_space(*stop) && *stop != '|')) {
                    const char* e = v;
                    while (e < end && !fa_space(*e) && *e != '|') e++;
                    return fa_fail(f, v - line + 1, "feature '%.*s:%.*s': the value is not a number",
                                   FA_SHOW(name, name_len), FA_SHOW(v, (size_t)(e - v)));
                }
                if (!isfinite((float)x))
                    return fa_fail(f, v - line + 1, "feature '%.*s:%.*s': the value is not finite",
                                   FA_SHOW(name, name_len), FA_SHOW(v, (size_t)(stop - v)));
                p = stop;
            }
            float value = scale * (float)x;
            if (name_len == 0) {                                   /* ":value": VW's anonymous feature */
                if (value != 0.0f && fa_push(f, index, channel + anonymous, value)) return -2;
                anonymous++;
                continue;
            }
            if (value == 0.0f) continue;                          /* VW keeps no zero-valued feature */
            if (fa_push_token(f, index, channel, name, name_len, value)) return -2;
        }
    }
    return fa_finish_line(f, label, weight) ? -2 : 0;
}

/* One field [s, e) of column `column` (CSV's field, JSON's value), as f->col_kind says: the
 * label or importance weight into *label, *weight, or the features of its namespace. Returns
 * 0, -1 with f->error set, -2 out of memory. */
static int fa_column_field(fa_featuriser* f, int column, const char* s, const char* e, float* label, float* weight)
{
    const uint8_t kind = f->col_kind[column];
    const uint8_t index = f->col_index[column];
    const uint32_t channel = f->col_channel[column];
    int status = 0;
    if (kind == FA_COL_LABEL || kind == FA_COL_WEIGHT) {
        if (s == e) status = fa_fail(f, column, "the %s is empty", kind == FA_COL_LABEL ? "label" : "importance weight");
        else if (fa_label_token(f, s, s, e, kind == FA_COL_WEIGHT, kind == FA_COL_LABEL ? label : weight)) {
            f->error_column = column;
            status = -1;
        }
    } else if (kind == FA_COL_CATEGORICAL) {
        if (s != e) status = fa_push_token(f, index, channel, s, (size_t)(e - s), 1.0f) ? -2 : 0;
    } else if (kind == FA_COL_NUMERIC) {
        const char* t = s;
        const char* u = e;
        while (t < u && fa_space(*t)) t++;
        while (u > t && fa_space(u[-1])) u--;
        if (t != u) {
            double x;
            const char* stop;
            if (!fa_parse_number(t, u, &stop, &x) || stop != u)
                status = fa_fail(f, column, "the value '%.*s' is not a number", FA_SHOW(t, (size_t)(u - t)));
            else if (!isfinite((float)x))
                status = fa_fail(f, column, "the value '%.*s' is not finite", FA_SHOW(t, (size_t)(u - t)));
            else if (x != 0.0)
                status = fa_push(f, index, f->col_feature[column], (float)x) ? -2 : 0;
        }
    } else if (kind == FA_COL_TEXT) {
        const char* t = s;
        while (!status && t < e) {
            if (fa_space(*t)) { t++; continue; }
            const char* w = t;
            while (t < e && !fa_space(*t)) t++;
            status = fa_push_token(f, index, channel, w, (size_t)(t - w), 1.0f) ? -2 : 0;
        }
    }
    return status;
}

/* One line of CSV/TSV (without its newline), its columns as f->col_* say. A field may be
 * quoted ("a, b" and "" inside for a quote); a quoted field runs to its closing quote on the
 * same line. Returns as fa_parse_vw_line; f->error_column is the 0-based field. */
static int fa_parse_csv_line(fa_featuriser* f, const char* line, size_t len)
{
    fa_reset_line(f);
    if (len && line[len - 1] == '\r') len--;
    if (len == 0) return 1;
    int64_t bad = fa_utf8_error(line, len);
    if (bad >= 0) {
        int field = 0;
        for (int64_t i = 0; i < bad; i++) field += line[i] == f->delimiter;
        return fa_fail(f, field, "invalid UTF-8 (byte 0x%02x at byte %lld of the line)", (uint8_t)line[bad],
                       (long long)bad + 1);
    }
    const char* p = line;
    const char* end = line + len;
    float label = NAN, weight = 1.0f;
    char stack[512];
    int column = 0;
    for (;;) {
        if (column == f->n_columns) {
            int fields = column + 1;
            for (const char* q = p; q < end; q++) fields += *q == f->delimiter;
            return fa_fail(f, column, "%d fields, more than the %d columns declared", fields, f->n_columns);
        }
        /* the field [s, e), unquoted into `buffer` when quoted */
        const char* s = p;
        const char* e;
        char* unquoted = NULL;
        if (p < end && *p == '"') {
            size_t n = 0, cap = sizeof(stack);
            char* buffer = stack;
            p++;
            for (;;) {
                if (p == end) {
                    if (buffer != stack) free(buffer);
                    return fa_fail(f, column, "a quoted field without its closing quote");
                }
                if (*p == '"') {
                    if (p + 1 < end && p[1] == '"') p++;
                    else { p++; break; }
                }
                if (n == cap) {
                    char* grown = (char*)malloc(2 * cap);
                    if (!grown) { if (buffer != stack) free(buffer); return -2; }
                    memcpy(grown, buffer, n);
                    if (buffer != stack) free(buffer);
                    buffer = grown; cap *= 2;
                }
                buffer[n++] = *p++;
            }
            if (p < end && *p != f->delimiter) {
                if (buffer != stack) free(buffer);
                return fa_fail(f, column, "text after a quoted field's closing quote");
            }
            unquoted = buffer;
            s = buffer; e = buffer + n;
        } else {
            while (p < end && *p != f->delimiter) p++;
            e = p;
        }
        int status = fa_column_field(f, column, s, e, &label, &weight);
        if (unquoted && unquoted != stack) free(unquoted);
        if (status) return status;
        column++;
        if (p == end) break;
        p++;                                                       /* the delimiter */
    }
    if (column < f->n_columns)
        return fa_fail(f, column, "%d fields, fewer than the %d columns declared", column, f->n_columns);
    return fa_finish_line(f, label, weight) ? -2 : 0;
}

/* ------------------------------------------------------------------ JSON lines */

static inline const char* fa_json_space(const char* p, const char* end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')) p++;
    return p;
}

/* Appends code point c as UTF-8 to f->text at *n (room checked by the caller: 4 bytes). */
static inline void fa_json_utf8(fa_featuriser* f, size_t* n, uint32_t c)
{
    char* t = f->text + *n;
    if (c < 0x80) { t[0] = (char)c; *n += 1; }
    else if (c < 0x800) { t[0] = (char)(0xC0 | c >> 6); t[1] = (char)(0x80 | (c & 0x3F)); *n += 2; }
    else if (c < 0x10000) {
        t[0] = (char)(0xE0 | c >> 12); t[1] = (char)(0x80 | (c >> 6 & 0x3F)); t[2] = (char)(0x80 | (c & 0x3F));
        *n += 3;
    } else {
        t[0] = (char)(0xF0 | c >> 18); t[1] = (char)(0x80 | (c >> 12 & 0x3F));
        t[2] = (char)(0x80 | (c >> 6 & 0x3F)); t[3] = (char)(0x80 | (c & 0x3F)); *n += 4;
    }
}

static inline int fa_json_hex4(const char* p, const char* end, uint32_t* out)
{
    uint32_t c = 0;
    if (end - p < 4) return 0;
    for (int i = 0; i < 4; i++) {
        char h = p[i];
        int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
              : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
        if (d < 0) return 0;
        c = c * 16 + (uint32_t)d;
    }
    *out = c;
    return 1;
}

/* The JSON string whose opening quote is at p, unescaped into f->text from offset *n (which
 * it advances). Returns the position after its closing quote; NULL with f->error set (-1)
 * or, *status -2, out of memory. */
static const char* fa_json_string(fa_featuriser* f, const char* line, const char* p, const char* end,
                                  size_t* n, int column, int* status)
{
    const char* open = p++;
    for (;;) {
        if (f->text_cap < *n + 8 && fa_grow((void**)&f->text, &f->text_cap, *n + 8, 1)) { *status = -2; return NULL; }
        if (p == end) { *status = fa_fail(f, column, "a string without its closing quote (from byte %lld)",
                                          (long long)(open - line) + 1); return NULL; }
        char c = *p;
        if (c == '"') return p + 1;
        if ((uint8_t)c < 0x20) { *status = fa_fail(f, column, "a control character in a string (byte %lld)",
                                                   (long long)(p - line) + 1); return NULL; }
        if (c != '\\') { f->text[(*n)++] = c; p++; continue; }
        if (p + 1 == end) { p++; continue; }                        /* the unclosed string's error */
        char e = p[1];
        const char* simple = strchr("\"\\/bfnrt", e);
        if (e && simple) {
            f->text[(*n)++] = "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
            p += 2;
            continue;
        }
        uint32_t u, low;
        if (e != 'u' || !fa_json_hex4(p + 2, end, &u)) {
            *status = fa_fail(f, column, "a bad escape in a string (byte %lld)", (long long)(p - line) + 1);
            return NULL;
        }
        p += 6;
        if (u >= 0xD800 && u < 0xDC00) {                            /* a surrogate pair */
            if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || !fa_json_hex4(p + 2, end, &low)
                || low < 0xDC00 || low >= 0xE000) {
                *status = fa_fail(f, column, "a lone surrogate \\u escape (byte %lld)", (long long)(p - line) - 5);
                return NULL;
            }
            u = 0x10000 + ((u - 0xD800) << 10) + (low - 0xDC00);
            p += 6;
        } else if (u >= 0xDC00 && u < 0xE000) {
            *status = fa_fail(f, column, "a lone surrogate \\u escape (byte %lld)", (long long)(p - line) - 5);
            return NULL;
        }
        fa_json_utf8(f, n, u);
    }
}

/* The end of the JSON value at p (a key's value that no column reads: any value, nested
 * ones too); NULL with f->error set. */
static const char* fa_json_skip(fa_featuriser* f, const char* line, const char* p, const char* end, int* status)
{
    int depth = 0;
    do {
        p = fa_json_space(p, end);
        if (p == end) break;
        if (*p == '"') {
            size_t n = 0;
            p = fa_json_string(f, line, p, end, &n, -1, status);
            if (!p) return NULL;
        } else if (*p == '{' || *p == '[') { depth++; p++; }
        else if (*p == '}' || *p == ']') { if (!depth) break; depth--; p++; }
        else if (*p == ',' || *p == ':') { if (!depth) break; p++; }
        else { while (p < end && !strchr(" \t\r\n,:]}[{\"", *p)) p++; }
    } while (depth);
    return p;
}

/* One line of JSON lines (without its newline): an object whose keys name the columns
 * (f->col_key); a key no column names is skipped, a column whose key is missing or null
 * gives nothing (a label NaN, an importance weight 1). A string value is its text, a number
 * or true/false the text written. Returns as fa_parse_vw_line; f->error_column is the
 * column of the key at fault, or -1 (the message gives the byte). */
static int fa_parse_json_line(fa_featuriser* f, const char* line, size_t len)
{
    fa_reset_line(f);
    const char* end = line + len;
    const char* p = fa_json_space(line, end);
    if (p == end) return 1;
    int64_t bad = fa_utf8_error(line, len);
    if (bad >= 0)
        return fa_fail(f, -1, "invalid UTF-8 (byte 0x%02x at byte %lld of the line)", (uint8_t)line[bad],
                       (long long)bad + 1);
    if (*p != '{') return fa_fail(f, -1, "a line is one JSON object {...}, byte %lld is '%c'",
                                  (long long)(p - line) + 1, *p);
    memset(f->col_seen, 0, (size_t)f->n_columns);
    float label = NAN, weight = 1.0f;
    int status = 0;
    p = fa_json_space(p + 1, end);
    if (p < end && *p == '}') p++;
    else for (;;) {
        if (p == end || *p != '"')
            return fa_fail(f, -1, "a key (a string) expected at byte %lld", (long long)(p - line) + 1);
        size_t key_len = 0;
        p = fa_json_string(f, line, p, end, &key_len, -1, &status);
        if (!p) return status;
        int column = -1;
        for (int k = 0; k < f->n_columns && column < 0; k++)
            if (f->col_key_len[k] == key_len && !memcmp(f->col_key[k], f->text, key_len)) column = k;
        p = fa_json_space(p, end);
        if (p == end || *p != ':')
            return fa_fail(f, column, "':' expected after a key at byte %lld", (long long)(p - line) + 1);
        p = fa_json_space(p + 1, end);
        if (p == end) return fa_fail(f, column, "a value expected at the end of the line");
        if (column < 0) {
            const char* after = fa_json_skip(f, line, p, end, &status);
            if (!after) return status;
            if (after == p) return fa_fail(f, -1, "a value expected at byte %lld", (long long)(p - line) + 1);
            p = after;
        } else {
            if (f->col_seen[column]) return fa_fail(f, column, "the key is given twice");
            f->col_seen[column] = 1;
            if (*p == '{' || *p == '[')
                return fa_fail(f, column, "the value is %s; a column reads a string, a number, true, false "
                               "or null", *p == '{' ? "an object" : "an array");
            if (*p == '"') {
                size_t n = 0;
                p = fa_json_string(f, line, p, end, &n, column, &status);
                if (!p) return status;
                status = fa_column_field(f, column, f->text, f->text + n, &label, &weight);
            } else {
                const char* s = p;
                while (p < end && !strchr(" \t\r\n,}]", *p)) p++;
                if (p - s == 4 && !memcmp(s, "null", 4)) status = 0;
                else if (((p - s == 4 && !memcmp(s, "true", 4)) || (p - s == 5 && !memcmp(s, "false", 5)))
                         || (s < p && (*s == '-' || (*s >= '0' && *s <= '9'))))
                    status = fa_column_field(f, column, s, p, &label, &weight);
                else
                    status = fa_fail(f, column, "the value '%.*s' is not JSON", FA_SHOW(s, (size_t)(p - s)));
            }
            if (status) return status;
        }
        p = fa_json_space(p, end);
        if (p < end && *p == ',') { p = fa_json_space(p + 1, end); continue; }
        if (p < end && *p == '}') { p++; break; }
        return fa_fail(f, -1, "',' or '}' expected at byte %lld", (long long)(p - line) + 1);
    }
    p = fa_json_space(p, end);
    if (p != end) return fa_fail(f, -1, "text after the object at byte %lld", (long long)(p - line) + 1);
    return fa_finish_line(f, label, weight) ? -2 : 0;
}

static void fa_free(fa_featuriser* f)
{
    for (int i = 0; i < 256; i++) { free(f->groups[i].h); free(f->groups[i].v); }
    free(f->gram_mask);
    free(f->ids); free(f->values); free(f->fields); free(f->offsets); free(f->labels); free(f->weights);
    free(f->col_kind); free(f->col_index); free(f->col_channel); free(f->col_feature);
    free(f->col_key); free(f->col_key_len); free(f->col_seen); free(f->text);
    memset(f, 0, sizeof(*f));
}

#endif
