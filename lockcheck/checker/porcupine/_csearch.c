/* The search of checker.py:_search in C, for speed; same algorithm, same order.
 *
 * Python prepares a partition (checker.py:_prepare) and hands over its arrays. States
 * stay Python objects, interned to small ints (a dict keeps them), so that the memo of
 * transitions and the cache of configurations live in C hash tables. The set of
 * linearized ops is a bitset over the required ops (with `low`, the first one not
 * linearized) and one over the crashed ops; a configuration is hashed incrementally
 * (Zobrist: a random word per op, XORed in and out), and stored compactly: the state
 * id, `low`, the required words from low's word to the highest set bit, the crashed
 * words. `run(budget)` pushes at most `budget` configurations and returns None to let
 * the caller's scheduler interleave partitions, or (0 = ok | 1 = illegal,
 * linearization or None, cache entries) when done. Verbose mode (partial
 * linearizations) stays in Python.
 *
 * For the kv model's step on strings (models._kv_value_step) the states are UTF-8
 * bytes interned here instead ("pure mode", see setup_pure): then the search touches
 * no Python object, and run_all() searches several partitions on threads without the
 * GIL, stopping all at the first illegal one. There the search also leaves out the
 * configurations that dead() proves to fail (a get that no put can precede any more
 * must read the state followed by appends): the same verdict and linearization, found
 * without searching the orders of appends that a later read already rules out.
 * kv_searches() makes the pure searches of the shipped kv model straight from the
 * events, in one pass, for the plain check.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#define ILL (-2)
#define NONE (-1)
#define NATIVE_NONE 0
#define NATIVE_KV 1 /* models._kv_value_step: one key's string value */

typedef struct {
    int32_t e, state, forced, low, hi, chi;
    uint64_t h;
} Frame;

/* A hash table's slot: key and value side by side, so that a probe misses the cache
 * once (the tables are the search's memory; a fresh process pays for every page) */
typedef struct {
    uint64_t key;
    int32_t val;
} TSlot;

typedef struct {
    uint64_t hash;
    size_t off; /* the record's offset in the arena */
} CSlot;

typedef struct {
    PyObject_HEAD
    int32_t n;  /* entries, head 0 and tail n-1 included */
    int32_t tail;
    int32_t *nxt, *prv, *match, *opi, *rid, *cid, *rv;
    uint8_t *iscall, *ro;
    PyObject *inputs, *outputs, *step, *ids, *states, *unknown;
    int native; /* NATIVE_*: a step of models.py done here, without calling Python */
    /* memo of transitions: key (entry << 32 | state) -> next state id or ILL */
    TSlot *trans;
    size_t tcap, tcount;
    /* configurations */
    uint64_t *zreq, *zcr, *lin, *cr;
    int32_t n_req, n_cr, need;
    CSlot *cslots; /* off SIZE_MAX where empty */
    size_t ccap, ccount;
    uint64_t *arena;
    size_t asize, acap;
    Frame *stack;
    int32_t sp, scap;
    /* registers, kept between calls of run() */
    int32_t state, low, hi, chi, e, fresh, has_ro, finished;
    uint64_t h;
    /* pure mode (see setup_pure): the kv step on UTF-8 bytes, states interned here, so
     * that the search touches no Python object and can run without the GIL */
    int pure, nomem, busy;
    int outcome; /* when finished: 1 linearizable, 2 not */
    int prune;   /* pure mode: leave out configurations that dead() proves fail */
    int32_t *callof; /* pure mode, return entries: their call entry */
    uint64_t *pfx;   /* pure mode: the leaves' prefix hashes (see may_prefix) */
    size_t *pfxat;   /* per leaf: where its own start in pfx */
    uint8_t *pfxok;  /* per leaf: whether they are made (when first needed) */
    int32_t npfx;
    uint8_t *kind;  /* call entries: KIND_* */
    int32_t *arg;   /* get: the output's state id, NONE if unknown; put/append: the value's */
    char *sbuf;     /* the interned strings' bytes */
    size_t slen, sbcap;
    size_t *soff;   /* per state id: a leaf's offset in sbuf, an appended one's value id; */
    int32_t *sln;   /* its length, parent (NONE for a leaf), hash, BASE^length */
    int32_t *spar;
    char *scratch;  /* room to compare two states' bytes */
    size_t scratchcap;
    uint64_t *shv, *spw;
    int32_t nstr, strcap;
    int32_t *stab;  /* hash table of state ids, NONE where empty */
    size_t stcap;
} Search;

#define KIND_GET 0
#define KIND_PUT 1
#define KIND_APPEND 2
/* strings hash as polynomials in BASE (mod 2^64), so that the hash of state + value
 * comes from theirs in O(1); equal hashes are still compared byte by byte */
#define BASE 0x100000001B3ULL

static uint64_t splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static uint64_t mix(uint64_t h, int32_t state) {
    uint64_t z = h ^ ((uint64_t)(uint32_t)state * 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 33)) * 0xFF51AFD7ED558CCDULL;
    return z ^ (z >> 33);
}

