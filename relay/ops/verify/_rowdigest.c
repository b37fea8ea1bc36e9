/*
 * relay.ops.verify._rowdigest: the row digest of canal-json records, straight from their bytes.
 *
 * ``data_digests(values, names, kinds, converters)`` gives, for each canal-json record value in ``values``,
 * exactly what ``relay.ops.verify.topic.data_digest(shard, parse_datas([value])[0])`` gives — the first
 * 8 bytes of the MD5 of the row's digest text (``relay.ops.verify.digest``), as an int — or None where it
 * cannot be sure to: then the caller takes the Python path for that record. ``names`` are the shard's
 * column names (UTF-8 bytes, table order), ``kinds`` one byte per column (``digest.HashKind``: 0 TEXT,
 * 1 BINARY, 2 BIT, 3 DOUBLE, 4 FLOAT), ``converters`` per column the Python conversion of a str value
 * for DOUBLE and FLOAT columns (``digest.STR_CONVERTERS``), None elsewhere.
 *
 * The value's ``data`` row is the bytes between its first ``"data":[`` and the ``],"old":`` after it,
 * as ``parse_datas`` slices them. It is read here when it is one JSON object whose keys are exactly the
 * column names, once each, and whose values are JSON strings or null; anything else — a number, a
 * duplicate or missing key, a control character, invalid UTF-8, a lone surrogate escape — gives None.
 * A string's length in the digest header is in characters, as Python's ``len``; a BINARY column's text is
 * the upper-case hex of its characters when each is below 256 (ISO-8859-1: canal's bytes), else the text
 * itself; DOUBLE and FLOAT texts go through their Python converter (the layout of MySQL's double text).
 *
 * Why: reading a topic for ``relay verify`` spent ~10 of its ~27 us a record parsing ``data`` into a dict
 * and building the digest text in Python. MD5 is RFC 1321's, written here (no library call per row).
 * Built by scripts/build_compiled.py beside the mypyc modules; used only when the relay runs compiled
 * (relay._native), so RELAY_PURE_PYTHON=1 runs the Python path alone.
 */
#define _GNU_SOURCE
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <math.h>

/* ---- MD5 (RFC 1321) ------------------------------------------------------------------------------ */

typedef struct {
    uint32_t a, b, c, d;
} md5_state;

static const uint32_t MD5_K[64] = {
    0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613, 0xfd469501,
    0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193, 0xa679438e, 0x49b40821,
    0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d, 0x02441453, 0xd8a1e681, 0xe7d3fbc8,
    0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed, 0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a,
    0xfffa3942, 0x8771f681, 0x6d9d6122, 0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70,
    0x289b7ec6, 0xeaa127fa, 0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665,
    0xf4292244, 0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
    0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb, 0xeb86d391,
};
static const unsigned char MD5_S[64] = {
    7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 5, 9,  14, 20, 5, 9,  14, 20, 5, 9,  14, 20,
    5, 9,  14, 20, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 6, 10, 15, 21, 6, 10, 15, 21,
    6, 10, 15, 21, 6, 10, 15, 21,
};

static void md5_block(md5_state *st, const unsigned char *p) {
    uint32_t m[16];
    for (int i = 0; i < 16; i++) {
        m[i] = (uint32_t)p[4 * i] | ((uint32_t)p[4 * i + 1] << 8) | ((uint32_t)p[4 * i + 2] << 16) |
               ((uint32_t)p[4 * i + 3] << 24);
    }
    uint32_t a = st->a, b = st->b, c = st->c, d = st->d;
    for (int i = 0; i < 64; i++) {
        uint32_t f;
        int g;
        if (i < 16) {
            f = (b & c) | (~b & d);
            g = i;
        } else if (i < 32) {
            f = (d & b) | (~d & c);
            g = (5 * i + 1) & 15;
        } else if (i < 48) {
            f = b ^ c ^ d;
            g = (3 * i + 5) & 15;
        } else {
            f = c ^ (b | ~d);
            g = (7 * i) & 15;
        }
        uint32_t t = a + f + MD5_K[i] + m[g];
        a = d;
        d = c;
        c = b;
        b = b + ((t << MD5_S[i]) | (t >> (32 - MD5_S[i])));
    }
    st->a += a;
    st->b += b;
    st->c += c;
    st->d += d;
}

