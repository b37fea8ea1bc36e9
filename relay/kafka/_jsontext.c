/*
 * relay.kafka._jsontext: the ``data`` object of a canal-json row (and an UPDATE's ``old``) as UTF-8 bytes,
 * in one pass.
 *
 * ``object_bytes(keys, values)`` gives exactly ``canal_json.object_text(object_format(keys), values)
 * .encode()`` — the text ``json.dumps(dict(...), ensure_ascii=False, separators=(",", ":"))`` writes —
 * where every value is None or a str of one byte per character (CPython's PyUnicode_1BYTE_KIND: ASCII
 * and ISO-8859-1 text, which is what canal's text of BINARY/BLOB values always is). For anything else it
 * returns None and the caller takes the Python path. Why: on ~4 KB rows (text + blob) CPython's JSON
 * string escaper and the UTF-8 encoder of the whole row were half of the record encoding's time.
 *
 * Escapes are CPython's (Modules/_json.c, ``escape_unicode``): \" \\ \b \f \n \r \t, other characters
 * below 0x20 as \u00xx (lowercase hex), everything else as is; characters 0x80-0xFF become their two
 * UTF-8 bytes. Built by scripts/build_compiled.py beside the mypyc modules; used only when the relay
 * runs compiled (relay._native), so RELAY_PURE_PYTHON=1 runs the Python path alone.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static const char HEX[] = "0123456789abcdef";

/* Output bytes of each one-byte character: 1 as is, 2 for \" \\ \b \f \n \r \t and for 0x80-0xFF (UTF-8),
 * 6 for the other control characters (\u00xx). Filled when the module loads. */
static unsigned char WIDTH[256];

static void fill_widths(void) {
    for (int c = 0; c < 256; c++) {
        if (c >= 0x80) {
            WIDTH[c] = 2;
        } else if (c == '"' || c == '\\' || c == '\b' || c == '\f' || c == '\n' || c == '\r' || c == '\t') {
            WIDTH[c] = 2;
        } else if (c < 0x20) {
            WIDTH[c] = 6;
        } else {
            WIDTH[c] = 1;
        }
    }
}

/* Bytes the JSON string (quotes included) of ``n`` one-byte characters takes. */
static Py_ssize_t quoted_size(const Py_UCS1 *s, Py_ssize_t n) {
    Py_ssize_t size = 2;
    for (Py_ssize_t i = 0; i < n; i++) size += WIDTH[s[i]];
    return size;
}

static char *write_quoted(char *out, const Py_UCS1 *s, Py_ssize_t n, Py_ssize_t size) {
    *out++ = '"';
    if (size == n + 2) { /* nothing to escape or encode: one copy */
        memcpy(out, s, (size_t)n);
        out += n;
        *out++ = '"';
        return out;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS1 c = s[i];
        switch (WIDTH[c]) {
        case 1:
            *out++ = (char)c;
            break;
        case 6:
            *out++ = '\\'; *out++ = 'u'; *out++ = '0'; *out++ = '0';
            *out++ = HEX[c >> 4];
            *out++ = HEX[c & 0xF];
            break;
        default:
            if (c >= 0x80) {
                *out++ = (char)(0xC0 | (c >> 6));
                *out++ = (char)(0x80 | (c & 0x3F));
                break;
            }
            *out++ = '\\';
            switch (c) {
            case '\b': *out++ = 'b'; break;
            case '\f': *out++ = 'f'; break;
            case '\n': *out++ = 'n'; break;
            case '\r': *out++ = 'r'; break;
            case '\t': *out++ = 't'; break;
            default: *out++ = (char)c; /* " and \\ */
            }
        }
    }
    *out++ = '"';
    return out;
}

