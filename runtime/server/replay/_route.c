/* The per-line loop of runtime.server.replay.route.Router, in C (the native build only).
 *
 * A 1M-task build routes 4M lines on the builder's main thread while the task-shard
 * workers wait for them: split, search and batch each line as Python objects took about
 * 1.2 us a line.  Here a line is found, its shard read off the first characters of its
 * task id by the same rules as Router.feed, and its bytes copied into the shard's batch,
 * which is a bytes object being filled: handed to the sink as it is, cut to its size, so
 * routed bytes are copied once (a copy of every batch was ~7 % of a spilling builder's
 * instructions).  Lines the byte
 * search cannot route go to the Python router's slow path, which appends them here, so
 * every shard's lines keep their order.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define BUCKETS 16
static const char KEY[] = "\"taskId\":\"";
#define KEY_LEN ((Py_ssize_t)(sizeof(KEY) - 1))

/* The first KEY in line[0:len], or NULL. With SSE2, 16 positions at a time are
 * tested for KEY's quote and, five bytes on, its 'I' (few keys have both: "nodeId"
 * is confirmed and passed over by memcmp); glibc's memmem took ~40 % of the routing
 * loop (it is generic: a two-way search). */
static const char *find_key(const char *line, Py_ssize_t len) {
#ifdef __SSE2__
    Py_ssize_t i = 0;
    const __m128i quote = _mm_set1_epi8('"'), capital_i = _mm_set1_epi8('I');
    for (; i + 16 + KEY_LEN <= len; i += 16) { /* both loads and each candidate's KEY_LEN bytes within */
        __m128i at = _mm_loadu_si128((const __m128i *)(line + i));
        __m128i on = _mm_loadu_si128((const __m128i *)(line + i + 5));
        unsigned mask = (unsigned)_mm_movemask_epi8(_mm_and_si128(_mm_cmpeq_epi8(at, quote), _mm_cmpeq_epi8(on, capital_i)));
        for (; mask != 0; mask &= mask - 1) {
            const char *candidate = line + i + __builtin_ctz(mask);
            if (memcmp(candidate, KEY, KEY_LEN) == 0) return candidate;
        }
    }
    for (; i + KEY_LEN <= len; i++)
        if (line[i] == '"' && memcmp(line + i, KEY, KEY_LEN) == 0) return line + i;
    return NULL;
#else
    return len >= KEY_LEN ? memmem(line, len, KEY, KEY_LEN) : NULL;
#endif
}

typedef struct {
    PyObject *bytes; /* being filled (NULL: none since the last flush); capacity bytes long */
    Py_ssize_t size, capacity, lines;
} Batch;

typedef struct {
    PyObject_HEAD
    int shards;
    Py_ssize_t limit;
    PyObject *sink, *slow;
    signed char b64[256], hexa[256];
    Batch *batches;
} Core;

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static int hex_value(unsigned char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

static int all_hex(const char *p, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++)
        if (hex_value((unsigned char)p[i]) < 0) return 0;
    return 1;
}

/* Router.feed's rule: the shard of a line, or -1 (the slow path parses it). */
static int shard_of_line(const Core *core, const char *line, Py_ssize_t len) {
    const char *found = find_key(line, len);
    if (found == NULL) return -1;
    Py_ssize_t start = (found - line) + KEY_LEN;
    const unsigned char *id = (const unsigned char *)line + start;
    if (start + 32 >= len) return -1;
    if (id[32] == '"') { /* Ray's 24-byte ids: 32 base64 characters */
        int shard = core->b64[id[0]];
        /* An all-hex 32-character id is hex to hex_id: the slow path decides. */
        if (core->hexa[id[16]] >= 0 && core->hexa[id[9]] >= 0 && core->hexa[id[0]] >= 0 && all_hex((const char *)id, 32))
            return -1;
        return shard;
    }
    if (start + 48 >= len) return -1;
    if (id[48] == '"' && all_hex((const char *)id, 48)) return core->hexa[id[0]];
    return -1;
}