static void Search_dealloc(Search *s) {
    PyMem_RawFree(s->nxt); PyMem_RawFree(s->prv); PyMem_RawFree(s->match); PyMem_RawFree(s->opi);
    PyMem_RawFree(s->rid); PyMem_RawFree(s->cid); PyMem_RawFree(s->rv); PyMem_RawFree(s->iscall);
    PyMem_RawFree(s->ro); PyMem_RawFree(s->trans); PyMem_RawFree(s->zreq);
    PyMem_RawFree(s->zcr); PyMem_RawFree(s->lin); PyMem_RawFree(s->cr); PyMem_RawFree(s->cslots);
    PyMem_RawFree(s->arena); PyMem_RawFree(s->stack);
    PyMem_RawFree(s->kind); PyMem_RawFree(s->arg); PyMem_RawFree(s->sbuf);
    PyMem_RawFree(s->soff); PyMem_RawFree(s->sln); PyMem_RawFree(s->shv);
    PyMem_RawFree(s->spw); PyMem_RawFree(s->stab); PyMem_RawFree(s->spar);
    PyMem_RawFree(s->scratch);
    PyMem_RawFree(s->pfx); PyMem_RawFree(s->pfxat); PyMem_RawFree(s->pfxok);
    PyMem_RawFree(s->callof);
    Py_XDECREF(s->inputs); Py_XDECREF(s->outputs); Py_XDECREF(s->step);
    Py_XDECREF(s->ids); Py_XDECREF(s->states); Py_XDECREF(s->unknown);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

/* the id of a state, interning it; -3 on error */
static int32_t intern(Search *s, PyObject *state) {
    PyObject *id = PyDict_GetItemWithError(s->ids, state);
    if (id != NULL)
        return (int32_t)PyLong_AsLong(id);
    if (PyErr_Occurred())
        return -3;
    Py_ssize_t n = PyList_GET_SIZE(s->states);
    PyObject *num = PyLong_FromSsize_t(n);
    if (num == NULL || PyDict_SetItem(s->ids, state, num) < 0 ||
        PyList_Append(s->states, state) < 0) {
        Py_XDECREF(num);
        return -3;
    }
    Py_DECREF(num);
    return (int32_t)n;
}

/* --- pure mode: interned UTF-8 strings --- */

static int grow_strtab(Search *s) {
    size_t cap = s->stcap ? s->stcap * 2 : 256;
    int32_t *tab = PyMem_RawMalloc(cap * sizeof(int32_t));
    if (tab == NULL) {
        s->nomem = 1;
        return -1;
    }
    for (size_t i = 0; i < cap; i++)
        tab[i] = NONE;
    for (int32_t id = 0; id < s->nstr; id++) {
        size_t j = (size_t)mix(s->shv[id], 0) & (cap - 1);
        while (tab[j] != NONE)
            j = (j + 1) & (cap - 1);
        tab[j] = id;
    }
    PyMem_RawFree(s->stab);
    s->stab = tab;
    s->stcap = cap;
    return 0;
}

/* *p reallocated to n bytes: 0, or -1 (*p unchanged) when out of memory. */
static int regrow(void **p, size_t n) {
    void *q = PyMem_RawRealloc(*p, n);
    if (q == NULL)
        return -1;
    *p = q;
    return 0;
}

/* Room for one more state id: 0, or -1 when out of memory. */
static int more_states(Search *s) {
    if (s->nstr < s->strcap)
        return 0;
    size_t cap = s->strcap ? (size_t)s->strcap * 2 : 256;
    if (regrow((void **)&s->soff, cap * sizeof(size_t)) < 0 ||
        regrow((void **)&s->sln, cap * sizeof(int32_t)) < 0 ||
        regrow((void **)&s->spar, cap * sizeof(int32_t)) < 0 ||
        regrow((void **)&s->shv, cap * sizeof(uint64_t)) < 0 ||
        regrow((void **)&s->spw, cap * sizeof(uint64_t)) < 0) {
        s->nomem = 1;
        return -1;
    }
    s->strcap = (int32_t)cap;
    return 0;
}

/* The bytes of state `id` written to out (sln[id] of them): a leaf's are in sbuf; an
 * appended state is its parent's bytes then its value's (a leaf), so the walk goes
 * from the end up the parents. */
static void flatten(Search *s, int32_t id, char *out) {
    size_t end = (size_t)s->sln[id];
    while (s->spar[id] != NONE) {
        int32_t v = (int32_t)s->soff[id];
        end -= (size_t)s->sln[v];
        memcpy(out + end, s->sbuf + s->soff[v], (size_t)s->sln[v]);
        id = s->spar[id];
    }
    memcpy(out, s->sbuf + s->soff[id], end);
}

/* Room for n bytes in the byte buffer *buf of capacity *cap: 0, or -1 (s->nomem) when
 * out of memory. */
static int room(Search *s, char **buf, size_t *cap, size_t n) {
    if (n <= *cap)
        return 0;
    size_t c = *cap ? *cap : 4096;
    while (c < n)
        c *= 2;
    if (regrow((void **)buf, c) < 0) {
        s->nomem = 1;
        return -1;
    }
    *cap = c;
    return 0;
}

/* Is state `id` the string parent + v (of the same length)? 1, 0, or -1 out of memory. */
static int is_concat(Search *s, int32_t id, int32_t parent, int32_t v) {
    if (s->spar[id] == parent && (int32_t)s->soff[id] == v)
        return 1; /* states are unique: the same parent and value is the same string */
    size_t n = (size_t)s->sln[id], lp = (size_t)s->sln[parent];
    if (room(s, &s->scratch, &s->scratchcap, n + lp) < 0)
        return -1;
    flatten(s, id, s->scratch);
    flatten(s, parent, s->scratch + n);
    return memcmp(s->scratch, s->scratch + n, lp) == 0 &&
           memcmp(s->scratch + lp, s->sbuf + s->soff[v], n - lp) == 0;
}

/* A new state id with hash h at slot j of the table: -3 when out of memory. */
static int32_t add_state(Search *s, size_t j, size_t len, uint64_t h, uint64_t pw) {
    int32_t id = s->nstr++;
    s->sln[id] = (int32_t)len;
    s->shv[id] = h;
    s->spw[id] = pw;
    if ((size_t)(s->nstr) * 2 > s->stcap) {
        if (grow_strtab(s) < 0)
            return -3;
    } else {
        s->stab[j] = id;
    }
    return id;
}

/* The polynomial hash of n bytes (h = h * BASE + byte, from 0) and BASE^n; four
 * bytes a turn, so that the multiplications do not wait on each other. */
static void poly_hash(const uint8_t *b, size_t n, uint64_t *hp, uint64_t *pwp) {
    const uint64_t b2 = BASE * BASE, b3 = b2 * BASE, b4 = b3 * BASE;
    uint64_t h = 0, pw = 1;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        h = h * b4 + (uint64_t)b[i] * b3 + (uint64_t)b[i + 1] * b2 + (uint64_t)b[i + 2] * BASE +
            b[i + 3];
        pw *= b4;
    }
    for (; i < n; i++) {
        h = h * BASE + b[i];
        pw *= BASE;
    }
    *hp = h;
    *pwp = pw;
}

/* the id of a Python str, interned as a leaf (its bytes kept); -1 if it is no exact str
 * or has no UTF-8 form (then pure mode does not apply), -3 when out of memory. Only
 * before the search, when every state is a leaf. */
#define PFX_STEP 16 /* bytes between two kept prefix hashes of a get's output */
#define DEAD_WALK 64 /* entries dead() looks at: enough for the gets near the front; a
                      * long history without puts would otherwise cost a walk to its end
                      * per configuration */

static int32_t intern_str(Search *s, PyObject *o) {
    if (!PyUnicode_CheckExact(o))
        return -1;
    Py_ssize_t n;
    const char *b = PyUnicode_AsUTF8AndSize(o, &n);
    if (b == NULL) {
        PyErr_Clear();
        return -1;
    }
    uint64_t h, pw;
    poly_hash((const uint8_t *)b, (size_t)n, &h, &pw);
    size_t mask = s->stcap - 1;
    size_t j = (size_t)mix(h, 0) & mask;
    for (int32_t id; (id = s->stab[j]) != NONE; j = (j + 1) & mask)
        if (s->shv[id] == h && s->sln[id] == n && memcmp(s->sbuf + s->soff[id], b, n) == 0)
            return id;
    if ((size_t)n > INT32_MAX / 2 || more_states(s) < 0) {
        s->nomem = 1;
        return -3;
    }
    if (room(s, &s->sbuf, &s->sbcap, s->slen + (size_t)n) < 0)
        return -3;
    s->soff[s->nstr] = s->slen;
    s->spar[s->nstr] = NONE;
    memcpy(s->sbuf + s->slen, b, (size_t)n);
    s->slen += (size_t)n;
    return add_state(s, j, (size_t)n, h, pw);
}

/* state + the string `v` (a leaf), interned; -3 when out of memory. The new state keeps
 * no bytes, only its parent and value (soff holds the value's id). */
static int32_t intern_concat(Search *s, int32_t state, int32_t v) {
    if (s->sln[v] == 0)
        return state;
    uint64_t h = s->shv[state] * s->spw[v] + s->shv[v];
    size_t len = (size_t)s->sln[state] + (size_t)s->sln[v];
    size_t mask = s->stcap - 1;
    size_t j = (size_t)mix(h, 0) & mask;
    for (int32_t id; (id = s->stab[j]) != NONE; j = (j + 1) & mask) {
        if (s->shv[id] == h && (size_t)s->sln[id] == len) {
            int eq = is_concat(s, id, state, v);
            if (eq < 0)
                return -3;
            if (eq)
                return id;
        }
    }
    if (len > INT32_MAX || more_states(s) < 0) {
        s->nomem = 1;
        return -3;
    }
    s->soff[s->nstr] = (size_t)v;
    s->spar[s->nstr] = state;
    return add_state(s, j, len, h, s->spw[state] * s->spw[v]);
}

static int grow_transitions(Search *s) {
    size_t cap = s->tcap ? s->tcap * 2 : 512;
    TSlot *t = PyMem_RawMalloc(cap * sizeof(TSlot));
    if (t == NULL) {
        s->nomem = 1;
        return -1;
    }
    for (size_t i = 0; i < cap; i++)
        t[i].key = UINT64_MAX;
    for (size_t i = 0; i < s->tcap; i++) {
        if (s->trans[i].key == UINT64_MAX)
            continue;
        size_t j = (size_t)mix(s->trans[i].key, 0) & (cap - 1);
        while (t[j].key != UINT64_MAX)
            j = (j + 1) & (cap - 1);
        t[j] = s->trans[i];
    }
    PyMem_RawFree(s->trans);
    s->trans = t; s->tcap = cap;
    return 0;
}

/* models._kv_value_step for str states and values: the next state as a new reference
 * and *ok, or NULL with no error set where it does not apply (then Python's step runs,
 * which also raises what it raises), or NULL with an error. */