static PyObject *object_bytes(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "object_bytes(keys, values) takes 2 arguments");
        return NULL;
    }
    PyObject *keys = args[0], *values = args[1];
    if (!PyTuple_CheckExact(keys) || !(PyTuple_CheckExact(values) || PyList_CheckExact(values))) {
        PyErr_SetString(PyExc_TypeError, "object_bytes: keys must be a tuple, values a tuple or list");
        return NULL;
    }
    Py_ssize_t count = PyTuple_GET_SIZE(keys);
    if (PySequence_Fast_GET_SIZE(values) != count) {
        PyErr_SetString(PyExc_ValueError, "object_bytes: as many values as keys");
        return NULL;
    }
    PyObject **items = PySequence_Fast_ITEMS(values);
    Py_ssize_t size = 2 + (count > 0 ? count - 1 : 0); /* braces and commas */
    Py_ssize_t small[64], *sizes = count <= 64 ? small : PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)count);
    if (sizes == NULL) return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *key = PyTuple_GET_ITEM(keys, i), *value = items[i];
        if (!PyBytes_CheckExact(key)) {
            if (sizes != small) PyMem_Free(sizes);
            PyErr_SetString(PyExc_TypeError, "object_bytes: every key must be bytes");
            return NULL;
        }
        size += PyBytes_GET_SIZE(key);
        if (value == Py_None) {
            size += 4;
        } else if (PyUnicode_Check(value) && PyUnicode_READY(value) == 0 &&
                   PyUnicode_KIND(value) == PyUnicode_1BYTE_KIND) {
            sizes[i] = quoted_size(PyUnicode_1BYTE_DATA(value), PyUnicode_GET_LENGTH(value));
            size += sizes[i];
        } else {
            if (sizes != small) PyMem_Free(sizes);
            Py_RETURN_NONE; /* not one byte per character (or not text): the Python path */
        }
    }
    PyObject *result = PyBytes_FromStringAndSize(NULL, size);
    if (result == NULL) {
        if (sizes != small) PyMem_Free(sizes);
        return NULL;
    }
    char *out = PyBytes_AS_STRING(result);
    *out++ = '{';
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *key = PyTuple_GET_ITEM(keys, i), *value = items[i];
        if (i > 0) {
            *out++ = ',';
        }
        memcpy(out, PyBytes_AS_STRING(key), (size_t)PyBytes_GET_SIZE(key));
        out += PyBytes_GET_SIZE(key);
        if (value == Py_None) {
            memcpy(out, "null", 4);
            out += 4;
        } else {
            out = write_quoted(out, PyUnicode_1BYTE_DATA(value), PyUnicode_GET_LENGTH(value), sizes[i]);
        }
    }
    if (sizes != small) PyMem_Free(sizes);
    *out++ = '}';
    if (out - PyBytes_AS_STRING(result) != size) { /* cannot happen: the two passes agree */
        Py_DECREF(result);
        PyErr_SetString(PyExc_SystemError, "object_bytes: size mismatch");
        return NULL;
    }
    return result;
}

/* The ``old`` field of an UPDATE: ``[{changed columns' previous values}]`` or ``null``, exactly
 * ``canal_json.old_text(keys, before, after).encode()``. A column is changed where ``before[i] != after[i]``
 * (Python's comparison); None when a previous value it writes is not one byte per character. */
