/* A compiled reader of history.jsonl for the lock check: lines -> lock-operation columns.
 *
 * history.py's reader builds an Op per line (two million objects for a million ops);
 * the lock check only needs, per lock operation, its key, kind, process, lease owner,
 * call and return times and two fences. This module parses the lines and pairs each
 * invoke with its completion as checker/linearizable.py:lock_operations does, step for
 * step, into int64 columns, and keeps the reader's checks (increasing index, and the
 * process rules: one op in flight per process, nothing after its info).
 *
 * It reads only the common shape of a line: one JSON object of the known fields, ASCII
 * strings without escapes, integers of at most 18 digits, a value that is null, a
 * scalar or a flat object of scalars. Anything else (and any line that breaks a check)
 * stops `scan` at that line: the Python side reads it with the ordinary decoder and
 * hands the fields to `feed`, or raises the reader's own error. So the result is the
 * one of the Python path on every history.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* ids of the strings every history has, interned first in this order */
enum { S_INVOKE, S_OK, S_FAIL, S_INFO, S_EVENT, S_ACQUIRE, S_RELEASE, S_RENEW, S_NEMESIS,
       S_WELL_KNOWN };
static const char *WELL_KNOWN[S_WELL_KNOWN] = {"invoke", "ok", "fail", "info", "event",
                                                "acquire", "release", "renew", "nemesis"};

#define NONE_ID (-1)
#define RETIRED (-1) /* a process after its info: it may issue nothing more */
#define TAG_LIMIT ((int64_t)1 << 60) /* ints tagged into one int64 must fit */

/* flags of a lock op */
#define F_CRASHED 1
#define F_FENCE 2 /* fence_out is set (an ok acquire's fence) */
#define F_NAMED 4 /* named is set (the fence a renew or release names) */

/* ---- a hash map of (int64, int64) -> int64, linear probing, backward-shift delete ---- */
typedef struct {
    int64_t *a, *b, *v;
    uint8_t *used;
    size_t cap, n;
} Map;

static inline size_t home(const Map *m, int64_t a, int64_t b) {
    uint64_t h = (uint64_t)a * 0x9E3779B97F4A7C15ULL ^ ((uint64_t)b + 0x632BE59BD9B4E019ULL);
    h ^= h >> 31;
    h *= 0xD6E8FEB86659FD93ULL;
    h ^= h >> 32;
    return (size_t)h & (m->cap - 1);
}

static void map_free(Map *m) {
    PyMem_Free(m->a); PyMem_Free(m->b); PyMem_Free(m->v); PyMem_Free(m->used);
    memset(m, 0, sizeof(*m));
}

