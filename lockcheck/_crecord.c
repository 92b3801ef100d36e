/* The history's lines made in C, at both ends of a worker's pipe.
 *
 * What recording costs a run is mostly Python work per op: a worker making each op's
 * line, the controller giving each line its index. Both are done here, byte for byte as
 * the Python code beside them does it (workloads/worker.py: lines, history.py:
 * HistoryWriter.append_block), which stays as the path taken where this module was not
 * built; tests/unit/test_crecord.py holds the two to the same output.
 *
 * Spool(worker, escape, dumps, raw, t0=0, prompt=False, every_ns=1000000, keep=-1): a
 * worker's lines not yet sent. `add` writes one op's line into the buffer at the call
 * (the Recorder's layout, workloads/worker.py); `record` does the same at the time it
 * reads from the monotonic clock (less `t0`), and says whether the lines should go out
 * now (`prompt`, a release is invoked and there is no `keep`, or a round begins
 * `every_ns` after they last went; `every_ns` may be set later); `take` hands over the
 * bytes and empties it. With `keep` (an open file) the lines live in a shared mapping
 * of that file, after a header that counts their bytes, until `sent` says the last
 * take was written: a worker that dies in between leaves them to the controller. A
 * line is whole in the buffer or not there at all: what needs Python (an encoder)
 * runs before the first byte is written, so no other thread can run between (the GIL
 * is not given up while the line is copied in). `escape` is json's
 * encode_basestring_ascii (for a key or error that is not plain ASCII), `dumps` the
 * worker's JSON encoder (for a value not already JSON, and a process that is not an
 * int), `raw` the str subclass whose values are JSON already (worker.Encoded).
 *
 * index_lines(block, first): each line of `block` (`{"...` lines, each ending in a
 * newline) with `"index": N, ` put first, N counting from `first`.
 */
#define _GNU_SOURCE /* memmem, mremap */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* The file a spool keeps its lines in (`keep`): this header, then the lines. `len` is
 * how many bytes of whole lines follow; a line's bytes are in place before `len` counts
 * them, so a reader after the worker died finds whole lines only. */
typedef struct {
    long long len;
} KeepHeader;
#define KEEP_START 65536 /* the first mapping's room for lines */

typedef struct {
    PyObject_HEAD
    char *buf;
    Py_ssize_t len, cap;
    /* with `keep`: buf is in a shared mapping of that file, after its KeepHeader; lines
     * before `start` went out, `taken` is where the last take ended */
    int keep;
    KeepHeader *head;
    Py_ssize_t start, taken;
    char tail[64]; /* `, "worker": W}\n` */
    Py_ssize_t tail_len;
    PyObject *escape, *dumps, *raw;
    long long t0, flushed, every_ns; /* the clock's start mark; the last take, since it */
    int prompt;
} Spool;

/* the mapping of the keep file grown to hold `cap` bytes of lines */
static int keep_map(Spool *s, Py_ssize_t cap) {
    size_t size = sizeof(KeepHeader) + (size_t)cap;
    if (ftruncate(s->keep, (off_t)size) < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    void *m = s->head == NULL
                  ? mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, s->keep, 0)
                  : mremap(s->head, sizeof(KeepHeader) + (size_t)s->cap, size,
                           MREMAP_MAYMOVE);
    if (m == MAP_FAILED) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    s->head = (KeepHeader *)m;
    s->buf = (char *)m + sizeof(KeepHeader);
    s->cap = cap;
    return 0;
}