static PyObject *kv_step(Search *s, PyObject *state, PyObject *input, PyObject *output,
                         int *ok) {
    if (!PyUnicode_CheckExact(state) || !PyTuple_CheckExact(input) ||
        PyTuple_GET_SIZE(input) != 3)
        return NULL;
    PyObject *f = PyTuple_GET_ITEM(input, 0), *value = PyTuple_GET_ITEM(input, 2);
    if (!PyUnicode_CheckExact(f))
        return NULL;
    if (PyUnicode_CompareWithASCIIString(f, "get") == 0) {
        if (output == s->unknown) {
            *ok = 1;
        } else {
            *ok = PyObject_RichCompareBool(output, state, Py_EQ);
            if (*ok < 0)
                return NULL;
        }
        Py_INCREF(state);
        return state;
    }
    if (!PyUnicode_CheckExact(value))
        return NULL;
    *ok = 1;
    if (PyUnicode_CompareWithASCIIString(f, "put") == 0) {
        Py_INCREF(value);
        return value;
    }
    if (PyUnicode_CompareWithASCIIString(f, "append") == 0)
        return PyUnicode_Concat(state, value);
    return NULL;
}

/* the state after entry e from state by the model's step (Python objects, GIL held):
 * its id, ILL if illegal, -3 on error */
static int32_t py_transition(Search *s, int32_t e, int32_t state) {
    PyObject *argv[3] = {PyList_GET_ITEM(s->states, state), PyList_GET_ITEM(s->inputs, e),
                         PyList_GET_ITEM(s->outputs, e)};
    int32_t next = ILL;
    int ok = 0;
    PyObject *ns = NULL;
    if (s->native == NATIVE_KV) {
        ns = kv_step(s, argv[0], argv[1], argv[2], &ok);
        if (ns == NULL && PyErr_Occurred())
            return -3;
    }
    if (ns != NULL) {
        if (ok)
            next = intern(s, ns);
        Py_DECREF(ns);
        if (next == -3)
            return -3;
    } else {
        PyObject *res = PyObject_Vectorcall(s->step, argv, 3, NULL);
        if (res == NULL)
            return -3;
        if (!PyTuple_Check(res) || PyTuple_GET_SIZE(res) != 2) {
            Py_DECREF(res);
            PyErr_SetString(PyExc_TypeError, "model step must return (legal, next_state)");
            return -3;
        }
        ok = PyObject_IsTrue(PyTuple_GET_ITEM(res, 0));
        if (ok < 0) {
            Py_DECREF(res);
            return -3;
        }
        if (ok) {
            next = intern(s, PyTuple_GET_ITEM(res, 1));
            if (next == -3) {
                Py_DECREF(res);
                return -3;
            }
        }
        Py_DECREF(res);
    }
    return next;
}

/* the state after entry e from state, memoized; ILL if illegal; -3 on error */
static int32_t transition(Search *s, int32_t e, int32_t state) {
    if (s->pure) { /* a get or a put needs no memo */
        int32_t a = s->arg[e];
        if (s->kind[e] == KIND_GET)
            return a == NONE || a == state ? state : ILL;
        if (s->kind[e] == KIND_PUT)
            return a;
    }
    uint64_t key = ((uint64_t)(uint32_t)e << 32) | (uint32_t)state;
    size_t mask = s->tcap - 1;
    size_t j = (size_t)mix(key, 0) & mask;
    while (s->trans[j].key != UINT64_MAX) {
        if (s->trans[j].key == key)
            return s->trans[j].val;
        j = (j + 1) & mask;
    }
    int32_t next = s->pure ? intern_concat(s, state, s->arg[e]) : py_transition(s, e, state);
    if (next == -3)
        return -3;
    if ((s->tcount + 1) * 2 > s->tcap) {
        if (grow_transitions(s) < 0)
            return -3;
        mask = s->tcap - 1;
        j = (size_t)mix(key, 0) & mask;
        while (s->trans[j].key != UINT64_MAX)
            j = (j + 1) & mask;
    }
    s->trans[j].key = key;
    s->trans[j].val = next;
    s->tcount++;
    return next;
}

/* The current configuration's stored form: sizes of its two word runs. */
static inline void runs(Search *s, int32_t *lw0, int32_t *nlw, int32_t *ncw) {
    *lw0 = s->low >> 6;
    *nlw = s->hi >= s->low ? (s->hi >> 6) - *lw0 + 1 : 0;
    *ncw = s->chi >= 0 ? (s->chi >> 6) + 1 : 0;
}

static int same(Search *s, size_t off, int32_t state) {
    const uint64_t *rec = s->arena + off;
    int32_t lw0, nlw, ncw;
    runs(s, &lw0, &nlw, &ncw);
    if (rec[0] != (((uint64_t)(uint32_t)state << 32) | (uint32_t)s->low))
        return 0;
    if (rec[1] != (((uint64_t)(uint32_t)nlw << 32) | (uint32_t)ncw))
        return 0;
    return memcmp(rec + 2, s->lin + lw0, nlw * sizeof(uint64_t)) == 0 &&
           memcmp(rec + 2 + nlw, s->cr, ncw * sizeof(uint64_t)) == 0;
}

static int grow_cache(Search *s) {
    size_t cap = s->ccap ? s->ccap * 2 : 1024;
    CSlot *t = PyMem_RawMalloc(cap * sizeof(CSlot));
    if (t == NULL) {
        s->nomem = 1;
        return -1;
    }
    for (size_t i = 0; i < cap; i++)
        t[i].off = SIZE_MAX;
    for (size_t i = 0; i < s->ccap; i++) {
        if (s->cslots[i].off == SIZE_MAX)
            continue;
        size_t j = (size_t)s->cslots[i].hash & (cap - 1);
        while (t[j].off != SIZE_MAX)
            j = (j + 1) & (cap - 1);
        t[j] = s->cslots[i];
    }
    PyMem_RawFree(s->cslots);
    s->cslots = t; s->ccap = cap;
    return 0;
}

/* Is the current configuration (with `state`) cached? If not and `add`, cache it.
 * Returns 1 if it was cached, 0 if not, -1 on error. */
static int cached(Search *s, int32_t state, int add) {
    uint64_t key = mix(s->h, state);
    size_t mask = s->ccap - 1;
    size_t j = (size_t)key & mask;
    while (s->cslots[j].off != SIZE_MAX) {
        if (s->cslots[j].hash == key && same(s, s->cslots[j].off, state))
            return 1;
        j = (j + 1) & mask;
    }
    if (!add)
        return 0;
    int32_t lw0, nlw, ncw;
    runs(s, &lw0, &nlw, &ncw);
    size_t need = 2 + (size_t)nlw + (size_t)ncw;
    if (s->asize + need > s->acap) {
        size_t cap = s->acap ? s->acap * 2 : 1 << 9;
        while (cap < s->asize + need)
            cap *= 2;
        uint64_t *a = PyMem_RawRealloc(s->arena, cap * sizeof(uint64_t));
        if (a == NULL) {
            s->nomem = 1;
            return -1;
        }
        s->arena = a;
        s->acap = cap;
    }
    uint64_t *rec = s->arena + s->asize;
    rec[0] = ((uint64_t)(uint32_t)state << 32) | (uint32_t)s->low;
    rec[1] = ((uint64_t)(uint32_t)nlw << 32) | (uint32_t)ncw;
    memcpy(rec + 2, s->lin + lw0, nlw * sizeof(uint64_t));
    memcpy(rec + 2 + nlw, s->cr, ncw * sizeof(uint64_t));
    if ((s->ccount + 1) * 2 > s->ccap) {
        if (grow_cache(s) < 0)
            return -1;
        mask = s->ccap - 1;
        j = (size_t)key & mask;
        while (s->cslots[j].off != SIZE_MAX)
            j = (j + 1) & mask;
    }
    s->cslots[j].hash = key;
    s->cslots[j].off = s->asize;
    s->asize += need;
    s->ccount++;
    return 0;
}

/* Mark op x linearized (registers updated); undo() restores from a frame. */
static inline void mark(Search *s, int32_t x) {
    int32_t j = s->rid[x];
    if (j < 0) {
        int32_t c = s->cid[x];
        s->cr[c >> 6] |= 1ULL << (c & 63);
        s->h ^= s->zcr[c];
        if (c > s->chi)
            s->chi = c;
        return;
    }
    s->lin[j >> 6] |= 1ULL << (j & 63);
    s->h ^= s->zreq[j];
    if (j > s->hi)
        s->hi = j;
    if (j == s->low) {
        int32_t low = j + 1;
        while (low < s->n_req && (s->lin[low >> 6] >> (low & 63)) & 1)
            low++;
        s->low = low;
    }
}