/* The first 8 bytes of MD5(data), big-endian, as the Python side's int.from_bytes(md5(...)[:8], "big"). */
static unsigned long long md5_head(const unsigned char *data, size_t n) {
    md5_state st = {0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476};
    size_t whole = n & ~(size_t)63;
    for (size_t i = 0; i < whole; i += 64) md5_block(&st, data + i);
    unsigned char tail[128];
    size_t rest = n - whole;
    memcpy(tail, data + whole, rest);
    tail[rest] = 0x80;
    size_t padded = rest + 1 + 8 <= 64 ? 64 : 128;
    memset(tail + rest + 1, 0, padded - rest - 1);
    uint64_t bits = (uint64_t)n * 8;
    for (int i = 0; i < 8; i++) tail[padded - 8 + i] = (unsigned char)(bits >> (8 * i));
    md5_block(&st, tail);
    if (padded == 128) md5_block(&st, tail + 64);
    uint32_t words[2] = {st.a, st.b};
    unsigned long long out = 0;
    for (int w = 0; w < 2; w++) {
        for (int i = 0; i < 4; i++) out = (out << 8) | ((words[w] >> (8 * i)) & 0xff);
    }
    return out;
}

/* ---- growable byte buffer --------------------------------------------------------------------------- */

typedef struct {
    char *p;
    Py_ssize_t n, cap;
} buf;

