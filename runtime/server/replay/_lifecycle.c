/* The lifecycle, definition and profile events of a task shard, scanned and applied in C
 * (the native build only).
 *
 * Three of every four task events are TASK_LIFECYCLE_EVENTs, nearly all the others
 * TASK_DEFINITION_EVENTs and (about one per executed task) TASK_PROFILE_EVENTs: decoding
 * each into msgspec structs or dicts and applying it in Python was most of a shard's CPU.
 * scan() reads a blob of JSON lines once and keeps, for each line of a shape it knows
 * exactly, the spans and numbers the handlers need; every other line is handed back for
 * the typed Python path.  A lifecycle event is taken when its read fields are plain
 * strings, int64 numbers and RFC 3339 timestamps with nanoseconds, nothing optional
 * carried; a definition when its ids and name are plain strings (see read_definition); a
 * profile event when its ids are plain strings and its entries' times int64 (see
 * read_profile).  apply() then does what TaskTable.lifecycle does for the first, on the
 * same Attempt objects; for the second what TaskTable.definition does when the template
 * (the fields every task of one function shares) is one it met before, and hands the line
 * to the Python path when it is new; for the third what TaskTable.profile does up to its
 * entries, which it hands to TaskTable._scanned_profile already decoded.
 *
 * A line is taken here only when it is strict JSON (no escapes where a value is read as
 * written, no control characters, standard numbers) that msgspec would decode to the same
 * values: anything else is the Python path's, which keeps every rule it has.  scan() has
 * no side effects, so a blob that the Python side finally rejects is replayed the old way
 * from the start.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_DEPTH 64
#define STATE_BITS 6
enum { LIFECYCLE, DEFINITION, ACTOR_DEFINITION, PROFILE, KINDS };

typedef struct {
    Py_ssize_t at, len; /* a span of the body; len < 0: absent or null */
} Span;

typedef struct {
    Span file;
    int64_t start, end;
} LogSide;

/* What a definition's shared template is keyed by: the tokens of these fields as
 * written (see read_definition). */
#define DEF_KEYS 12

/* One entry of a profile event's ``events``. */
typedef struct {
    Span name, extra; /* as written, escapes included (quotes excluded); len < 0: null or absent */
    int64_t start, end;
} ProfileEntry;

typedef struct {
    int kind; /* LIFECYCLE, DEFINITION, ACTOR_DEFINITION or PROFILE */
    Span line; /* the whole line: the Python path's when its template is new */
    Span name; /* a definition's task name (len < 0: null or absent) */
    Span keys[DEF_KEYS];
    Span event_id, task_id, job, node, worker;
    int64_t attempt, pid;
    int has_pid;
    int has_log;
    LogSide out, err;
    Py_ssize_t first_transition, transitions; /* into Scan.times/ranks */
    Span component_type, component_id, node_ip; /* a profile event's (len < 0: null or absent) */
    Py_ssize_t first_entry, entries;            /* into Scan.entries */
} Record;

typedef struct {
    Span timestamp;
    int rank;
} TransitionRef;

typedef struct {
    PyObject_HEAD
    PyObject *body;
    Record *records;
    Py_ssize_t count, capacity;
    TransitionRef *transitions;
    Py_ssize_t transition_count, transition_capacity;
    ProfileEntry *entries;
    Py_ssize_t entry_count, entry_capacity;
} Scan;

static const char *const TASK_STATES[] = {
    "NIL", "PENDING_ARGS_AVAIL", "PENDING_NODE_ASSIGNMENT", "PENDING_OBJ_STORE_MEM_AVAIL",
    "PENDING_ARGS_FETCH", "SUBMITTED_TO_WORKER", "PENDING_ACTOR_TASK_ARGS_FETCH",
    "PENDING_ACTOR_TASK_ORDERING_OR_CONCURRENCY", "RUNNING", "RUNNING_IN_RAY_GET",
    "RUNNING_IN_RAY_WAIT", "FINISHED", "FAILED", "GETTING_AND_PINNING_ARGS",
};
#define N_STATES ((int)(sizeof(TASK_STATES) / sizeof(TASK_STATES[0])))

/* ------------------------------------------------------------------ strict JSON */

typedef struct {
    const char *base, *p, *end;
} Cursor;

static inline void skip_ws(Cursor *c) {
    /* Spaces and tabs only: a line with a CR (or anything unusual) is the Python path's. */
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t')) c->p++;
}

#ifdef __SSE2__
#include <emmintrin.h>
/* Past the plain bytes of a string, sixteen at a time: 1 with c->p at the first quote,
 * backslash or control byte, 0 where fewer than sixteen bytes are left. */
static inline int skip_plain_blocks(Cursor *c) {
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'), control = _mm_set1_epi8(0x1F);
    while (c->end - c->p >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)c->p);
        __m128i stops = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)),
                                     _mm_cmpeq_epi8(_mm_min_epu8(v, control), v)); /* v <= 0x1F */
        int mask = _mm_movemask_epi8(stops);
        if (mask) {
            c->p += __builtin_ctz((unsigned)mask);
            return 1;
        }
        c->p += 16;
    }
    return 0;
}
#else
static inline int skip_plain_blocks(Cursor *c) {
    (void)c;
    return 0;
}
#endif

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ && defined(__GNUC__)
#define WORD_AT_A_TIME 1
/* The bytes of w (8 of a string, in memory order) that end a plain string: '"', '\\' or
 * a control character, each flagged by its high bit.  Each test is the classic "has a
 * zero byte" trick; its false flags come only from a borrow out of a flagged byte, so
 * they lie above it: the lowest flag is exactly the first such byte. */
static inline uint64_t string_stops(uint64_t w) {
    const uint64_t ones = 0x0101010101010101ULL, high = 0x8080808080808080ULL;
    uint64_t quote = w ^ (ones * '"'), backslash = w ^ (ones * '\\');
    return (((quote - ones) & ~quote) | ((backslash - ones) & ~backslash) | ((w - ones * 0x20) & ~w)) & high;
}
#endif

/* Past the plain bytes of a string: c->p at its first quote, backslash or control byte,
 * or at the end.  Sixteen, then eight bytes at a time where the platform allows: a byte at
 * a time, this loop was ~11 % of the instructions of a whole in-process build (callgrind,
 * 10k tasks). */
static inline void skip_plain(Cursor *c) {
    if (skip_plain_blocks(c)) return;
#ifdef WORD_AT_A_TIME
    while (c->end - c->p >= 8) {
        uint64_t w;
        memcpy(&w, c->p, 8);
        uint64_t stops = string_stops(w);
        if (stops) {
            c->p += __builtin_ctzll(stops) >> 3;
            return;
        }
        c->p += 8;
    }
#endif
    while (c->p < c->end && (unsigned char)*c->p >= 0x20 && *c->p != '"' && *c->p != '\\') c->p++;
}

/* A string without escapes or control characters: its span (quotes excluded). */
static int read_string(Cursor *c, Span *out) {
    if (c->p >= c->end || *c->p != '"') return 0;
    const char *start = ++c->p;
    skip_plain(c);
    if (c->p >= c->end || *c->p != '"') return 0; /* an escape, a control byte or the end */
    out->at = start - c->base;
    out->len = c->p - start;
    c->p++;
    return 1;
}

static inline int is_digit(char ch) { return ch >= '0' && ch <= '9'; }

static inline int is_hex_digit(char ch) {
    return is_digit(ch) || (ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F');
}

/* Past one valid JSON escape (c at its backslash); a \u escape of a surrogate is
 * refused: decoders disagree on those. */
static int skip_escape(Cursor *c) {
    if (c->end - c->p < 2) return 0;
    char kind = c->p[1];
    if (kind != 'u') {
        if (!strchr("\"\\/bfnrt", kind) || kind == '\0') return 0;
        c->p += 2;
        return 1;
    }
    if (c->end - c->p < 6) return 0;
    for (int i = 2; i < 6; i++)
        if (!is_hex_digit(c->p[i])) return 0;
    if ((c->p[2] | 0x20) == 'd' && strchr("89abcdefABCDEF", c->p[3])) return 0;
    c->p += 6;
    return 1;
}

/* A string whose escapes are valid JSON ones: its span (quotes excluded).  The fields a
 * definition's template is keyed by are compared as written: equal text, equal value. */
static int read_escaped_string(Cursor *c, Span *out) {
    if (c->p >= c->end || *c->p != '"') return 0;
    const char *start = ++c->p;
    for (;;) {
        skip_plain(c);
        if (c->p >= c->end || (unsigned char)*c->p < 0x20) return 0;
        if (*c->p == '"') {
            out->at = start - c->base;
            out->len = c->p - start;
            c->p++;
            return 1;
        }
        if (!skip_escape(c)) return 0;
    }
}

/* A JSON number; *integral: no fraction or exponent. */
static int skip_number(Cursor *c, int *integral) {
    const char *p = c->p;
    *integral = 1;
    if (p < c->end && *p == '-') p++;
    if (p >= c->end || !is_digit(*p)) return 0;
    if (*p == '0') {
        p++;
    } else {
        while (p < c->end && is_digit(*p)) p++;
    }
    if (p < c->end && *p == '.') {
        *integral = 0;
        p++;
        if (p >= c->end || !is_digit(*p)) return 0;
        while (p < c->end && is_digit(*p)) p++;
    }
    if (p < c->end && (*p == 'e' || *p == 'E')) {
        *integral = 0;
        p++;
        if (p < c->end && (*p == '+' || *p == '-')) p++;
        if (p >= c->end || !is_digit(*p)) return 0;
        while (p < c->end && is_digit(*p)) p++;
    }
    c->p = p;
    return 1;
}

/* An integer that fits int64 (at most 18 digits: no overflow to check). */
static int read_int64(Cursor *c, int64_t *out) {
    const char *start = c->p;
    int integral;
    if (!skip_number(c, &integral) || !integral) return 0;
    const char *p = start;
    int negative = 0;
    if (*p == '-') {
        negative = 1;
        p++;
    }
    if (c->p - p > 18) return 0;
    int64_t value = 0;
    for (; p < c->p; p++) value = value * 10 + (*p - '0');
    *out = negative ? -value : value;
    return 1;
}

static int literal(Cursor *c, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0) return 0;
    c->p += n;
    return 1;
}