static int map_alloc(Map *m, size_t cap) {
    m->a = PyMem_Malloc(cap * sizeof(int64_t));
    m->b = PyMem_Malloc(cap * sizeof(int64_t));
    m->v = PyMem_Malloc(cap * sizeof(int64_t));
    m->used = PyMem_Calloc(cap, 1);
    m->cap = cap;
    m->n = 0;
    if (!m->a || !m->b || !m->v || !m->used) {
        map_free(m);
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static int64_t *map_get(const Map *m, int64_t a, int64_t b) {
    size_t i = home(m, a, b);
    while (m->used[i]) {
        if (m->a[i] == a && m->b[i] == b)
            return &m->v[i];
        i = (i + 1) & (m->cap - 1);
    }
    return NULL;
}

static int map_put(Map *m, int64_t a, int64_t b, int64_t v);

static int map_grow(Map *m) {
    Map old = *m;
    if (map_alloc(m, old.cap * 2) < 0) {
        *m = old;
        return -1;
    }
    for (size_t i = 0; i < old.cap; i++)
        if (old.used[i])
            map_put(m, old.a[i], old.b[i], old.v[i]);
    map_free(&old);
    return 0;
}

/* insert or overwrite; 1 if new, 0 if overwritten, -1 on error */
static int map_put(Map *m, int64_t a, int64_t b, int64_t v) {
    int64_t *p = map_get(m, a, b);
    if (p != NULL) {
        *p = v;
        return 0;
    }
    if ((m->n + 1) * 2 > m->cap && map_grow(m) < 0)
        return -1;
    size_t i = home(m, a, b);
    while (m->used[i])
        i = (i + 1) & (m->cap - 1);
    m->used[i] = 1;
    m->a[i] = a; m->b[i] = b; m->v[i] = v;
    m->n++;
    return 1;
}

/* remove; 1 (and *v) if it was there, 0 if not */
static int map_del(Map *m, int64_t a, int64_t b, int64_t *v) {
    size_t mask = m->cap - 1, i = home(m, a, b);
    while (m->used[i] && !(m->a[i] == a && m->b[i] == b))
        i = (i + 1) & mask;
    if (!m->used[i])
        return 0;
    if (v != NULL)
        *v = m->v[i];
    size_t j = i;
    for (;;) { /* shift back the entries that probed past the hole */
        j = (j + 1) & mask;
        if (!m->used[j])
            break;
        size_t k = home(m, m->a[j], m->b[j]);
        if ((j > i && (k <= i || k > j)) || (j < i && (k <= i && k > j))) {
            m->a[i] = m->a[j]; m->b[i] = m->b[j]; m->v[i] = m->v[j];
            i = j;
        }
    }
    m->used[i] = 0;
    m->n--;
    return 1;
}

/* ---- growable int64 columns ---- */
typedef struct {
    int64_t *d;
    size_t n, cap;
} Col;

static int col_push(Col *c, int64_t x) {
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 1 << 12;
        int64_t *d = PyMem_Realloc(c->d, cap * sizeof(int64_t));
        if (d == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        c->d = d;
        c->cap = cap;
    }
    c->d[c->n++] = x;
    return 0;
}

/* the output columns, one entry per lock operation, in lock_operations' order */
enum { C_KFF, C_PROC, C_OWNER, C_CALL, C_RET, C_FENCE, C_NAMED, N_COLS };
static const char *COL_NAMES[N_COLS] = {"kff", "proc", "owner", "call", "ret", "fence",
                                        "named"};

/* an open lock invoke */
enum { P_CALL, P_KEY, P_PROC, P_F, P_FENCE, P_HASF, P_LEASE, P_HASL, P_SEQ, N_P };

typedef struct {
    PyObject_HEAD
    /* interned strings: ids index `strings`; the table maps bytes to ids */
    PyObject *strings; /* list of str */
    char **sbytes;
    Py_ssize_t *slen;
    uint64_t *shash;
    int64_t *stab; /* id + 1, 0 empty */
    size_t stab_cap, n_str, sbytes_cap;
    Map open;    /* the process rules: (process tag, 0) -> f id in flight, or RETIRED */
    Map pending; /* lock invokes: (process tag, f id) -> pool slot */
    Map grants;  /* (key id, lease tag) -> grant slot */
    Col pool[N_P];
    Col free_slots;
    Col gowner, gfence, ghas;
    Col cols[N_COLS];
    Col fcount; /* client lines (not events, not the nemesis) per f id */
    int64_t last_index, seq, lines, n_ops;
} Scanner;

/* a parsed line */
typedef struct {
    int64_t index, time, proc, type, f, key, error, worker;
    int64_t fence, lease;
    int has_fence, has_lease;
} Line;

static uint64_t fnv(const char *s, Py_ssize_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (Py_ssize_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 1099511628211ULL;
    return h;
}

static int stab_grow(Scanner *s) {
    size_t cap = s->stab_cap ? s->stab_cap * 2 : 1024;
    int64_t *t = PyMem_Calloc(cap, sizeof(int64_t));
    if (t == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (size_t id = 0; id < s->n_str; id++) {
        size_t i = (size_t)s->shash[id] & (cap - 1);
        while (t[i])
            i = (i + 1) & (cap - 1);
        t[i] = (int64_t)id + 1;
    }
    PyMem_Free(s->stab);
    s->stab = t;
    s->stab_cap = cap;
    return 0;
}

/* the id of a string (UTF-8 bytes), interning it; -2 on error */
static int64_t intern(Scanner *s, const char *p, Py_ssize_t n) {
    uint64_t h = fnv(p, n);
    size_t mask = s->stab_cap - 1, i = (size_t)h & mask;
    while (s->stab[i]) {
        int64_t id = s->stab[i] - 1;
        if (s->shash[id] == h && s->slen[id] == n && memcmp(s->sbytes[id], p, n) == 0)
            return id;
        i = (i + 1) & mask;
    }
    if (s->n_str == s->sbytes_cap) {
        size_t cap = s->sbytes_cap ? s->sbytes_cap * 2 : 256;
        char **b = PyMem_Realloc(s->sbytes, cap * sizeof(char *));
        if (b == NULL)
            goto nomem;
        s->sbytes = b;
        Py_ssize_t *l = PyMem_Realloc(s->slen, cap * sizeof(Py_ssize_t));
        if (l == NULL)
            goto nomem;
        s->slen = l;
        uint64_t *hs = PyMem_Realloc(s->shash, cap * sizeof(uint64_t));
        if (hs == NULL)
            goto nomem;
        s->shash = hs;
        s->sbytes_cap = cap;
    }
    char *copy = PyMem_Malloc(n ? n : 1);
    if (copy == NULL)
        goto nomem;
    memcpy(copy, p, n);
    PyObject *str = PyUnicode_DecodeUTF8(p, n, NULL);
    if (str == NULL) {
        PyMem_Free(copy);
        return -2;
    }
    if (PyList_Append(s->strings, str) < 0) {
        Py_DECREF(str);
        PyMem_Free(copy);
        return -2;
    }
    Py_DECREF(str);
    int64_t id = (int64_t)s->n_str++;
    s->sbytes[id] = copy;
    s->slen[id] = n;
    s->shash[id] = h;
    s->stab[i] = id + 1;
    if (s->n_str * 2 > s->stab_cap && stab_grow(s) < 0)
        return -2;
    return id;
nomem:
    PyErr_NoMemory();
    return -2;
}

/* process tags: an int process v -> 4v, a string process with id s -> 4s + 1; lease
 * owners that no grant names: 4t + 2 (string token id t), 4v + 3 (int token v) */
static inline int64_t tag_int(int64_t v, int64_t kind) { return v * 4 + kind; }

/* ---- the lock adapter (lock_operations) and the reader's checks, per line ---- */

static int emit(Scanner *s, const int64_t *rec, const Line *comp) {
    int64_t f = rec[P_F], key = rec[P_KEY], proc = rec[P_PROC];
    int64_t owner = proc, named = 0, fence = 0, ret = 0, flags = 0;
    int has_named = 0;
    if (f != S_ACQUIRE) {
        if (comp == NULL && f == S_RENEW)
            return 0; /* a crashed renew changes nothing */
        has_named = (int)rec[P_HASF];
        named = rec[P_FENCE];
        int has_token = (int)rec[P_HASL];
        int64_t token = rec[P_LEASE];
        if (comp != NULL) {
            if (!has_named && comp->has_fence) {
                has_named = 1;
                named = comp->fence;
            }
            if (!has_token && comp->has_lease) {
                has_token = 1;
                token = comp->lease;
            }
        }
        if (has_token) {
            int64_t *g = map_get(&s->grants, key, token);
            if (g != NULL) {
                owner = s->gowner.d[*g];
                if (!has_named && s->ghas.d[*g]) {
                    has_named = 1;
                    named = s->gfence.d[*g];
                }
            } else { /* a lease nobody was granted: an owner that never held the lock */
                owner = (token & 1) ? tag_int(token >> 1, 3) : tag_int(token >> 1, 2);
            }
        }
    }
    if (comp != NULL) {
        if (f == S_ACQUIRE) {
            if (comp->has_fence) {
                flags |= F_FENCE;
                fence = comp->fence;
            }
            if (comp->has_lease) {
                int64_t slot = (int64_t)s->gowner.n;
                if (col_push(&s->gowner, proc) < 0 || col_push(&s->gfence, fence) < 0 ||
                    col_push(&s->ghas, comp->has_fence) < 0 ||
                    map_put(&s->grants, key, comp->lease, slot) < 0)
                    return -1;
            }
        }
        ret = comp->time;
    } else {
        flags |= F_CRASHED;
    }
    if (has_named)
        flags |= F_NAMED;
    int64_t row[N_COLS] = {(key << 8) | (f << 4) | flags, proc, owner, rec[P_CALL], ret,
                           fence, named};
    for (int c = 0; c < N_COLS; c++)
        if (col_push(&s->cols[c], row[c]) < 0)
            return -1;
    return 0;
}

/* 0 done, 1 the index does not increase, -1 error, or a process rule broken (the codes
 * of history.py's ProcessRules): 2 a completion with no open invoke of its process and
 * f, 3 an invoke while its process has an op in flight, 4 an op after its process's
 * info. Nothing changes unless 0 is returned. */
static int process(Scanner *s, const Line *ln) {
    if (ln->index <= s->last_index)
        return 1;
    int client = ln->type != S_EVENT && ln->proc != tag_int(S_NEMESIS, 1);
    if (client) {
        const int64_t *st = map_get(&s->open, ln->proc, 0);
        if (st != NULL && *st == RETIRED)
            return 4;
        if (ln->type == S_INVOKE ? st != NULL : (st == NULL || *st != ln->f))
            return ln->type == S_INVOKE ? 3 : 2;
    }
    s->last_index = ln->index;
    s->n_ops++;
    if (client) {
        while ((int64_t)s->fcount.n <= ln->f)
            if (col_push(&s->fcount, 0) < 0)
                return -1;
        s->fcount.d[ln->f]++;
        if (ln->type == S_INVOKE || ln->type == S_INFO) {
            if (map_put(&s->open, ln->proc, 0, ln->type == S_INVOKE ? ln->f : RETIRED) < 0)
                return -1;
        } else {
            map_del(&s->open, ln->proc, 0, NULL);
        }
    }
    int lock = (ln->f == S_ACQUIRE || ln->f == S_RELEASE || ln->f == S_RENEW) &&
               ln->key != NONE_ID && ln->proc != tag_int(S_NEMESIS, 1);
    if (!lock || ln->type == S_EVENT)
        return 0;
    if (ln->type == S_INVOKE) {
        int64_t *slotp = map_get(&s->pending, ln->proc, ln->f);
        int64_t slot, seq;
        if (slotp != NULL) { /* a second invoke replaces the first, in its place */
            slot = *slotp;
            seq = s->pool[P_SEQ].d[slot];
        } else {
            if (s->free_slots.n) {
                slot = s->free_slots.d[--s->free_slots.n];
            } else {
                slot = (int64_t)s->pool[0].n;
                for (int c = 0; c < N_P; c++)
                    if (col_push(&s->pool[c], 0) < 0)
                        return -1;
            }
            seq = s->seq++;
            if (map_put(&s->pending, ln->proc, ln->f, slot) < 0)
                return -1;
        }
        int64_t rec[N_P] = {ln->time, ln->key, ln->proc, ln->f, ln->fence, ln->has_fence,
                            ln->lease, ln->has_lease, seq};
        for (int c = 0; c < N_P; c++)
            s->pool[c].d[slot] = rec[c];
        return 0;
    }
    int64_t slot;
    if (!map_del(&s->pending, ln->proc, ln->f, &slot))
        return 0;
    if (col_push(&s->free_slots, slot) < 0)
        return -1;
    if (ln->type == S_FAIL)
        return 0;
    int64_t rec[N_P];
    for (int c = 0; c < N_P; c++)
        rec[c] = s->pool[c].d[slot];
    return emit(s, rec, ln->type == S_OK ? ln : NULL) < 0 ? -1 : 0;
}

/* ---- the common shape of a line ---- */

typedef struct {
    const char *p, *end;
} Cur;

static inline void ws(Cur *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\r'))
        c->p++;
}

/* a plain ASCII string: sets *s, *n; 0 if not one */
static inline int str(Cur *c, const char **s, Py_ssize_t *n) {
    if (c->p >= c->end || *c->p != '"')
        return 0;
    const char *q = ++c->p;
    while (q < c->end && *q != '"') {
        unsigned char ch = (unsigned char)*q;
        if (ch == '\\' || ch < 0x20 || ch >= 0x80)
            return 0;
        q++;
    }
    if (q >= c->end)
        return 0;
    *s = c->p;
    *n = q - c->p;
    c->p = q + 1;
    return 1;
}

/* an integer of at most 18 digits (not a float): 0 if not one */
static inline int integer(Cur *c, int64_t *v) {
    const char *q = c->p;
    int neg = 0;
    if (q < c->end && *q == '-') {
        neg = 1;
        q++;
    }
    const char *d = q;
    int64_t x = 0;
    while (q < c->end && *q >= '0' && *q <= '9' && q - d < 19) {
        x = x * 10 + (*q - '0');
        q++;
    }
    int nd = (int)(q - d);
    if (nd == 0 || nd > 18 || (nd > 1 && *d == '0'))
        return 0;
    if (q < c->end && (*q == '.' || *q == 'e' || *q == 'E' || (*q >= '0' && *q <= '9')))
        return 0;
    *v = neg ? -x : x;
    c->p = q;
    return 1;
}

static inline int lit(Cur *c, const char *w, int n) {
    if (c->end - c->p >= n && memcmp(c->p, w, n) == 0) {
        c->p += n;
        return 1;
    }
    return 0;
}

/* kinds of a scalar */
enum { V_NULL, V_INT, V_STR, V_BOOL };

static inline int scalar(Cur *c, int *kind, int64_t *iv, const char **s, Py_ssize_t *n) {
    if (c->p >= c->end)
        return 0;
    char ch = *c->p;
    if (ch == '"') {
        *kind = V_STR;
        return str(c, s, n);
    }
    if (ch == 'n') {
        *kind = V_NULL;
        return lit(c, "null", 4);
    }
    if (ch == 't' || ch == 'f') {
        *kind = V_BOOL;
        return lit(c, "true", 4) || lit(c, "false", 5);
    }
    *kind = V_INT;
    return integer(c, iv);
}

#define NAME_IS(s, n, lit_) ((n) == (Py_ssize_t)sizeof(lit_) - 1 && memcmp(s, lit_, n) == 0)

/* the value field: null, a scalar, or a flat object of scalars; fence and lease read as
 * lock_operations reads them (an int fence, a str or int lease). 0 if another shape. */
static int value(Scanner *s, Cur *c, Line *ln) {
    ln->has_fence = ln->has_lease = 0;
    int kind;
    int64_t iv;
    const char *sp;
    Py_ssize_t sn;
    if (c->p < c->end && *c->p != '{')
        return scalar(c, &kind, &iv, &sp, &sn);
    c->p++;
    ws(c);
    if (c->p < c->end && *c->p == '}') {
        c->p++;
        return 1;
    }
    for (;;) {
        const char *name;
        Py_ssize_t nn;
        ws(c);
        if (!str(c, &name, &nn))
            return 0;
        ws(c);
        if (!lit(c, ":", 1))
            return 0;
        ws(c);
        if (!scalar(c, &kind, &iv, &sp, &sn))
            return 0;
        if (NAME_IS(name, nn, "fence")) { /* the last one wins, as in a dict */
            ln->has_fence = kind == V_INT;
            ln->fence = iv;
        } else if (NAME_IS(name, nn, "lease")) {
            ln->has_lease = kind == V_INT || kind == V_STR;
            if (kind == V_INT) {
                if (iv >= TAG_LIMIT || iv <= -TAG_LIMIT)
                    return 0;
                ln->lease = iv * 2 + 1;
            } else if (kind == V_STR) {
                int64_t id = intern(s, sp, sn);
                if (id < 0)
                    return -1;
                ln->lease = id * 2;
            }
        }
        ws(c);
        if (lit(c, "}", 1))
            return 1;
        if (!lit(c, ",", 1))
            return 0;
    }
}

enum { K_INDEX, K_TIME, K_PROCESS, K_TYPE, K_F, K_KEY, K_VALUE, K_ERROR, K_WORKER };

/* parse one line [p, end) (end at its newline); 1 parsed, 0 another shape, -1 error */
static int parse(Scanner *s, const char *p, const char *end, Line *ln) {
    Cur c = {p, end};
    unsigned seen = 0;
    ln->key = NONE_ID;
    ln->error = NONE_ID;
    ln->has_fence = ln->has_lease = 0;
    ws(&c);
    if (!lit(&c, "{", 1))
        return 0;
    for (;;) {
        const char *name;
        Py_ssize_t nn;
        ws(&c);
        if (!str(&c, &name, &nn))
            return 0;
        ws(&c);
        if (!lit(&c, ":", 1))
            return 0;
        ws(&c);
        int k;
        if (NAME_IS(name, nn, "index")) k = K_INDEX;
        else if (NAME_IS(name, nn, "time")) k = K_TIME;
        else if (NAME_IS(name, nn, "process")) k = K_PROCESS;
        else if (NAME_IS(name, nn, "type")) k = K_TYPE;
        else if (NAME_IS(name, nn, "f")) k = K_F;
        else if (NAME_IS(name, nn, "key")) k = K_KEY;
        else if (NAME_IS(name, nn, "value")) k = K_VALUE;
        else if (NAME_IS(name, nn, "error")) k = K_ERROR;
        else if (NAME_IS(name, nn, "worker")) k = K_WORKER;
        else return 0; /* an extra field */
        if (seen & (1u << k))
            return 0; /* a repeated field */
        seen |= 1u << k;
        int kind;
        int64_t iv = 0;
        const char *sp = NULL;
        Py_ssize_t sn = 0;
        if (k == K_VALUE) {
            int r = value(s, &c, ln);
            if (r <= 0)
                return r;
        } else {
            if (!scalar(&c, &kind, &iv, &sp, &sn))
                return 0;
            int64_t id = NONE_ID;
            if (kind == V_STR) {
                id = intern(s, sp, sn);
                if (id < 0)
                    return -1;
            }
            switch (k) {
            case K_INDEX: case K_TIME:
                if (kind != V_INT) return 0;
                if (k == K_INDEX) ln->index = iv; else ln->time = iv;
                break;
            case K_PROCESS:
                if (kind == V_INT) {
                    if (iv >= TAG_LIMIT || iv <= -TAG_LIMIT) return 0;
                    ln->proc = tag_int(iv, 0);
                } else if (kind == V_STR) {
                    ln->proc = tag_int(id, 1);
                } else return 0;
                break;
            case K_TYPE:
                if (kind != V_STR || id >= S_WELL_KNOWN || id > S_EVENT) return 0;
                ln->type = id;
                break;
            case K_F:
                if (kind != V_STR) return 0;
                ln->f = id;
                break;
            case K_KEY:
                if (kind == V_STR) ln->key = id;
                else if (kind != V_NULL) return 0;
                break;
            case K_ERROR:
                if (kind == V_STR) ln->error = id;
                else if (kind != V_NULL) return 0;
                break;
            case K_WORKER:
                if (kind != V_INT && kind != V_NULL) return 0;
                break;
            }
        }
        ws(&c);
        if (lit(&c, "}", 1))
            break;
        if (!lit(&c, ",", 1))
            return 0;
    }
    ws(&c);
    if (c.p != end)
        return 0;
    unsigned need = (1u << K_INDEX) | (1u << K_TIME) | (1u << K_PROCESS) | (1u << K_TYPE) |
                    (1u << K_F);
    return (seen & need) == need;
}

/* scan(buf, start): read the complete lines of buf from start; stops at the first line
 * it leaves to Python (another shape, or a check that fails) or at the last newline.
 * Returns the offset where it stopped. */
static PyObject *Scanner_scan(Scanner *s, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t start;
    if (!PyArg_ParseTuple(args, "y*n", &buf, &start))
        return NULL;
    const char *base = buf.buf, *p = base + start, *end = base + buf.len;
    while (p < end) {
        const char *nl = memchr(p, '\n', end - p);
        if (nl == NULL)
            break;
        Line ln;
        int r = parse(s, p, nl, &ln);
        if (r < 0)
            goto error;
        if (r == 0)
            break;
        r = process(s, &ln);
        if (r < 0)
            goto error;
        if (r > 0)
            break;
        s->lines++;
        p = nl + 1;
    }
    PyBuffer_Release(&buf);
    return PyLong_FromSsize_t(p - base);
error:
    PyBuffer_Release(&buf);
    return NULL;
}

/* an id for a str (interned; non-ASCII strings are interned by their UTF-8 bytes) */
static int64_t id_of(Scanner *s, PyObject *o) {
    Py_ssize_t n;
    const char *p = PyUnicode_AsUTF8AndSize(o, &n);
    if (p == NULL)
        return -2;
    return intern(s, p, n);
}

/* feed(index, time, process, type, f, key, fence, lease, line_counted): a line the
 * Python side read; fence an int or None, lease a str, an int or None, as
 * lock_operations reads them. Returns process()'s code. */
static PyObject *Scanner_feed(Scanner *s, PyObject *args) {
    PyObject *proc, *type, *f, *key, *fence, *lease;
    Line ln;
    long long index, time;
    if (!PyArg_ParseTuple(args, "LLOUUOOO", &index, &time, &proc, &type, &f, &key, &fence,
                          &lease))
        return NULL;
    ln.index = index;
    ln.time = time;
    ln.error = NONE_ID;
    if (PyLong_CheckExact(proc)) {
        long long v = PyLong_AsLongLong(proc);
        if ((v == -1 && PyErr_Occurred()) || v >= TAG_LIMIT || v <= -TAG_LIMIT) {
            PyErr_Clear();
            PyErr_SetString(PyExc_OverflowError, "process out of range");
            return NULL;
        }
        ln.proc = tag_int(v, 0);
    } else {
        int64_t id = id_of(s, proc);
        if (id < 0)
            return NULL;
        ln.proc = tag_int(id, 1);
    }
    ln.type = id_of(s, type);
    ln.f = id_of(s, f);
    ln.key = key == Py_None ? NONE_ID : id_of(s, key);
    if (ln.type < 0 || ln.f < 0 || ln.key == -2)
        return NULL;
    ln.has_fence = fence != Py_None;
    ln.fence = 0;
    if (ln.has_fence) {
        ln.fence = PyLong_AsLongLong(fence);
        if (ln.fence == -1 && PyErr_Occurred())
            return NULL;
    }
    ln.has_lease = lease != Py_None;
    if (ln.has_lease) {
        if (PyLong_CheckExact(lease)) {
            long long v = PyLong_AsLongLong(lease);
            if ((v == -1 && PyErr_Occurred()) || v >= TAG_LIMIT || v <= -TAG_LIMIT) {
                PyErr_Clear();
                PyErr_SetString(PyExc_OverflowError, "lease out of range");
                return NULL;
            }
            ln.lease = v * 2 + 1;
        } else {
            int64_t id = id_of(s, lease);
            if (id < 0)
                return NULL;
            ln.lease = id * 2;
        }
    }
    int r = process(s, &ln);
    if (r < 0)
        return NULL;
    if (r == 0)
        s->lines++;
    return PyLong_FromLong(r);
}

static int by_seq(const void *x, const void *y) {
    int64_t a = ((const int64_t *)x)[0], b = ((const int64_t *)y)[0];
    return (a > b) - (a < b);
}

/* finish(): emit the invokes that never completed (in the order they were opened, as
 * lock_operations does) and return {column name: bytes of int64}. */
static PyObject *Scanner_finish(Scanner *s, PyObject *unused) {
    size_t n = s->pending.n, k = 0;
    int64_t *order = PyMem_Malloc((n ? n : 1) * 2 * sizeof(int64_t));
    if (order == NULL)
        return PyErr_NoMemory();
    for (size_t i = 0; i < s->pending.cap; i++) {
        if (!s->pending.used[i])
            continue;
        int64_t slot = s->pending.v[i];
        order[2 * k] = s->pool[P_SEQ].d[slot];
        order[2 * k + 1] = slot;
        k++;
    }
    qsort(order, k, 2 * sizeof(int64_t), by_seq);
    for (size_t i = 0; i < k; i++) {
        int64_t rec[N_P];
        for (int c = 0; c < N_P; c++)
            rec[c] = s->pool[c].d[order[2 * i + 1]];
        if (emit(s, rec, NULL) < 0) {
            PyMem_Free(order);
            return NULL;
        }
    }
    PyMem_Free(order);
    PyObject *out = PyDict_New();
    if (out == NULL)
        return NULL;
    for (int c = 0; c < N_COLS; c++) {
        PyObject *b = PyBytes_FromStringAndSize((const char *)s->cols[c].d,
                                                (Py_ssize_t)(s->cols[c].n * sizeof(int64_t)));
        if (b == NULL || PyDict_SetItemString(out, COL_NAMES[c], b) < 0) {
            Py_XDECREF(b);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(b);
        PyMem_Free(s->cols[c].d);
        memset(&s->cols[c], 0, sizeof(Col));
    }
    return out;
}

static PyObject *Scanner_get_lines(Scanner *s, void *closure) {
    return PyLong_FromLongLong(s->lines);
}

static int Scanner_set_lines(Scanner *s, PyObject *v, void *closure) {
    long long n = PyLong_AsLongLong(v);
    if (n == -1 && PyErr_Occurred())
        return -1;
    s->lines = n;
    return 0;
}

/* counts() -> (ops, {f: client lines}) */
static PyObject *Scanner_counts(Scanner *s, PyObject *unused) {
    PyObject *kinds = PyDict_New();
    if (kinds == NULL)
        return NULL;
    for (size_t i = 0; i < s->fcount.n; i++) {
        if (!s->fcount.d[i])
            continue;
        PyObject *n = PyLong_FromLongLong(s->fcount.d[i]);
        if (n == NULL || PyDict_SetItem(kinds, PyList_GET_ITEM(s->strings, i), n) < 0) {
            Py_XDECREF(n);
            Py_DECREF(kinds);
            return NULL;
        }
        Py_DECREF(n);
    }
    return Py_BuildValue("(LN)", (long long)s->n_ops, kinds);
}

static PyObject *Scanner_get_strings(Scanner *s, void *closure) {
    Py_INCREF(s->strings);
    return s->strings;
}

static void Scanner_dealloc(Scanner *s) {
    for (size_t i = 0; i < s->n_str; i++)
        PyMem_Free(s->sbytes[i]);
    PyMem_Free(s->sbytes); PyMem_Free(s->slen); PyMem_Free(s->shash); PyMem_Free(s->stab);
    map_free(&s->open); map_free(&s->pending); map_free(&s->grants);
    for (int c = 0; c < N_P; c++)
        PyMem_Free(s->pool[c].d);
    for (int c = 0; c < N_COLS; c++)
        PyMem_Free(s->cols[c].d);
    PyMem_Free(s->free_slots.d); PyMem_Free(s->gowner.d); PyMem_Free(s->gfence.d);
    PyMem_Free(s->ghas.d); PyMem_Free(s->fcount.d);
    Py_XDECREF(s->strings);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static int Scanner_init(Scanner *s, PyObject *args, PyObject *kw) {
    if (!PyArg_ParseTuple(args, ""))
        return -1;
    if (s->strings != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "a Scanner is initialized once");
        return -1;
    }
    s->strings = PyList_New(0);
    if (s->strings == NULL || stab_grow(s) < 0 || map_alloc(&s->open, 256) < 0 ||
        map_alloc(&s->pending, 256) < 0 || map_alloc(&s->grants, 1024) < 0)
        return -1;
    for (int i = 0; i < S_WELL_KNOWN; i++)
        if (intern(s, WELL_KNOWN[i], (Py_ssize_t)strlen(WELL_KNOWN[i])) != i)
            return -1;
    s->last_index = INT64_MIN;
    return 0;
}

static PyMethodDef Scanner_methods[] = {
    {"scan", (PyCFunction)Scanner_scan, METH_VARARGS,
     "scan(buf, start) -> offset where it stopped"},
    {"feed", (PyCFunction)Scanner_feed, METH_VARARGS,
     "feed(index, time, process, type, f, key, fence, lease) -> 0 | 1 (index) | 2 (orphan)"},
    {"counts", (PyCFunction)Scanner_counts, METH_NOARGS,
     "counts() -> (ops read, {f: lines of client processes})"},
    {"finish", (PyCFunction)Scanner_finish, METH_NOARGS,
     "finish() -> {column: bytes of int64}"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Scanner_getset[] = {
    {"lines", (getter)Scanner_get_lines, (setter)Scanner_set_lines, "lines read so far", NULL},
    {"strings", (getter)Scanner_get_strings, NULL, "the interned strings, by id", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "lockcheck.checker._lockscan.Scanner",
    .tp_basicsize = sizeof(Scanner),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "history.jsonl lines -> lock-operation columns (see the module doc).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Scanner_init,
    .tp_dealloc = (destructor)Scanner_dealloc,
    .tp_methods = Scanner_methods,
    .tp_getset = Scanner_getset,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_lockscan", "history.jsonl -> lock-operation columns, in C.", -1,
    NULL,
};

PyMODINIT_FUNC PyInit__lockscan(void) {
    if (PyType_Ready(&ScannerType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&ScannerType);
    if (PyModule_AddObject(m, "Scanner", (PyObject *)&ScannerType) < 0) {
        Py_DECREF(&ScannerType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