static int buf_reserve(buf *b, Py_ssize_t more) {
    if (b->n + more <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + more) cap *= 2;
    char *p = PyMem_Realloc(b->p, (size_t)cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

static int buf_put(buf *b, const char *s, Py_ssize_t n) {
    if (buf_reserve(b, n) < 0) return -1;
    memcpy(b->p + b->n, s, (size_t)n);
    b->n += n;
    return 0;
}

/* ---- the JSON of one data object ------------------------------------------------------------------- */

enum { OK = 0, UNSURE = 1, FAILED = -1 }; /* UNSURE: leave the record to the Python path */

typedef struct {
    Py_ssize_t at, len; /* the value's UTF-8 in the scratch buffer */
    Py_ssize_t chars;   /* its length in characters */
    int null, seen, wide; /* wide: a character above 0xFF */
} column;

static const unsigned char *skip_ws(const unsigned char *p, const unsigned char *end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    return p;
}

static int hexval(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int read_u4(const unsigned char *p, const unsigned char *end, unsigned *out) {
    if (end - p < 4) return -1;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p[i]);
        if (h < 0) return -1;
        v = (v << 4) | (unsigned)h;
    }
    *out = v;
    return 0;
}

static int put_utf8(buf *b, unsigned cp) {
    char s[4];
    Py_ssize_t n;
    if (cp < 0x80) {
        s[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        s[0] = (char)(0xC0 | (cp >> 6));
        s[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        s[0] = (char)(0xE0 | (cp >> 12));
        s[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        s[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        s[0] = (char)(0xF0 | (cp >> 18));
        s[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        s[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        s[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    return buf_put(b, s, n);
}

/* One UTF-8 sequence starting at *pp (its first byte >= 0x80), strictly (no overlong forms, no encoded
 * surrogates, nothing above U+10FFFF): its code point, *pp moved past it; -1 where it is not valid. */
static long utf8_seq(const unsigned char **pp, const unsigned char *end) {
    const unsigned char *p = *pp;
    unsigned c = p[0];
    int n;
    unsigned cp;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
        n = 1;
        cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 2;
        cp = c & 0x0F;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 3;
        cp = c & 0x07;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        return -1;
    }
    if (end - p < n + 1) return -1;
    for (int i = 1; i <= n; i++) {
        unsigned char d = p[i];
        if (i == 1 ? (d < lo || d > hi) : (d < 0x80 || d > 0xBF)) return -1;
        cp = (cp << 6) | (d & 0x3F);
    }
    *pp = p + n + 1;
    return (long)cp;
}

/* A JSON string whose opening quote is at *pp: its text appended to ``out`` as UTF-8, *pp moved past
 * the closing quote. Counts its characters and whether one is above 0xFF. */
static int read_string(const unsigned char **pp, const unsigned char *end, buf *out, Py_ssize_t *chars,
                       int *wide) {
    const unsigned char *p = *pp + 1;
    Py_ssize_t count = 0;
    int above = 0;
    for (;;) {
        const unsigned char *run = p; /* a run of plain ASCII: copied at once */
        while (p < end && *p >= 0x20 && *p < 0x80 && *p != '"' && *p != '\\') p++;
        if (p > run) {
            if (buf_put(out, (const char *)run, p - run) < 0) return FAILED;
            count += p - run;
        }
        if (p >= end) return UNSURE;
        unsigned char c = *p;
        if (c == '"') {
            *pp = p + 1;
            *chars = count;
            *wide = above;
            return OK;
        }
        if (c < 0x20) return UNSURE; /* a raw control character: json.loads refuses it */
        if (c >= 0x80) {
            const unsigned char *start = p;
            long cp = utf8_seq(&p, end);
            if (cp < 0) return UNSURE;
            if (cp > 0xFF) above = 1;
            if (buf_put(out, (const char *)start, p - start) < 0) return FAILED;
            count++;
            continue;
        }
        /* a backslash */
        if (end - p < 2) return UNSURE;
        unsigned char e = p[1];
        p += 2;
        char ch;
        switch (e) {
        case '"': ch = '"'; break;
        case '\\': ch = '\\'; break;
        case '/': ch = '/'; break;
        case 'b': ch = '\b'; break;
        case 'f': ch = '\f'; break;
        case 'n': ch = '\n'; break;
        case 'r': ch = '\r'; break;
        case 't': ch = '\t'; break;
        case 'u': {
            unsigned cp;
            if (read_u4(p, end, &cp) < 0) return UNSURE;
            p += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF) { /* a pair makes one character; a lone half does not */
                unsigned low;
                if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || read_u4(p + 2, end, &low) < 0) return UNSURE;
                if (low < 0xDC00 || low > 0xDFFF) return UNSURE;
                p += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                return UNSURE;
            }
            if (cp > 0xFF) above = 1;
            if (put_utf8(out, cp) < 0) return FAILED;
            count++;
            continue;
        }
        default:
            return UNSURE;
        }
        if (buf_put(out, &ch, 1) < 0) return FAILED;
        count++;
    }
}

/* The data object of ``value``: each column's text in ``cols`` (UTF-8 in ``scratch``). */
static int read_row(const unsigned char *value, Py_ssize_t size, PyObject *names, column *cols,
                    Py_ssize_t ncols, buf *scratch, buf *key) {
    static const char DATA[] = "\"data\":[", OLD[] = "],\"old\":";
    if (size < 1 || value[0] != '{') return UNSURE;
    const unsigned char *start = memmem(value, (size_t)size, DATA, sizeof(DATA) - 1);
    if (start == NULL || start == value) return UNSURE;
    const unsigned char *from = start + sizeof(DATA) - 1;
    const unsigned char *end = memmem(start, (size_t)(value + size - start), OLD, sizeof(OLD) - 1);
    if (end == NULL || end <= start) return UNSURE;
    const unsigned char *p = skip_ws(from, end);
    if (p >= end || *p != '{') return UNSURE;
    p = skip_ws(p + 1, end);
    Py_ssize_t found = 0, next = 0;
    if (p < end && *p == '}') {
        p++;
    } else {
        for (;;) {
            if (p >= end || *p != '"') return UNSURE;
            key->n = 0;
            Py_ssize_t kchars;
            int kwide;
            int r = read_string(&p, end, key, &kchars, &kwide);
            if (r != OK) return r;
            /* the column it names: the next one in table order, as the codec writes them, else any */
            Py_ssize_t at = -1;
            for (Py_ssize_t tried = 0; tried < ncols; tried++) {
                Py_ssize_t i = (next + tried) % ncols;
                PyObject *name = PyTuple_GET_ITEM(names, i);
                if (PyBytes_GET_SIZE(name) == key->n && memcmp(PyBytes_AS_STRING(name), key->p, (size_t)key->n) == 0) {
                    at = i;
                    break;
                }
            }
            if (at < 0 || cols[at].seen) return UNSURE; /* not a column, or twice */
            next = at + 1;
            column *col = &cols[at];
            col->seen = 1;
            found++;
            p = skip_ws(p, end);
            if (p >= end || *p != ':') return UNSURE;
            p = skip_ws(p + 1, end);
            if (p < end && *p == '"') {
                col->at = scratch->n;
                r = read_string(&p, end, scratch, &col->chars, &col->wide);
                if (r != OK) return r;
                col->len = scratch->n - col->at;
                col->null = 0;
            } else if (end - p >= 4 && memcmp(p, "null", 4) == 0) {
                p += 4;
                col->null = 1;
            } else {
                return UNSURE; /* a number, a literal, an object: not canal text */
            }
            p = skip_ws(p, end);
            if (p < end && *p == ',') {
                p = skip_ws(p + 1, end);
                continue;
            }
            if (p < end && *p == '}') {
                p++;
                break;
            }
            return UNSURE;
        }
    }
    p = skip_ws(p, end);
    if (p != end || found != ncols) return UNSURE;
    return OK;
}


/* A DOUBLE/FLOAT column's digest text for the common case, in C (``digest._number_text``): ``text`` strictly
 * a decimal number (sign, digits, one point, an exponent: what float() reads the same as C), the value
 * (FLOAT: rounded to float32 as struct's "<f" does) non-zero and in [1e-4, 1e15), where MySQL's text is
 * Python's repr without a trailing ".0". Returns the length written to ``out``, or -1: the Python converter
 * decides (zero, other ranges, inf/nan, underscores, spaces, anything else). */
static int number_text(const unsigned char *text, Py_ssize_t n, int single, char *out, size_t room) {
    if (n < 1 || n > 64) return -1;
    Py_ssize_t i = 0;
    int digits = 0;
    if (text[i] == '-' || text[i] == '+') i++;
    while (i < n && text[i] >= '0' && text[i] <= '9') i++, digits++;
    if (i < n && text[i] == '.') {
        i++;
        while (i < n && text[i] >= '0' && text[i] <= '9') i++, digits++;
    }
    if (digits == 0) return -1;
    if (i < n && (text[i] == 'e' || text[i] == 'E')) {
        i++;
        if (i < n && (text[i] == '-' || text[i] == '+')) i++;
        int exp_digits = 0;
        while (i < n && text[i] >= '0' && text[i] <= '9') i++, exp_digits++;
        if (exp_digits == 0) return -1;
    }
    if (i != n) return -1;
    char copy[65];
    memcpy(copy, text, (size_t)n);
    copy[n] = 0;
    char *end = NULL;
    double x = PyOS_string_to_double(copy, &end, NULL);
    if (x == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    if (end != copy + n) return -1;
    if (single) {
        float y = (float)x;
        if (isinf(y)) return -1;
        x = (double)y;
    }
    double a = fabs(x);
    if (!(a >= 1e-4 && a < 1e15)) return -1;
    char *repr = PyOS_double_to_string(x, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (repr == NULL) {
        PyErr_Clear();
        return -1;
    }
    size_t len = strlen(repr);
    if (len >= 2 && repr[len - 2] == '.' && repr[len - 1] == '0') len -= 2;
    if (len >= room || memchr(repr, 'e', len) != NULL) { /* positional in this range; else let Python say */
        PyMem_Free(repr);
        return -1;
    }
    memcpy(out, repr, len);
    PyMem_Free(repr);
    return (int)len;
}

static const char HEXUP[] = "0123456789ABCDEF";

/* The digest text of the row read into ``cols``: the header, '|', the texts. */
static int digest_row(column *cols, Py_ssize_t ncols, const char *kinds, PyObject *converters, buf *scratch,
                      buf *out, buf *body) {
    char num[24], num2[40];
    int fast;
    out->n = 0;
    body->n = 0;
    for (Py_ssize_t i = 0; i < ncols; i++) {
        column *col = &cols[i];
        if (i > 0 && buf_put(out, ",", 1) < 0) return FAILED;
        if (col->null) {
            if (buf_put(out, "N", 1) < 0) return FAILED;
            continue;
        }
        const unsigned char *text = (const unsigned char *)scratch->p + col->at;
        Py_ssize_t chars = col->chars;
        char kind = kinds[i];
        if (kind == 1 && !col->wide) { /* BINARY: the hex of each character (ISO-8859-1) */
            if (buf_reserve(body, 2 * chars) < 0) return FAILED;
            char *w = body->p + body->n;
            const unsigned char *q = text, *qend = text + col->len;
            while (q < qend) {
                unsigned cp = *q++;
                if (cp >= 0x80) cp = ((cp & 0x1F) << 6) | (*q++ & 0x3F); /* two bytes: below 0x100 */
                *w++ = HEXUP[cp >> 4];
                *w++ = HEXUP[cp & 15];
            }
            body->n += 2 * chars;
            chars *= 2;
        } else if ((kind == 3 || kind == 4) && (fast = number_text(text, col->len, kind == 4, num2, sizeof(num2))) >= 0) {
            if (buf_put(body, num2, fast) < 0) return FAILED; /* ASCII: its length in characters too */
            chars = fast;
        } else if (kind == 3 || kind == 4) { /* DOUBLE, FLOAT: MySQL's layout, by the Python converter */
            PyObject *convert = PyTuple_GET_ITEM(converters, i);
            PyObject *str = PyUnicode_DecodeUTF8((const char *)text, col->len, NULL);
            if (str == NULL) return FAILED;
            PyObject *res = PyObject_CallOneArg(convert, str);
            Py_DECREF(str);
            if (res == NULL) return FAILED;
            if (!PyUnicode_Check(res)) {
                Py_DECREF(res);
                return UNSURE;
            }
            Py_ssize_t n;
            const char *u = PyUnicode_AsUTF8AndSize(res, &n);
            if (u == NULL) {
                PyErr_Clear();
                Py_DECREF(res);
                return UNSURE;
            }
            chars = PyUnicode_GET_LENGTH(res);
            int r = buf_put(body, u, n);
            Py_DECREF(res);
            if (r < 0) return FAILED;
        } else if (buf_put(body, (const char *)text, col->len) < 0) {
            return FAILED;
        }
        int k = snprintf(num, sizeof(num), "%zd", chars);
        if (buf_put(out, num, k) < 0) return FAILED;
    }
    if (buf_put(out, "|", 1) < 0 || buf_put(out, body->p, body->n) < 0) return FAILED;
    return OK;
}

static PyObject *data_digests(PyObject *self, PyObject *args) {
    PyObject *values, *names, *converters;
    const char *kinds;
    Py_ssize_t nkinds;
    if (!PyArg_ParseTuple(args, "O!O!y#O!", &PyList_Type, &values, &PyTuple_Type, &names, &kinds, &nkinds,
                          &PyTuple_Type, &converters))
        return NULL;
    Py_ssize_t ncols = PyTuple_GET_SIZE(names);
    if (nkinds != ncols || PyTuple_GET_SIZE(converters) != ncols) {
        PyErr_SetString(PyExc_ValueError, "names, kinds and converters differ in length");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < ncols; i++) {
        if (!PyBytes_Check(PyTuple_GET_ITEM(names, i))) {
            PyErr_SetString(PyExc_TypeError, "column names must be bytes");
            return NULL;
        }
        if ((kinds[i] == 3 || kinds[i] == 4) && !PyCallable_Check(PyTuple_GET_ITEM(converters, i))) {
            PyErr_SetString(PyExc_TypeError, "a DOUBLE or FLOAT column needs its converter");
            return NULL;
        }
    }
    Py_ssize_t count = PyList_GET_SIZE(values);
    PyObject *out = PyList_New(count);
    if (out == NULL) return NULL;
    column *cols = PyMem_Calloc((size_t)(ncols ? ncols : 1), sizeof(column));
    buf scratch = {0}, key = {0}, text = {0}, body = {0};
    if (cols == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t r = 0; r < count; r++) {
        PyObject *value = PyList_GET_ITEM(values, r);
        PyObject *item = NULL;
        if (PyBytes_Check(value)) {
            memset(cols, 0, (size_t)ncols * sizeof(column));
            scratch.n = 0;
            int res = read_row((const unsigned char *)PyBytes_AS_STRING(value), PyBytes_GET_SIZE(value), names,
                               cols, ncols, &scratch, &key);
            if (res == OK) res = digest_row(cols, ncols, kinds, converters, &scratch, &text, &body);
            if (res == FAILED) goto fail;
            if (res == OK) item = PyLong_FromUnsignedLongLong(md5_head((const unsigned char *)text.p, (size_t)text.n));
        }
        if (item == NULL) {
            if (PyErr_Occurred()) goto fail;
            item = Py_NewRef(Py_None);
        }
        PyList_SET_ITEM(out, r, item);
    }
    PyMem_Free(cols);
    PyMem_Free(scratch.p);
    PyMem_Free(key.p);
    PyMem_Free(text.p);
    PyMem_Free(body.p);
    return out;
fail:
    PyMem_Free(cols);
    PyMem_Free(scratch.p);
    PyMem_Free(key.p);
    PyMem_Free(text.p);
    PyMem_Free(body.p);
    Py_DECREF(out);
    return NULL;
}

/* ---- the headers of consumed records ----------------------------------------------------------------- */

enum { HDB, HTABLE, HPDB, HPTABLE, HTYPE, HSEQ, HSOURCE, HPART, NHEADERS };

/* Which of the relay's headers ``name`` is (-1: none the keyed path reads). */
static int header_slot(const char *s, Py_ssize_t n) {
    if (n < 8 || memcmp(s, "relay.", 6) != 0) return -1;
    s += 6;
    n -= 6;
    switch (n) {
    case 2: return memcmp(s, "db", 2) == 0 ? HDB : -1;
    case 4: return memcmp(s, "type", 4) == 0 ? HTYPE : memcmp(s, "part", 4) == 0 ? HPART : -1;
    case 5: return memcmp(s, "table", 5) == 0 ? HTABLE : -1;
    case 8: return memcmp(s, "sequence", 8) == 0 ? HSEQ : -1;
    case 9: return memcmp(s, "source.id", 9) == 0 ? HSOURCE : -1;
    case 11: return memcmp(s, "physical.db", 11) == 0 ? HPDB : -1;
    case 14: return memcmp(s, "physical.table", 14) == 0 ? HPTABLE : -1;
    default: return -1;
    }
}

/* A header's decimal digits as Python's int() reads the relay's own (an optional '-', 1-18 digits). */
static int parse_int(PyObject *value, long long *out) {
    if (value == NULL || !PyBytes_Check(value)) return -1;
    const char *s = PyBytes_AS_STRING(value);
    Py_ssize_t n = PyBytes_GET_SIZE(value), i = 0;
    int negative = 0;
    if (n > 0 && s[0] == '-') {
        negative = 1;
        i = 1;
    }
    if (n - i < 1 || n - i > 18) return -1;
    long long v = 0;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (s[i] - '0');
    }
    *out = negative ? -v : v;
    return 0;
}

static int bytes_equal(PyObject *a, PyObject *b) {
    return a != NULL && PyBytes_Check(a) && PyBytes_GET_SIZE(a) == PyBytes_GET_SIZE(b) &&
           memcmp(PyBytes_AS_STRING(a), PyBytes_AS_STRING(b), (size_t)PyBytes_GET_SIZE(a)) == 0;
}

static PyObject *call0(PyObject *obj, PyObject *name) { return PyObject_CallMethodNoArgs(obj, name); }

static PyObject *S_ERROR, *S_HEADERS, *S_KEY, *S_VALUE, *S_TOPIC, *S_PARTITION, *S_OFFSET, *B_INSERT, *B_UPDATE, *B_DELETE;

/* What the keyed path takes of one record: NULL with no error for a record this table's index skips, the
 * Message itself for one the Python path must read (no headers, a shard read another way, a header the
 * relay never writes so), else (shard, (sequence, part), type, key, value, (topic, partition, offset)). */
static PyObject *row_record(PyObject *msg, PyObject *topic, PyObject *partition, PyObject *offset, PyObject *db,
                            PyObject *table, PyObject *source, PyObject *keyed, PyObject *others) {
    PyObject *pairs = call0(msg, S_HEADERS);
    if (pairs == NULL) return NULL;
    if (!PyList_Check(pairs) || PyList_GET_SIZE(pairs) == 0) {
        Py_DECREF(pairs);
        return Py_NewRef(msg);
    }
    PyObject *h[NHEADERS] = {NULL};
    Py_ssize_t count = PyList_GET_SIZE(pairs);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *pair = PyList_GET_ITEM(pairs, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 || !PyUnicode_Check(PyTuple_GET_ITEM(pair, 0))) {
            Py_DECREF(pairs);
            return Py_NewRef(msg);
        }
        Py_ssize_t n;
        const char *name = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(pair, 0), &n);
        if (name == NULL) {
            PyErr_Clear();
            Py_DECREF(pairs);
            return Py_NewRef(msg);
        }
        int slot = header_slot(name, n);
        if (slot >= 0) h[slot] = PyTuple_GET_ITEM(pair, 1); /* the last of a name wins, as dict(pairs) */
    }
    PyObject *out = NULL;
    if (!bytes_equal(h[HTABLE], table) || !bytes_equal(h[HDB], db)) goto done; /* another table */
    if (h[HSOURCE] != NULL && h[HSOURCE] != Py_None && !bytes_equal(h[HSOURCE], source)) goto done; /* not ours */
    PyObject *pdb = h[HPDB], *ptable = h[HPTABLE];
    if ((pdb != NULL && !PyBytes_Check(pdb)) || (ptable != NULL && !PyBytes_Check(ptable))) {
        out = Py_NewRef(msg);
        goto done;
    }
    Py_ssize_t ndb = pdb ? PyBytes_GET_SIZE(pdb) : 0, ntable = ptable ? PyBytes_GET_SIZE(ptable) : 0;
    PyObject *physical = PyBytes_FromStringAndSize(NULL, ndb + 1 + ntable);
    if (physical == NULL) goto done;
    char *w = PyBytes_AS_STRING(physical);
    if (ndb) memcpy(w, PyBytes_AS_STRING(pdb), (size_t)ndb);
    w[ndb] = '.';
    if (ntable) memcpy(w + ndb + 1, PyBytes_AS_STRING(ptable), (size_t)ntable);
    PyObject *shard = PyDict_GetItemWithError(keyed, physical); /* borrowed */
    int other = shard == NULL && !PyErr_Occurred() ? PySet_Contains(others, physical) : 0;
    Py_DECREF(physical);
    if (PyErr_Occurred() || other < 0) goto done;
    if (other) {
        out = Py_NewRef(msg);
        goto done;
    }
    if (shard == NULL) goto done; /* a shard not verified */
    PyObject *kind = h[HTYPE];
    if (kind == NULL || !(bytes_equal(kind, B_INSERT) || bytes_equal(kind, B_UPDATE) || bytes_equal(kind, B_DELETE)))
        goto done;
    if (h[HSEQ] == NULL) goto done;
    long long seq, part = 0;
    if (parse_int(h[HSEQ], &seq) < 0 || (h[HPART] != NULL && parse_int(h[HPART], &part) < 0)) {
        out = Py_NewRef(msg); /* not the relay's digits: the Python path says what is wrong */
        goto done;
    }
    PyObject *key = call0(msg, S_KEY), *value = key ? call0(msg, S_VALUE) : NULL;
    if (value != NULL) {
        PyObject *where = PyTuple_Pack(3, topic, partition, offset);
        PyObject *ident = where ? Py_BuildValue("(LL)", seq, part) : NULL;
        if (ident != NULL) out = PyTuple_Pack(6, shard, ident, kind, key, value, where);
        Py_XDECREF(ident);
        Py_XDECREF(where);
    }
    Py_XDECREF(key);
    Py_XDECREF(value);
done:
    Py_DECREF(pairs);
    return out;
}

/* next_offsets[(topic, partition)] = offset + 1 */
static int note_offset(PyObject *next_offsets, PyObject *topic, PyObject *partition, PyObject *offset) {
    PyObject *where = PyTuple_Pack(2, topic, partition);
    PyObject *one = where ? PyLong_FromLong(1) : NULL;
    PyObject *next = one ? PyNumber_Add(offset, one) : NULL;
    int r = next ? PyDict_SetItem(next_offsets, where, next) : -1;
    Py_XDECREF(where);
    Py_XDECREF(one);
    Py_XDECREF(next);
    return r;
}

static PyObject *row_records(PyObject *self, PyObject *args) {
    PyObject *messages, *db, *table, *source, *keyed, *others, *next_offsets;
    if (!PyArg_ParseTuple(args, "O!SSSO!O!O!", &PyList_Type, &messages, &db, &table, &source, &PyDict_Type, &keyed,
                          &PySet_Type, &others, &PyDict_Type, &next_offsets))
        return NULL;
    PyObject *out = PyList_New(0);
    if (out == NULL) return NULL;
    PyObject *topic = NULL, *partition = NULL, *offset = NULL; /* of the record read last */
    PyObject *last_topic = NULL, *last_partition = NULL, *last_offset = NULL; /* a partition's last, to note */
    Py_ssize_t count = PyList_GET_SIZE(messages), read = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *msg = PyList_GET_ITEM(messages, i);
        PyObject *err = call0(msg, S_ERROR);
        if (err == NULL) goto fail;
        int is_error = err != Py_None;
        Py_DECREF(err);
        PyObject *item = NULL;
        if (is_error) { /* the end of a partition, or a failure: the Python path says which */
            item = Py_NewRef(msg);
        } else {
            topic = call0(msg, S_TOPIC);
            partition = topic ? call0(msg, S_PARTITION) : NULL;
            offset = partition ? call0(msg, S_OFFSET) : NULL;
            if (offset == NULL) goto fail;
            read++;
            if (last_topic != NULL && (PyObject_RichCompareBool(last_topic, topic, Py_EQ) != 1 ||
                                       PyObject_RichCompareBool(last_partition, partition, Py_EQ) != 1)) {
                if (note_offset(next_offsets, last_topic, last_partition, last_offset) < 0) goto fail;
            }
            Py_XSETREF(last_topic, Py_NewRef(topic));
            Py_XSETREF(last_partition, Py_NewRef(partition));
            Py_XSETREF(last_offset, Py_NewRef(offset));
            item = row_record(msg, topic, partition, offset, db, table, source, keyed, others);
            Py_CLEAR(topic);
            Py_CLEAR(partition);
            Py_CLEAR(offset);
            if (item == NULL && PyErr_Occurred()) goto fail;
        }
        if (item != NULL) {
            int r = PyList_Append(out, item);
            Py_DECREF(item);
            if (r < 0) goto fail;
        }
    }
    if (last_topic != NULL && note_offset(next_offsets, last_topic, last_partition, last_offset) < 0) goto fail;
    Py_XDECREF(last_topic);
    Py_XDECREF(last_partition);
    Py_XDECREF(last_offset);
    PyObject *result = Py_BuildValue("(Nn)", out, read);
    return result;
fail:
    Py_XDECREF(topic);
    Py_XDECREF(partition);
    Py_XDECREF(offset);
    Py_XDECREF(last_topic);
    Py_XDECREF(last_partition);
    Py_XDECREF(last_offset);
    Py_DECREF(out);
    return NULL;
}

static PyObject *md5_prefix(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    unsigned long long head = md5_head(view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLongLong(head);
}

static PyMethodDef METHODS[] = {
    {"data_digests", data_digests, METH_VARARGS,
     "data_digests(values, names, kinds, converters) -> list of int or None: each canal-json record's row "
     "digest (relay.ops.verify.topic.data_digest), None where the Python path must decide."},
    {"row_records", row_records, METH_VARARGS,
     "row_records(messages, db, table, source, keyed, others, next_offsets) -> (items, read): per consumed "
     "message of the logical table (relay.ops.verify.topic.TopicIndex._batch) its keyed-path tuple, or the Message "
     "for the Python path (errors included); next_offsets noted per partition; read: the records (not errors)."},
    {"md5_prefix", md5_prefix, METH_O, "md5_prefix(data) -> int: the first 8 bytes of MD5(data), big-endian."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "relay.ops.verify._rowdigest", NULL, -1, METHODS};

PyMODINIT_FUNC PyInit__rowdigest(void) {
    S_ERROR = PyUnicode_InternFromString("error");
    S_HEADERS = PyUnicode_InternFromString("headers");
    S_KEY = PyUnicode_InternFromString("key");
    S_VALUE = PyUnicode_InternFromString("value");
    S_TOPIC = PyUnicode_InternFromString("topic");
    S_PARTITION = PyUnicode_InternFromString("partition");
    S_OFFSET = PyUnicode_InternFromString("offset");
    B_INSERT = PyBytes_FromString("INSERT");
    B_UPDATE = PyBytes_FromString("UPDATE");
    B_DELETE = PyBytes_FromString("DELETE");
    if (!S_ERROR || !S_HEADERS || !S_KEY || !S_VALUE || !S_TOPIC || !S_PARTITION || !S_OFFSET || !B_INSERT || !B_UPDATE || !B_DELETE)
        return NULL;
    return PyModule_Create(&MODULE);
}