static int reserve(Spool *s, Py_ssize_t more) {
    if (s->len + more <= s->cap)
        return 0;
    Py_ssize_t cap = s->cap ? s->cap : 4096;
    while (cap < s->len + more)
        cap *= 2;
    if (s->keep >= 0)
        return keep_map(s, cap);
    char *b = PyMem_Realloc(s->buf, (size_t)cap);
    if (b == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    s->buf = b;
    s->cap = cap;
    return 0;
}

static int put(Spool *s, const char *p, Py_ssize_t n) {
    if (reserve(s, n) < 0)
        return -1;
    memcpy(s->buf + s->len, p, (size_t)n);
    s->len += n;
    return 0;
}

#define PUT_LIT(s, lit) put((s), (lit), (Py_ssize_t)(sizeof(lit) - 1))

/* a str's UTF-8 as it is (a value already JSON, a type or f name) */
static int put_text(Spool *s, PyObject *o) {
    Py_ssize_t n;
    const char *p = PyUnicode_AsUTF8AndSize(o, &n);
    return p == NULL ? -1 : put(s, p, n);
}

/* what `f"{o}"` writes for an exact int (format() only past 64 bits: in C too) */
static int put_formatted(Spool *s, PyObject *o) {
    if (PyLong_CheckExact(o)) {
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (!overflow) {
            if (v == -1 && PyErr_Occurred())
                return -1;
            char d[24];
            int n = snprintf(d, sizeof d, "%lld", v);
            return put(s, d, n);
        }
    }
    if (PyUnicode_CheckExact(o))
        return put_text(s, o);
    PyObject *str = PyObject_Format(o, NULL);
    if (str == NULL)
        return -1;
    int r = put_text(s, str);
    Py_DECREF(str);
    return r;
}

/* The pieces of a line that need Python (an encoder, format()), made before the line is
 * written, each the exact text to write; NULL where the piece is written without Python
 * (an exact int or str, plain ASCII quoted here, None). */
typedef struct {
    PyObject *time, *process, *type, *f, *key, *value, *error;
} Pieces;

static void pieces_clear(Pieces *p) {
    Py_XDECREF(p->time);
    Py_XDECREF(p->process);
    Py_XDECREF(p->type);
    Py_XDECREF(p->f);
    Py_XDECREF(p->key);
    Py_XDECREF(p->value);
    Py_XDECREF(p->error);
}

static int plain_ascii(PyObject *o) {
    if (!PyUnicode_CheckExact(o) || !PyUnicode_IS_ASCII(o))
        return 0;
    const unsigned char *p = PyUnicode_1BYTE_DATA(o);
    Py_ssize_t n = PyUnicode_GET_LENGTH(o);
    for (Py_ssize_t i = 0; i < n; i++)
        if (p[i] < ' ' || p[i] > '~' || p[i] == '"' || p[i] == '\\')
            return 0;
    return 1;
}

/* `f(o)`, which must be a str */
static PyObject *call_text(PyObject *f, PyObject *o) {
    PyObject *r = PyObject_CallOneArg(f, o);
    if (r != NULL && !PyUnicode_Check(r)) {
        Py_DECREF(r);
        PyErr_SetString(PyExc_TypeError, "the encoder did not return a str");
        return NULL;
    }
    return r;
}

/* `f"{o}"` where that needs Python: anything but an exact int or str */
static int format_piece(PyObject *o, PyObject **out) {
    if (PyLong_CheckExact(o) || PyUnicode_CheckExact(o))
        return 0;
    *out = PyObject_Format(o, NULL);
    return *out == NULL ? -1 : 0;
}

static int make_pieces(Spool *s, PyObject *const *a, Pieces *p) {
    PyObject *process = a[1], *key = a[4], *value = a[5], *error = a[6];
    memset(p, 0, sizeof *p);
    if (format_piece(a[0], &p->time) < 0)
        goto fail;
    if (!PyLong_CheckExact(process) && (p->process = call_text(s->dumps, process)) == NULL)
        goto fail;
    if (format_piece(a[2], &p->type) < 0 || format_piece(a[3], &p->f) < 0)
        goto fail;
    if (key != Py_None && !plain_ascii(key) && (p->key = call_text(s->escape, key)) == NULL)
        goto fail;
    if (!Py_IS_TYPE(value, (PyTypeObject *)s->raw) && value != Py_None
        && (p->value = call_text(s->dumps, value)) == NULL)
        goto fail;
    if (error != Py_None && !plain_ascii(error)
        && (p->error = call_text(s->escape, error)) == NULL)
        goto fail;
    return 0;
fail:
    pieces_clear(p);
    return -1;
}

/* a str's UTF-8 between quotes: plain ASCII, as `plain_ascii` found it */
static int put_quoted(Spool *s, PyObject *o) {
    Py_ssize_t n = PyUnicode_GET_LENGTH(o);
    if (reserve(s, n + 2) < 0)
        return -1;
    s->buf[s->len++] = '"';
    memcpy(s->buf + s->len, PyUnicode_1BYTE_DATA(o), (size_t)n);
    s->len += n;
    s->buf[s->len++] = '"';
    return 0;
}

/* the line, with every piece that needed Python already made: no Python runs here */
static int put_line(Spool *s, PyObject *const *a, const Pieces *p) {
    PyObject *key = a[4], *value = a[5], *error = a[6];
    if (PUT_LIT(s, "{\"time\": ") < 0
        || (p->time ? put_text(s, p->time) : put_formatted(s, a[0])) < 0
        || PUT_LIT(s, ", \"process\": ") < 0)
        return -1;
    if (p->process ? put_text(s, p->process) : put_formatted(s, a[1]))
        return -1;
    if (PUT_LIT(s, ", \"type\": \"") < 0 || put_text(s, p->type ? p->type : a[2]) < 0
        || PUT_LIT(s, "\", \"f\": \"") < 0 || put_text(s, p->f ? p->f : a[3]) < 0
        || PUT_LIT(s, "\", \"key\": ") < 0)
        return -1;
    int r = key == Py_None ? PUT_LIT(s, "null") : p->key ? put_text(s, p->key)
                                                        : put_quoted(s, key);
    if (r < 0 || PUT_LIT(s, ", \"value\": ") < 0)
        return -1;
    r = p->value ? put_text(s, p->value) : value == Py_None ? PUT_LIT(s, "null")
                                                            : put_text(s, value);
    if (r < 0)
        return -1;
    if (error != Py_None
        && (PUT_LIT(s, ", \"error\": ") < 0
            || (p->error ? put_text(s, p->error) : put_quoted(s, error)) < 0))
        return -1;
    return put(s, s->tail, s->tail_len);
}

/* one op's line (a[0] its time), whole or not at all */
static int add_line(Spool *s, PyObject *const *a) {
    Pieces p;
    if (make_pieces(s, a, &p) < 0)
        return -1;
    Py_ssize_t start = s->len;
    int r = put_line(s, a, &p);
    if (r < 0)
        s->len = start; /* nothing of a line that failed */
    else if (s->head != NULL)
        s->head->len = s->len; /* the line is whole in the file: count it */
    pieces_clear(&p);
    return r;
}

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* time.monotonic_ns's clock on Linux */
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static PyObject *spool_add(Spool *s, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError,
                        "add(time, process, type, f, key, value, error) takes 7 arguments");
        return NULL;
    }
    if (add_line(s, args) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *spool_record(Spool *s, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 4 || nargs > 6) {
        PyErr_SetString(PyExc_TypeError,
                        "record(process, type, f, key, value=None, error=None) takes 4-6 "
                        "arguments");
        return NULL;
    }
    long long t = now_ns() - s->t0;
    PyObject *time = PyLong_FromLongLong(t);
    if (time == NULL)
        return NULL;
    PyObject *a[7] = {time, args[0], args[1], args[2], args[3],
                      nargs > 4 ? args[4] : Py_None, nargs > 5 ? args[5] : Py_None};
    int r = add_line(s, a);
    Py_DECREF(time);
    if (r < 0)
        return NULL;
    /* without `keep`, a release's invoke goes out before the release is sent: a worker
     * that dies after it would otherwise leave a lease its history says is still held */
    int invoke = PyUnicode_Check(args[1]) && PyUnicode_Check(args[2])
                 && PyUnicode_CompareWithASCIIString(args[1], "invoke") == 0;
    int due = s->prompt
              || (s->keep < 0 && invoke
                  && PyUnicode_CompareWithASCIIString(args[2], "release") == 0)
              || (invoke && t - s->flushed >= s->every_ns
                  && PyUnicode_CompareWithASCIIString(args[2], "acquire") == 0);
    return PyBool_FromLong(due);
}

