/*
 * relay.binlog._rowimage: one row image (null bitmap, then the present columns' values) → canal's text of
 * each value, in C, for the column types that make up most rows.
 *
 * ``Reader(steps, ncols)`` is built once per (table map, columns present); ``reader(data, pos)`` returns
 * ``(values, pos after the image)`` exactly as ``relay.binlog.rows._image`` does with the Python decoders.
 * ``steps`` holds, for each present column in order, ``(index, op, a, b, obj, decoder)``: ``decoder`` is
 * the column's Python decoder (``relay.binlog.values.value_decoder``); ``op`` says what C does instead
 * (``relay.binlog.values.native_step`` chooses it):
 *
 *   0 CALL       decoder(data, pos) -> (text, pos)                 every other type
 *   1 INT        a bytes little-endian, b signed: str(value)         TINYINT … BIGINT, MEDIUMINT
 *   2 FLOAT      a = 4 (float) or 8 (double): obj(value)             obj is Java's toString (types.java_*)
 *   3 DECIMAL    a precision, b scale                                 MySQL decimal2bin
 *   4 DATE       3 bytes: YYYY-MM-DD
 *   5 DATETIME2  a = fsp: YYYY-MM-DD hh:mm:ss[.f…]
 *   6 TEXT       a length bytes, b: 0 UTF-8 ("replace"), 1 ISO-8859-1, 2 obj(raw bytes)
 *   7 ENUM       a bytes: obj[index] (obj: the names, "" first), or str(index) when obj is None
 *
 * Whatever C does not take as ordinary — a value running past the data, a DATETIME2 or DECIMAL whose
 * digits are out of range, an ENUM index past its members — goes to ``decoder``, which gives the very
 * text (or error) the Python path gives. Used only when the relay runs compiled (relay._native);
 * ``tests/unit/test_compiled.py`` compares it with the Python decoders on every type and random values.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

enum { OP_CALL, OP_INT, OP_FLOAT, OP_DECIMAL, OP_DATE, OP_DATETIME2, OP_TEXT, OP_ENUM };

typedef struct {
    Py_ssize_t index;
    int op;
    long a, b;
    PyObject *obj;     /* borrowed from steps (kept alive by the Reader) */
    PyObject *decoder; /* borrowed from steps */
} Step;

typedef struct {
    PyObject_HEAD
    PyObject *steps; /* the tuple the steps below borrow from */
    Py_ssize_t ncols, nsteps;
    Step *step;
    vectorcallfunc vectorcall;
} Reader;

static const int DIG2BYTES[10] = {0, 1, 1, 2, 2, 3, 3, 4, 4, 4};
static const uint32_t POW10[10] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000, 1000000000};

static uint64_t be(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = (v << 8) | p[i];
    return v;
}

/* ``v`` in decimal, zero-padded to at least ``width`` digits (printf's %0*llu), at ``out``; returns the end.
 * Numbers are written here rather than by snprintf: its format parsing was a tenth of the row reader's
 * time on rows of integers and dates. */
static char *put_uint(char *out, uint64_t v, int width) {
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n < width) tmp[n++] = '0';
    while (n) *out++ = tmp[--n];
    return out;
}

/* A negative number's text from its magnitude (printf's %lld of -magnitude). */
static char *put_negative(char *out, uint64_t magnitude) {
    *out++ = '-';
    return put_uint(out, magnitude, 1);
}