static int batch_append(Batch *batch, const char *line, Py_ssize_t len) {
    Py_ssize_t need = batch->size + len + 1;
    if (batch->bytes == NULL || need > batch->capacity) {
        /* a new batch starts at the size the last one reached: batches are alike */
        Py_ssize_t capacity = batch->capacity ? batch->capacity : 1 << 16;
        while (capacity < need) capacity *= 2;
        if (batch->bytes == NULL) {
            batch->bytes = PyBytes_FromStringAndSize(NULL, capacity);
            if (batch->bytes == NULL) return -1;
        } else if (_PyBytes_Resize(&batch->bytes, capacity) < 0) { /* it frees the batch */
            batch->size = batch->lines = 0;
            return -1;
        }
        batch->capacity = capacity;
    }
    char *data = PyBytes_AS_STRING(batch->bytes);
    memcpy(data + batch->size, line, len);
    data[batch->size + len] = '\n';
    batch->size = need;
    batch->lines++;
    return 0;
}

/* Hand a shard's batch to the sink (emptied first, as Router._flush does). */
static int flush_shard(Core *core, int shard) {
    Batch *batch = &core->batches[shard];
    if (batch->lines == 0) return 0;
    PyObject *blob = batch->bytes;
    Py_ssize_t lines = batch->lines, size = batch->size - 1; /* no final newline */
    batch->bytes = NULL;
    batch->size = batch->lines = 0;
    if (_PyBytes_Resize(&blob, size) < 0) return -1;
    PyObject *result = PyObject_CallFunction(core->sink, "iNn", shard, blob, lines);
    if (result == NULL) return -1;
    Py_DECREF(result);
    return 0;
}

static int add_line(Core *core, int shard, const char *line, Py_ssize_t len) {
    if (batch_append(&core->batches[shard], line, len) < 0) return -1;
    if (core->batches[shard].lines >= core->limit) return flush_shard(core, shard);
    return 0;
}

/* 0 when the core can be used: initialised, and not cleared by the garbage collector. */
static int check_ready(Core *self) {
    if (self->batches == NULL || self->sink == NULL || self->slow == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "RouterCore is not initialised");
        return -1;
    }
    return 0;
}

static PyObject *Core_feed(Core *self, PyObject *arg) {
    if (check_ready(self) < 0) return NULL;
    if (!PyBytes_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "feed() takes bytes");
        return NULL;
    }
    Py_INCREF(arg); /* the slow path runs Python code */
    const char *base = PyBytes_AS_STRING(arg), *end = base + PyBytes_GET_SIZE(arg);
    const char *line = base;
    PyObject *result = Py_None;
    for (;;) {
        const char *stop = memchr(line, '\n', end - line);
        if (stop == NULL) stop = end;
        Py_ssize_t len = stop - line;
        int shard = shard_of_line(self, line, len);
        if (shard >= 0) {
            if (add_line(self, shard, line, len) < 0) {
                result = NULL;
                break;
            }
        } else if (len > 0) { /* an empty line is nothing to the slow path */
            PyObject *text = PyBytes_FromStringAndSize(line, len);
            PyObject *done = text ? PyObject_CallOneArg(self->slow, text) : NULL;
            Py_XDECREF(text);
            if (done == NULL) {
                result = NULL;
                break;
            }
            Py_DECREF(done);
        }
        if (stop == end) break;
        line = stop + 1;
    }
    Py_DECREF(arg);
    Py_XINCREF(result);
    return result;
}

static int shard_arg(Core *self, PyObject *arg, int *shard) {
    long value = PyLong_AsLong(arg);
    if (value == -1 && PyErr_Occurred()) return -1;
    if (value < 0 || value >= self->shards) {
        PyErr_SetString(PyExc_IndexError, "no such shard");
        return -1;
    }
    *shard = (int)value;
    return 0;
}