static PyObject *old_bytes(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "old_bytes(keys, before, after) takes 3 arguments");
        return NULL;
    }
    PyObject *keys = args[0], *before = args[1], *after = args[2];
    if (!PyTuple_CheckExact(keys) || !(PyTuple_CheckExact(before) || PyList_CheckExact(before)) ||
        !(PyTuple_CheckExact(after) || PyList_CheckExact(after))) {
        PyErr_SetString(PyExc_TypeError, "old_bytes: keys must be a tuple, the images tuples or lists");
        return NULL;
    }
    Py_ssize_t count = PyTuple_GET_SIZE(keys);
    if (PySequence_Fast_GET_SIZE(before) != count || PySequence_Fast_GET_SIZE(after) != count) {
        PyErr_SetString(PyExc_ValueError, "old_bytes: as many values in each image as keys");
        return NULL;
    }
    PyObject **was = PySequence_Fast_ITEMS(before), **now = PySequence_Fast_ITEMS(after);
    /* sizes[i]: the bytes of column i's previous value (-1: unchanged, left out). */
    Py_ssize_t small[64], *sizes = count <= 64 ? small : PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)count);
    if (sizes == NULL) return PyErr_NoMemory();
    Py_ssize_t size = 4, changed = 0; /* [{ }] */
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *key = PyTuple_GET_ITEM(keys, i), *b = was[i];
        int same = b == now[i] ? 1 : PyObject_RichCompareBool(b, now[i], Py_EQ);
        sizes[i] = -1;
        if (same < 0 || !PyBytes_CheckExact(key)) {
            if (sizes != small) PyMem_Free(sizes);
            if (same >= 0) PyErr_SetString(PyExc_TypeError, "old_bytes: every key must be bytes");
            return NULL;
        }
        if (same) continue;
        if (b == Py_None) {
            sizes[i] = 4;
        } else if (PyUnicode_Check(b) && PyUnicode_READY(b) == 0 && PyUnicode_KIND(b) == PyUnicode_1BYTE_KIND) {
            sizes[i] = quoted_size(PyUnicode_1BYTE_DATA(b), PyUnicode_GET_LENGTH(b));
        } else {
            if (sizes != small) PyMem_Free(sizes);
            Py_RETURN_NONE; /* not one byte per character (or not text): the Python path */
        }
        size += (changed++ > 0 ? 1 : 0) + PyBytes_GET_SIZE(key) + sizes[i];
    }
    if (changed == 0) {
        if (sizes != small) PyMem_Free(sizes);
        return PyBytes_FromStringAndSize("null", 4);
    }
    PyObject *result = PyBytes_FromStringAndSize(NULL, size);
    if (result == NULL) {
        if (sizes != small) PyMem_Free(sizes);
        return NULL;
    }
    char *out = PyBytes_AS_STRING(result);
    *out++ = '[';
    *out++ = '{';
    Py_ssize_t written = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (sizes[i] < 0) continue;
        PyObject *key = PyTuple_GET_ITEM(keys, i), *b = was[i];
        if (written++ > 0) *out++ = ',';
        memcpy(out, PyBytes_AS_STRING(key), (size_t)PyBytes_GET_SIZE(key));
        out += PyBytes_GET_SIZE(key);
        if (b == Py_None) {
            memcpy(out, "null", 4);
            out += 4;
        } else {
            out = write_quoted(out, PyUnicode_1BYTE_DATA(b), PyUnicode_GET_LENGTH(b), sizes[i]);
        }
    }
    if (sizes != small) PyMem_Free(sizes);
    *out++ = '}';
    *out++ = ']';
    if (out - PyBytes_AS_STRING(result) != size) { /* cannot happen: the two passes agree */
        Py_DECREF(result);
        PyErr_SetString(PyExc_SystemError, "old_bytes: size mismatch");
        return NULL;
    }
    return result;
}

static PyMethodDef methods[] = {
    {"object_bytes", (PyCFunction)(void (*)(void))object_bytes, METH_FASTCALL,
     "object_bytes(keys, values) -> bytes | None: a JSON object of '\"name\":' byte fragments and "
     "text-or-None values, as UTF-8; None when a value is not one byte per character."},
    {"old_bytes", (PyCFunction)(void (*)(void))old_bytes, METH_FASTCALL,
     "old_bytes(keys, before, after) -> bytes | None: canal-json's 'old' field of an UPDATE (the changed "
     "columns' previous values, or null) as UTF-8; None when such a value is not one byte per character."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "relay.kafka._jsontext", "canal-json row objects as UTF-8 bytes (C).", -1, methods,
};

PyMODINIT_FUNC PyInit__jsontext(void) {
    fill_widths();
    return PyModule_Create(&module_def);
}