static int skip_json(Cursor *c, int depth, int escapes);
/* A value whose strings hold no escape (the lifecycle events' rule). */
static inline int skip_value(Cursor *c, int depth) { return skip_json(c, depth, 0); }
/* Any strict JSON value, escapes included (a definition's maps). */
static inline int skip_any(Cursor *c, int depth) { return skip_json(c, depth, 1); }

/* After a container's element: 1 when another follows (',' consumed), 0 at its end
 * (``close`` consumed), -1 on anything else. */
static int after_element(Cursor *c, char close) {
    skip_ws(c);
    if (c->p >= c->end) return -1;
    if (*c->p == ',') {
        c->p++;
        skip_ws(c);
        return 1;
    }
    if (*c->p == close) {
        c->p++;
        return 0;
    }
    return -1;
}

static int skip_container(Cursor *c, int depth, char close, int keyed, int escapes) {
    c->p++;
    skip_ws(c);
    if (c->p < c->end && *c->p == close) {
        c->p++;
        return 1;
    }
    for (;;) {
        if (keyed) {
            Span key;
            if (!(escapes ? read_escaped_string(c, &key) : read_string(c, &key))) return 0;
            skip_ws(c);
            if (c->p >= c->end || *c->p != ':') return 0;
            c->p++;
            skip_ws(c);
        }
        if (!skip_json(c, depth + 1, escapes)) return 0;
        int next = after_element(c, close);
        if (next <= 0) return next == 0;
    }
}

static int skip_json(Cursor *c, int depth, int escapes) {
    if (depth > MAX_DEPTH || c->p >= c->end) return 0;
    Span ignored;
    int integral;
    switch (*c->p) {
        case '"': return escapes ? read_escaped_string(c, &ignored) : read_string(c, &ignored);
        case '{': return skip_container(c, depth, '}', 1, escapes);
        case '[': return skip_container(c, depth, ']', 0, escapes);
        case 't': return literal(c, "true");
        case 'f': return literal(c, "false");
        case 'n': return literal(c, "null");
        default: return skip_number(c, &integral);
    }
}

/* Iterate an object's members: call with c at '{'; *first set to 1 before the first call.
 * Returns 1 with *key set and c at the value, 0 at the end ('}' consumed), -1 on error. */
static int next_member(Cursor *c, int *first, Span *key) {
    if (*first) {
        if (c->p >= c->end || *c->p != '{') return -1;
        c->p++;
        skip_ws(c);
        *first = 0;
        if (c->p < c->end && *c->p == '}') {
            c->p++;
            return 0;
        }
    } else if (c->end - c->p >= 2 && c->p[0] == ',' && c->p[1] == '"') {
        c->p++; /* compact JSON, as Ray writes it: no whitespace to look for */
    } else {
        skip_ws(c);
        if (c->p >= c->end) return -1;
        if (*c->p == '}') {
            c->p++;
            return 0;
        }
        if (*c->p != ',') return -1;
        c->p++;
        skip_ws(c);
    }
    if (!read_string(c, key)) return -1;
    if (c->end - c->p >= 2 && c->p[0] == ':' && c->p[1] != ' ' && c->p[1] != '\t') {
        c->p++;
        return 1;
    }
    skip_ws(c);
    if (c->p >= c->end || *c->p != ':') return -1;
    c->p++;
    skip_ws(c);
    return 1;
}

static inline int key_is(const Cursor *c, const Span *key, const char *name) {
    size_t n = strlen(name);
    return (size_t)key->len == n && memcmp(c->base + key->at, name, n) == 0;
}

/* Which of ``names`` a member's key is: its index, -1 for another key, -2 for one seen
 * before in this object (what msgspec would do with it is the Python path's to know). */
static int member(const Cursor *c, const Span *key, const char *const *names, int n, int *seen) {
    for (int i = 0; i < n; i++) {
        if (key_is(c, key, names[i])) {
            if (*seen & (1 << i)) return -2;
            *seen |= 1 << i;
            return i;
        }
    }
    return -1;
}

static inline int is_null(Cursor *c) { return c->p < c->end && *c->p == 'n' && literal(c, "null"); }

/* A string field that may be null (len -1). */
static int read_optional_string(Cursor *c, Span *out) {
    if (is_null(c)) {
        out->len = -1;
        return 1;
    }
    return read_string(c, out);
}

/* The int64 that p..e spells: an optional '-', then 1 to max_digits (at most 19) digits,
 * within int64.  1, or 0 for anything else. */
static int digits_int64(const char *p, const char *e, int max_digits, int64_t *out) {
    int negative = 0;
    if (p < e && *p == '-') {
        negative = 1;
        p++;
    }
    if (p == e || e - p > max_digits) return 0;
    uint64_t value = 0; /* 19 digits stay below 2^64 */
    for (; p < e; p++) {
        if (!is_digit(*p)) return 0;
        value = value * 10 + (uint64_t)(*p - '0');
    }
    if (value > (uint64_t)INT64_MAX + (uint64_t)negative) return 0;
    *out = negative ? (int64_t)(0 - value) : (int64_t)value;
    return 1;
}

/* A log offset: null (0), an int64 number, or a string of 1-18 digits with an optional
 * '-' (Ray sends its int64 fields as strings): what to_int turns into the same number. */
static int read_offset(Cursor *c, int64_t *out) {
    if (is_null(c)) {
        *out = 0;
        return 1;
    }
    if (c->p < c->end && *c->p == '"') {
        Span s;
        return read_string(c, &s) && digits_int64(c->base + s.at, c->base + s.at + s.len, 18, out);
    }
    return read_int64(c, out);
}

/* ------------------------------------------------------------------ the scan */

static int state_rank(const char *text, Py_ssize_t len) {
    for (int i = 0; i < N_STATES; i++) {
        if ((Py_ssize_t)strlen(TASK_STATES[i]) == len && memcmp(TASK_STATES[i], text, len) == 0) return i;
    }
    return -1;
}

static int is_nanos_timestamp(const char *t, Py_ssize_t len) {
    /* YYYY-MM-DDTHH:MM:SS.fffffffffZ: the handler's fast form, its fraction all digits. */
    if (len != 30 || t[19] != '.' || t[29] != 'Z') return 0;
    for (int i = 0; i < 30; i++)
        if ((unsigned char)t[i] >= 0x80) return 0; /* bytes are characters: ASCII only */
    for (int i = 20; i < 29; i++)
        if (!is_digit(t[i])) return 0;
    /* Years 1700-2261: every instant of them is an int64 of ns, as apply() computes. */
    for (int i = 0; i < 4; i++)
        if (!is_digit(t[i])) return 0;
    int year = (t[0] - '0') * 1000 + (t[1] - '0') * 100 + (t[2] - '0') * 10 + (t[3] - '0');
    return year >= 1700 && year <= 2261;
}

/* A full array of ``*capacity`` items of ``size`` bytes made twice as large (``first``
 * items when empty): the new block, *capacity updated; NULL when memory is short (the
 * array left as it was). */
static void *grown(void *items, Py_ssize_t *capacity, size_t size, Py_ssize_t first) {
    Py_ssize_t wanted = *capacity ? *capacity * 2 : first;
    void *larger = PyMem_Realloc(items, (size_t)wanted * size);
    if (larger != NULL) *capacity = wanted;
    return larger;
}

static int push_transition(Scan *scan, TransitionRef ref) {
    if (scan->transition_count == scan->transition_capacity) {
        TransitionRef *larger = grown(scan->transitions, &scan->transition_capacity, sizeof(TransitionRef), 256);
        if (larger == NULL) return -1;
        scan->transitions = larger;
    }
    scan->transitions[scan->transition_count++] = ref;
    return 0;
}

static int read_transitions(Cursor *c, Scan *scan, Record *r) {
    r->first_transition = scan->transition_count;
    r->transitions = 0;
    if (is_null(c)) return 1;
    if (c->p >= c->end || *c->p != '[') return 0;
    c->p++;
    skip_ws(c);
    if (c->p < c->end && *c->p == ']') {
        c->p++;
        return 1;
    }
    for (;;) {
        Span key, timestamp = {0, -1}, state = {0, -1};
        int first = 1, more;
        while ((more = next_member(c, &first, &key)) == 1) {
            if (key_is(c, &key, "timestamp")) {
                if (timestamp.len >= 0 || !read_string(c, &timestamp)) return 0;
            } else if (key_is(c, &key, "state")) {
                if (state.len >= 0 || !read_string(c, &state)) return 0;
            } else if (!skip_value(c, 3)) {
                return 0;
            }
        }
        if (more < 0 || timestamp.len < 0 || state.len < 0) return 0;
        if (!is_nanos_timestamp(c->base + timestamp.at, timestamp.len)) return 0;
        int rank = state_rank(c->base + state.at, state.len);
        if (rank < 0) return 0;
        TransitionRef ref = {timestamp, rank};
        if (push_transition(scan, ref) < 0) return -1;
        r->transitions++;
        int next = after_element(c, ']');
        if (next <= 0) return next == 0;
    }
}