static PyObject *Core_append(Core *self, PyObject *const *args, Py_ssize_t nargs) {
    int shard;
    if (check_ready(self) < 0) return NULL;
    if (nargs != 2 || !PyBytes_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "append(shard, line: bytes)");
        return NULL;
    }
    if (shard_arg(self, args[0], &shard) < 0) return NULL;
    if (add_line(self, shard, PyBytes_AS_STRING(args[1]), PyBytes_GET_SIZE(args[1])) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Core_flush(Core *self, PyObject *arg) {
    int shard;
    if (check_ready(self) < 0) return NULL;
    if (shard_arg(self, arg, &shard) < 0 || flush_shard(self, shard) < 0) return NULL;
    Py_RETURN_NONE;
}

static int Core_init(Core *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"shards", "sink", "slow", "batch_lines", NULL};
    int shards;
    Py_ssize_t limit;
    PyObject *sink, *slow;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iOOn", names, &shards, &sink, &slow, &limit)) return -1;
    if (shards < 1 || shards > BUCKETS || limit < 1) {
        PyErr_SetString(PyExc_ValueError, "1 to 16 shards and at least one line a batch");
        return -1;
    }
    if (self->batches != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "already initialised");
        return -1;
    }
    self->batches = PyMem_Calloc(shards, sizeof(Batch));
    if (self->batches == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    self->shards = shards;
    self->limit = limit;
    Py_INCREF(sink);
    Py_INCREF(slow);
    self->sink = sink;
    self->slow = slow;
    /* route._tables: a base64 character's six bits, of which the top four are the first hex digit. */
    memset(self->b64, -1, sizeof(self->b64));
    memset(self->hexa, -1, sizeof(self->hexa));
    for (int value = 0; value < 64; value++) self->b64[(unsigned char)B64[value]] = (signed char)((value >> 2) * shards / BUCKETS);
    self->b64['-'] = (signed char)((62 >> 2) * shards / BUCKETS);
    self->b64['_'] = (signed char)((63 >> 2) * shards / BUCKETS);
    for (int ch = 0; ch < 256; ch++) {
        int nibble = hex_value((unsigned char)ch);
        if (nibble >= 0) self->hexa[ch] = (signed char)(nibble * shards / BUCKETS);
    }
    return 0;
}

static int Core_traverse(Core *self, visitproc visit, void *arg) {
    Py_VISIT(self->sink);
    Py_VISIT(self->slow);
    return 0;
}

static int Core_clear(Core *self) {
    Py_CLEAR(self->sink);
    Py_CLEAR(self->slow);
    return 0;
}

static void Core_dealloc(Core *self) {
    PyObject_GC_UnTrack(self);
    Core_clear(self);
    if (self->batches != NULL) {
        for (int i = 0; i < self->shards; i++) Py_XDECREF(self->batches[i].bytes);
        PyMem_Free(self->batches);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Core_methods[] = {
    {"feed", (PyCFunction)Core_feed, METH_O, "feed(body): route every line of an event object's body."},
    {"append", (PyCFunction)(void (*)(void))Core_append, METH_FASTCALL,
     "append(shard, line): a line the slow path routed."},
    {"flush", (PyCFunction)Core_flush, METH_O, "flush(shard): hand the shard's batch to the sink."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject CoreType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "runtime.server.replay._route.RouterCore",
    .tp_basicsize = sizeof(Core),
    .tp_dealloc = (destructor)Core_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "RouterCore(shards, sink, slow, batch_lines): Router's batches and per-line loop.",
    .tp_traverse = (traverseproc)Core_traverse,
    .tp_clear = (inquiry)Core_clear,
    .tp_methods = Core_methods,
    .tp_init = (initproc)Core_init,
    .tp_new = PyType_GenericNew,
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "runtime.server.replay._route", "Router's per-line loop in C (the native build).", -1,
    NULL, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__route(void) {
    if (PyType_Ready(&CoreType) < 0) return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) return NULL;
    Py_INCREF(&CoreType);
    if (PyModule_AddObject(module, "RouterCore", (PyObject *)&CoreType) < 0) {
        Py_DECREF(&CoreType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