static uint64_t le(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* The text (new reference) of one value at *pos, advancing *pos; NULL with no exception: let the decoder
 * do it; NULL with an exception: failed. */
static PyObject *native(const Step *s, const unsigned char *d, Py_ssize_t len, Py_ssize_t *pos) {
    Py_ssize_t p = *pos;
    char buf[128];
    switch (s->op) {
    case OP_INT: {
        int n = (int)s->a;
        if (p + n > len) return NULL;
        uint64_t u = le(d + p, n);
        char *end;
        if (s->b && n < 8 && (u >> (8 * n - 1)) & 1) {
            end = put_negative(buf, (1ULL << (8 * n)) - u); /* u - 2^(8n), negative */
        } else if (s->b && n == 8 && (u >> 63)) {
            end = put_negative(buf, ~u + 1); /* two's complement of a negative BIGINT */
        } else {
            end = put_uint(buf, u, 1);
        }
        *pos = p + n;
        return PyUnicode_FromStringAndSize(buf, end - buf);
    }
    case OP_FLOAT: {
        int n = (int)s->a;
        if (p + n > len) return NULL;
        double v;
        if (n == 4) {
            float f;
            memcpy(&f, d + p, 4); /* little-endian hosts only: checked when the module loads */
            v = f;
        } else {
            memcpy(&v, d + p, 8);
        }
        PyObject *number = PyFloat_FromDouble(v);
        if (number == NULL) return NULL;
        PyObject *text = PyObject_CallOneArg(s->obj, number);
        Py_DECREF(number);
        if (text != NULL) *pos = p + n;
        return text;
    }
    case OP_DECIMAL: {
        int precision = (int)s->a, scale = (int)s->b, intg = precision - scale;
        if (intg < 0 || scale < 0 || precision > 90) return NULL; /* metadata no server writes */
        int ifull = intg / 9, ipart = intg % 9, ffull = scale / 9, fpart = scale % 9;
        Py_ssize_t size = DIG2BYTES[ipart] + 4 * ifull + 4 * ffull + DIG2BYTES[fpart];
        if (size == 0 || p + size > len || size > 40) return NULL;
        unsigned char raw[40];
        memcpy(raw, d + p, (size_t)size);
        int negative = !(raw[0] & 0x80);
        raw[0] ^= 0x80;
        if (negative)
            for (Py_ssize_t i = 0; i < size; i++) raw[i] = (unsigned char)~raw[i];
        /* digits: every group zero-padded to its width, then leading zeros of the integer part dropped */
        char digits[100];
        int nd = 0, at = 0;
        int widths[24], ng = 0;
        if (ipart) widths[ng++] = ipart;
        for (int i = 0; i < ifull; i++) widths[ng++] = 9;
        for (int i = 0; i < ffull; i++) widths[ng++] = 9;
        if (fpart) widths[ng++] = fpart;
        for (int g = 0; g < ng; g++) {
            int w = widths[g], nb = DIG2BYTES[w];
            uint32_t v = (uint32_t)be(raw + at, nb);
            at += nb;
            if (v >= POW10[w]) return NULL; /* not a valid group: the decoder's arithmetic decides */
            for (int k = w - 1; k >= 0; k--) {
                digits[nd + k] = (char)('0' + v % 10);
                v /= 10;
            }
            nd += w;
        }
        int first = 0; /* the first integer digit kept */
        while (first < intg && digits[first] == '0') first++;
        int zero = 1;
        for (int k = 0; k < nd; k++)
            if (digits[k] != '0') zero = 0;
        char *out = buf;
        if (negative && !zero) *out++ = '-';
        if (first == intg) {
            *out++ = '0';
        } else {
            memcpy(out, digits + first, (size_t)(intg - first));
            out += intg - first;
        }
        if (scale) {
            *out++ = '.';
            memcpy(out, digits + intg, (size_t)scale);
            out += scale;
        }
        *pos = p + size;
        return PyUnicode_FromStringAndSize(buf, out - buf);
    }
    case OP_DATE: {
        if (p + 3 > len) return NULL;
        unsigned v = (unsigned)le(d + p, 3);
        char *end = put_uint(buf, v >> 9, 4); /* YYYY-MM-DD */
        *end++ = '-';
        end = put_uint(end, (v >> 5) & 0x0F, 2);
        *end++ = '-';
        end = put_uint(end, v & 0x1F, 2);
        *pos = p + 3;
        return PyUnicode_FromStringAndSize(buf, end - buf);
    }
    case OP_DATETIME2: {
        int fsp = (int)s->a, fsize = (fsp + 1) / 2;
        if (p + 5 + fsize > len) return NULL;
        uint64_t stored = be(d + p, 5);
        if (stored < 0x8000000000ULL) return NULL; /* a negative packed value: the decoder's */
        uint64_t packed = stored - 0x8000000000ULL;
        uint64_t ymd = packed >> 17, hms = packed & 0x1FFFF, ym = ymd >> 5;
        char *end = put_uint(buf, ym / 13, 4); /* YYYY-MM-DD hh:mm:ss */
        *end++ = '-';
        end = put_uint(end, ym % 13, 2);
        *end++ = '-';
        end = put_uint(end, ymd & 0x1F, 2);
        *end++ = ' ';
        end = put_uint(end, hms >> 12, 2);
        *end++ = ':';
        end = put_uint(end, (hms >> 6) & 0x3F, 2);
        *end++ = ':';
        end = put_uint(end, hms & 0x3F, 2);
        int size = (int)(end - buf);
        if (fsize) {
            uint64_t frac = be(d + p + 5, fsize) / POW10[fsize * 2 - fsp];
            if (frac >= POW10[fsp]) return NULL;
            buf[size++] = '.';
            for (int k = fsp - 1; k >= 0; k--) {
                buf[size + k] = (char)('0' + frac % 10);
                frac /= 10;
            }
            size += fsp;
        }
        *pos = p + 5 + fsize;
        return PyUnicode_FromStringAndSize(buf, size);
    }
    case OP_TEXT: {
        int n = (int)s->a;
        if (p + n > len) return NULL;
        Py_ssize_t size = (Py_ssize_t)le(d + p, n), start = p + n;
        if (start + size > len) return NULL;
        PyObject *text;
        if (s->b == 0) {
            text = PyUnicode_DecodeUTF8((const char *)d + start, size, "replace");
        } else if (s->b == 1) {
            text = PyUnicode_DecodeLatin1((const char *)d + start, size, NULL);
        } else {
            PyObject *raw = PyBytes_FromStringAndSize((const char *)d + start, size);
            if (raw == NULL) return NULL;
            text = PyObject_CallOneArg(s->obj, raw);
            Py_DECREF(raw);
        }
        if (text != NULL) *pos = start + size;
        return text;
    }
    case OP_ENUM: {
        int n = (int)s->a;
        if (p + n > len) return NULL;
        uint64_t index = le(d + p, n);
        if (s->obj == Py_None) {
            char *end = put_uint(buf, index, 1);
            *pos = p + n;
            return PyUnicode_FromStringAndSize(buf, end - buf);
        }
        if (index >= (uint64_t)PyTuple_GET_SIZE(s->obj)) return NULL; /* the decoder raises */
        PyObject *name = PyTuple_GET_ITEM(s->obj, (Py_ssize_t)index);
        Py_INCREF(name);
        *pos = p + n;
        return name;
    }
    default:
        return NULL;
    }
}

/* decoder(data, pos) -> (text, pos): the Python path for one value. */
static PyObject *call_decoder(const Step *s, PyObject *data, Py_ssize_t *pos) {
    PyObject *at = PyLong_FromSsize_t(*pos);
    if (at == NULL) return NULL;
    PyObject *args[2] = {data, at};
    PyObject *result = PyObject_Vectorcall(s->decoder, args, 2, NULL);
    Py_DECREF(at);
    if (result == NULL) return NULL;
    if (!PyTuple_Check(result) || PyTuple_GET_SIZE(result) != 2) {
        Py_DECREF(result);
        PyErr_SetString(PyExc_TypeError, "a value decoder must return (text, position)");
        return NULL;
    }
    Py_ssize_t next = PyLong_AsSsize_t(PyTuple_GET_ITEM(result, 1));
    if (next == -1 && PyErr_Occurred()) {
        Py_DECREF(result);
        return NULL;
    }
    PyObject *text = PyTuple_GET_ITEM(result, 0);
    Py_INCREF(text);
    Py_DECREF(result);
    *pos = next;
    return text;
}

static PyObject *Reader_read(Reader *self, PyObject *data, Py_ssize_t pos) {
    if (!PyBytes_Check(data)) {
        PyErr_SetString(PyExc_TypeError, "a row image is read from bytes");
        return NULL;
    }
    const unsigned char *d = (const unsigned char *)PyBytes_AS_STRING(data);
    Py_ssize_t len = PyBytes_GET_SIZE(data);
    Py_ssize_t null_bytes = (self->nsteps + 7) >> 3;
    PyObject *values = PyTuple_New(self->ncols);
    if (values == NULL) return NULL;
    for (Py_ssize_t i = 0; i < self->ncols; i++) {
        Py_INCREF(Py_None);
        PyTuple_SET_ITEM(values, i, Py_None);
    }
    Py_ssize_t bitmap = pos;
    pos += null_bytes;
    for (Py_ssize_t k = 0; k < self->nsteps; k++) {
        /* a bitmap byte past the data reads as no NULLs, as int.from_bytes of a short slice does */
        Py_ssize_t at = bitmap + (k >> 3);
        if (at < len && (d[at] >> (k & 7)) & 1) continue;
        const Step *s = &self->step[k];
        PyObject *text = s->op == OP_CALL ? NULL : native(s, d, len, &pos);
        if (text == NULL) {
            if (PyErr_Occurred()) goto fail;
            text = call_decoder(s, data, &pos);
            if (text == NULL) goto fail;
        }
        PyObject *old = PyTuple_GET_ITEM(values, s->index);
        PyTuple_SET_ITEM(values, s->index, text);
        Py_DECREF(old);
    }
    PyObject *at = PyLong_FromSsize_t(pos);
    if (at == NULL) goto fail;
    PyObject *result = PyTuple_Pack(2, values, at);
    Py_DECREF(values);
    Py_DECREF(at);
    return result;
fail:
    Py_DECREF(values);
    return NULL;
}

static PyObject *Reader_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != 2 || kwnames != NULL) {
        PyErr_SetString(PyExc_TypeError, "reader(data, pos) takes 2 positional arguments");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    if (pos == -1 && PyErr_Occurred()) return NULL;
    if (pos < 0) {
        PyErr_SetString(PyExc_ValueError, "negative position");
        return NULL;
    }
    return Reader_read((Reader *)self, args[0], pos);
}