static PyObject *spool_take(Spool *s, PyObject *unused) {
    PyObject *out = PyBytes_FromStringAndSize(s->buf + s->start, s->len - s->start);
    if (out != NULL) {
        if (s->keep >= 0)
            s->taken = s->len; /* kept until `sent` */
        else
            s->len = 0;
        s->flushed = now_ns() - s->t0;
    }
    return out;
}

/* the lines of the last take are in the pipe: the file need not keep them */
static PyObject *spool_sent(Spool *s, PyObject *unused) {
    if (s->keep < 0)
        Py_RETURN_NONE;
    s->start = s->taken;
    if (s->start == s->len) { /* nothing added since the take (the usual case) */
        s->len = s->start = s->taken = 0;
        s->head->len = 0;
    }
    Py_RETURN_NONE;
}

static Py_ssize_t spool_length(Spool *s) { return s->len - s->start; }

static PyObject *spool_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    Spool *s = (Spool *)PyType_GenericNew(type, args, kw);
    if (s != NULL)
        s->keep = -1; /* no keep file until __init__ gives one */
    return (PyObject *)s;
}

static int spool_init(Spool *s, PyObject *args, PyObject *kw) {
    long long worker, t0 = 0, every_ns = 1000000;
    int prompt = 0, keep = -1;
    PyObject *escape, *dumps, *raw;
    static char *names[] = {"worker", "escape", "dumps", "raw", "t0", "prompt", "every_ns",
                            "keep", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "LOOO|LpLi", names, &worker, &escape, &dumps,
                                     &raw, &t0, &prompt, &every_ns, &keep))
        return -1;
    if (s->keep >= 0 || s->buf != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "a Spool is set up once");
        return -1;
    }
    if (!PyType_Check(raw)) {
        PyErr_SetString(PyExc_TypeError, "raw must be a type");
        return -1;
    }
    s->tail_len = snprintf(s->tail, sizeof s->tail, ", \"worker\": %lld}\n", worker);
    Py_XSETREF(s->escape, Py_NewRef(escape));
    Py_XSETREF(s->dumps, Py_NewRef(dumps));
    Py_XSETREF(s->raw, Py_NewRef(raw));
    s->len = 0;
    s->t0 = t0;
    s->prompt = prompt;
    s->every_ns = every_ns;
    s->flushed = 0;
    if (keep >= 0) {
        s->keep = keep;
        if (keep_map(s, KEEP_START) < 0) {
            s->keep = -1;
            return -1;
        }
        s->head->len = 0;
    }
    return 0;
}