static int read_log_info(Cursor *c, Record *r) {
    r->has_log = 0;
    if (is_null(c)) return 1;
    Span key;
    int first = 1, more, seen = 0, any = 0;
    LogSide *sides[2] = {&r->out, &r->err};
    static const char *const names[6] = {"stdoutFile", "stdoutStart", "stdoutEnd",
                                         "stderrFile", "stderrStart", "stderrEnd"};
    r->out.file.len = r->err.file.len = -1;
    r->out.start = r->out.end = r->err.start = r->err.end = 0;
    while ((more = next_member(c, &first, &key)) == 1) {
        int which = member(c, &key, names, 6, &seen);
        if (which == -2) return 0;
        if (which < 0) {
            if (!skip_value(c, 3)) return 0;
            continue;
        }
        LogSide *side = sides[which / 3];
        int null = c->p < c->end && *c->p == 'n';
        if (which % 3 == 0) {
            if (!read_optional_string(c, &side->file)) return 0;
        } else if (!read_offset(c, which % 3 == 1 ? &side->start : &side->end)) {
            return 0;
        }
        any |= !null; /* a field that is not null: the log info carries something */
    }
    if (more < 0) return 0;
    r->has_log = any;
    return 1;
}

static int read_payload(Cursor *c, Scan *scan, Record *r) {
    Span key;
    int first = 1, more, seen = 0;
    int have_transitions = 0;
    static const char *const names[] = {"taskId", "taskAttempt", "jobId", "stateTransitions",
                                        "taskLogInfo", "nodeId", "workerId", "workerPid",
                                        "rayErrorInfo", "isDebuggerPaused", "actorReprName"};
    r->task_id.len = r->job.len = r->node.len = r->worker.len = -1;
    r->attempt = 0;
    r->has_pid = 0;
    r->has_log = 0;
    r->first_transition = scan->transition_count;
    r->transitions = 0;
    while ((more = next_member(c, &first, &key)) == 1) {
        int which = member(c, &key, names, 11, &seen);
        if (which == -2) return 0;
        if (which < 0) {
            if (!skip_value(c, 2)) return 0;
            continue;
        }
        int ok;
        switch (which) {
            case 0: ok = read_string(c, &r->task_id); break;
            case 1: ok = is_null(c) || read_int64(c, &r->attempt); break;
            case 2: ok = read_optional_string(c, &r->job); break;
            case 3:
                ok = read_transitions(c, scan, r);
                if (ok < 0) return -1;
                have_transitions = 1;
                break;
            case 4: ok = read_log_info(c, r); break;
            case 5: ok = read_optional_string(c, &r->node); break;
            case 6: ok = read_optional_string(c, &r->worker); break;
            case 7:
                if (is_null(c)) {
                    ok = 1;
                } else {
                    ok = read_int64(c, &r->pid);
                    r->has_pid = ok;
                }
                break;
            default: ok = is_null(c); break; /* carried only when set: the Python path's */
        }
        if (!ok) return 0;
    }
    (void)have_transitions;
    if (more < 0 || r->task_id.len <= 0) return 0;
    /* Neither transitions nor log info: a bad event, which the Python path counts. */
    if (r->transitions == 0 && !r->has_log) return 0;
    return 1;
}

/* A token of a ``str | None`` field: a string (escapes allowed) or null, span included quotes. */
static int read_optional_token(Cursor *c, Span *out) {
    const char *start = c->p;
    if (is_null(c)) {
        out->at = start - c->base;
        out->len = 4;
        return 1;
    }
    Span inner;
    if (!read_escaped_string(c, &inner)) return 0;
    out->at = start - c->base;
    out->len = c->p - start;
    return 1;
}

/* A raw JSON value (msgspec.Raw's text). */
static int read_raw(Cursor *c, Span *out) {
    const char *start = c->p;
    if (!skip_any(c, 3)) return 0;
    out->at = start - c->base;
    out->len = c->p - start;
    return 1;
}

/* A taskDefinitionEvent / actorTaskDefinitionEvent payload, taken only in the shapes
 * task_events.DefinitionPayload decodes to the same values: ids and names plain strings
 * (or null), the attempt an int64 (or null), the ``str | None`` fields strings or null,
 * the maps any JSON.  Its template's fields are kept as written, in ``keys``. */
static int read_definition(Cursor *c, Record *r, int actor) {
    Span key;
    int first = 1, more, seen = 0;
    static const char *const names[] = {
        "taskId", "taskAttempt", "taskName", "actorTaskName", "taskType", "language",
        "taskFunc", "actorFunc", "requiredResources", "labelSelector", "fallbackStrategy",
        "actorId", "parentTaskId", "placementGroupId", "serializedRuntimeEnv", "callSite", "jobId",
    };
    r->task_id.len = r->name.len = -1;
    r->attempt = 0;
    for (int i = 0; i < DEF_KEYS; i++) r->keys[i].len = -1;
    while ((more = next_member(c, &first, &key)) == 1) {
        int which = member(c, &key, names, 17, &seen);
        if (which == -2) return 0;
        int ok;
        switch (which) {
            case 0: ok = read_string(c, &r->task_id); break;
            case 1: ok = is_null(c) || read_int64(c, &r->attempt); break;
            case 2: /* taskName, or actorTaskName for an actor task; the other is not read */
            case 3:
                ok = (which == 3) == actor ? read_optional_string(c, &r->name) : skip_any(c, 2);
                break;
            case 6: /* taskFunc, or actorFunc for an actor task */
            case 7: ok = (which == 7) == actor ? read_raw(c, &r->keys[2]) : skip_any(c, 2); break;
            case 4: ok = read_optional_token(c, &r->keys[0]); break;
            case 5: ok = read_optional_token(c, &r->keys[1]); break;
            case 8: case 9: case 10: ok = read_raw(c, &r->keys[which - 5]); break;
            case 11: case 12: case 13: case 14: case 15: case 16:
                ok = read_optional_token(c, &r->keys[which - 5]);
                break;
            default: ok = skip_any(c, 2); break; /* a field DefinitionPayload does not have */
        }
        if (!ok) return 0;
    }
    return more == 0 && r->task_id.len > 0;
}

/* A profile entry's time: an int64 number, or a string of 1-19 digits with an optional
 * '-' within int64: what int() makes of it and in_int64 keeps (anything else: the Python
 * path's, which skips such an entry). */
static int read_time(Cursor *c, int64_t *out) {
    if (c->p >= c->end || *c->p != '"') return read_int64(c, out);
    Span s;
    return read_string(c, &s) && digits_int64(c->base + s.at, c->base + s.at + s.len, 19, out);
}

static int push_entry(Scan *scan, const ProfileEntry *entry) {
    if (scan->entry_count == scan->entry_capacity) {
        ProfileEntry *larger = grown(scan->entries, &scan->entry_capacity, sizeof(ProfileEntry), 256);
        if (larger == NULL) return -1;
        scan->entries = larger;
    }
    scan->entries[scan->entry_count++] = *entry;
    return 0;
}

/* One entry of ``events``: an object with both times (read_time) and a name and extra
 * data that are strings (escapes allowed) or null.  1 read, 0 not taken, -1 no memory. */
static int read_entry(Cursor *c, Scan *scan) {
    Span key;
    int first = 1, more, seen = 0;
    static const char *const names[] = {"eventName", "startTime", "endTime", "extraData"};
    ProfileEntry entry = {{0, -1}, {0, -1}, 0, 0};
    while ((more = next_member(c, &first, &key)) == 1) {
        int ok;
        switch (member(c, &key, names, 4, &seen)) {
            case -2: return 0;
            case 0: ok = is_null(c) || read_escaped_string(c, &entry.name); break;
            case 1: ok = read_time(c, &entry.start); break;
            case 2: ok = read_time(c, &entry.end); break;
            case 3: ok = is_null(c) || read_escaped_string(c, &entry.extra); break;
            default: ok = skip_any(c, 5); break;
        }
        if (!ok) return 0;
    }
    if (more < 0 || (seen & 6) != 6) return 0; /* a time missing: the Python path skips the entry */
    return push_entry(scan, &entry) < 0 ? -1 : 1;
}

/* ``events``: a list of at least one entry (none: a bad event, the Python path's). */
static int read_entries(Cursor *c, Scan *scan, Record *r) {
    if (c->p >= c->end || *c->p != '[') return 0;
    c->p++;
    skip_ws(c);
    r->first_entry = scan->entry_count;
    for (;;) {
        int ok = read_entry(c, scan);
        if (ok <= 0) return ok;
        skip_ws(c);
        if (c->p >= c->end) return 0;
        if (*c->p == ']') break;
        if (*c->p != ',') return 0;
        c->p++;
        skip_ws(c);
    }
    c->p++;
    r->entries = scan->entry_count - r->first_entry;
    return 1;
}

/* ``profileEvents``: the component's fields plain strings or null, and its entries. */
static int read_profile_body(Cursor *c, Scan *scan, Record *r) {
    Span key;
    int first = 1, more, seen = 0;
    static const char *const names[] = {"componentType", "componentId", "nodeIpAddress", "events"};
    while ((more = next_member(c, &first, &key)) == 1) {
        int ok;
        switch (member(c, &key, names, 4, &seen)) {
            case -2: return 0;
            case 0: ok = read_optional_string(c, &r->component_type); break;
            case 1: ok = read_optional_string(c, &r->component_id); break;
            case 2: ok = read_optional_string(c, &r->node_ip); break;
            case 3: ok = read_entries(c, scan, r); break;
            default: ok = skip_any(c, 3); break;
        }
        if (ok <= 0) return ok;
    }
    return more == 0 && (seen & 8) ? 1 : 0;
}