static PyObject *Reader_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *steps;
    Py_ssize_t ncols;
    if (!PyArg_ParseTuple(args, "O!n", &PyTuple_Type, &steps, &ncols)) return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(steps);
    Reader *self = (Reader *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->step = PyMem_Calloc((size_t)(n ? n : 1), sizeof(Step));
    if (self->step == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    Py_INCREF(steps);
    self->steps = steps;
    self->ncols = ncols;
    self->nsteps = n;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *item = PyTuple_GET_ITEM(steps, k);
        Step *s = &self->step[k];
        int op;
        if (!PyTuple_Check(item) ||
            !PyArg_ParseTuple(item, "nillOO", &s->index, &op, &s->a, &s->b, &s->obj, &s->decoder)) {
            Py_DECREF(self);
            return NULL;
        }
        s->op = op;
        if (s->index < 0 || s->index >= ncols || op < OP_CALL || op > OP_ENUM ||
            (op == OP_INT && (s->a < 1 || s->a > 8)) || (op == OP_FLOAT && s->a != 4 && s->a != 8) ||
            (op == OP_DATETIME2 && (s->a < 0 || s->a > 6)) || (op == OP_TEXT && (s->a < 1 || s->a > 4)) ||
            (op == OP_ENUM && (s->a < 1 || s->a > 8 || (s->obj != Py_None && !PyTuple_Check(s->obj))))) {
            PyErr_Format(PyExc_ValueError, "bad row image step %zd", k);
            Py_DECREF(self);
            return NULL;
        }
    }
    self->vectorcall = Reader_vectorcall;
    return (PyObject *)self;
}

static void Reader_dealloc(Reader *self) {
    PyMem_Free(self->step);
    Py_XDECREF(self->steps);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "relay.binlog._rowimage.Reader",
    .tp_basicsize = sizeof(Reader),
    .tp_dealloc = (destructor)Reader_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(Reader, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = Reader_new,
    .tp_doc = "Reader(steps, ncols): reader(data, pos) -> (values, pos) for one row image.",
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "relay.binlog._rowimage", "Row images to canal's text in C.", -1, NULL,
};

PyMODINIT_FUNC PyInit__rowimage(void) {
    const uint16_t probe = 1;
    if (*(const unsigned char *)&probe != 1) {
        PyErr_SetString(PyExc_ImportError, "relay.binlog._rowimage reads floats on little-endian hosts only");
        return NULL;
    }
    if (PyType_Ready(&ReaderType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL) return NULL;
    Py_INCREF(&ReaderType);
    if (PyModule_AddObject(m, "Reader", (PyObject *)&ReaderType) < 0) {
        Py_DECREF(&ReaderType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