static int spool_traverse(Spool *s, visitproc visit, void *arg) {
    Py_VISIT(s->escape);
    Py_VISIT(s->dumps);
    Py_VISIT(s->raw);
    return 0;
}

static int spool_clear(Spool *s) {
    Py_CLEAR(s->escape);
    Py_CLEAR(s->dumps);
    Py_CLEAR(s->raw);
    return 0;
}

static void spool_dealloc(Spool *s) {
    PyObject_GC_UnTrack(s);
    spool_clear(s);
    if (s->head != NULL)
        munmap(s->head, sizeof(KeepHeader) + (size_t)s->cap);
    else
        PyMem_Free(s->buf);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyMethodDef spool_methods[] = {
    {"add", (PyCFunction)(void (*)(void))spool_add, METH_FASTCALL,
     "add(time, process, type, f, key, value, error): one op's line into the buffer."},
    {"record", (PyCFunction)(void (*)(void))spool_record, METH_FASTCALL,
     "record(process, type, f, key, value=None, error=None): one op's line at the clock's "
     "time since t0; True if the lines should go out now."},
    {"take", (PyCFunction)spool_take, METH_NOARGS,
     "The lines so far, as bytes; empties it (they go out now). With `keep` they stay in "
     "the file until `sent`."},
    {"sent", (PyCFunction)spool_sent, METH_NOARGS,
     "The lines of the last take were written: the keep file may drop them."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef spool_members[] = {
    /* settable: the worker shortens it once a fault starts to watch who holds a lock */
    {"every_ns", T_LONGLONG, offsetof(Spool, every_ns), 0,
     "A round's start sends the lines once this long has passed since they last went."},
    {NULL, 0, 0, 0, NULL},
};

static PySequenceMethods spool_as_sequence = {.sq_length = (lenfunc)spool_length};

static PyTypeObject SpoolType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "lockcheck._crecord.Spool",
    .tp_basicsize = sizeof(Spool),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A worker's history lines not yet sent (the Recorder's layout).",
    .tp_new = spool_new,
    .tp_init = (initproc)spool_init,
    .tp_dealloc = (destructor)spool_dealloc,
    .tp_traverse = (traverseproc)spool_traverse,
    .tp_clear = (inquiry)spool_clear,
    .tp_methods = spool_methods,
    .tp_members = spool_members,
    .tp_as_sequence = &spool_as_sequence,
};

static PyObject *index_lines(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer in;
    long long first;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "index_lines(block, first) takes 2 arguments");
        return NULL;
    }
    first = PyLong_AsLongLong(args[1]);
    if (first == -1 && PyErr_Occurred())
        return NULL;
    if (PyObject_GetBuffer(args[0], &in, PyBUF_SIMPLE) < 0)
        return NULL;
    const char *p = in.buf, *end = p + in.len;
    Py_ssize_t lines = 0;
    for (const char *q = p; (q = memchr(q, '\n', (size_t)(end - q))) != NULL; q++)
        lines++;
    /* `{"index": N, ` for `{`: at most 32 bytes more a line */
    PyObject *out = PyBytes_FromStringAndSize(NULL, in.len + lines * 32);
    if (out == NULL) {
        PyBuffer_Release(&in);
        return NULL;
    }
    char *w = PyBytes_AS_STRING(out);
    long long i = first;
    const char *nl;
    /* complete lines only: what follows the last newline is not a line */
    while ((nl = memchr(p, '\n', (size_t)(end - p))) != NULL) {
        const char *stop = nl + 1;
        if (*p != '{') {
            PyBuffer_Release(&in);
            Py_DECREF(out);
            PyErr_SetString(PyExc_ValueError, "a line that does not start with {");
            return NULL;
        }
        w += sprintf(w, "{\"index\": %lld, ", i++);
        memcpy(w, p + 1, (size_t)(stop - p - 1));
        w += stop - p - 1;
        p = stop;
    }
    Py_ssize_t n = w - PyBytes_AS_STRING(out);
    PyBuffer_Release(&in);
    if (_PyBytes_Resize(&out, n) < 0)
        return NULL;
    return out;
}