/* A taskProfileEvents payload, taken in the shapes TaskTable.profile reads as they are:
 * the task id a plain string, the attempt an int64 (or null), the job id a plain string
 * or null, and profileEvents as read_profile_body takes it. */
static int read_profile(Cursor *c, Scan *scan, Record *r) {
    Span key;
    int first = 1, more, seen = 0;
    static const char *const names[] = {"taskId", "attemptNumber", "jobId", "profileEvents"};
    r->task_id.len = r->job.len = r->component_type.len = r->component_id.len = r->node_ip.len = -1;
    r->attempt = 0;
    r->first_entry = scan->entry_count;
    r->entries = 0;
    while ((more = next_member(c, &first, &key)) == 1) {
        int ok;
        switch (member(c, &key, names, 4, &seen)) {
            case -2: return 0;
            case 0: ok = read_string(c, &r->task_id); break;
            case 1: ok = is_null(c) || read_int64(c, &r->attempt); break;
            case 2: ok = read_optional_string(c, &r->job); break;
            case 3: ok = read_profile_body(c, scan, r); break;
            default: ok = skip_any(c, 2); break;
        }
        if (ok <= 0) return ok;
    }
    return more == 0 && r->task_id.len > 0 && (seen & 8) ? 1 : 0;
}

/* 1: an event taken here; 0: a line for the Python path; -1: out of memory. */
static int scan_line(Scan *scan, const char *base, const char *line, const char *end, Record *r) {
    static const char *const types[KINDS] = {"TASK_LIFECYCLE_EVENT", "TASK_DEFINITION_EVENT",
                                             "ACTOR_TASK_DEFINITION_EVENT", "TASK_PROFILE_EVENT"};
    Cursor c = {base, line, end};
    Span key, event_type = {0, -1};
    int first = 1, more, have_payload = 0, have_id = 0, kind = -1;
    Py_ssize_t transitions_before = scan->transition_count, entries_before = scan->entry_count;
    r->event_id.len = -1;
    r->line.at = line - base;
    r->line.len = end - line;
    skip_ws(&c);
    while ((more = next_member(&c, &first, &key)) == 1) {
        if (key_is(&c, &key, "eventType")) {
            if (event_type.len >= 0 || !read_string(&c, &event_type)) goto other;
            int known = 0;
            for (int k = 0; k < KINDS; k++) known |= key_is(&c, &event_type, types[k]);
            if (!known) goto other; /* no need to read on */
        } else if (key_is(&c, &key, "eventId")) {
            if (have_id++ || !read_optional_string(&c, &r->event_id)) goto other;
        } else if (key_is(&c, &key, "taskLifecycleEvent") || key_is(&c, &key, "taskProfileEvents")) {
            if (have_payload++) goto other;
            kind = key.len == 18 ? LIFECYCLE : PROFILE;
            int ok = kind == LIFECYCLE ? read_payload(&c, scan, r) : read_profile(&c, scan, r);
            if (ok < 0) return -1;
            if (!ok) goto other;
        } else if (key_is(&c, &key, "taskDefinitionEvent") || key_is(&c, &key, "actorTaskDefinitionEvent")) {
            if (have_payload++) goto other;
            kind = key.len == 19 ? DEFINITION : ACTOR_DEFINITION;
            if (!read_definition(&c, r, kind == ACTOR_DEFINITION)) goto other;
        } else if (!skip_value(&c, 1)) {
            goto other;
        }
    }
    if (more < 0 || !have_payload || !key_is(&c, &event_type, types[kind])) goto other;
    r->kind = kind;
    skip_ws(&c);
    if (c.p != end) goto other;
    return 1;
other:
    scan->transition_count = transitions_before;
    scan->entry_count = entries_before;
    return 0;
}

static PyTypeObject ScanType;