static inline void unmark(Search *s, int32_t x, int32_t low, int32_t hi, int32_t chi, uint64_t h) {
    int32_t j = s->rid[x];
    if (j < 0) {
        int32_t c = s->cid[x];
        s->cr[c >> 6] &= ~(1ULL << (c & 63));
    } else {
        s->lin[j >> 6] &= ~(1ULL << (j & 63));
    }
    s->low = low; s->hi = hi; s->chi = chi; s->h = h;
}

static int push(Search *s, int32_t x, int32_t old_state, int forced, int32_t low, int32_t hi,
                int32_t chi, uint64_t h) {
    if (s->sp == s->scap) {
        int32_t cap = s->scap ? s->scap * 2 : 256;
        Frame *st = PyMem_RawRealloc(s->stack, (size_t)cap * sizeof(Frame));
        if (st == NULL) {
            s->nomem = 1;
            return -1;
        }
        s->stack = st;
        s->scap = cap;
    }
    Frame *f = &s->stack[s->sp++];
    f->e = x; f->state = old_state; f->forced = forced;
    f->low = low; f->hi = hi; f->chi = chi; f->h = h;
    return 0;
}

static inline void unlink_op(Search *s, int32_t x) {
    int32_t p = s->prv[x], q = s->nxt[x];
    s->nxt[p] = q; s->prv[q] = p;
    int32_t r = s->match[x];
    p = s->prv[r]; q = s->nxt[r];
    s->nxt[p] = q; s->prv[q] = p;
}

static inline void relink_op(Search *s, int32_t x) { /* unlink_op undone */
    int32_t r = s->match[x];
    s->nxt[s->prv[r]] = r; s->prv[s->nxt[r]] = r;
    s->nxt[s->prv[x]] = x; s->prv[s->nxt[x]] = x;
}

/* Could the state `st` be a prefix of the get output `v` (a leaf)? 0 only when it is
 * surely not: longer, or its hash differs from that of v's first sln[st] bytes (equal
 * strings hash the same; equal hashes may still differ, then 1). The hashes of v's
 * prefixes are kept every PFX_STEP bytes (made when first needed: most gets never
 * are), the rest hashed here. */
static int may_prefix(Search *s, int32_t st, int32_t v) {
    size_t n = (size_t)s->sln[st];
    if (n > (size_t)s->sln[v])
        return 0;
    if (n == 0 || s->pfx == NULL)
        return 1;
    uint64_t *ph = s->pfx + s->pfxat[v];
    const uint8_t *b = (const uint8_t *)s->sbuf + s->soff[v];
    if (!s->pfxok[v]) {
        size_t len = (size_t)s->sln[v];
        uint64_t h = 0;
        ph[0] = 0;
        for (size_t i = 0; i < len; i++) {
            h = h * BASE + b[i];
            if ((i + 1) % PFX_STEP == 0)
                ph[(i + 1) / PFX_STEP] = h;
        }
        s->pfxok[v] = 1;
    }
    uint64_t h = ph[n / PFX_STEP];
    for (size_t i = n - n % PFX_STEP; i < n; i++)
        h = h * BASE + b[i];
    return h == s->shv[st];
}

/* Pure mode, with the list of entries as for the configuration about to be pushed (its
 * op unlinked) and `st` its state: is that configuration sure to fail? It is when some
 * get G not linearized yet, with a known output v, returned before every put not
 * linearized yet was called: then no put can come before G, only appends, so G's state
 * will be st followed by appended values, and st must be a prefix of v. The list holds
 * the entries not linearized in time order: its first put call is the earliest, and
 * the gets' returns before it are the Gs. */
static int dead(Search *s, int32_t st) {
    int32_t *nxt = s->nxt;
    int walk = DEAD_WALK;
    for (int32_t x = nxt[0]; x != s->tail && walk-- > 0; x = nxt[x]) {
        if (s->iscall[x]) {
            if (s->kind[x] == KIND_PUT)
                return 0;
            continue;
        }
        int32_t c = s->callof[x];
        if (s->kind[c] == KIND_GET && s->arg[c] != NONE && !may_prefix(s, st, s->arg[c]))
            return 1;
    }
    return 0;
}

/* the outcome of a finished search: (code, linearization or None, cache entries) */
static PyObject *finish(Search *s, int code) {
    PyObject *lin = Py_None;
    if (code == 0) {
        lin = PyTuple_New(s->sp);
        if (lin == NULL)
            return NULL;
        for (int32_t k = 0; k < s->sp; k++)
            PyTuple_SET_ITEM(lin, k, PyLong_FromLong(s->opi[s->stack[k].e]));
    } else {
        Py_INCREF(lin);
    }
    return Py_BuildValue("(iNn)", code, lin, (Py_ssize_t)s->ccount);
}

/* Try to linearize x now (its transition is ns): 1 pushed, 0 already cached, -1 error */
static int try_push(Search *s, int32_t x, int32_t ns, int forced) {
    int32_t low = s->low, hi = s->hi, chi = s->chi;
    uint64_t h = s->h;
    mark(s, x);
    int c = cached(s, ns, 1);
    if (c != 0) {
        unmark(s, x, low, hi, chi, h);
        return c < 0 ? -1 : 0;
    }
    unlink_op(s, x);
    if (s->prune && dead(s, ns)) { /* failed like a cached one (and it stays cached) */
        relink_op(s, x);
        unmark(s, x, low, hi, chi, h);
        return 0;
    }
    if (push(s, x, s->state, forced, low, hi, chi, h) < 0)
        return -1;
    s->state = ns;
    return 1;
}

/* Push at most `budget` configurations: 0 when spent (resume with another call), 1 when
 * every required op is linearized, 2 when the history is not linearizable, -1 on error
 * (a Python error set, or s->nomem). In pure mode it touches no Python object. */
static int core(Search *s, long budget) {
    int32_t *nxt = s->nxt, *prv = s->prv;
    int32_t e = s->e;
    int fresh = s->fresh;
    for (;;) {
        if (fresh) {
            /* A new configuration: one walk over the candidates (the calls before the
             * first return). A read-only op that fits is forced; otherwise the walk
             * notes the first other op that fits, where the ordinary scan starts. */
            fresh = 0;
            int32_t x = nxt[0], cand = 0;
            for (;;) {
                if (!s->iscall[x]) {
                    e = cand ? cand : s->tail;
                    break;
                }
                int r = s->ro[x];
                if (r || !cand) {
                    int32_t ns;
                    if (r && s->rv[x] != NONE) {
                        if (s->rv[x] != s->state) {
                            x = nxt[x];
                            continue;
                        }
                        ns = s->state;
                    } else {
                        ns = transition(s, x, s->state);
                        if (ns == -3)
                            return -1;
                    }
                    if (ns != ILL) {
                        if (!r) {
                            int32_t low = s->low, hi = s->hi, chi = s->chi;
                            uint64_t h = s->h;
                            mark(s, x);
                            int c = cached(s, ns, 0);
                            unmark(s, x, low, hi, chi, h);
                            if (c == 0)
                                cand = x;
                        } else {
                            int p = try_push(s, x, ns, 1);
                            if (p < 0)
                                return -1;
                            if (p == 0) { /* explored and failed: so does this one */
                                e = s->tail;
                                break;
                            }
                            if (s->rid[x] >= 0 && --s->need == 0)
                                {
                                s->finished = 1;
                                return s->outcome = 1;
                            }
                            if (--budget == 0) {
                                s->e = nxt[0];
                                s->fresh = 1;
                                return 0;
                            }
                            x = nxt[0];
                            cand = 0;
                            continue;
                        }
                    }
                }
                x = nxt[x];
            }
        }
        if (s->iscall[e]) { /* a call: try to linearize it now */
            if (s->ro[e]) { /* read-only ops were tried when this configuration was new */
                e = nxt[e];
                continue;
            }
            int32_t ns = transition(s, e, s->state);
            if (ns == -3)
                return -1;
            if (ns != ILL) {
                int p = try_push(s, e, ns, 0);
                if (p < 0)
                    return -1;
                if (p == 1) {
                    if (s->rid[e] >= 0 && --s->need == 0)
                        {
                                s->finished = 1;
                                return s->outcome = 1;
                            }
                    e = nxt[0];
                    fresh = s->has_ro;
                    if (--budget == 0) {
                        s->e = e;
                        s->fresh = fresh;
                        return 0;
                    }
                    continue;
                }
            }
            e = nxt[e];
        } else { /* a return whose call is not linearized: backtrack */
            if (s->sp == 0)
                {
                s->finished = 1;
                return s->outcome = 2;
            }
            Frame *f = &s->stack[--s->sp];
            e = f->e;
            s->state = f->state;
            unmark(s, e, f->low, f->hi, f->chi, f->h);
            if (s->rid[e] >= 0)
                s->need++;
            int32_t r = s->match[e];
            nxt[prv[r]] = r; prv[nxt[r]] = r;
            nxt[prv[e]] = e; prv[nxt[e]] = e;
            e = f->forced ? s->tail : nxt[e];
        }
    }
}