/* ---- event_rows: the critical-section events of a block, without a JSON decoder ---- */

#define MARK "\"type\": \"event\", \"f\": \""

/* an integer of at most 18 digits at *p, moving *p past it */
static int read_int(const char **p, const char *end, long long *out) {
    const char *q = *p;
    int neg = 0;
    if (q < end && *q == '-') {
        neg = 1;
        q++;
    }
    const char *first = q;
    long long v = 0;
    while (q < end && *q >= '0' && *q <= '9' && q - first < 18)
        v = v * 10 + (*q++ - '0');
    if (q == first || (q < end && *q >= '0' && *q <= '9'))
        return -1;
    *out = neg ? -v : v;
    *p = q;
    return 0;
}

static int expect(const char **p, const char *end, const char *lit) {
    size_t n = strlen(lit);
    if ((size_t)(end - *p) < n || memcmp(*p, lit, n) != 0)
        return -1;
    *p += n;
    return 0;
}

/* a JSON string without escapes at *p (after its opening quote), to its closing quote */
static int read_plain(const char **p, const char *end, const char **s, Py_ssize_t *n) {
    const char *q = *p;
    while (q < end && *q != '"' && *q != '\\' && (unsigned char)*q >= ' ')
        q++;
    if (q >= end || *q != '"')
        return -1;
    *s = *p;
    *n = q - *p;
    *p = q + 1;
    return 0;
}