static void Scan_dealloc(Scan *self) {
    Py_XDECREF(self->body);
    PyMem_Free(self->records);
    PyMem_Free(self->transitions);
    PyMem_Free(self->entries);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Scan_count(Scan *self, void *closure) {
    (void)closure;
    return PyLong_FromSsize_t(self->count);
}

static PyGetSetDef Scan_getset[] = {
    {"count", (getter)Scan_count, NULL, "events taken", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ScanType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "runtime.server.replay._lifecycle.Scan",
    .tp_basicsize = sizeof(Scan),
    .tp_dealloc = (destructor)Scan_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The task events scanned from one blob.",
    .tp_getset = Scan_getset,
};

/* scan(body) -> (Scan, others: list[bytes], runs: list[int]) */
static PyObject *scan(PyObject *module, PyObject *arg) {
    (void)module;
    if (!PyBytes_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "scan() takes bytes");
        return NULL;
    }
    const char *base = PyBytes_AS_STRING(arg);
    const char *end = base + PyBytes_GET_SIZE(arg);
    Scan *s = PyObject_New(Scan, &ScanType);
    if (s == NULL) return NULL;
    Py_INCREF(arg);
    s->body = arg;
    s->records = NULL;
    s->count = s->capacity = s->transition_count = s->transition_capacity = 0;
    s->transitions = NULL;
    s->entries = NULL;
    s->entry_count = s->entry_capacity = 0;
    PyObject *others = PyList_New(0), *runs = PyList_New(0);
    if (others == NULL || runs == NULL) goto fail;
    Py_ssize_t run = 0;
    int taking = 1; /* runs alternate: taken lines first, then lines for Python, ... */
    const char *line = base;
    for (;;) {
        const char *stop = memchr(line, '\n', end - line);
        if (stop == NULL) stop = end;
        if (s->count == s->capacity) {
            Record *larger = grown(s->records, &s->capacity, sizeof(Record), 64);
            if (larger == NULL) {
                PyErr_NoMemory();
                goto fail;
            }
            s->records = larger;
        }
        int taken = scan_line(s, base, line, stop, &s->records[s->count]);
        if (taken < 0) {
            PyErr_NoMemory();
            goto fail;
        }
        if (taken != taking) {
            PyObject *n = PyLong_FromSsize_t(run);
            if (n == NULL || PyList_Append(runs, n) < 0) {
                Py_XDECREF(n);
                goto fail;
            }
            Py_DECREF(n);
            run = 0;
            taking = taken;
        }
        run++;
        if (taken) {
            s->count++;
        } else {
            PyObject *text = PyBytes_FromStringAndSize(line, stop - line);
            if (text == NULL || PyList_Append(others, text) < 0) {
                Py_XDECREF(text);
                goto fail;
            }
            Py_DECREF(text);
        }
        if (stop == end) break;
        line = stop + 1;
    }
    PyObject *n = PyLong_FromSsize_t(run);
    if (n == NULL || PyList_Append(runs, n) < 0) {
        Py_XDECREF(n);
        goto fail;
    }
    Py_DECREF(n);
    return Py_BuildValue("(NNN)", (PyObject *)s, others, runs);
fail:
    Py_XDECREF(others);
    Py_XDECREF(runs);
    Py_DECREF(s);
    return NULL;
}

/* ------------------------------------------------------------------ the apply */

/* Slots of a per-call cache of interned texts (a power of two; direct-mapped). */
#define TEXTS_MET 64

typedef struct {
    const char *text;
    Py_ssize_t len;
    PyObject *value; /* strong; NULL: empty slot */
} TextMet;

typedef struct {
    TextMet slot[TEXTS_MET];
} TextsMet;

/* Slots of the per-call cache of attempts by task id text and attempt number (most
 * lines of a routed batch name a task another line of it named). */
#define ATTEMPTS_MET 512

typedef struct {
    const char *text;
    Py_ssize_t len;
    int64_t attempt;
    PyObject *state; /* strong; NULL: empty slot */
} AttemptMet;

typedef struct {
    PyObject *attempts, *attempt_type, *ids, *known, *seconds, *ts_ns, *strings;
    PyObject *templates, *names, *learn; /* definitions: see apply_definition */
    PyObject *profile;                   /* profile events: see apply_profile */
    Py_ssize_t templates_limit, names_limit;
    int64_t base_ns;
    /* The last second looked up (SECOND_NS's value for it never changes). */
    char head[19];
    int64_t head_ns;
    int has_head;
    /* Texts met in this call, by their JSON text (the body outlives the call), each
     * decoded and interned (TaskTable._strings) once: the table's _intern then finds
     * the very object with its hash cached, instead of hashing a fresh copy per use.
     * Profile entry names and components (a handful per session), log file names. */
    TextsMet met_names, met_files;
    TextsMet met_ids; /* raw node and worker ids: their hex ids (hex_of_span) */
    AttemptMet met_attempts[ATTEMPTS_MET]; /* attempt_of */
} Context;

static PyObject *S_seen, *S_job, *S_log, *S_transitions, *S_node, *S_node_ns, *S_worker,
    *S_worker_ns, *S_pid, *S_pid_ns, *S_empty, *S_empty_object, *S_definition, *S_name;

static PyObject *span_str(PyObject *body, const Span *s) {
    return PyUnicode_DecodeUTF8(PyBytes_AS_STRING(body) + s->at, s->len, "strict");
}

/* 1 when found (value in *ns), 0 when the timestamp is unusable (skipped), -1 on error. */
static int transition_ns(Context *ctx, const char *text, int64_t *ns) {
    int64_t frac = 0;
    for (int i = 20; i < 29; i++) frac = frac * 10 + (text[i] - '0');
    if (ctx->has_head && memcmp(ctx->head, text, 19) == 0) {
        *ns = ctx->head_ns + frac;
        return 1;
    }
    PyObject *head = PyUnicode_FromStringAndSize(text, 19);
    if (head == NULL) return -1;
    PyObject *found = PyDict_GetItemWithError(ctx->seconds, head); /* borrowed */
    Py_DECREF(head);
    int64_t second;
    if (found != NULL) {
        int overflow;
        second = PyLong_AsLongLongAndOverflow(found, &overflow);
        if (overflow || (second == -1 && PyErr_Occurred())) return -2;
    } else {
        if (PyErr_Occurred()) return -1;
        /* Not cached: the Python path's own parser decides (and caches the second). */
        PyObject *full = PyUnicode_FromStringAndSize(text, 30);
        if (full == NULL) return -1;
        PyObject *value = PyObject_CallOneArg(ctx->ts_ns, full);
        Py_DECREF(full);
        if (value == NULL) return -1;
        if (value == Py_None) {
            Py_DECREF(value);
            return 0;
        }
        int overflow;
        int64_t whole = PyLong_AsLongLongAndOverflow(value, &overflow);
        Py_DECREF(value);
        if (overflow || (whole == -1 && PyErr_Occurred())) return -2;
        second = whole - frac;
    }
    memcpy(ctx->head, text, 19);
    ctx->head_ns = second;
    ctx->has_head = 1;
    *ns = second + frac;
    return 1;
}

static PyObject *long_from_i128(__int128 value) {
    if (value >= INT64_MIN && value <= INT64_MAX) return PyLong_FromLongLong((long long)value);
    unsigned char bytes[16];
    unsigned __int128 bits = (unsigned __int128)value;
    for (int i = 0; i < 16; i++) bytes[i] = (unsigned char)(bits >> (8 * i));
    return _PyLong_FromByteArray(bytes, 16, 1, 1);
}

/* An attribute's int compared with ns: 1 when ns >= it. */
static int newer_or_same(PyObject *state, PyObject *name, int64_t ns) {
    PyObject *value = PyObject_GetAttr(state, name);
    if (value == NULL) return -1;
    int overflow;
    long long known = PyLong_AsLongLongAndOverflow(value, &overflow);
    Py_DECREF(value);
    if (known == -1 && PyErr_Occurred()) return -1;
    if (overflow) return overflow < 0;
    return ns >= known;
}

static int set_int(PyObject *state, PyObject *name, int64_t value) {
    PyObject *number = PyLong_FromLongLong(value);
    if (number == NULL) return -1;
    int rc = PyObject_SetAttr(state, name, number);
    Py_DECREF(number);
    return rc;
}

/* The hex id of a raw id: the IdCache's memo first, as the handler reads it. */
static PyObject *hex_of(Context *ctx, PyObject *raw) {
    PyObject *found = PyDict_GetItemWithError(ctx->known, raw);
    if (found != NULL) {
        Py_INCREF(found); /* borrowed: held while its truth is asked */
        int truth = PyObject_IsTrue(found);
        if (truth > 0) return found;
        Py_DECREF(found);
        if (truth < 0) return NULL;
    } else if (PyErr_Occurred()) {
        return NULL;
    }
    return PyObject_CallOneArg(ctx->ids, raw);
}

static TextMet *text_slot(TextsMet *met, PyObject *body, const Span *s);
static PyObject *text_met(const TextMet *slot, PyObject *body, const Span *s);
static void meet_text(TextMet *slot, PyObject *body, const Span *s, PyObject *value);

/* hex_of the span's text, remembered for the rest of the call (node and worker ids
 * repeat on most events; the IdCache answers the same for the same text). */
static PyObject *hex_of_span(Context *ctx, PyObject *body, const Span *s) {
    TextMet *slot = text_slot(&ctx->met_ids, body, s);
    PyObject *hex = text_met(slot, body, s);
    if (hex != NULL) return hex;
    PyObject *raw = span_str(body, s);
    if (raw == NULL) return NULL;
    hex = hex_of(ctx, raw);
    Py_DECREF(raw);
    if (hex == NULL) return NULL;
    meet_text(slot, body, s, hex);
    return hex;
}

static int carry_id(Context *ctx, PyObject *body, PyObject *state, const Span *span, PyObject *field,
                    PyObject *field_ns, int64_t latest) {
    if (span->len <= 0) return 0; /* absent, null or '': never erases */
    int newer = newer_or_same(state, field_ns, latest);
    if (newer <= 0) return newer;
    PyObject *hex = hex_of_span(ctx, body, span);
    if (hex == NULL) return -1;
    int rc = PyObject_SetAttr(state, field, hex);
    Py_DECREF(hex);
    if (rc < 0) return -1;
    return set_int(state, field_ns, latest);
}

static PyObject *interned_text(Context *ctx, TextsMet *met, PyObject *body, const Span *s,
                               PyObject *(*decode)(PyObject *, const Span *));
static PyObject *string_value(PyObject *body, const Span *s);

static PyObject *interned_file(Context *ctx, PyObject *body, const Span *file) {
    if (file->len <= 0) {
        Py_INCREF(S_empty);
        return S_empty;
    }
    return interned_text(ctx, &ctx->met_files, body, file, span_str);
}

/* merge_log_info: a file name sets file and start, a non-zero start sets start, an end
 * replaces a zero end or is replaced only by a non-zero one. */
static int merge_log(Context *ctx, PyObject *body, PyObject *state, const Record *r) {
    PyObject *update = PyList_New(6);
    if (update == NULL) return -1;
    const LogSide *sides[2] = {&r->out, &r->err};
    for (int i = 0; i < 2; i++) {
        PyObject *file = interned_file(ctx, body, &sides[i]->file);
        PyObject *start = PyLong_FromLongLong(sides[i]->start);
        PyObject *end = PyLong_FromLongLong(sides[i]->end);
        if (file == NULL || start == NULL || end == NULL) {
            Py_XDECREF(file);
            Py_XDECREF(start);
            Py_XDECREF(end);
            Py_DECREF(update);
            return -1;
        }
        PyList_SET_ITEM(update, 3 * i, file);
        PyList_SET_ITEM(update, 3 * i + 1, start);
        PyList_SET_ITEM(update, 3 * i + 2, end);
    }
    PyObject *current = PyObject_GetAttr(state, S_log);
    if (current == NULL) {
        Py_DECREF(update);
        return -1;
    }
    int rc = 0;
    if (current == Py_None) {
        rc = PyObject_SetAttr(state, S_log, update);
    } else if (!PyList_Check(current) || PyList_GET_SIZE(current) != 6) {
        PyErr_SetString(PyExc_TypeError, "Attempt.log is not a list of six");
        rc = -1;
    } else {
        for (int base = 0; base < 6; base += 3) {
            const LogSide *side = sides[base / 3];
            if (side->file.len > 0) {
                PyList_SetItem(current, base, Py_NewRef(PyList_GET_ITEM(update, base)));
                PyList_SetItem(current, base + 1, Py_NewRef(PyList_GET_ITEM(update, base + 1)));
            } else if (side->start) {
                PyList_SetItem(current, base + 1, Py_NewRef(PyList_GET_ITEM(update, base + 1)));
            }
            /* (A zero end replacing a zero end changes nothing.) */
            if (side->end) PyList_SetItem(current, base + 2, Py_NewRef(PyList_GET_ITEM(update, base + 2)));
        }
    }
    Py_DECREF(current);
    Py_DECREF(update);
    return rc;
}

/* The attempt a record is about (created when new): a new reference. */
static PyObject *attempt_of_dict(Context *ctx, PyObject *body, const Record *r);

/* The record's Attempt (a new reference), from the call's cache when a line before it
 * named the same task id text and attempt, else from TaskTable._attempts. The dict only
 * grows during a call, so a remembered attempt is still the one it holds. */
static PyObject *attempt_of(Context *ctx, PyObject *body, const Record *r) {
    const unsigned char *text = (const unsigned char *)PyBytes_AS_STRING(body) + r->task_id.at;
    Py_ssize_t n = r->task_id.len;
    size_t pick = (size_t)n * 31 + (size_t)r->attempt; /* an id's own bytes come first */
    for (Py_ssize_t i = 0; i < n && i < 16; i++) pick = pick * 31 + text[i];
    pick ^= pick >> 9;
    AttemptMet *slot = &ctx->met_attempts[pick & (ATTEMPTS_MET - 1)];
    if (slot->state != NULL && slot->len == n && slot->attempt == r->attempt &&
        memcmp(slot->text, text, (size_t)n) == 0) {
        return Py_NewRef(slot->state);
    }
    PyObject *state = attempt_of_dict(ctx, body, r);
    if (state != NULL) {
        Py_XSETREF(slot->state, Py_NewRef(state));
        slot->text = (const char *)text;
        slot->len = n;
        slot->attempt = r->attempt;
    }
    return state;
}

static PyObject *attempt_of_dict(Context *ctx, PyObject *body, const Record *r) {
    PyObject *raw = span_str(body, &r->task_id);
    if (raw == NULL) return NULL;
    PyObject *key = raw;
    if (r->attempt) {
        PyObject *number = PyLong_FromLongLong(r->attempt);
        key = number ? PyTuple_Pack(2, raw, number) : NULL;
        Py_XDECREF(number);
        Py_DECREF(raw);
        if (key == NULL) return NULL;
    }
    PyObject *state = PyDict_GetItemWithError(ctx->attempts, key); /* borrowed */
    if (state == NULL) {
        if (PyErr_Occurred()) {
            Py_DECREF(key);
            return NULL;
        }
        state = PyObject_CallNoArgs(ctx->attempt_type);
        if (state == NULL || PyDict_SetItem(ctx->attempts, key, state) < 0) {
            Py_XDECREF(state);
            Py_DECREF(key);
            return NULL;
        }
        Py_DECREF(key);
        return state; /* the dict holds one reference, the caller the other */
    }
    Py_DECREF(key);
    Py_INCREF(state);
    return state;
}

/* ``boxed in values`` for a list of ints, ``boxed`` being ``value``: an exact int is
 * compared as a C integer instead of through the generic ==, anything else (a bool, a
 * subclass, an int beyond int64) as PySequence_Contains would. 1, 0, or -1 on error. */
static int holds_int(PyObject *values, long long value, PyObject *boxed) {
    if (!PyList_CheckExact(values)) return PySequence_Contains(values, boxed);
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(values); i++) {
        PyObject *item = PyList_GET_ITEM(values, i);
        if (PyLong_CheckExact(item)) {
            int overflow;
            long long held = PyLong_AsLongLongAndOverflow(item, &overflow);
            if (!overflow) {
                if (held == value) return 1;
                continue;
            }
        }
        Py_INCREF(item); /* held while compared: == may run code that changes the list */
        int equal = PyObject_RichCompareBool(item, boxed, Py_EQ);
        Py_DECREF(item);
        if (equal != 0) return equal;
    }
    return 0;
}