static PyObject *Search_run(Search *s, PyObject *arg) {
    long budget = PyLong_AsLong(arg);
    if (budget == -1 && PyErr_Occurred())
        return NULL;
    if (s->finished || s->busy) {
        PyErr_SetString(PyExc_RuntimeError,
                        s->busy ? "search running elsewhere" : "search already finished");
        return NULL;
    }
    int r = core(s, budget);
    if (r < 0) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        return NULL;
    }
    if (r == 0)
        Py_RETURN_NONE;
    return finish(s, r - 1);
}

/* Pure mode applies when the step is models._kv_value_step and every string it meets is
 * an exact str: the initial state, the values put and appended, the outputs of gets and
 * the read values. 1 if it applies (states, rv and the per-entry kind/arg set up), 0 if
 * not, -1 on error (set). */
/* Pure mode's own arrays and an empty string table: 0, or -1 (set) out of memory. */
static int pure_tables(Search *s) {
    s->kind = PyMem_RawCalloc((size_t)s->n, 1);
    s->arg = PyMem_RawMalloc((size_t)s->n * sizeof(int32_t));
    s->sbuf = PyMem_RawMalloc(1 << 12);
    s->sbcap = 1 << 12;
    if (s->kind == NULL || s->arg == NULL || s->sbuf == NULL || grow_strtab(s) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* Pure mode, once every leaf is interned: what dead() needs. 0, or -1 (set). */
static int setup_prune(Search *s) {
    int32_t n = s->n;
    s->callof = PyMem_RawMalloc((size_t)n * sizeof(int32_t));
    /* room for all the leaves' prefix hashes, in one block allocated here rather than
     * in the threads (a thread's first allocation makes it a heap of its own); its pages
     * are only touched for the gets that need them */
    s->pfxat = PyMem_RawMalloc(((size_t)s->nstr + 1) * sizeof(size_t));
    s->pfxok = PyMem_RawCalloc((size_t)s->nstr + 1, 1);
    if (s->callof == NULL || s->pfxat == NULL || s->pfxok == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    size_t at = 0;
    for (int32_t v = 0; v < s->nstr; v++) {
        s->pfxat[v] = at;
        at += (size_t)s->sln[v] / PFX_STEP + 1;
    }
    s->pfx = PyMem_RawMalloc(at * sizeof(uint64_t)); /* NULL: no pruning */
    s->npfx = s->nstr; /* the leaves: every get's output is one */
    for (int32_t i = 0; i < n; i++)
        s->callof[i] = NONE;
    for (int32_t i = 0; i < n; i++)
        if (s->iscall[i])
            s->callof[s->match[i]] = i;
    return 0;
}

static int setup_pure(Search *s, PyObject *inputs, PyObject *outputs, PyObject *rv,
                      PyObject *init, PyObject *unknown) {
    int32_t n = s->n;
    if (pure_tables(s) < 0)
        return -1;
    int32_t id = intern_str(s, init);
    if (id < 0)
        goto fail;
    s->state = id;
    for (int32_t i = 0; i < n; i++) {
        s->arg[i] = NONE;
        if (!s->iscall[i])
            continue;
        PyObject *in = PyList_GET_ITEM(inputs, i);
        if (!PyTuple_CheckExact(in) || PyTuple_GET_SIZE(in) != 3)
            return 0;
        PyObject *f = PyTuple_GET_ITEM(in, 0);
        if (!PyUnicode_CheckExact(f))
            return 0;
        PyObject *text;
        if (PyUnicode_CompareWithASCIIString(f, "get") == 0) {
            s->kind[i] = KIND_GET;
            text = PyList_GET_ITEM(outputs, i);
        } else if (PyUnicode_CompareWithASCIIString(f, "put") == 0) {
            s->kind[i] = KIND_PUT;
            text = PyTuple_GET_ITEM(in, 2);
        } else if (PyUnicode_CompareWithASCIIString(f, "append") == 0) {
            s->kind[i] = KIND_APPEND;
            text = PyTuple_GET_ITEM(in, 2);
        } else {
            return 0;
        }
        if (s->kind[i] != KIND_GET || text != unknown) {
            id = intern_str(s, text);
            if (id < 0)
                goto fail;
            s->arg[i] = id;
        }
        s->rv[i] = NONE;
        PyObject *v = PyList_GET_ITEM(rv, i);
        if (s->ro[i] && v != unknown) {
            id = intern_str(s, v);
            if (id < 0)
                goto fail;
            s->rv[i] = id;
        }
    }
    return setup_prune(s) < 0 ? -1 : 1;
fail:
    if (id == -3) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static int fill(PyObject *seq, int32_t *out, Py_ssize_t n, const char *what) {
    if (!PyList_Check(seq) || PyList_GET_SIZE(seq) != n) {
        PyErr_Format(PyExc_ValueError, "%s: a list of %zd ints expected", what, n);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long v = PyLong_AsLong(PyList_GET_ITEM(seq, i));
        if (v == -1 && PyErr_Occurred())
            return -1;
        out[i] = (int32_t)v;
    }
    return 0;
}

/* Search(match, opi, rid, cid, ro, rv, inputs, outputs, step, init, unknown[, native])
 * native: 0, or NATIVE_KV when step is models._kv_value_step */
static int setup_configs(Search *s);

static int Search_init(Search *s, PyObject *args, PyObject *kw) {
    PyObject *match, *opi, *rid, *cid, *ro, *rv, *inputs, *outputs, *step, *init, *unknown;
    int native = NATIVE_NONE;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOO|i", &match, &opi, &rid, &cid, &ro, &rv, &inputs,
                          &outputs, &step, &init, &unknown, &native))
        return -1;
    s->native = native;
    Py_INCREF(unknown);
    s->unknown = unknown;
    if (!PyList_Check(match) || !PyList_Check(inputs) || !PyList_Check(outputs)) {
        PyErr_SetString(PyExc_TypeError, "lists expected");
        return -1;
    }
    Py_ssize_t n = PyList_GET_SIZE(match);
    s->n = (int32_t)n;
    s->tail = (int32_t)n - 1;
    s->nxt = PyMem_RawMalloc(n * sizeof(int32_t));
    s->prv = PyMem_RawMalloc(n * sizeof(int32_t));
    s->match = PyMem_RawMalloc(n * sizeof(int32_t));
    s->opi = PyMem_RawMalloc(n * sizeof(int32_t));
    s->rid = PyMem_RawMalloc(n * sizeof(int32_t));
    s->cid = PyMem_RawMalloc(n * sizeof(int32_t));
    s->rv = PyMem_RawMalloc(n * sizeof(int32_t));
    s->iscall = PyMem_RawMalloc(n);
    s->ro = PyMem_RawMalloc(n);
    if (!s->nxt || !s->prv || !s->match || !s->opi || !s->rid || !s->cid || !s->rv ||
        !s->iscall || !s->ro) {
        PyErr_NoMemory();
        return -1;
    }
    if (fill(match, s->match, n, "match") < 0 || fill(opi, s->opi, n, "opi") < 0 ||
        fill(rid, s->rid, n, "rid") < 0 || fill(cid, s->cid, n, "cid") < 0 ||
        fill(ro, s->rv, n, "ro") < 0)
        return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        s->ro[i] = (uint8_t)(s->rv[i] != 0);
        s->nxt[i] = (int32_t)i + 1;
        s->prv[i] = (int32_t)i - 1;
        s->iscall[i] = (uint8_t)(s->opi[i] >= 0);
    }
    Py_INCREF(inputs); s->inputs = inputs;
    Py_INCREF(outputs); s->outputs = outputs;
    Py_INCREF(step); s->step = step;
    s->ids = PyDict_New();
    s->states = PyList_New(0);
    if (s->ids == NULL || s->states == NULL)
        return -1;
    if (!PyList_Check(rv) || PyList_GET_SIZE(rv) != n || PyList_GET_SIZE(inputs) != n ||
        PyList_GET_SIZE(outputs) != n) {
        PyErr_SetString(PyExc_ValueError, "rv, inputs, outputs: a list per entry expected");
        return -1;
    }
    if (native == NATIVE_KV) {
        int p = setup_pure(s, inputs, outputs, rv, init, unknown);
        if (p < 0)
            return -1;
        s->pure = p;
    }
    if (!s->pure) {
        s->state = intern(s, init);
        if (s->state < 0)
            return -1;
    }
    for (Py_ssize_t i = 0; !s->pure && i < n; i++) {
        PyObject *v = PyList_GET_ITEM(rv, i);
        s->rv[i] = NONE;
        if (s->ro[i] && v != unknown) {
            int32_t id = intern(s, v);
            if (id < 0)
                return -1;
            s->rv[i] = id;
        }
    }
    return setup_configs(s);
}

/* The rest of a search's set-up, from its entries (iscall, ro, rid, cid, nxt): the
 * bitsets of linearized ops, their hashes, the tables, the first entry. 0, or -1. */
static int setup_configs(Search *s) {
    int32_t n = s->n;
    s->has_ro = 0;
    int32_t n_req = 0, n_cr = 0, need = 0;
    for (int32_t i = 0; i < n; i++) {
        s->has_ro |= s->ro[i];
        if (s->iscall[i]) {
            if (s->rid[i] >= 0) {
                n_req = s->rid[i] + 1 > n_req ? s->rid[i] + 1 : n_req;
                need++;
            } else {
                n_cr = s->cid[i] + 1 > n_cr ? s->cid[i] + 1 : n_cr;
            }
        }
    }
    s->n_req = n_req; s->n_cr = n_cr; s->need = need;
    size_t lw = (size_t)(n_req / 64 + 1), cw = (size_t)(n_cr / 64 + 1);
    s->lin = PyMem_RawCalloc(lw, sizeof(uint64_t));
    s->cr = PyMem_RawCalloc(cw, sizeof(uint64_t));
    s->zreq = PyMem_RawMalloc((n_req + 1) * sizeof(uint64_t));
    s->zcr = PyMem_RawMalloc((n_cr + 1) * sizeof(uint64_t));
    if (!s->lin || !s->cr || !s->zreq || !s->zcr) {
        PyErr_NoMemory();
        return -1;
    }
    uint64_t seed = 20261201;
    for (int32_t i = 0; i < n_req; i++)
        s->zreq[i] = splitmix(&seed);
    for (int32_t i = 0; i < n_cr; i++)
        s->zcr[i] = splitmix(&seed);
    s->low = 0; s->hi = -1; s->chi = -1; s->h = 0;
    /* the stack never holds more than every op; it and the first tables are allocated
     * here, so that a small search running on a thread allocates nothing there */
    s->scap = n_req + n_cr + 1;
    s->stack = PyMem_RawMalloc((size_t)s->scap * sizeof(Frame));
    s->acap = 1 << 11;
    s->arena = PyMem_RawMalloc(s->acap * sizeof(uint64_t));
    if (s->stack == NULL || s->arena == NULL || grow_transitions(s) < 0 || grow_cache(s) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    s->e = s->nxt[0];
    s->fresh = s->has_ro;
    s->finished = 0;
    return 0;
}

static PyObject *Search_entries(Search *s, void *closure) {
    return PyLong_FromSize_t(s->ccount);
}

static PyObject *Search_pure(Search *s, void *closure) {
    return PyBool_FromLong(s->pure);
}

static PyMethodDef Search_methods[] = {
    {"run", (PyCFunction)Search_run, METH_O,
     "run(budget): push at most budget configurations; None, or (code, lin, entries)"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Search_getset[] = {
    {"entries", (getter)Search_entries, NULL, "configurations cached so far", NULL},
    {"pure", (getter)Search_pure, NULL,
     "whether the search runs without Python objects (so run_all can take it)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject SearchType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "lockcheck.checker.porcupine._csearch.Search",
    .tp_basicsize = sizeof(Search),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One partition's search, resumable (see checker.py:_search).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Search_init,
    .tp_dealloc = (destructor)Search_dealloc,
    .tp_methods = Search_methods,
    .tp_getset = Search_getset,
};

/* --- kv_searches: a kv history's partitions as pure searches, made in one pass --- */

static PyObject *str_kind, *str_id, *str_value; /* attribute names, interned */

/* Where an event type keeps its kind, id and value: the offsets of its slots, read
 * without a lookup per event (0: look the attribute up) */
typedef struct {
    PyTypeObject *type;
    Py_ssize_t off[3];
} EventSlots;

static void event_slots(EventSlots *es, PyTypeObject *type) {
    PyObject *names[3] = {str_kind, str_id, str_value};
    es->type = type;
    for (int i = 0; i < 3; i++) {
        es->off[i] = 0;
        if (type->tp_getattro != PyObject_GenericGetAttr)
            continue;
        PyObject *d = _PyType_Lookup(type, names[i]); /* borrowed */
        if (d != NULL && Py_IS_TYPE(d, &PyMemberDescr_Type)) {
            PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
            if (m->type == T_OBJECT_EX)
                es->off[i] = m->offset;
        }
    }
}

/* Attribute i of event ev: a new reference, or NULL (set). */
static PyObject *event_attr(EventSlots *es, PyObject *ev, int i) {
    static PyObject **names[3] = {&str_kind, &str_id, &str_value};
    if (Py_TYPE(ev) != es->type)
        event_slots(es, Py_TYPE(ev));
    if (es->off[i]) {
        PyObject *v = *(PyObject **)((char *)ev + es->off[i]);
        if (v != NULL) {
            Py_INCREF(v);
            return v;
        }
    }
    return PyObject_GetAttr(ev, *names[i]);
}

/* Is u (an exact str) the ASCII text t of length n? */
static int is_text(PyObject *u, const char *t, Py_ssize_t n) {
    if (PyUnicode_IS_COMPACT_ASCII(u))
        return PyUnicode_GET_LENGTH(u) == n && memcmp(PyUnicode_DATA(u), t, (size_t)n) == 0;
    return PyUnicode_CompareWithASCIIString(u, t) == 0;
}

/* One call of the events: its partition, its entry there, and its return's (0 if it
 * never returned); input and output are new references. */
typedef struct {
    int32_t group, entry, ret, kind;
    PyObject *input, *output;
} KvCall;

/* Pure search `s` of n entries (head and tail included), all arrays allocated, every
 * entry a return until told otherwise: 0, or -1 (set) out of memory. */
static int kv_alloc(Search *s, int32_t n) {
    s->n = n;
    s->tail = n - 1;
    s->nxt = PyMem_RawMalloc((size_t)n * sizeof(int32_t));
    s->prv = PyMem_RawMalloc((size_t)n * sizeof(int32_t));
    s->match = PyMem_RawCalloc((size_t)n, sizeof(int32_t));
    s->opi = PyMem_RawMalloc((size_t)n * sizeof(int32_t));
    s->rid = PyMem_RawMalloc((size_t)n * sizeof(int32_t));
    s->cid = PyMem_RawMalloc((size_t)n * sizeof(int32_t));
    s->rv = PyMem_RawMalloc((size_t)n * sizeof(int32_t));
    s->iscall = PyMem_RawCalloc((size_t)n, 1);
    s->ro = PyMem_RawCalloc((size_t)n, 1);
    if (!s->nxt || !s->prv || !s->match || !s->opi || !s->rid || !s->cid || !s->rv ||
        !s->iscall || !s->ro) {
        PyErr_NoMemory();
        return -1;
    }
    if (pure_tables(s) < 0)
        return -1;
    for (int32_t i = 0; i < n; i++) {
        s->nxt[i] = i + 1;
        s->prv[i] = i - 1;
        s->opi[i] = s->rid[i] = s->cid[i] = s->rv[i] = s->arg[i] = NONE;
    }
    s->pure = 1;
    return 0;
}

/* The kind of a kv input ("get", key, value): KIND_*, or -1 if it is none of them. */
static int kv_kind(PyObject *input) {
    if (!PyTuple_CheckExact(input) || PyTuple_GET_SIZE(input) != 3)
        return -1;
    PyObject *f = PyTuple_GET_ITEM(input, 0);
    if (!PyUnicode_CheckExact(f))
        return -1;
    if (is_text(f, "get", 3))
        return KIND_GET;
    if (is_text(f, "put", 3))
        return KIND_PUT;
    if (is_text(f, "append", 6))
        return KIND_APPEND;
    return -1;
}

/* The id of a leaf string for kv_searches: 0 and *id set; 1 if `o` is no exact str
 * (the Python path runs); -1 out of memory (set). */
static int kv_leaf(Search *s, PyObject *o, int32_t *id) {
    *id = intern_str(s, o);
    if (*id == -3) {
        PyErr_NoMemory();
        return -1;
    }
    return *id < 0;
}

/* kv_searches(events, init, unknown): what checker.py makes of a kv history with the
 * shipped kv model (partition_events, _prepare_events, Search), made here in one pass:
 * per partition (in the order of their first events) a pure search, or None where the
 * partition has nothing to linearize. None instead when anything is out of the
 * ordinary (an event that is not a plain call or return, an id that is not a small
 * int, a call open twice, a return without its call, an input, value or output that
 * pure mode does not take): then the Python path runs, and says what is wrong. */
static PyObject *kv_searches(PyObject *self, PyObject *args) {
    PyObject *events, *init, *unknown;
    if (!PyArg_ParseTuple(args, "OOO", &events, &init, &unknown))
        return NULL;
    PyObject *seq = PySequence_Fast(events, "kv_searches: a sequence of events expected");
    if (seq == NULL)
        return NULL;
    Py_ssize_t ne = PySequence_Fast_GET_SIZE(seq);
    PyObject **evs = PySequence_Fast_ITEMS(seq);
    KvCall *calls = PyMem_Calloc((size_t)ne + 1, sizeof(KvCall));
    int32_t *open = PyMem_Calloc((size_t)ne + 1, sizeof(int32_t)); /* id -> call + 1 */
    int32_t *size = PyMem_Calloc((size_t)ne + 1, sizeof(int32_t)); /* group -> events */
    int32_t *count = NULL; /* per group: calls; then calls, required, crashed so far */
    PyObject *groups = PyDict_New(); /* key -> group */
    PyObject *out = NULL;
    int32_t ncalls = 0, ngroups = 0;
    int r = -1; /* 0 done, 1 the Python path, -1 error */
    if (calls == NULL || open == NULL || size == NULL || groups == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    EventSlots es = {NULL, {0, 0, 0}};
    for (Py_ssize_t t = 0; t < ne; t++) {
        PyObject *kind = event_attr(&es, evs[t], 0);
        PyObject *idobj = kind ? event_attr(&es, evs[t], 1) : NULL;
        PyObject *value = idobj ? event_attr(&es, evs[t], 2) : NULL;
        long id = -1;
        int call = -1;
        if (value != NULL && PyLong_CheckExact(idobj) && PyUnicode_CheckExact(kind)) {
            id = PyLong_AsLong(idobj);
            if (is_text(kind, "call", 4))
                call = 1;
            else if (is_text(kind, "return", 6))
                call = 0;
        }
        Py_XDECREF(kind);
        Py_XDECREF(idobj);
        if (value == NULL || call < 0 || id < 0 || id > ne || call == (open[id] != 0)) {
            Py_XDECREF(value);
            r = 1;
            goto done;
        }
        if (call) {
            KvCall *c = &calls[ncalls++];
            c->input = value;
            if ((c->kind = kv_kind(value)) < 0) {
                r = 1;
                goto done;
            }
            PyObject *key = PyTuple_GET_ITEM(value, 1);
            PyObject *g = PyDict_GetItemWithError(groups, key);
            if (g == NULL) {
                if (PyErr_Occurred()) {
                    r = 1;
                    goto done;
                }
                g = PyLong_FromLong(ngroups);
                if (g == NULL || PyDict_SetItem(groups, key, g) < 0) {
                    Py_XDECREF(g);
                    r = 1;
                    goto done;
                }
                Py_DECREF(g);
                c->group = ngroups++;
            } else {
                c->group = (int32_t)PyLong_AsLong(g);
            }
            c->entry = ++size[c->group];
            open[id] = ncalls;
        } else {
            KvCall *c = &calls[open[id] - 1];
            c->output = value;
            c->ret = ++size[c->group];
            open[id] = 0;
        }
    }
    /* a partition of m events with k calls has 2k + 2 entries: the head, its events,
     * its crashed calls' returns, the tail */
    count = PyMem_Calloc((size_t)ngroups + 1, 3 * sizeof(int32_t));
    out = PyList_New(ngroups);
    if (count == NULL || out == NULL) {
        if (count == NULL)
            PyErr_NoMemory();
        goto done;
    }
    for (int32_t i = 0; i < ncalls; i++)
        count[3 * calls[i].group]++;
    for (int32_t g = 0; g < ngroups; g++) {
        Search *s = (Search *)SearchType.tp_alloc(&SearchType, 0);
        if (s == NULL)
            goto done;
        PyList_SET_ITEM(out, g, (PyObject *)s);
        if (kv_alloc(s, 2 * count[3 * g] + 2) < 0)
            goto done;
        Py_INCREF(unknown);
        s->unknown = unknown;
        s->native = NATIVE_KV;
        if ((r = kv_leaf(s, init, &s->state)) != 0)
            goto done;
        r = -1;
        count[3 * g] = 0;
    }
    for (int32_t i = 0; i < ncalls; i++) {
        KvCall *c = &calls[i];
        int32_t g = c->group, e = c->entry, *k = &count[3 * g];
        Search *s = (Search *)PyList_GET_ITEM(out, g);
        s->iscall[e] = 1;
        s->opi[e] = k[0]++;
        if (c->ret) {
            s->match[e] = c->ret;
            s->rid[e] = k[1]++;
        } else {
            s->match[e] = size[g] + 1 + k[2];
            s->cid[e] = k[2]++;
        }
        int kind = c->kind;
        s->kind[e] = (uint8_t)kind;
        if (kind == KIND_GET) { /* read-only; legal iff the state is its known output */
            s->ro[e] = 1;
            if (c->ret && c->output != unknown) {
                if ((r = kv_leaf(s, c->output, &s->arg[e])) != 0)
                    goto done;
                r = -1;
            }
            s->rv[e] = s->arg[e];
        } else if ((r = kv_leaf(s, PyTuple_GET_ITEM(c->input, 2), &s->arg[e])) != 0) {
            goto done;
        } else {
            r = -1;
        }
    }
    for (int32_t g = 0; g < ngroups; g++) {
        Search *s = (Search *)PyList_GET_ITEM(out, g);
        if (setup_prune(s) < 0 || setup_configs(s) < 0)
            goto done;
        if (s->need == 0) {
            Py_INCREF(Py_None);
            PyList_SetItem(out, g, Py_None);
        }
    }
    r = 0;
done:
    if (r == 1) { /* out of the ordinary: the Python path */
        PyErr_Clear();
        Py_XDECREF(out);
        Py_INCREF(Py_None);
        out = Py_None;
    } else if (r < 0) {
        Py_CLEAR(out);
    }
    for (int32_t i = 0; i < ncalls; i++) {
        Py_XDECREF(calls[i].input);
        Py_XDECREF(calls[i].output);
    }
    PyMem_Free(calls); PyMem_Free(open); PyMem_Free(size); PyMem_Free(count);
    Py_XDECREF(groups);
    Py_DECREF(seq);
    return out;
}

/* --- run_all: pure searches on several threads, without the GIL --- */

#define SLICE_S 0.0002 /* a slice of one search, in seconds: short enough that a partition
                        * illegal after little work ends the check before the others
                        * have spent much, long enough that switching costs nothing */
#define SIGNAL_S 0.05 /* how often the calling thread looks at Python's signals */
#define MIN_BUDGET 16
#define MAX_BUDGET (1L << 20)

typedef struct {
    Search **s;
    int n;
    uint8_t *st; /* per search: 0 waiting, 1 running, 2 done */
    double *spent;
    long *budget;
    int remaining;
    int stop; /* 0 running, 1 search stop_at is illegal, 2 deadline, 3 error in stop_at,
               * 4 a signal handler raised (Ctrl-C) */
    int stop_at;
    double deadline; /* 0: none */
    int workers; /* threads still running worker() */
    int raised;  /* a signal handler raised (the calling thread's exception is set) */
    PyThreadState *ts; /* the calling thread's, while it runs without the GIL */
    pthread_mutex_t mu;
    pthread_cond_t done; /* signalled when a worker ends */
} Pool;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Take the waiting search that has had the least time, run it for a slice, put it
 * back; until all are done or one is illegal (or the deadline passes). Equal time
 * rather than equal pushes: a partition whose pushes are cheap gets further. The
 * calling thread (main) works too, and looks at Python's signals between its slices
 * every SIGNAL_S: Ctrl-C stops a search that has no timeout. */
static void work(Pool *p, int main) {
    double next_check = now_s() + SIGNAL_S;
    pthread_mutex_lock(&p->mu);
    while (!p->stop && p->remaining > 0) {
        int k = -1;
        for (int i = 0; i < p->n; i++)
            if (p->st[i] == 0 && (k < 0 || p->spent[i] < p->spent[k]))
                k = i;
        if (k < 0) /* the others run on the other threads, and keep them */
            break;
        p->st[k] = 1;
        long b = p->budget[k];
        pthread_mutex_unlock(&p->mu);
        double t0 = now_s();
        int r = core(p->s[k], b);
        double t1 = now_s(), dt = t1 - t0;
        if (main && t1 >= next_check) {
            next_check = t1 + SIGNAL_S;
            PyEval_RestoreThread(p->ts);
            p->raised = PyErr_CheckSignals() < 0;
            p->ts = PyEval_SaveThread();
        }
        pthread_mutex_lock(&p->mu);
        if (p->raised && !p->stop)
            p->stop = 4;
        p->spent[k] += dt;
        long nb = dt > 0 ? (long)((double)b * SLICE_S / dt) : 2 * b;
        if (nb > 2 * b)
            nb = 2 * b;
        p->budget[k] = nb < MIN_BUDGET ? MIN_BUDGET : nb > MAX_BUDGET ? MAX_BUDGET : nb;
        if (r == 0) {
            p->st[k] = 0;
        } else {
            p->st[k] = 2;
            p->remaining--;
            if (r != 1 && !p->stop) {
                p->stop = r == 2 ? 1 : 3;
                p->stop_at = k;
            }
        }
        if (!p->stop && p->deadline > 0 && t1 > p->deadline)
            p->stop = 2;
    }
    pthread_mutex_unlock(&p->mu);
}

static void *worker(void *arg) {
    Pool *p = arg;
    work(p, 0);
    pthread_mutex_lock(&p->mu);
    p->workers--;
    pthread_cond_signal(&p->done);
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static PyObject *run_all(PyObject *self, PyObject *args) {
    PyObject *list;
    double timeout;
    int threads;
    if (!PyArg_ParseTuple(args, "O!di", &PyList_Type, &list, &timeout, &threads))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(list);
    Pool p;
    memset(&p, 0, sizeof p);
    p.n = (int)n;
    p.s = PyMem_Calloc((size_t)n + 1, sizeof(Search *));
    p.st = PyMem_Calloc((size_t)n + 1, 1);
    p.spent = PyMem_Calloc((size_t)n + 1, sizeof(double));
    p.budget = PyMem_Calloc((size_t)n + 1, sizeof(long));
    pthread_t *tids = PyMem_Calloc((size_t)threads + 1, sizeof(pthread_t));
    PyObject *result = NULL;
    int taken = 0;
    if (!p.s || !p.st || !p.spent || !p.budget || !tids) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PyList_GET_ITEM(list, i);
        if (!PyObject_TypeCheck(o, &SearchType)) {
            PyErr_SetString(PyExc_TypeError, "run_all: a list of Search expected");
            goto out;
        }
        Search *x = (Search *)o;
        if (!x->pure || x->finished || x->busy) {
            PyErr_SetString(PyExc_ValueError,
                            "run_all: searches must be pure, unfinished and not running");
            goto out;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) { /* kept alive and to ourselves while unlocked */
        Search *x = (Search *)PyList_GET_ITEM(list, i);
        Py_INCREF(x);
        x->busy = 1;
        x->prune = 1;
        p.s[i] = x;
        p.budget[i] = 64;
        taken++;
    }
    p.remaining = p.n;
    p.stop_at = -1;
    if (pthread_mutex_init(&p.mu, NULL) != 0 || pthread_cond_init(&p.done, NULL) != 0) {
        PyErr_SetString(PyExc_OSError, "run_all: no mutex");
        goto out;
    }
    p.ts = PyEval_SaveThread();
    p.deadline = timeout >= 0 ? now_s() + timeout : 0;
    int started = 0;
    pthread_mutex_lock(&p.mu);
    /* this thread is one of the workers: it has the CPU now, which a new thread may wait
     * for on a busy machine; fewer threads if they cannot start */
    for (int t = 1; t < threads && t < p.n; t++)
        if (pthread_create(&tids[started], NULL, worker, &p) == 0) {
            started++;
            p.workers++;
        }
    pthread_mutex_unlock(&p.mu);
    work(&p, 1);
    /* then waits for the others, still looking at Python's signals */
    pthread_mutex_lock(&p.mu);
    while (p.workers > 0) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 50 * 1000 * 1000;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&p.done, &p.mu, &until);
        if (p.workers == 0 || p.raised)
            continue;
        pthread_mutex_unlock(&p.mu);
        PyEval_RestoreThread(p.ts);
        p.raised = PyErr_CheckSignals() < 0;
        p.ts = PyEval_SaveThread();
        pthread_mutex_lock(&p.mu);
        if (p.raised && !p.stop)
            p.stop = 4;
    }
    pthread_mutex_unlock(&p.mu);
    for (int t = 0; t < started; t++)
        pthread_join(tids[t], NULL);
    PyEval_RestoreThread(p.ts);
    pthread_cond_destroy(&p.done);
    pthread_mutex_destroy(&p.mu);
    if (p.raised)
        goto out; /* the handler's exception is set */
    if (p.stop == 3) {
        PyErr_NoMemory();
        goto out;
    }
    PyObject *outs = PyList_New(n);
    if (outs == NULL)
        goto out;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o;
        if (p.s[i]->finished) {
            o = finish(p.s[i], p.s[i]->outcome - 1);
        } else {
            Py_INCREF(Py_None);
            o = Py_None;
        }
        if (o == NULL) {
            Py_DECREF(outs);
            goto out;
        }
        PyList_SET_ITEM(outs, i, o);
    }
    result = Py_BuildValue("(Nii)", outs, p.stop, p.stop_at);
out:
    for (int i = 0; i < taken; i++) {
        p.s[i]->busy = 0;
        Py_DECREF(p.s[i]);
    }
    PyMem_Free(p.s); PyMem_Free(p.st); PyMem_Free(p.spent); PyMem_Free(p.budget);
    PyMem_Free(tids);
    return result;
}

static PyMethodDef module_methods[] = {
    {"kv_searches", kv_searches, METH_VARARGS,
     "kv_searches(events, init, unknown): the partitions of a kv history (the shipped kv "
     "model, states str) as pure searches, None where one has nothing to linearize; or "
     "None if the events are out of the ordinary (the Python path then runs)"},
    {"run_all", run_all, METH_VARARGS,
     "run_all(searches, timeout, threads): run pure searches to the end on up to `threads` "
     "threads, without the GIL, stopping at the first illegal one (or at `timeout` "
     "seconds if >= 0); returns (outcomes, stop, stop_at): per search (code, lin, "
     "entries) or None if unfinished; stop 0 (all done), 1 (search stop_at is illegal) "
     "or 2 (timeout)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_csearch", "The search of checker.py in C.", -1, module_methods,
};

PyMODINIT_FUNC PyInit__csearch(void) {
    if (PyType_Ready(&SearchType) < 0)
        return NULL;
    str_kind = PyUnicode_InternFromString("kind");
    str_id = PyUnicode_InternFromString("id");
    str_value = PyUnicode_InternFromString("value");
    if (str_kind == NULL || str_id == NULL || str_value == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&SearchType);
    if (PyModule_AddObject(m, "Search", (PyObject *)&SearchType) < 0) {
        Py_DECREF(&SearchType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