/* whether [p, end) is one JSON value as Python's json.loads reads it (NaN and
 * Infinity included, as the worker's encoder may write them), nested at most 64 deep */
static const char *json_value(const char *p, const char *end, int depth);

static const char *json_ws(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n'))
        p++;
    return p;
}

static const char *json_string(const char *p, const char *end) {
    for (p++; p < end; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '"')
            return p + 1;
        if (c < ' ')
            return NULL;
        if (c == '\\') {
            if (++p >= end)
                return NULL;
            if (*p == 'u') {
                for (int i = 0; i < 4; i++)
                    if (++p >= end || !((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')
                                        || (*p >= 'A' && *p <= 'F')))
                        return NULL;
            } else if (!strchr("\"\\/bfnrt", *p) || *p == '\0') {
                return NULL;
            }
        }
    }
    return NULL;
}

static const char *json_digits(const char *p, const char *end) {
    const char *q = p;
    while (q < end && *q >= '0' && *q <= '9')
        q++;
    return q == p ? NULL : q;
}

static const char *json_number(const char *p, const char *end) {
    if (*p == '-')
        p++;
    if (end - p >= 8 && memcmp(p, "Infinity", 8) == 0)
        return p + 8;
    if (p < end && *p == '0')
        p++;
    else if ((p = json_digits(p, end)) == NULL)
        return NULL;
    if (p < end && *p == '.' && (p = json_digits(p + 1, end)) == NULL)
        return NULL;
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        if ((p = json_digits(p, end)) == NULL)
            return NULL;
    }
    return p;
}

static const char *json_word(const char *p, const char *end, const char *w) {
    size_t n = strlen(w);
    return (size_t)(end - p) >= n && memcmp(p, w, n) == 0 ? p + n : NULL;
}

static const char *json_value(const char *p, const char *end, int depth) {
    p = json_ws(p, end);
    if (p >= end || depth > 64)
        return NULL;
    switch (*p) {
    case '"':
        return json_string(p, end);
    case '{':
    case '[': {
        char close = *p == '{' ? '}' : ']';
        int object = *p == '{';
        p = json_ws(p + 1, end);
        if (p < end && *p == close)
            return p + 1;
        for (;;) {
            if (object) {
                p = json_ws(p, end);
                if (p >= end || *p != '"' || (p = json_string(p, end)) == NULL)
                    return NULL;
                p = json_ws(p, end);
                if (p >= end || *p++ != ':')
                    return NULL;
            }
            if ((p = json_value(p, end, depth + 1)) == NULL)
                return NULL;
            p = json_ws(p, end);
            if (p < end && *p == ',') {
                p++;
                continue;
            }
            return p < end && *p == close ? p + 1 : NULL;
        }
    }
    case 't':
        return json_word(p, end, "true");
    case 'f':
        return json_word(p, end, "false");
    case 'n':
        return json_word(p, end, "null");
    case 'N':
        return json_word(p, end, "NaN");
    default:
        return (*p == '-' || (*p >= '0' && *p <= '9') || *p == 'I') ? json_number(p, end) : NULL;
    }
}