/* hash(str) of ASCII text without making the str (a str's hash is its bytes' for
 * ASCII; Ray's event ids are base64); -1 when the text is not ASCII. */
static Py_hash_t ascii_hash(const char *text, Py_ssize_t len) {
    for (Py_ssize_t i = 0; i < len; i++) {
        if ((unsigned char)text[i] >= 0x80) return -1;
    }
#if PY_VERSION_HEX >= 0x030E0000
    return Py_HashBuffer(text, len); /* public from 3.14 */
#else
    return _Py_HashBytes(text, len);
#endif
}

/* attempt.seen_before: 1 when the record's eventId is on the attempt already, else 0
 * (and it is recorded); -1 on error. */
static int seen_before(PyObject *body, PyObject *state, const Record *r) {
    if (r->event_id.len < 0) return 0;
    Py_hash_t hash = ascii_hash(PyBytes_AS_STRING(body) + r->event_id.at, r->event_id.len);
    if (hash == -1) {
        PyObject *id = span_str(body, &r->event_id);
        if (id == NULL) return -1;
        hash = PyObject_Hash(id);
        Py_DECREF(id);
        if (hash == -1) return -1;
    }
    PyObject *marker = PyLong_FromSsize_t(hash);
    if (marker == NULL) return -1;
    PyObject *seen = PyObject_GetAttr(state, S_seen);
    if (seen == NULL) {
        Py_DECREF(marker);
        return -1;
    }
    int result;
    if (seen == Py_None) {
        PyObject *fresh = PyList_New(1);
        if (fresh == NULL) {
            Py_DECREF(marker);
            Py_DECREF(seen);
            return -1;
        }
        PyList_SET_ITEM(fresh, 0, marker);
        result = PyObject_SetAttr(state, S_seen, fresh) < 0 ? -1 : 0;
        Py_DECREF(fresh);
    } else {
        int present = holds_int(seen, (long long)hash, marker);
        result = present;
        if (present == 0 && PyList_Append(seen, marker) < 0) result = -1;
        Py_DECREF(marker);
    }
    Py_DECREF(seen);
    return result;
}

/* The record's job id on an attempt that has none yet (first wins); -1 on error. */
static int carry_job(Context *ctx, PyObject *body, PyObject *state, const Record *r) {
    if (r->job.len <= 0) return 0;
    PyObject *job = PyObject_GetAttr(state, S_job);
    if (job == NULL) return -1;
    int truth = PyObject_IsTrue(job);
    Py_DECREF(job);
    if (truth <= 0) {
        if (truth < 0) return -1;
        PyObject *text = span_str(body, &r->job);
        PyObject *hex = text ? PyObject_CallOneArg(ctx->ids, text) : NULL;
        Py_XDECREF(text);
        if (hex == NULL) return -1;
        int rc = PyObject_SetAttr(state, S_job, hex);
        Py_DECREF(hex);
        if (rc < 0) return -1;
    }
    return 0;
}

/* 1 applied, 2 duplicate, -1 error. */
static int apply_one(Context *ctx, Scan *scan, const Record *r) {
    PyObject *body = scan->body;
    PyObject *state = attempt_of(ctx, body, r);
    if (state == NULL) return -1;
    int result = -1;
    int seen = seen_before(body, state, r);
    if (seen < 0) goto done;
    if (seen) {
        result = 2;
        goto done;
    }
    if (carry_job(ctx, body, state, r) < 0) goto done;
    if (r->has_log && merge_log(ctx, body, state, r) < 0) goto done;
    if (r->transitions == 0) {
        result = 1; /* metadata only */
        goto done;
    }
    PyObject *codes = PyObject_GetAttr(state, S_transitions);
    if (codes == NULL) goto done;
    if (codes == Py_None) {
        Py_DECREF(codes);
        codes = PyList_New(0);
        if (codes == NULL || PyObject_SetAttr(state, S_transitions, codes) < 0) {
            Py_XDECREF(codes);
            goto done;
        }
    }
    int64_t latest = -1;
    const char *text = PyBytes_AS_STRING(body);
    for (Py_ssize_t i = 0; i < r->transitions; i++) {
        const TransitionRef *t = &scan->transitions[r->first_transition + i];
        int64_t ns;
        int found = transition_ns(ctx, text + t->timestamp.at, &ns);
        if (found == -2) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_OverflowError, "a cached second beyond int64");
            found = -1;
        }
        if (found < 0) {
            Py_DECREF(codes);
            goto done;
        }
        if (!found) continue;
        __int128 packed_value = ((__int128)ns - ctx->base_ns) * ((__int128)1 << STATE_BITS) + t->rank;
        PyObject *packed = long_from_i128(packed_value);
        if (packed == NULL) {
            Py_DECREF(codes);
            goto done;
        }
        int present = packed_value >= LLONG_MIN && packed_value <= LLONG_MAX
                          ? holds_int(codes, (long long)packed_value, packed)
                          : PySequence_Contains(codes, packed);
        int rc = present == 0 ? PyList_Append(codes, packed) : 0;
        Py_DECREF(packed);
        if (present < 0 || rc < 0) {
            Py_DECREF(codes);
            goto done;
        }
        if (ns > latest) latest = ns;
    }
    Py_DECREF(codes);
    if (latest >= 0) {
        if (carry_id(ctx, body, state, &r->node, S_node, S_node_ns, latest) < 0) goto done;
        if (carry_id(ctx, body, state, &r->worker, S_worker, S_worker_ns, latest) < 0) goto done;
        if (r->has_pid && r->pid) {
            int newer = newer_or_same(state, S_pid_ns, latest);
            if (newer < 0) goto done;
            if (newer && (set_int(state, S_pid, r->pid) < 0 || set_int(state, S_pid_ns, latest) < 0)) goto done;
        }
    }
    result = 1;
done:
    Py_DECREF(state);
    return result;
}

/* The bytes a definition's template is keyed by: its kind, then each field's length
 * (-1: absent) and text as written. */
static PyObject *template_key(PyObject *body, const Record *r) {
    Py_ssize_t size = 1;
    for (int i = 0; i < DEF_KEYS; i++) size += sizeof(Py_ssize_t) + (r->keys[i].len > 0 ? r->keys[i].len : 0);
    PyObject *key = PyBytes_FromStringAndSize(NULL, size);
    if (key == NULL) return NULL;
    char *out = PyBytes_AS_STRING(key);
    const char *text = PyBytes_AS_STRING(body);
    *out++ = (char)r->kind;
    for (int i = 0; i < DEF_KEYS; i++) {
        Py_ssize_t len = r->keys[i].len;
        memcpy(out, &len, sizeof len);
        out += sizeof len;
        if (len > 0) {
            memcpy(out, text + r->keys[i].at, (size_t)len);
            out += len;
        }
    }
    return key;
}

/* TaskTable.definition for a taken definition event.  Most tasks share a template: one
 * seen before (``templates``: key -> the Definition the Python path made of it) is set
 * here, with the task's name; a new one is the Python path's (``learn(line)`` applies
 * the event and answers (result, Definition or None)), and what it made is kept.
 * 1 applied, 2 duplicate, 0 bad, -1 error. */
static int apply_definition(Context *ctx, Scan *scan, const Record *r) {
    PyObject *body = scan->body;
    PyObject *key = template_key(body, r);
    if (key == NULL) return -1;
    PyObject *shared = PyDict_GetItemWithError(ctx->templates, key); /* borrowed */
    if (shared == NULL) {
        int result = -1;
        if (PyErr_Occurred()) goto learnt;
        PyObject *line = PyBytes_FromStringAndSize(PyBytes_AS_STRING(body) + r->line.at, r->line.len);
        if (line == NULL) goto learnt;
        PyObject *answer = PyObject_CallOneArg(ctx->learn, line);
        Py_DECREF(line);
        if (answer == NULL) goto learnt;
        if (!PyTuple_Check(answer) || PyTuple_GET_SIZE(answer) != 2) {
            PyErr_SetString(PyExc_TypeError, "learn() must answer (result, definition)");
        } else {
            long code = PyLong_AsLong(PyTuple_GET_ITEM(answer, 0));
            PyObject *made = PyTuple_GET_ITEM(answer, 1);
            if (!(code == -1 && PyErr_Occurred())) {
                result = (int)code;
                if (made != Py_None && PyDict_GET_SIZE(ctx->templates) < ctx->templates_limit &&
                    PyDict_SetItem(ctx->templates, key, made) < 0)
                    result = -1;
            }
        }
        Py_DECREF(answer);
    learnt:
        Py_DECREF(key);
        return result;
    }
    Py_INCREF(shared);
    Py_DECREF(key);
    int result = -1;
    PyObject *state = attempt_of(ctx, body, r);
    if (state == NULL) {
        Py_DECREF(shared);
        return -1;
    }
    int seen = seen_before(body, state, r);
    if (seen < 0) goto done;
    if (seen) {
        result = 2;
        goto done;
    }
    if (PyObject_SetAttr(state, S_definition, shared) < 0) goto done;
    PyObject *name = r->name.len >= 0 ? span_str(body, &r->name) : Py_NewRef(S_empty);
    if (name == NULL) goto done;
    PyObject *known = PyDict_GetItemWithError(ctx->names, name); /* borrowed */
    if (known == NULL) {
        if (PyErr_Occurred() ||
            (PyDict_GET_SIZE(ctx->names) < ctx->names_limit && PyDict_SetItem(ctx->names, name, name) < 0)) {
            Py_DECREF(name);
            goto done;
        }
        known = name; /* names often repeat ("square"); ids never do */
    }
    int rc = PyObject_SetAttr(state, S_name, known);
    Py_DECREF(name);
    if (rc < 0) goto done;
    result = 1;
done:
    Py_DECREF(state);
    Py_DECREF(shared);
    return result;
}