/* one event line [s, e) (e at its newline) as a row, or NULL (not in the usual shape;
 * no Python error set) */
static PyObject *event_row(const char *s, const char *e, Py_ssize_t start) {
    const char *p = s, *f, *key = NULL, *v;
    Py_ssize_t fn, kn = 0;
    long long t, process, worker;
    if (expect(&p, e, "{\"time\": ") || read_int(&p, e, &t) || expect(&p, e, ", \"process\": ")
        || read_int(&p, e, &process) || expect(&p, e, ", " MARK)
        || read_plain(&p, e, &f, &fn) || expect(&p, e, ", \"key\": "))
        return NULL;
    if (expect(&p, e, "null") != 0) {
        if (expect(&p, e, "\"") || read_plain(&p, e, &key, &kn))
            return NULL;
    }
    if (expect(&p, e, ", \"value\": "))
        return NULL;
    v = p;
    /* the tail, `, "worker": W}`: the last `, "worker": ` of the line */
    static const char tail[] = ", \"worker\": ";
    const char *w = NULL;
    for (const char *q = e - (Py_ssize_t)(sizeof tail - 1); q > v; q--) {
        if (*q == ',' && memcmp(q, tail, sizeof tail - 1) == 0) {
            w = q;
            break;
        }
    }
    if (w == NULL)
        return NULL;
    const char *q = w + sizeof tail - 1;
    if (read_int(&q, e, &worker) || q != e - 1 || *q != '}')
        return NULL;
    const char *after = json_value(v, w, 0);
    if (after == NULL || json_ws(after, w) != w) /* not JSON: the slow path drops it */
        return NULL;
    PyObject *row = PyTuple_New(7);
    if (row == NULL)
        return NULL;
    PyObject *k = key == NULL ? Py_NewRef(Py_None) : PyUnicode_FromStringAndSize(key, kn);
    PyObject *items[7] = {PyLong_FromSsize_t(start), PyLong_FromLongLong(t),
                          PyLong_FromLongLong(process), PyUnicode_FromStringAndSize(f, fn), k,
                          PyLong_FromLongLong(worker),
                          PyUnicode_FromStringAndSize(v, (Py_ssize_t)(w - v))};
    for (int i = 0; i < 7; i++) {
        if (items[i] == NULL) {
            for (int j = 0; j < 7; j++)
                Py_XDECREF(items[j]);
            Py_DECREF(row);
            return NULL;
        }
    }
    for (int i = 0; i < 7; i++)
        PyTuple_SET_ITEM(row, i, items[i]);
    return row;
}

/* the event line [s, e) (starting at `start` in its block, its newline ending before
 * `stop`) onto `rows`, or its (start, stop) onto `odd` if it is not in the usual shape */
static int take_event(Py_ssize_t start, Py_ssize_t stop, const char *s, const char *e,
                      PyObject *rows, PyObject *odd) {
    PyObject *row = event_row(s, e, start);
    if (row == NULL && PyErr_Occurred())
        return -1;
    if (row == NULL)
        row = Py_BuildValue("(nn)", start, stop);
    if (row == NULL)
        return -1;
    int r = PyList_Append(PyTuple_GET_SIZE(row) == 2 ? odd : rows, row);
    Py_DECREF(row);
    return r;
}