/* A JSON string's value (escapes decoded; read_escaped_string checked them and refused
 * surrogates); "" for null or absent. */
static PyObject *string_value(PyObject *body, const Span *s) {
    if (s->len < 0) return Py_NewRef(S_empty);
    const char *text = PyBytes_AS_STRING(body) + s->at;
    if (memchr(text, '\\', (size_t)s->len) == NULL) return PyUnicode_DecodeUTF8(text, s->len, "strict");
    char *out = PyMem_Malloc((size_t)s->len); /* an escape never decodes to more bytes than it takes */
    if (out == NULL) return PyErr_NoMemory();
    Py_ssize_t n = 0;
    for (Py_ssize_t i = 0; i < s->len; i++) {
        char ch = text[i];
        if (ch != '\\') {
            out[n++] = ch;
            continue;
        }
        ch = text[++i];
        switch (ch) {
            case 'b': out[n++] = '\b'; break;
            case 'f': out[n++] = '\f'; break;
            case 'n': out[n++] = '\n'; break;
            case 'r': out[n++] = '\r'; break;
            case 't': out[n++] = '\t'; break;
            case 'u': {
                unsigned code = 0;
                for (int k = 1; k <= 4; k++) {
                    char h = text[i + k];
                    code = code * 16 + (unsigned)(is_digit(h) ? h - '0' : (h | 0x20) - 'a' + 10);
                }
                i += 4;
                if (code < 0x80) {
                    out[n++] = (char)code;
                } else if (code < 0x800) {
                    out[n++] = (char)(0xC0 | (code >> 6));
                    out[n++] = (char)(0x80 | (code & 0x3F));
                } else {
                    out[n++] = (char)(0xE0 | (code >> 12));
                    out[n++] = (char)(0x80 | ((code >> 6) & 0x3F));
                    out[n++] = (char)(0x80 | (code & 0x3F));
                }
                break;
            }
            default: out[n++] = ch; break; /* '"', '\\' or '/' */
        }
    }
    PyObject *value = PyUnicode_DecodeUTF8(out, n, "strict");
    PyMem_Free(out);
    return value;
}

static PyObject *optional_str(PyObject *body, const Span *s) {
    return s->len < 0 ? Py_NewRef(Py_None) : span_str(body, s);
}

/* The slot of ``met`` for the span's bytes (picked by the length and the last 24 bytes,
 * where log file names and ids differ; all of a short text). */
static TextMet *text_slot(TextsMet *met, PyObject *body, const Span *s) {
    const unsigned char *text = (const unsigned char *)PyBytes_AS_STRING(body) + s->at;
    size_t n = (size_t)s->len, pick = n;
    for (const unsigned char *q = n > 24 ? text + n - 24 : text; q < text + n; q++) pick = pick * 31 + *q;
    pick ^= pick >> 7;
    return &met->slot[pick & (TEXTS_MET - 1)];
}

/* What the slot holds for the span's bytes (a new reference), or NULL. */
static PyObject *text_met(const TextMet *slot, PyObject *body, const Span *s) {
    if (slot->value == NULL || slot->len != s->len) return NULL;
    if (memcmp(slot->text, PyBytes_AS_STRING(body) + s->at, (size_t)s->len) != 0) return NULL;
    return Py_NewRef(slot->value);
}

/* Remember ``value`` for the span's bytes (the slot's previous text is forgotten). */
static void meet_text(TextMet *slot, PyObject *body, const Span *s, PyObject *value) {
    Py_XSETREF(slot->value, Py_NewRef(value));
    slot->text = PyBytes_AS_STRING(body) + s->at;
    slot->len = s->len;
}

/* ``text`` (the span's bytes) decoded by ``decode`` and interned in TaskTable._strings,
 * the same object every time this call meets the same bytes in ``met`` (a collision
 * of two texts on one slot only costs a decode). */
static PyObject *interned_text(Context *ctx, TextsMet *met, PyObject *body, const Span *s,
                               PyObject *(*decode)(PyObject *, const Span *)) {
    TextMet *slot = text_slot(met, body, s);
    PyObject *found = text_met(slot, body, s);
    if (found != NULL) return found;
    PyObject *decoded = decode(body, s);
    if (decoded == NULL) return NULL;
    found = PyDict_SetDefault(ctx->strings, decoded, decoded); /* borrowed */
    Py_DECREF(decoded);
    if (found == NULL) return NULL;
    meet_text(slot, body, s, found);
    return Py_NewRef(found);
}

static void forget_attempts(Context *ctx) {
    for (int i = 0; i < ATTEMPTS_MET; i++) Py_CLEAR(ctx->met_attempts[i].state);
}

static void forget_texts(TextsMet *met) {
    for (int i = 0; i < TEXTS_MET; i++) Py_CLEAR(met->slot[i].value);
}

/* A profile entry's name, interned ("" for null or absent). */
static PyObject *entry_name(Context *ctx, PyObject *body, const Span *s) {
    if (s->len < 0) return Py_NewRef(S_empty);
    return interned_text(ctx, &ctx->met_names, body, s, string_value);
}

/* A profile component's type or node address, interned; None for null. Its text has no
 * escape (read_string), so it decodes as an entry name of the same text would: the two
 * may share slots. */
static PyObject *component_text(Context *ctx, PyObject *body, const Span *s) {
    if (s->len < 0) return Py_NewRef(Py_None);
    return interned_text(ctx, &ctx->met_names, body, s, span_str);
}

/* A profile entry's extra data: Ray's usual "{}" is one shared object. */
static PyObject *entry_extra(PyObject *body, const Span *s) {
    if (s->len == 2 && memcmp(PyBytes_AS_STRING(body) + s->at, "{}", 2) == 0) return Py_NewRef(S_empty_object);
    return string_value(body, s);
}

/* TaskTable.profile for a taken profile event: the attempt, the duplicate check and the
 * job id here, then ``profile(state, component_type, component_id, node_ip, entries)``
 * (TaskTable._scanned_profile) with the entries as (name, start, end, extra) tuples.
 * 1 applied, 2 duplicate, -1 error. */
static int apply_profile(Context *ctx, Scan *scan, const Record *r) {
    PyObject *body = scan->body;
    PyObject *state = attempt_of(ctx, body, r);
    if (state == NULL) return -1;
    int result = -1;
    PyObject *entries = NULL, *args[5] = {state, NULL, NULL, NULL, NULL};
    int seen = seen_before(body, state, r);
    if (seen) {
        result = seen < 0 ? -1 : 2;
        goto done;
    }
    if (carry_job(ctx, body, state, r) < 0) goto done;
    entries = PyList_New(r->entries);
    if (entries == NULL) goto done;
    for (Py_ssize_t i = 0; i < r->entries; i++) {
        const ProfileEntry *e = &scan->entries[r->first_entry + i];
        PyObject *item = PyTuple_New(4);
        if (item == NULL) goto done;
        PyList_SET_ITEM(entries, i, item);
        PyObject *parts[4] = {entry_name(ctx, body, &e->name), PyLong_FromLongLong(e->start),
                              PyLong_FromLongLong(e->end), entry_extra(body, &e->extra)};
        int complete = 1;
        for (int k = 0; k < 4; k++) {
            if (parts[k] == NULL) complete = 0;
            else PyTuple_SET_ITEM(item, k, parts[k]);
        }
        if (!complete) goto done;
    }
    args[1] = component_text(ctx, body, &r->component_type);
    args[2] = optional_str(body, &r->component_id);
    args[3] = component_text(ctx, body, &r->node_ip);
    if (args[1] == NULL || args[2] == NULL || args[3] == NULL) goto done;
    args[4] = entries;
    PyObject *answer = PyObject_Vectorcall(ctx->profile, args, 5, NULL);
    if (answer == NULL) goto done;
    Py_DECREF(answer);
    result = 1;
done:
    for (int k = 1; k < 4; k++) Py_XDECREF(args[k]);
    Py_XDECREF(entries);
    Py_DECREF(state);
    return result;
}

#define APPLY_ARGS 16
#define APPLY_SIGNATURE                                                                      \
    "apply(scan, start, stop, attempts, Attempt, ids, seconds, ts_ns, strings, base_ns, "    \
    "templates, names, learn, templates_limit, names_limit, profile)"

/* APPLY_SIGNATURE -> (taken, duplicates, bad): the events start..stop applied, counted
 * by kind (lifecycle, definition, actor task definition, profile). */