static PyObject *event_rows(PyObject *mod, PyObject *arg) {
    Py_buffer in;
    if (PyObject_GetBuffer(arg, &in, PyBUF_SIMPLE) < 0)
        return NULL;
    const char *buf = in.buf, *end = buf + in.len;
    PyObject *rows = PyList_New(0), *odd = PyList_New(0), *out = NULL;
    if (rows == NULL || odd == NULL)
        goto done;
    const char *from = buf;
    const char *m;
    while ((m = memmem(from, (size_t)(end - from), MARK, sizeof MARK - 1)) != NULL) {
        const char *s = m;
        while (s > buf && s[-1] != '\n')
            s--;
        const char *e = memchr(m, '\n', (size_t)(end - m));
        if (e == NULL)
            e = end;
        if (take_event(s - buf, e - buf + (e < end), s, e, rows, odd) < 0)
            goto done;
        from = e < end ? e + 1 : end;
    }
    out = PyTuple_Pack(2, rows, odd);
done:
    Py_XDECREF(rows);
    Py_XDECREF(odd);
    PyBuffer_Release(&in);
    return out;
}

/* scan(block): one pass over a block of lines. None if a line is out of the usual
 * shape (not the layout's head and tail, not ASCII, a process that is not an integer,
 * the block not ending in a newline): the caller takes the Python path. Else (lines,
 * (other, ok, fail, info, event) counts by type, event rows, odd event lines) as
 * event_rows gives them. */
static PyObject *scan(PyObject *mod, PyObject *arg) {
    static const char *types[] = {"ok", "fail", "info", "event"};
    Py_buffer in;
    if (PyObject_GetBuffer(arg, &in, PyBUF_SIMPLE) < 0)
        return NULL;
    const char *buf = in.buf, *end = buf + in.len, *s = buf;
    long long counts[5] = {0, 0, 0, 0, 0};
    Py_ssize_t lines = 0;
    PyObject *rows = PyList_New(0), *odd = PyList_New(0), *out = NULL;
    if (rows == NULL || odd == NULL)
        goto done;
    if (in.len == 0 || end[-1] != '\n')
        goto unusual;
    while (s < end) {
        const char *e = memchr(s, '\n', (size_t)(end - s)), *p = s, *ty;
        Py_ssize_t tn;
        long long ignored;
        for (const char *q = s; q < e; q++)
            if ((unsigned char)*q & 0x80)
                goto unusual;
        if (e - s < 2 || e[-1] != '}' || expect(&p, e, "{\"time\": ") || read_int(&p, e, &ignored)
            || expect(&p, e, ", \"process\": ") || read_int(&p, e, &ignored)
            || expect(&p, e, ", \"type\": \"") || read_plain(&p, e, &ty, &tn))
            goto unusual;
        int kind = 0;
        for (int i = 0; i < 4; i++)
            if ((size_t)tn == strlen(types[i]) && memcmp(ty, types[i], (size_t)tn) == 0)
                kind = i + 1;
        counts[kind]++;
        if (kind == 4) {
            if (take_event(s - buf, e + 1 - buf, s, e, rows, odd) < 0)
                goto done;
        }
        lines++;
        s = e + 1;
    }
    out = Py_BuildValue("(n(LLLLL)OO)", lines, counts[0], counts[1], counts[2], counts[3],
                        counts[4], rows, odd);
    goto done;
unusual:
    out = Py_NewRef(Py_None);
done:
    Py_XDECREF(rows);
    Py_XDECREF(odd);
    PyBuffer_Release(&in);
    return out;
}

static PyMethodDef module_methods[] = {
    {"index_lines", (PyCFunction)(void (*)(void))index_lines, METH_FASTCALL,
     "index_lines(block, first): each line with `\"index\": N, ` put first."},
    {"scan", (PyCFunction)scan, METH_O,
     "scan(block): None if a line is out of the usual shape, else (lines, (other, ok, "
     "fail, info, event) counts, event rows, odd event lines)."},
    {"event_rows", (PyCFunction)event_rows, METH_O,
     "event_rows(block): (rows, odd): each event line in the usual shape as (start, time, "
     "process, f, key, worker, value as JSON text); the (start, end) of the others."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_crecord", "The history's lines made in C.", -1, module_methods,
};

PyMODINIT_FUNC PyInit__crecord(void) {
    if (PyType_Ready(&SpoolType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Spool", (PyObject *)&SpoolType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