static PyObject *apply(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != APPLY_ARGS || !PyObject_TypeCheck(args[0], &ScanType)) {
        PyErr_SetString(PyExc_TypeError, APPLY_SIGNATURE);
        return NULL;
    }
    Scan *scan = (Scan *)args[0];
    Py_ssize_t start = PyLong_AsSsize_t(args[1]), stop = PyLong_AsSsize_t(args[2]);
    if ((start == -1 || stop == -1) && PyErr_Occurred()) return NULL;
    if (start < 0 || stop > scan->count || start > stop) {
        PyErr_SetString(PyExc_IndexError, "records out of range");
        return NULL;
    }
    Context ctx;
    ctx.attempts = args[3];
    ctx.attempt_type = args[4];
    ctx.ids = args[5];
    ctx.seconds = args[6];
    ctx.ts_ns = args[7];
    ctx.strings = args[8];
    ctx.templates = args[10];
    ctx.names = args[11];
    ctx.learn = args[12];
    ctx.profile = args[15];
    ctx.has_head = 0;
    memset(&ctx.met_names, 0, sizeof ctx.met_names);
    memset(&ctx.met_files, 0, sizeof ctx.met_files);
    memset(&ctx.met_ids, 0, sizeof ctx.met_ids);
    memset(ctx.met_attempts, 0, sizeof ctx.met_attempts);
    if (!PyDict_Check(ctx.attempts) || !PyDict_Check(ctx.seconds) || !PyDict_Check(ctx.strings) ||
        !PyDict_Check(ctx.templates) || !PyDict_Check(ctx.names)) {
        PyErr_SetString(PyExc_TypeError, "attempts, seconds, strings, templates and names must be dicts");
        return NULL;
    }
    ctx.templates_limit = PyLong_AsSsize_t(args[13]);
    ctx.names_limit = PyLong_AsSsize_t(args[14]);
    if ((ctx.templates_limit == -1 || ctx.names_limit == -1) && PyErr_Occurred()) return NULL;
    int overflow;
    ctx.base_ns = PyLong_AsLongLongAndOverflow(args[9], &overflow);
    if (overflow || (ctx.base_ns == -1 && PyErr_Occurred())) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_OverflowError, "base_ns beyond int64");
        return NULL;
    }
    ctx.known = PyObject_GetAttrString(ctx.ids, "known");
    if (ctx.known == NULL) return NULL;
    if (!PyDict_Check(ctx.known)) {
        Py_DECREF(ctx.known);
        PyErr_SetString(PyExc_TypeError, "ids.known must be a dict");
        return NULL;
    }
    Py_ssize_t taken[KINDS] = {0}, duplicates[KINDS] = {0}, bad = 0;
    for (Py_ssize_t i = start; i < stop; i++) {
        const Record *r = &scan->records[i];
        int result = r->kind == LIFECYCLE ? apply_one(&ctx, scan, r)
                     : r->kind == PROFILE ? apply_profile(&ctx, scan, r)
                                          : apply_definition(&ctx, scan, r);
        if (result < 0) {
            forget_texts(&ctx.met_names);
            forget_texts(&ctx.met_files);
            forget_texts(&ctx.met_ids);
            forget_attempts(&ctx);
            Py_DECREF(ctx.known);
            return NULL;
        }
        taken[r->kind]++;
        duplicates[r->kind] += result == 2;
        bad += result == 0;
    }
    forget_texts(&ctx.met_names);
    forget_texts(&ctx.met_files);
    forget_texts(&ctx.met_ids);
    forget_attempts(&ctx);
    Py_DECREF(ctx.known);
    return Py_BuildValue("((nnnn)(nnnn)n)", taken[0], taken[1], taken[2], taken[3], duplicates[0], duplicates[1],
                         duplicates[2], duplicates[3], bad);
}

/* ------------------------------------------------------------------ task ids */

static int base64_value(unsigned char ch) {
    if (ch >= 'A' && ch <= 'Z') return ch - 'A';
    if (ch >= 'a' && ch <= 'z') return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9') return ch - '0' + 52;
    if (ch == '+') return 62;
    if (ch == '/') return 63;
    return -1;
}

/* hex_id(text) -> str | None: ids.hex_id for the two spellings Ray writes, None for
 * anything else (the Python function decides).  An all-hex text is hex, lower-cased;
 * else padded base64 decodes as a2b_base64's strict mode does (which, as here, ignores
 * the unused bits of the last character).  TaskTable.attempts converts every task id once: ~4k instructions each
 * in Python (a regex, a decode, a hex), a twentieth of that here. */
static PyObject *hex_id(PyObject *module, PyObject *arg) {
    (void)module;
    if (!PyUnicode_Check(arg) || !PyUnicode_IS_ASCII(arg)) Py_RETURN_NONE;
    const unsigned char *text = PyUnicode_1BYTE_DATA(arg);
    Py_ssize_t len = PyUnicode_GET_LENGTH(arg);
    if (len == 0) Py_RETURN_NONE;
    Py_ssize_t n = 0;
    while (n < len && is_hex_digit((char)text[n])) n++;
    if (n == len) {
        PyObject *out = PyUnicode_New(len, 127);
        if (out == NULL) return NULL;
        unsigned char *lower = PyUnicode_1BYTE_DATA(out);
        for (Py_ssize_t i = 0; i < len; i++) lower[i] = (unsigned char)(text[i] | (text[i] >= 'A' && text[i] <= 'F' ? 0x20 : 0));
        return out;
    }
    if (len % 4) Py_RETURN_NONE;
    Py_ssize_t padding = text[len - 1] == '=' ? (text[len - 2] == '=' ? 2 : 1) : 0;
    Py_ssize_t bytes = len / 4 * 3 - padding;
    if (bytes <= 0 || bytes > 64) Py_RETURN_NONE; /* Ray's ids are at most 28 bytes */
    unsigned char decoded[66];
    uint32_t bits = 0;
    int have = 0;
    Py_ssize_t made = 0;
    for (Py_ssize_t i = 0; i < len - padding; i++) {
        int value = base64_value(text[i]);
        if (value < 0) Py_RETURN_NONE;
        bits = (bits << 6) | (uint32_t)value;
        have += 6;
        if (have >= 8) {
            have -= 8;
            decoded[made++] = (unsigned char)(bits >> have);
            bits &= (1u << have) - 1;
        }
    }
    if (made != bytes) Py_RETURN_NONE;
    static const char digits[] = "0123456789abcdef";
    PyObject *out = PyUnicode_New(2 * made, 127);
    if (out == NULL) return NULL;
    unsigned char *hex = PyUnicode_1BYTE_DATA(out);
    for (Py_ssize_t i = 0; i < made; i++) {
        hex[2 * i] = (unsigned char)digits[decoded[i] >> 4];
        hex[2 * i + 1] = (unsigned char)digits[decoded[i] & 15];
    }
    return out;
}

/* is_ascii(data) -> bool: bytes.isascii(), 64 bytes per step with SSE2 (CPython's
 * takes a word at a time; every blob is checked before its typed decode). */
static PyObject *is_ascii(PyObject *module, PyObject *arg) {
    (void)module;
    if (!PyBytes_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "is_ascii() takes bytes");
        return NULL;
    }
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(arg);
    Py_ssize_t n = PyBytes_GET_SIZE(arg), i = 0;
#ifdef __SSE2__
    for (; i + 64 <= n; i += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(p + i));
        __m128i b = _mm_loadu_si128((const __m128i *)(p + i + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(p + i + 32));
        __m128i d = _mm_loadu_si128((const __m128i *)(p + i + 48));
        if (_mm_movemask_epi8(_mm_or_si128(_mm_or_si128(a, b), _mm_or_si128(c, d)))) Py_RETURN_FALSE;
    }
#endif
    for (; i < n; i++) {
        if (p[i] & 0x80) Py_RETURN_FALSE;
    }
    Py_RETURN_TRUE;
}

static PyMethodDef methods[] = {
    {"is_ascii", (PyCFunction)is_ascii, METH_O, "is_ascii(data) -> bool: bytes.isascii(), faster."},
    {"scan", (PyCFunction)scan, METH_O,
     "scan(body) -> (Scan, others, runs): the lifecycle events taken, the other lines, and the "
     "lengths of the alternating runs of taken and other lines (taken first)."},
    {"apply", (PyCFunction)(void (*)(void))apply, METH_FASTCALL,
     APPLY_SIGNATURE " -> ((taken by kind), (duplicates by kind), bad): TaskTable.lifecycle and "
     "TaskTable.definition for the taken events start..stop."},
    {"hex_id", (PyCFunction)hex_id, METH_O,
     "hex_id(text) -> str | None: ids.hex_id of an all-hex or canonical base64 text, else None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "runtime.server.replay._lifecycle",
    "Lifecycle task events scanned and applied in C (the native build).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__lifecycle(void) {
    if (PyType_Ready(&ScanType) < 0) return NULL;
#define INTERN(var, text) \
    if ((var = PyUnicode_InternFromString(text)) == NULL) return NULL
    INTERN(S_seen, "seen");
    INTERN(S_job, "job");
    INTERN(S_log, "log");
    INTERN(S_transitions, "transitions");
    INTERN(S_node, "node");
    INTERN(S_node_ns, "node_ns");
    INTERN(S_worker, "worker");
    INTERN(S_worker_ns, "worker_ns");
    INTERN(S_pid, "pid");
    INTERN(S_pid_ns, "pid_ns");
    INTERN(S_empty, "");
    INTERN(S_empty_object, "{}");
    INTERN(S_definition, "definition");
    INTERN(S_name, "name");
#undef INTERN
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) return NULL;
    if (PyModule_AddIntConstant(module, "STATE_BITS", STATE_BITS) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
