/* The SQLite store's compiled path: a history's rows read, and a lone slot's statement run,
 * on the sqlite3.Connection's own database handle, without Python's sqlite3 module in between;
 * and the lone slot's fence check and parameters (lone_write), without the interpreter, called
 * as the store's own commit_record (bind_lone); and the statements every workflow makes beside
 * its slots, on prepared statements kept for the connection (execute, execute_many, fetch).
 *
 * Python's sqlite3 module costs, per statement and per row, more than SQLite's own work
 * for the small rows of a history: the GIL let go and taken back around every step, a
 * Python tuple per row, ~500-800 CPU instructions per parameter bound through its adapter
 * look-ups. This module does the same SQLite calls on the same connection (the same
 * transaction, locks, busy timeout and snapshot) with none of that. It is optional:
 * replaylog/engine/store/sqlite/speedups.py loads it only where it can prove it talks to
 * the very library and connection layout Python's sqlite3 uses, and every caller has a
 * pure-Python path that gives the same answers (tests/test_speedups.py runs both).
 *
 * No SQLite header is needed: the few functions used are looked up by name in the
 * libsqlite3 that Python's _sqlite3 module loaded (dlopen with RTLD_NOLOAD on its file),
 * so the handle always meets the same library instance that opened it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <string.h>
#include <time.h>

#ifndef _WIN32
#include <dlfcn.h>
#endif

typedef struct sqlite3 sqlite3;
typedef struct sqlite3_stmt sqlite3_stmt;
typedef long long sqlite3_int64;

#define SQLITE_OK 0
#define SQLITE_ROW 100
#define SQLITE_DONE 101
#define SQLITE_INTEGER 1
#define SQLITE_FLOAT 2
#define SQLITE_TEXT 3
#define SQLITE_NULL 5
#define SQLITE_FCNTL_DATA_VERSION 35
/* SQLITE_STATIC: the bound text outlives the binding (records(): the caller's parameters
 * tuple holds it until the statement is finalized; execute(): see cached_stmt). */
#define BIND_STATIC ((void (*)(void *))0)

static int (*p_prepare_v2)(sqlite3 *, const char *, int, sqlite3_stmt **, const char **);
static int (*p_step)(sqlite3_stmt *);
static int (*p_reset)(sqlite3_stmt *);
static int (*p_finalize)(sqlite3_stmt *);
static int (*p_clear_bindings)(sqlite3_stmt *);
static int (*p_bind_int64)(sqlite3_stmt *, int, sqlite3_int64);
static int (*p_bind_double)(sqlite3_stmt *, int, double);
static int (*p_bind_text)(sqlite3_stmt *, int, const char *, int, void (*)(void *));
static int (*p_bind_blob)(sqlite3_stmt *, int, const void *, int, void (*)(void *));
static int (*p_bind_null)(sqlite3_stmt *, int);
static int (*p_bind_parameter_count)(sqlite3_stmt *);
static int (*p_column_count)(sqlite3_stmt *);
static int (*p_column_type)(sqlite3_stmt *, int);
static sqlite3_int64 (*p_column_int64)(sqlite3_stmt *, int);
static double (*p_column_double)(sqlite3_stmt *, int);
static const unsigned char *(*p_column_text)(sqlite3_stmt *, int);
static int (*p_column_bytes)(sqlite3_stmt *, int);
static const void *(*p_column_blob)(sqlite3_stmt *, int);
static int (*p_changes)(sqlite3 *);
static const char *(*p_errmsg)(sqlite3 *);
static int (*p_extended_errcode)(sqlite3 *);
static int (*p_libversion_number)(void);
static int (*p_file_control)(sqlite3 *, const char *, int, void *);
static void *(*p_commit_hook)(sqlite3 *, int (*)(void *), void *);
static int (*p_get_autocommit)(sqlite3 *);

static PyTypeObject *connection_type = NULL;
/* sqlite3's exception classes, by what the sqlite3 module raises for each result code. */
static PyObject *exc_operational = NULL, *exc_integrity = NULL, *exc_database = NULL, *exc_programming = NULL,
                *exc_interface = NULL, *exc_data = NULL, *exc_internal = NULL;

/* The head of CPython's pysqlite_Connection (Modules/_sqlite/connection.h, the same in
 * 3.11 to 3.13): the database handle is its first field. speedups.py loads this module
 * only on those versions, and checks the handle through a connection it opened. */
typedef struct {
    PyObject_HEAD
    sqlite3 *db;
} connection_head;

static int ready = 0;

static const char *
code_name(int code)
{
    switch (code & 0xff) {
    case 1: return "SQLITE_ERROR";
    case 2: return "SQLITE_INTERNAL";
    case 3: return "SQLITE_PERM";
    case 4: return "SQLITE_ABORT";
    case 5: return "SQLITE_BUSY";
    case 6: return "SQLITE_LOCKED";
    case 7: return "SQLITE_NOMEM";
    case 8: return "SQLITE_READONLY";
    case 9: return "SQLITE_INTERRUPT";
    case 10: return "SQLITE_IOERR";
    case 11: return "SQLITE_CORRUPT";
    case 12: return "SQLITE_NOTFOUND";
    case 13: return "SQLITE_FULL";
    case 14: return "SQLITE_CANTOPEN";
    case 15: return "SQLITE_PROTOCOL";
    case 16: return "SQLITE_EMPTY";
    case 17: return "SQLITE_SCHEMA";
    case 18: return "SQLITE_TOOBIG";
    case 19: return "SQLITE_CONSTRAINT";
    case 20: return "SQLITE_MISMATCH";
    case 21: return "SQLITE_MISUSE";
    case 25: return "SQLITE_RANGE";
    case 26: return "SQLITE_NOTADB";
    default: return "SQLITE_UNKNOWN";
    }
}

/* Raise what the sqlite3 module raises for this failure: its class, with sqlite_errorcode
 * and sqlite_errorname set, so the store's translation (store_error) reads it the same. */
static void
raise_sqlite(sqlite3 *db, int rc)
{
    int code = p_extended_errcode(db);
    if ((code & 0xff) == 0)
        code = rc;
    PyObject *cls;
    switch (code & 0xff) {
    case 2: case 12: cls = exc_internal; break;
    case 7: PyErr_NoMemory(); return;
    case 11: cls = exc_database; break;
    case 18: cls = exc_data; break;
    case 19: case 20: cls = exc_integrity; break;
    case 21: case 25: cls = exc_interface; break;
    case 1: case 3: case 4: case 5: case 6: case 8: case 9: case 10: case 13: case 14: case 15: case 16: case 17:
        cls = exc_operational; break;
    default: cls = exc_database; break;
    }
    PyObject *exc = PyObject_CallFunction(cls, "s", p_errmsg(db));
    if (exc == NULL)
        return;
    PyObject *num = PyLong_FromLong(code);
    PyObject *name = PyUnicode_FromString(code_name(code));
    if (num != NULL && name != NULL) {
        PyObject_SetAttrString(exc, "sqlite_errorcode", num);
        PyObject_SetAttrString(exc, "sqlite_errorname", name);
    }
    Py_XDECREF(num);
    Py_XDECREF(name);
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
}

static sqlite3 *
handle_of(PyObject *conn)
{
    if (!ready) {
        PyErr_SetString(PyExc_RuntimeError, "replaylog's compiled SQLite path is not initialised");
        return NULL;
    }
    if (!PyObject_TypeCheck(conn, connection_type)) {
        PyErr_Format(PyExc_TypeError, "expected a sqlite3.Connection, not %.100s", Py_TYPE(conn)->tp_name);
        return NULL;
    }
    sqlite3 *db = ((connection_head *)conn)->db;
    if (db == NULL) {
        PyErr_SetString(exc_programming, "Cannot operate on a closed database.");
        return NULL;
    }
    return db;
}

/* Bind `v` (int, float, str, bytes or None) at position `at` of `stmt`; -1 with an exception set. */
static int
bind_one(sqlite3 *db, sqlite3_stmt *stmt, int at, PyObject *v)
{
    int rc;
    if (PyUnicode_Check(v)) {  /* (a str subclass too, a StrEnum say: bound as its text, as the sqlite3 module does) */
        Py_ssize_t size;
        const char *text = PyUnicode_AsUTF8AndSize(v, &size);
        if (text == NULL)
            return -1;
        if (size > INT_MAX) {
            PyErr_SetString(exc_data, "string longer than INT_MAX bytes");
            return -1;
        }
        rc = p_bind_text(stmt, at, text, (int)size, BIND_STATIC);
    }
    else if (PyLong_Check(v)) {
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow) {
            PyErr_SetString(PyExc_OverflowError, "Python int too large to convert to SQLite INTEGER");
            return -1;
        }
        if (x == -1 && PyErr_Occurred())
            return -1;
        rc = p_bind_int64(stmt, at, x);
    }
    else if (PyFloat_Check(v)) {
        rc = p_bind_double(stmt, at, PyFloat_AS_DOUBLE(v));
    }
    else if (v == Py_None) {
        rc = p_bind_null(stmt, at);
    }
    else if (PyBytes_Check(v)) {  /* a BLOB, as the sqlite3 module binds bytes */
        if (PyBytes_GET_SIZE(v) > INT_MAX) {
            PyErr_SetString(exc_data, "BLOB longer than INT_MAX bytes");
            return -1;
        }
        rc = p_bind_blob(stmt, at, PyBytes_AS_STRING(v), (int)PyBytes_GET_SIZE(v), BIND_STATIC);
    }
    else {
        PyErr_Format(exc_programming, "Error binding parameter %d: type '%.100s' is not supported", at,
                     Py_TYPE(v)->tp_name);
        return -1;
    }
    if (rc != SQLITE_OK) {
        raise_sqlite(db, rc);
        return -1;
    }
    return 0;
}

/* Bind `params` (int, float, str, bytes or None each) to `stmt`; -1 with an exception set. */
static int
bind_all(sqlite3 *db, sqlite3_stmt *stmt, PyObject *params)
{
    Py_ssize_t n = PyTuple_GET_SIZE(params);
    if (p_bind_parameter_count(stmt) != n) {
        PyErr_Format(exc_programming, "Incorrect number of bindings supplied. The current statement uses %d,"
                     " and there are %zd supplied.", p_bind_parameter_count(stmt), n);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (bind_one(db, stmt, (int)i + 1, PyTuple_GET_ITEM(params, i)) < 0)
            return -1;
    }
    return 0;
}

/* `sql` (one statement) prepared on `db`; NULL with an exception set. */
static sqlite3_stmt *
prepare(sqlite3 *db, PyObject *sql)
{
    Py_ssize_t size;
    const char *text = PyUnicode_AsUTF8AndSize(sql, &size);
    if (text == NULL)
        return NULL;
    sqlite3_stmt *stmt = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = p_prepare_v2(db, text, (int)size + 1, &stmt, NULL);
    Py_END_ALLOW_THREADS
    if (rc != SQLITE_OK) {
        raise_sqlite(db, rc);
        return NULL;
    }
    if (stmt == NULL)
        PyErr_SetString(exc_programming, "no statement in the SQL given");
    return stmt;
}

/* A prepared statement of execute()'s cache, and the parameters bound to it now.
 *
 * Kept bindings (execute): a lone workflow's slot binds ten parameters, and four of them
 * (the workflow row's rowid, its id, the lease's owner and epoch) are the very same objects
 * slot after slot, as is the activity's name; binding costs ~250-400 CPU instructions each
 * (SQLite's connection mutex, the old value released) and clearing them all ~460. So the
 * bindings stay after a step and only a parameter that is not the object bound before is
 * bound again: bench.instructions' engine row, ~1,700-2,000 instructions a slot fewer
 * (60,712 -> 58,659). `bound` holds the tuple whose str objects the SQLITE_STATIC texts point into,
 * so they outlive the bindings; parameters are int, float, str, bytes or None, all immutable, so
 * the same object is the same value. */
typedef struct {
    sqlite3_stmt *stmt;
    PyObject *bound;  /* the tuple bound now (a strong reference), or NULL: nothing kept */
} cached_stmt;

static void
forget_bindings(cached_stmt *c)
{
    p_clear_bindings(c->stmt);
    Py_CLEAR(c->bound);
}

static void
stmt_capsule_free(PyObject *capsule)
{
    cached_stmt *c = (cached_stmt *)PyCapsule_GetPointer(capsule, "replaylog.cached_stmt");
    if (c == NULL)
        return;
    p_finalize(c->stmt);  /* the connection closes once its last statement is finalized (sqlite3_close_v2) */
    Py_XDECREF(c->bound);
    PyMem_Free(c);
}

/* Bind what of `params` is not the object `c` has bound at that position; -1 with an exception set
 * (the bindings forgotten). */
static int
bind_changed(sqlite3 *db, cached_stmt *c, PyObject *params)
{
    PyObject *bound = c->bound;
    Py_ssize_t n = PyTuple_GET_SIZE(params);
    if (bound == NULL || PyTuple_GET_SIZE(bound) != n) {
        forget_bindings(c);
        if (bind_all(db, c->stmt, params) < 0) {
            p_clear_bindings(c->stmt);
            return -1;
        }
    }
    else {
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *v = PyTuple_GET_ITEM(params, i);
            if (v == PyTuple_GET_ITEM(bound, i))
                continue;
            if (bind_one(db, c->stmt, (int)i + 1, v) < 0) {
                forget_bindings(c);
                return -1;
            }
        }
    }
    Py_INCREF(params);
    Py_XSETREF(c->bound, params);
    return 0;
}

PyDoc_STRVAR(execute_doc,
"execute(conn, cache, sql, params) -> int\n\n"
"Run one statement that returns no rows on `conn`'s database handle, its prepared form kept in\n"
"`cache` (a dict owned by the connection's user, keyed by `sql`); the rows it changed.\n"
"The GIL is let go around the step (a commit's fsync).");

/* `sql`'s prepared statement on `db`, from `cache` (a dict keyed by `sql`), prepared and kept
 * there the first time; NULL with an exception set. */
static cached_stmt *
cached_of(sqlite3 *db, PyObject *cache, PyObject *sql)
{
    cached_stmt *c;
    PyObject *capsule = PyDict_GetItemWithError(cache, sql);
    if (capsule != NULL)
        return (cached_stmt *)PyCapsule_GetPointer(capsule, "replaylog.cached_stmt");
    if (PyErr_Occurred())
        return NULL;
    sqlite3_stmt *stmt = prepare(db, sql);
    if (stmt == NULL)
        return NULL;
    c = PyMem_Malloc(sizeof(cached_stmt));
    if (c == NULL) {
        p_finalize(stmt);
        PyErr_NoMemory();
        return NULL;
    }
    c->stmt = stmt;
    c->bound = NULL;
    capsule = PyCapsule_New(c, "replaylog.cached_stmt", stmt_capsule_free);
    if (capsule == NULL) {
        p_finalize(stmt);
        PyMem_Free(c);
        return NULL;
    }
    int err = PyDict_SetItem(cache, sql, capsule);
    Py_DECREF(capsule);  /* the cache holds it */
    return err < 0 ? NULL : c;
}

/* Run `sql` (prepared once per connection, kept in `cache`) with `params`; the rows it changed,
 * or -1 with an exception set. */
static long
run_cached(sqlite3 *db, PyObject *cache, PyObject *sql, PyObject *params)
{
    cached_stmt *c = cached_of(db, cache, sql);
    if (c == NULL)
        return -1;
    if (bind_changed(db, c, params) < 0)
        return -1;
    sqlite3_stmt *stmt = c->stmt;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    do {
        rc = p_step(stmt);
    } while (rc == SQLITE_ROW);
    Py_END_ALLOW_THREADS
    if (rc != SQLITE_DONE) {
        raise_sqlite(db, rc);
        p_reset(stmt);
        forget_bindings(c);
        return -1;
    }
    long changed = p_changes(db);
    p_reset(stmt);  /* the bindings stay (see cached_stmt) */
    return changed;
}

static PyObject *
sp_execute(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyDict_CheckExact(args[1]) || !PyUnicode_CheckExact(args[2]) || !PyTuple_CheckExact(args[3])) {
        PyErr_SetString(PyExc_TypeError, "execute(conn, cache: dict, sql: str, params: tuple)");
        return NULL;
    }
    sqlite3 *db = handle_of(args[0]);
    if (db == NULL)
        return NULL;
    long changed = run_cached(db, args[1], args[2], args[3]);
    return changed < 0 ? NULL : PyLong_FromLong(changed);
}

/* Attribute reads by slot offset (lone_write). The objects lone_write reads (the claim, the fence
 * and its _Written) are instances of classes with __slots__, and PyObject_GetAttr by name
 * costs ~150-250 CPU instructions a read (the type's look-up, the descriptor call) where the
 * interpreter's specialised LOAD_ATTR reads the slot at its offset: lone_write reading its ten
 * attributes by name saved 380 CPU instructions a slot against the interpreted lines, and
 * reading them at their offsets 2,200 (bench.instructions' engine row, 43,372 -> 41,166).
 * A slot_at remembers where a type keeps one attribute, checked against the type's
 * version tag (it changes if the class is altered); any other object, or an unset slot, is
 * read by name. */
typedef struct {
    PyTypeObject *type;  /* a strong reference, or NULL: nothing remembered */
    unsigned int version;
    Py_ssize_t offset;
} slot_at;

static int
slot_find(slot_at *at, PyTypeObject *t, PyObject *name)
{
    Py_CLEAR(at->type);
    PyObject *d = _PyType_Lookup(t, name);
    if (d == NULL || !Py_IS_TYPE(d, &PyMemberDescr_Type) || !PyType_HasFeature(t, Py_TPFLAGS_VALID_VERSION_TAG))
        return 0;
    PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
    if (m->type != T_OBJECT_EX)
        return 0;
    Py_INCREF(t);
    at->type = t;
    at->version = t->tp_version_tag;
    at->offset = m->offset;
    return 1;
}

static inline int
slot_known(slot_at *at, PyObject *obj, PyObject *name)
{
    PyTypeObject *t = Py_TYPE(obj);
    if (t == at->type && t->tp_version_tag == at->version && PyType_HasFeature(t, Py_TPFLAGS_VALID_VERSION_TAG))
        return 1;
    return slot_find(at, t, name);
}

/* obj.name as a new reference; NULL with an exception set. */
static PyObject *
read_slot(slot_at *at, PyObject *obj, PyObject *name)
{
    if (slot_known(at, obj, name)) {
        PyObject *v = *(PyObject **)((char *)obj + at->offset);
        if (v != NULL)
            return Py_NewRef(v);
    }
    return PyObject_GetAttr(obj, name);  /* not a slot here, or unset: Python's own answer */
}

/* obj.name = v; -1 with an exception set. */
static int
write_slot(slot_at *at, PyObject *obj, PyObject *name, PyObject *v)
{
    if (Py_TYPE(obj)->tp_setattro == PyObject_GenericSetAttr && slot_known(at, obj, name)) {
        PyObject **p = (PyObject **)((char *)obj + at->offset);
        Py_INCREF(v);
        Py_XSETREF(*p, v);
        return 0;
    }
    return PyObject_SetAttr(obj, name, v);
}

/* Where the claim, the fence and its _Written keep what lone_write reads. */
static slot_at at_claim_id, at_claim_epoch, at_claim_owner, at_claim_base, at_fence_written, at_fence_stamped,
               at_w_epoch, at_w_next_slot, at_w_row, at_w_column, at_w_pager, at_w_version;

/* The lone slot's writer (lone_write): what commit.py's pure-Python lines for the same slot read,
 * set once by lone_setup. */
static PyObject *lone_ok_sql = NULL, *lone_first_try_sql = NULL, *lone_ok_args_sql = NULL;
/* The same three statements unguarded (the data-version fence, below). */
static PyObject *lone_ok_plain = NULL, *lone_first_try_plain = NULL, *lone_ok_args_plain = NULL;
static PyObject *lone_activity = NULL, *lone_writes_more = NULL, *lone_dumps = NULL;
static PyObject *lone_one = NULL;
static double lone_restamp = 0.0;
/* Attribute names, interned once: the claim's, the fence's and its _Written's. */
static PyObject *s_id, *s_epoch, *s_owner, *s_base, *s_next_slot, *s_row, *s_column, *s_written, *s_stamped,
                *s_pager, *s_version;

PyDoc_STRVAR(lone_setup_doc,
"lone_setup(ok_sql, first_try_sql, ok_args_sql, ok_plain, first_try_plain, ok_args_plain, activity,\n"
"           writes_more, dumps, restamp) -> None\n\n"
"What lone_write needs of commit.py and fence.py: the three guarded statements and the same\n"
"three unguarded (their parameters the guarded ones' before the row's), the activity\n"
"kind's name, the kinds whose slots write more than their row, the JSON encoder and the\n"
"fence's UPDATED_AT_STEP.");

static PyObject *
sp_lone_setup(PyObject *self, PyObject *args)
{
    PyObject *ok, *first, *ok_args, *ok_plain, *first_plain, *ok_args_plain, *activity, *writes_more, *dumps;
    double restamp;
    if (!PyArg_ParseTuple(args, "UUUUUUUO!Od", &ok, &first, &ok_args, &ok_plain, &first_plain, &ok_args_plain,
                          &activity, &PyFrozenSet_Type, &writes_more, &dumps, &restamp))
        return NULL;
    if (!PyCallable_Check(dumps)) {
        PyErr_SetString(PyExc_TypeError, "dumps must be callable");
        return NULL;
    }
    if (lone_one == NULL && (lone_one = PyLong_FromLong(1)) == NULL)
        return NULL;
    if (s_version == NULL) {  /* the last one made: all of them are */
        const char *names[] = {"id", "epoch", "owner", "base", "next_slot", "row", "column", "_written", "_stamped",
                               "pager", "version"};
        PyObject **slots[] = {&s_id, &s_epoch, &s_owner, &s_base, &s_next_slot, &s_row, &s_column, &s_written,
                              &s_stamped, &s_pager, &s_version};
        for (int i = 0; i < 11; i++) {
            if ((*slots[i] = PyUnicode_InternFromString(names[i])) == NULL)
                return NULL;
        }
    }
    PyObject **keep[] = {&lone_ok_sql, &lone_first_try_sql, &lone_ok_args_sql, &lone_ok_plain, &lone_first_try_plain,
                         &lone_ok_args_plain, &lone_activity, &lone_writes_more, &lone_dumps};
    PyObject *given[] = {ok, first, ok_args, ok_plain, first_plain, ok_args_plain, activity, writes_more, dumps};
    for (int i = 0; i < 9; i++) {
        Py_INCREF(given[i]);
        Py_XSETREF(*keep[i], given[i]);
    }
    lone_restamp = restamp;
    Py_RETURN_NONE;
}

/* The data-version fence (lone_write). SQLite's data version of a connection
 * (SQLITE_FCNTL_DATA_VERSION) changes with each of its own commits and, when a statement
 * starts, with every commit another connection made since; it never goes back. A slot
 * written by lone_write leaves the version after its commit in the workflow's _Written
 * (`pager`). If, at the next slot's commit, with the write lock held since the statement
 * began, the version is still that, nothing was committed to the file by anyone since the
 * last slot, which found the workflow's row as the fence expects (guarded, or by this same
 * rule): the row is as it was, and the slot is written unguarded, its commit refused by the
 * commit hook otherwise (and then written guarded). This is the commit fence's FAST rule
 * (PRAGMA data_version in the fenced transaction, fence.py) without its three statements:
 * the row check of the guarded statement cost ~3,100 CPU instructions a slot. */
typedef struct {
    sqlite3 *db;
    unsigned int expected;
    int refused;
} fence_hook;

/* The connection's data version, or -1 if SQLite cannot say. */
static long long
data_version(sqlite3 *db)
{
    unsigned int v = 0;
    return p_file_control(db, "main", SQLITE_FCNTL_DATA_VERSION, &v) == SQLITE_OK ? (long long)v : -1;
}

static int
fence_commit_hook(void *arg)
{
    fence_hook *h = (fence_hook *)arg;
    if (data_version(h->db) != (long long)h->expected) {
        h->refused = 1;
        return 1;  /* the commit becomes a rollback */
    }
    return 0;
}

/* The slot value's JSON text, a new reference: `text` if the caller encoded it, else `value`
 * encoded (dumps's int case inline, as the pure path does); NULL with an exception set. */
static PyObject *
value_text(PyObject *text, PyObject *value)
{
    if (text != Py_None)
        return Py_NewRef(text);
    return PyLong_CheckExact(value) ? PyLong_Type.tp_repr(value) : PyObject_CallOneArg(lone_dumps, value);
}

/* The fence advanced past `slot` (`w.next_slot = slot + 1`, as the pure path does); -1 with an exception set. */
static int
advance(PyObject *w, PyObject *slot)
{
    PyObject *after = PyNumber_Add(slot, lone_one);
    if (after == NULL)
        return -1;
    int err = write_slot(&at_w_next_slot, w, s_next_slot, after);
    Py_DECREF(after);
    return err;
}

/* CommitFence's rule for `slot` of `claim` on `fence` (fence.py, guard and check): this
 * connection fenced the row under this lease, `slot` is next, the row's updated_at is not due to
 * be rewritten and, if `version` is given, PRAGMA data_version is still what it was then (the
 * FAST rule). 1 and new references in *wid, *w (the workflow's _Written) and *epoch (the
 * claim's) if so; 0 if not; -1 with an exception set. */
static int
fence_takes(PyObject *fence, PyObject *claim, PyObject *slot, PyObject *now, PyObject *version, PyObject **wid,
            PyObject **w, PyObject **epoch)
{
    PyObject *written = NULL, *stamped = NULL, *w_epoch = NULL, *next = NULL, *w_version = NULL;
    int taken = -1, eq = 1;
    *wid = *w = *epoch = NULL;
    if ((*wid = read_slot(&at_claim_id, claim, s_id)) == NULL
        || (written = read_slot(&at_fence_written, fence, s_written)) == NULL
        || (stamped = read_slot(&at_fence_stamped, fence, s_stamped)) == NULL)
        goto done;
    if (!PyDict_CheckExact(written) || !PyDict_CheckExact(stamped)) {
        PyErr_SetString(PyExc_TypeError, "the fence's _written and _stamped must be dicts");
        goto done;
    }
    *w = Py_XNewRef(PyDict_GetItemWithError(written, *wid));
    if (*w == NULL) {
        if (!PyErr_Occurred())
            taken = 0;
        goto done;
    }
    if ((*epoch = read_slot(&at_claim_epoch, claim, s_epoch)) == NULL
        || (w_epoch = read_slot(&at_w_epoch, *w, s_epoch)) == NULL
        || (eq = PyObject_RichCompareBool(w_epoch, *epoch, Py_EQ)) != 1
        || (next = read_slot(&at_w_next_slot, *w, s_next_slot)) == NULL
        || (eq = PyObject_RichCompareBool(next, slot, Py_EQ)) != 1
        || (version != NULL && ((w_version = read_slot(&at_w_version, *w, s_version)) == NULL
                                || (eq = PyObject_RichCompareBool(w_version, version, Py_EQ)) != 1))) {
        if (!PyErr_Occurred())
            taken = 0;
        goto done;
    }
    PyObject *at = PyDict_GetItemWithError(stamped, *wid);
    double stamped_at = 0.0;
    if (at != NULL) {
        stamped_at = PyFloat_AsDouble(at);
        if (stamped_at == -1.0 && PyErr_Occurred())
            goto done;
    }
    else if (PyErr_Occurred()) {
        goto done;
    }
    taken = PyFloat_AS_DOUBLE(now) - stamped_at < lone_restamp;
done:
    Py_XDECREF(written);
    Py_XDECREF(stamped);
    Py_XDECREF(w_epoch);
    Py_XDECREF(next);
    Py_XDECREF(w_version);
    if (taken != 1) {
        Py_CLEAR(*wid);
        Py_CLEAR(*w);
        Py_CLEAR(*epoch);
    }
    return taken;
}

/* A lone workflow's common slot whole, as commit.py's pure-Python lines for it do: if the
 * fence (a CommitFence) knows `slot` is the next of `claim`'s lease and no restamp is due, and
 * `rec` succeeded and writes no more than its row, write it with one guarded statement (its
 * value encoded unless `text` is given; unguarded under the data-version fence, see
 * fence_hook) and advance the fence. Py_True if written; Py_False if not taken or refused by
 * the row (the fenced transaction decides); NULL with an exception set. */
static PyObject *
lone_write(sqlite3 *db, PyObject *cache, PyObject *fence, PyObject *claim, PyObject *slot, PyObject *rec,
           PyObject *text, PyObject *now)
{
    if (!PyDict_CheckExact(cache) || !PyLong_CheckExact(slot) || !PyTuple_Check(rec) || PyTuple_GET_SIZE(rec) != 7
        || !PyFloat_CheckExact(now)) {
        PyErr_SetString(PyExc_TypeError, "lone slot: cache: dict, slot: int, rec: 7-tuple, now: float");
        return NULL;
    }
    if (lone_ok_sql == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "lone_setup() was not called");
        return NULL;
    }
    PyObject *wid = NULL, *w = NULL, *row_key = NULL, *owner = NULL;
    PyObject *epoch = NULL, *w_row = NULL, *w_column = NULL, *params = NULL, *base = NULL;
    PyObject *pager = NULL;
    PyObject *result = NULL;

    /* CommitFence.guard */
    int taken = fence_takes(fence, claim, slot, now, NULL, &wid, &w, &epoch);
    if (taken <= 0) {
        if (taken == 0)
            result = Py_NewRef(Py_False);
        goto done;
    }
    /* The slot: succeeded, and a kind whose commit writes its row alone. */
    PyObject *kind = PyTuple_GET_ITEM(rec, 0), *name = PyTuple_GET_ITEM(rec, 1), *ok = PyTuple_GET_ITEM(rec, 2);
    PyObject *value = PyTuple_GET_ITEM(rec, 3), *error = PyTuple_GET_ITEM(rec, 4);
    PyObject *attempts = PyTuple_GET_ITEM(rec, 5), *arg_key = PyTuple_GET_ITEM(rec, 6);
    int truth = PyObject_IsTrue(ok);
    if (truth < 0)
        goto done;
    int more = truth && error == Py_None ? PySet_Contains(lone_writes_more, kind) : 1;
    if (more < 0)
        goto done;
    if (more) {
        result = Py_NewRef(Py_False);
        goto done;
    }
    if ((text = value_text(text, value)) == NULL)
        goto done;
    if ((base = read_slot(&at_claim_base, claim, s_base)) == NULL || (row_key = PyNumber_Add(base, slot)) == NULL
        || (owner = read_slot(&at_claim_owner, claim, s_owner)) == NULL
        || (w_row = read_slot(&at_w_row, w, s_row)) == NULL
        || (w_column = read_slot(&at_w_column, w, s_column)) == NULL) {
        Py_DECREF(text);
        goto done;
    }
    /* Which statement (`which`: 0 ok, 1 first try, 2 ok with arguments) and whether the
     * data-version fence may write it unguarded (see fence_hook). */
    int which = 0;
    if (arg_key != Py_None) {
        int overflow = 0;
        int first = PyLong_CheckExact(attempts) && PyLong_AsLongAndOverflow(attempts, &overflow) == 1;
        if (first) {
            first = PyObject_RichCompareBool(kind, lone_activity, Py_EQ);
            if (first < 0) {
                Py_DECREF(text);
                goto done;
            }
        }
        which = first ? 1 : 2;
    }
    fence_hook hook = {db, 0, 0};
    int unguarded = 0;
    if ((pager = read_slot(&at_w_pager, w, s_pager)) == NULL) {
        Py_DECREF(text);
        goto done;
    }
    if (PyLong_CheckExact(pager) && p_get_autocommit(db)) {
        /* Its own transaction (not inside one left open), and the version the last slot left is
         * still this connection's (else a commit of its own came between: guarded). */
        int overflow = 0;
        long long expected = PyLong_AsLongLongAndOverflow(pager, &overflow);
        if (!overflow && expected >= 0 && expected == data_version(db)) {
            hook.expected = (unsigned int)expected;
            unguarded = 1;
        }
    }
    long changed = -1;
    for (int guarded = !unguarded; guarded < 2; guarded++) {
        PyObject *sql;
        if (which == 0) {
            sql = guarded ? lone_ok_sql : lone_ok_plain;
            params = guarded ? PyTuple_Pack(11, row_key, kind, name, text, attempts, now, w_row, wid, owner, epoch,
                                            w_column)
                             : PyTuple_Pack(6, row_key, kind, name, text, attempts, now);
        }
        else if (which == 1) {
            sql = guarded ? lone_first_try_sql : lone_first_try_plain;
            params = guarded ? PyTuple_Pack(10, row_key, name, text, now, arg_key, w_row, wid, owner, epoch, w_column)
                             : PyTuple_Pack(5, row_key, name, text, now, arg_key);
        }
        else {
            sql = guarded ? lone_ok_args_sql : lone_ok_args_plain;
            params = guarded ? PyTuple_Pack(12, row_key, kind, name, text, attempts, now, arg_key, w_row, wid, owner,
                                            epoch, w_column)
                             : PyTuple_Pack(7, row_key, kind, name, text, attempts, now, arg_key);
        }
        if (params == NULL)
            break;
        if (!guarded)
            p_commit_hook(db, fence_commit_hook, &hook);
        changed = run_cached(db, cache, sql, params);
        if (!guarded)
            p_commit_hook(db, NULL, NULL);  /* the store's connections have no other (Python's sqlite3 sets none) */
        if (changed >= 0 || guarded || !hook.refused)
            break;
        /* The hook refused the commit (the version moved: another connection committed since
         * the last slot): rolled back, nothing written; the row decides, guarded. */
        PyErr_Clear();
        Py_CLEAR(params);
    }
    Py_DECREF(text);
    if (changed < 0)
        goto done;
    if (changed != 1) {
        /* The row refused it (the lease is gone, or a cancel request waits): the fenced transaction decides. */
        result = Py_NewRef(Py_False);
        goto done;
    }
    int err = advance(w, slot);
    if (err == 0) {
        /* The version this commit left: the next slot's fence (see fence_hook). */
        PyObject *version = PyLong_FromLongLong(data_version(db));
        err = version == NULL ? -1 : write_slot(&at_w_pager, w, s_pager, version);
        Py_XDECREF(version);
    }
    if (err == 0)
        result = Py_NewRef(Py_True);
done:
    Py_XDECREF(wid);
    Py_XDECREF(w);
    Py_XDECREF(pager);
    Py_XDECREF(base);
    Py_XDECREF(row_key);
    Py_XDECREF(owner);
    Py_XDECREF(epoch);
    Py_XDECREF(w_row);
    Py_XDECREF(w_column);
    Py_XDECREF(params);
    return result;
}

PyDoc_STRVAR(first_try_doc,
"first_try(fence, claim, slot, rec, text, now, version, slot_limit) -> tuple | None\n\n"
"A group commit's commonest outcome (commit.py's Commits.commit_batch): an activity that\n"
"succeeded at its first attempt, in a slot the fence's FAST rule takes (CommitFence.check:\n"
"this connection fenced the row under this lease, `slot` is next, PRAGMA data_version is\n"
"still `version`, no restamp is due). Then the fence is advanced and the row for\n"
"_INSERT_FIRST_TRY is returned, (row_key, name, text, now, args), its value encoded unless\n"
"`text` is given; else None, and nothing is changed.");

/* Trick "first try in C": CommitFence.check and _write_record for that outcome were ~145
 * interpreted bytecodes a slot of a crowded worker's (measured in the note of commit.py's
 * commit_batch). */
static PyObject *
sp_first_try(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8 || !PyFloat_CheckExact(args[5])) {
        PyErr_SetString(PyExc_TypeError,
                        "first_try(fence, claim, slot, rec, text, now: float, version, slot_limit: int)");
        return NULL;
    }
    if (lone_ok_sql == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "lone_setup() was not called");
        return NULL;
    }
    PyObject *fence = args[0], *claim = args[1], *slot = args[2], *rec = args[3], *text = args[4], *now = args[5];
    PyObject *version = args[6];
    PyObject *wid = NULL, *w = NULL, *epoch = NULL, *base = NULL, *row_key = NULL;
    PyObject *result = NULL;
    int overflow = 0, eq;
    /* The outcome: an activity that succeeded at its first attempt, its arguments' key kept. */
    if (!PyLong_CheckExact(slot) || !PyTuple_Check(rec) || PyTuple_GET_SIZE(rec) != 7
        || PyLong_AsLongLongAndOverflow(slot, &overflow) >= PyLong_AsLongLong(args[7]) || overflow)
        goto declined;
    if (PyErr_Occurred())
        return NULL;
    PyObject *kind = PyTuple_GET_ITEM(rec, 0), *name = PyTuple_GET_ITEM(rec, 1), *ok = PyTuple_GET_ITEM(rec, 2);
    PyObject *value = PyTuple_GET_ITEM(rec, 3), *attempts = PyTuple_GET_ITEM(rec, 5);
    PyObject *arg_key = PyTuple_GET_ITEM(rec, 6);
    if (ok != Py_True || PyTuple_GET_ITEM(rec, 4) != Py_None || arg_key == Py_None || !PyLong_CheckExact(attempts)
        || PyLong_AsLongAndOverflow(attempts, &overflow) != 1 || overflow)
        goto declined;
    if ((eq = PyObject_RichCompareBool(kind, lone_activity, Py_EQ)) != 1)
        return eq < 0 ? NULL : Py_NewRef(Py_None);
    /* CommitFence.check's FAST rule */
    int taken = fence_takes(fence, claim, slot, now, version, &wid, &w, &epoch);
    if (taken <= 0) {
        if (taken == 0)
            result = Py_NewRef(Py_None);
        goto done;
    }
    if ((text = value_text(text, value)) == NULL)
        goto done;
    if ((base = read_slot(&at_claim_base, claim, s_base)) == NULL || (row_key = PyNumber_Add(base, slot)) == NULL
        || advance(w, slot) < 0) {
        Py_DECREF(text);
        goto done;
    }
    result = PyTuple_Pack(5, row_key, name, text, now, arg_key);
    Py_DECREF(text);
done:
    Py_XDECREF(wid);
    Py_XDECREF(w);
    Py_XDECREF(epoch);
    Py_XDECREF(base);
    Py_XDECREF(row_key);
    return result;
declined:
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_NONE;
}

/* ---- A store's commit_record, bound in C (commit.py's Commits binds one per writing store).
 *
 * Trick "lone slot bound": the store's commit_record is an instance attribute, this object,
 * which does in C what the interpreted method does for a lone workflow's common slot (the
 * clock read, lone_write) and hands anything else to the store's Python: a call of another
 * shape or with a parallel group to the method itself (`slow`), a slot lone_write declines to
 * the fenced transaction (`fenced`), and an sqlite3 error to `failed` (the store's error, as
 * the method raises it). The interpreted call it replaces (its frame, keyword arguments, six
 * attribute reads, the clock's call) cost ~2,500 CPU instructions a slot (bench.instructions). */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *conn, *cache, *fence, *slow, *fenced, *failed, *error, *clock_globals;
    long long slot_limit;
} LoneObject;

/* The time module, its dict and its time(), and the names a call of commit_record uses, interned once. */
static PyObject *time_module = NULL, *time_dict = NULL, *time_time = NULL;
static PyObject *s_time = NULL, *kw_text = NULL, *kw_ttl = NULL, *kw_group = NULL, *kw_traceback = NULL;

/* Every object a LoneObject holds, for the collector (each binds the store to it: a cycle). */
#define LONE_HOLDS(DO) DO(conn) DO(cache) DO(fence) DO(slow) DO(fenced) DO(failed) DO(error) DO(clock_globals)

static int
lone_traverse(LoneObject *self, visitproc visit, void *arg)
{
#define VISIT(field) Py_VISIT(self->field);
    LONE_HOLDS(VISIT)
#undef VISIT
    return 0;
}

static int
lone_clear(LoneObject *self)
{
#define CLEAR(field) Py_CLEAR(self->field);
    LONE_HOLDS(CLEAR)
#undef CLEAR
    return 0;
}

static void
lone_dealloc(LoneObject *self)
{
    PyObject_GC_UnTrack(self);
    lone_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The time now, as commit.py reads it (`time.time()`): the time module's clock without the
 * call, unless commit.py's `time`, or that module's `time`, is something else (a test's
 * stand-in), which is called. */
static PyObject *
lone_now(LoneObject *self)
{
    PyObject *clock = PyDict_GetItemWithError(self->clock_globals, s_time);
    if (clock == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_NameError, "commit.py has no `time`");
        return NULL;
    }
#ifdef CLOCK_REALTIME
    if (clock == time_module && PyDict_GetItemWithError(time_dict, s_time) == time_time) {
        /* time.time()'s clock and arithmetic (_PyTime_AsSecondsDouble) */
        struct timespec ts;
        if (clock_gettime(CLOCK_REALTIME, &ts) == 0) {
            long long ns = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
            double now = ns % 1000000000LL == 0 ? (double)(ns / 1000000000LL) : (double)ns / 1e9;
            return PyFloat_FromDouble(now);
        }
    }
#endif
    PyObject *now = PyObject_CallMethodNoArgs(clock, s_time);
    if (now != NULL && !PyFloat_CheckExact(now))
        Py_SETREF(now, PyNumber_Float(now));
    return now;
}

static int
same_name(PyObject *given, PyObject *name)
{
    return given == name || (PyUnicode_Check(given) && PyUnicode_Compare(given, name) == 0);
}

static PyObject *
lone_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    LoneObject *self = (LoneObject *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    PyObject *text = nargs == 4 ? args[3] : Py_None, *ttl = NULL, *group = Py_None, *traceback = Py_None;
    if (nargs < 3 || nargs > 4)
        goto slow;
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, i), *value = args[nargs + i];
        if (same_name(key, kw_ttl))
            ttl = value;
        else if (same_name(key, kw_group))
            group = value;
        else if (same_name(key, kw_traceback))
            traceback = value;
        else if (nargs == 3 && same_name(key, kw_text))
            text = value;
        else
            goto slow;
    }
    if (ttl == NULL || group != Py_None || !PyLong_CheckExact(args[1]))
        goto slow;
    int overflow = 0;
    long long slot = PyLong_AsLongLongAndOverflow(args[1], &overflow);
    if (overflow || slot >= self->slot_limit)
        goto slow;
    PyObject *now = lone_now(self);
    if (now == NULL)
        return NULL;
    sqlite3 *db = handle_of(self->conn);
    PyObject *written = db == NULL ? NULL
                                   : lone_write(db, self->cache, self->fence, args[0], args[1], args[2], text, now);
    if (written == Py_False) {
        /* Not taken, or the row refused it: the fenced transaction decides, as for any other slot. */
        Py_DECREF(written);
        PyObject *rest[] = {args[0], args[1], args[2], text, ttl, group, traceback, now};
        written = PyObject_Vectorcall(self->fenced, rest, 8, NULL);
    }
    else if (written == NULL && PyErr_ExceptionMatches(self->error)) {
        /* An sqlite3 error: the store's, raised by the store (the fence forgets what it knew). */
        PyObject *type, *exc, *tb;
        PyErr_Fetch(&type, &exc, &tb);
        PyErr_NormalizeException(&type, &exc, &tb);
        if (tb != NULL)
            PyException_SetTraceback(exc, tb);
        PyObject *raised = PyObject_CallOneArg(self->failed, exc);
        Py_XDECREF(raised);  /* it raises; should it return, the slot's error still stands */
        if (raised != NULL)
            PyErr_Restore(type, exc, tb);
        else {
            Py_XDECREF(type);
            Py_XDECREF(exc);
            Py_XDECREF(tb);
        }
    }
    Py_DECREF(now);
    return written;
slow:
    return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
}

static PyTypeObject LoneType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "replaylog.engine.store.sqlite._speedups.Lone",
    .tp_basicsize = sizeof(LoneObject),
    .tp_dealloc = (destructor)lone_dealloc,
    .tp_vectorcall_offset = offsetof(LoneObject, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "A store's commit_record in C: see bind_lone.",
    .tp_traverse = (traverseproc)lone_traverse,
    .tp_clear = (inquiry)lone_clear,
};

PyDoc_STRVAR(bind_lone_doc,
"bind_lone(conn, cache, fence, slow, fenced, failed, error, clock_globals, slot_limit) -> callable\n\n"
"A store's commit_record(claim, slot, rec, text=None, *, ttl, parallel_group=None, traceback=None)\n"
"in C for a lone workflow's common slot (lone_write) on `conn`, its statement `cache` and its\n"
"CommitFence `fence`, at the time commit.py's `time` (in `clock_globals`) gives. Anything else\n"
"goes back to the store: a call of another shape, a parallel group's task or a slot past\n"
"`slot_limit` to `slow(...)` (the method itself, the same arguments), a slot lone_write\n"
"declines to `fenced(claim, slot, rec, text, ttl, parallel_group, traceback, now)`, and an\n"
"exception of class `error` to `failed(exc)`, which raises the store's.");

static PyObject *
sp_bind_lone(PyObject *module, PyObject *args)
{
    PyObject *conn, *cache, *fence, *slow, *fenced, *failed, *error, *clock_globals;
    long long slot_limit;
    if (!PyArg_ParseTuple(args, "OO!OOOOOO!L:bind_lone", &conn, &PyDict_Type, &cache, &fence, &slow, &fenced,
                          &failed, &error, &PyDict_Type, &clock_globals, &slot_limit))
        return NULL;
    if (!PyCallable_Check(slow) || !PyCallable_Check(fenced) || !PyCallable_Check(failed)
        || !PyExceptionClass_Check(error)) {
        PyErr_SetString(PyExc_TypeError,
                        "bind_lone: slow, fenced and failed must be callable, error an exception class");
        return NULL;
    }
    if (handle_of(conn) == NULL)
        return NULL;
    if (kw_traceback == NULL) {
        const char *names[] = {"time", "text", "ttl", "parallel_group", "traceback"};
        PyObject **keep[] = {&s_time, &kw_text, &kw_ttl, &kw_group, &kw_traceback};
        for (int i = 0; i < 5; i++) {
            if (*keep[i] == NULL && (*keep[i] = PyUnicode_InternFromString(names[i])) == NULL)
                return NULL;
        }
    }
    if (time_module == NULL) {
        /* time.time itself, a builtin (not a test's stand-in, should one be in its place now). */
        PyObject *module = PyImport_ImportModule("time");
        if (module == NULL)
            return NULL;
        PyObject *fn = PyObject_GetAttr(module, s_time);
        if (fn == NULL) {
            Py_DECREF(module);
            return NULL;
        }
        if (PyCFunction_Check(fn)) {
            time_time = fn;
            time_dict = Py_NewRef(PyModule_GetDict(module));
            time_module = module;
        }
        else {
            Py_DECREF(fn);
            Py_DECREF(module);
        }
    }
    LoneObject *self = PyObject_GC_New(LoneObject, &LoneType);
    if (self == NULL)
        return NULL;
    self->vectorcall = lone_vectorcall;
    PyObject *given[] = {conn, cache, fence, slow, fenced, failed, error, clock_globals};
    PyObject **keep[] = {&self->conn, &self->cache, &self->fence, &self->slow, &self->fenced, &self->failed,
                         &self->error, &self->clock_globals};
    for (int i = 0; i < 8; i++)
        *keep[i] = Py_NewRef(given[i]);
    self->slot_limit = slot_limit;
    PyObject_GC_Track(self);
    return (PyObject *)self;
}

/* One column of the current row as the sqlite3 module gives it (no converters). */
static PyObject *
column(sqlite3_stmt *stmt, int i)
{
    switch (p_column_type(stmt, i)) {
    case SQLITE_NULL:
        Py_RETURN_NONE;
    case SQLITE_INTEGER:
        return PyLong_FromLongLong(p_column_int64(stmt, i));
    case SQLITE_FLOAT:
        return PyFloat_FromDouble(p_column_double(stmt, i));
    case SQLITE_TEXT: {
        const char *text = (const char *)p_column_text(stmt, i);
        int size = p_column_bytes(stmt, i);
        if (text == NULL)
            return PyErr_NoMemory();
        return PyUnicode_FromStringAndSize(text, size);
    }
    default: {
        const void *blob = p_column_blob(stmt, i);
        return PyBytes_FromStringAndSize(blob, p_column_bytes(stmt, i));
    }
    }
}

/* A JSON int that fits 18 digits (no leading zero, optional minus): its value, or NULL (and no
 * exception) if the text is anything else. The same value json.loads and int() give. */
static PyObject *
small_json_int(const char *s, int n)
{
    int i = 0, neg = 0;
    if (n > 0 && s[0] == '-') {
        neg = 1;
        i = 1;
    }
    int digits = n - i;
    if (digits < 1 || digits > 18 || (s[i] == '0' && digits > 1))
        return NULL;
    long long x = 0;
    for (; i < n; i++) {
        char c = s[i];
        if (c < '0' || c > '9')
            return NULL;
        x = x * 10 + (c - '0');
    }
    return PyLong_FromLongLong(neg ? -x : x);
}

/* How many rows are read between letting go of the GIL (another thread may run meanwhile):
 * letting go on every step, as the sqlite3 module does, cost ~2,000 instructions a row. */
#define ROWS_PER_GIL_RELEASE 64

/* Step `stmt` to its next row, the `n`th of its rows (from 0), letting go of the GIL before
 * the first and then every ROWS_PER_GIL_RELEASE rows. */
static int
step_row(sqlite3_stmt *stmt, long n)
{
    int rc;
    if (n % ROWS_PER_GIL_RELEASE == 0) {
        Py_BEGIN_ALLOW_THREADS
        rc = p_step(stmt);
        Py_END_ALLOW_THREADS
    }
    else {
        rc = p_step(stmt);
    }
    return rc;
}

PyDoc_STRVAR(records_doc,
"records(conn, sql, params, record_type, loads) -> list\n\n"
"Run a SELECT of seven columns (kind, name, ok, value, error, attempts, args) on `conn`'s\n"
"database handle and build one `record_type` (a named tuple of those fields) per row: `ok`\n"
"as a bool, `value` (JSON text) decoded, a small JSON int directly and anything else by\n"
"`loads(text)`; the other columns as sqlite3 gives them.");

static PyObject *
sp_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5 || !PyUnicode_CheckExact(args[1]) || !PyTuple_CheckExact(args[2]) || !PyType_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "records(conn, sql: str, params: tuple, record_type: type, loads)");
        return NULL;
    }
    sqlite3 *db = handle_of(args[0]);
    if (db == NULL)
        return NULL;
    PyTypeObject *rtype = (PyTypeObject *)args[3];
    PyObject *loads = args[4];
    if (!PyType_IsSubtype(rtype, &PyTuple_Type) || rtype->tp_basicsize != PyTuple_Type.tp_basicsize
        || rtype->tp_itemsize != PyTuple_Type.tp_itemsize) {
        PyErr_SetString(PyExc_TypeError, "record_type must be a named tuple class");
        return NULL;
    }
    sqlite3_stmt *stmt = prepare(db, args[1]);
    if (stmt == NULL)
        return NULL;
    int rc;
    PyObject *out = NULL;
    if (p_column_count(stmt) != 7) {
        PyErr_SetString(PyExc_ValueError, "records() needs a SELECT of seven columns");
        goto done;
    }
    if (bind_all(db, stmt, args[2]) < 0)
        goto done;
    out = PyList_New(0);
    if (out == NULL)
        goto done;
    for (long n = 0;; n++) {
        rc = step_row(stmt, n);
        if (rc == SQLITE_DONE)
            break;
        if (rc != SQLITE_ROW) {
            raise_sqlite(db, rc);
            Py_CLEAR(out);
            goto done;
        }
        PyObject *rec = rtype->tp_alloc(rtype, 7);
        if (rec == NULL) {
            Py_CLEAR(out);
            goto done;
        }
        for (int i = 0; i < 7; i++) {
            PyObject *v;
            if (i == 2) {
                /* ok: bool(column), as the pure path's bool(ok) */
                if (p_column_type(stmt, 2) == SQLITE_INTEGER) {
                    v = PyBool_FromLong(p_column_int64(stmt, 2) != 0);
                }
                else {
                    PyObject *raw = column(stmt, 2);
                    int truth = raw == NULL ? -1 : PyObject_IsTrue(raw);
                    Py_XDECREF(raw);
                    v = truth < 0 ? NULL : PyBool_FromLong(truth);
                }
            }
            else if (i == 3 && p_column_type(stmt, 3) == SQLITE_TEXT) {
                const char *s = (const char *)p_column_text(stmt, 3);
                int len = p_column_bytes(stmt, 3);
                v = s == NULL ? PyErr_NoMemory() : small_json_int(s, len);
                if (v == NULL && !PyErr_Occurred()) {
                    PyObject *str = PyUnicode_FromStringAndSize(s, len);
                    v = str == NULL ? NULL : PyObject_CallOneArg(loads, str);
                    Py_XDECREF(str);
                }
            }
            else if (i == 3) {
                PyObject *raw = column(stmt, 3);
                v = raw == NULL ? NULL : PyObject_CallOneArg(loads, raw);
                Py_XDECREF(raw);
            }
            else {
                v = column(stmt, i);
            }
            if (v == NULL) {
                Py_DECREF(rec);
                Py_CLEAR(out);
                goto done;
            }
            PyTuple_SET_ITEM(rec, i, v);
        }
        int err = PyList_Append(out, rec);
        Py_DECREF(rec);
        if (err < 0) {
            Py_CLEAR(out);
            goto done;
        }
    }
done:
    p_finalize(stmt);
    return out;
}

PyDoc_STRVAR(init_doc,
"init(sqlite3_module_file, connection_type, errors) -> int\n\n"
"Find SQLite's functions in the libsqlite3 that the _sqlite3 extension at that file loaded;\n"
"`errors` maps the sqlite3 module's exception names to its classes. Returns that library's\n"
"sqlite3_libversion_number(), or 0 if it cannot be found (the pure-Python path is used).");

static PyObject *
sp_init(PyObject *self, PyObject *args)
{
    const char *path;
    PyObject *ctype, *errors;
    if (!PyArg_ParseTuple(args, "sO!O!", &path, &PyType_Type, &ctype, &PyDict_Type, &errors))
        return NULL;
#ifdef _WIN32
    return PyLong_FromLong(0);
#else
    void *lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (lib == NULL)
        return PyLong_FromLong(0);
#define FIND(var, name) if ((*(void **)&var = dlsym(lib, name)) == NULL) return PyLong_FromLong(0)
    FIND(p_prepare_v2, "sqlite3_prepare_v2");
    FIND(p_step, "sqlite3_step");
    FIND(p_reset, "sqlite3_reset");
    FIND(p_finalize, "sqlite3_finalize");
    FIND(p_clear_bindings, "sqlite3_clear_bindings");
    FIND(p_bind_int64, "sqlite3_bind_int64");
    FIND(p_bind_double, "sqlite3_bind_double");
    FIND(p_bind_text, "sqlite3_bind_text");
    FIND(p_bind_blob, "sqlite3_bind_blob");
    FIND(p_bind_null, "sqlite3_bind_null");
    FIND(p_bind_parameter_count, "sqlite3_bind_parameter_count");
    FIND(p_column_count, "sqlite3_column_count");
    FIND(p_column_type, "sqlite3_column_type");
    FIND(p_column_int64, "sqlite3_column_int64");
    FIND(p_column_double, "sqlite3_column_double");
    FIND(p_column_text, "sqlite3_column_text");
    FIND(p_column_bytes, "sqlite3_column_bytes");
    FIND(p_column_blob, "sqlite3_column_blob");
    FIND(p_changes, "sqlite3_changes");
    FIND(p_errmsg, "sqlite3_errmsg");
    FIND(p_extended_errcode, "sqlite3_extended_errcode");
    FIND(p_libversion_number, "sqlite3_libversion_number");
    FIND(p_file_control, "sqlite3_file_control");
    FIND(p_commit_hook, "sqlite3_commit_hook");
    FIND(p_get_autocommit, "sqlite3_get_autocommit");
#undef FIND
    /* The handle stays open: the library stays loaded as long as _sqlite3 does, which is for
     * the life of the process. */
    PyObject **slots[] = {&exc_operational, &exc_integrity, &exc_database, &exc_programming, &exc_interface,
                          &exc_data, &exc_internal};
    const char *names[] = {"OperationalError", "IntegrityError", "DatabaseError", "ProgrammingError",
                           "InterfaceError", "DataError", "InternalError"};
    for (int i = 0; i < 7; i++) {
        PyObject *cls = PyDict_GetItemString(errors, names[i]);
        if (cls == NULL || !PyExceptionClass_Check(cls)) {
            PyErr_Format(PyExc_ValueError, "errors has no exception class %s", names[i]);
            return NULL;
        }
        Py_INCREF(cls);
        Py_XSETREF(*slots[i], cls);
    }
    Py_INCREF(ctype);
    Py_XSETREF(connection_type, (PyTypeObject *)ctype);
    ready = 1;
    return PyLong_FromLong(p_libversion_number());
#endif
}

PyDoc_STRVAR(execute_many_doc,
"execute_many(conn, cache, sql, rows) -> int\n\n"
"execute() for each parameters tuple of the list `rows`, in order, on one prepared statement;\n"
"the rows they changed in all. The first failure raises, the rows before it stay run.");

static PyObject *
sp_execute_many(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyDict_CheckExact(args[1]) || !PyUnicode_CheckExact(args[2]) || !PyList_CheckExact(args[3])) {
        PyErr_SetString(PyExc_TypeError, "execute_many(conn, cache: dict, sql: str, rows: list)");
        return NULL;
    }
    sqlite3 *db = handle_of(args[0]);
    if (db == NULL)
        return NULL;
    PyObject *rows = args[3];
    long total = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(rows); i++) {
        PyObject *params = PyList_GET_ITEM(rows, i);
        if (!PyTuple_CheckExact(params)) {
            PyErr_SetString(PyExc_TypeError, "execute_many's rows must be tuples");
            return NULL;
        }
        Py_INCREF(params);  /* (the list may change under a callback while the GIL is let go) */
        long changed = run_cached(db, args[1], args[2], params);
        Py_DECREF(params);
        if (changed < 0)
            return NULL;
        total += changed;
    }
    return PyLong_FromLong(total);
}

PyDoc_STRVAR(fetch_doc,
"fetch(conn, cache, sql, params) -> list[tuple]\n\n"
"The rows of one statement on `conn`'s database handle, each a tuple of its columns as the\n"
"sqlite3 module gives them (int, float, str, bytes or None), its prepared form kept in `cache`\n"
"as execute()'s. The GIL is let go around the first step and then every 64 rows.");

static PyObject *
sp_fetch(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyDict_CheckExact(args[1]) || !PyUnicode_CheckExact(args[2]) || !PyTuple_CheckExact(args[3])) {
        PyErr_SetString(PyExc_TypeError, "fetch(conn, cache: dict, sql: str, params: tuple)");
        return NULL;
    }
    sqlite3 *db = handle_of(args[0]);
    if (db == NULL)
        return NULL;
    cached_stmt *c = cached_of(db, args[1], args[2]);
    if (c == NULL || bind_changed(db, c, args[3]) < 0)
        return NULL;
    sqlite3_stmt *stmt = c->stmt;
    int columns = p_column_count(stmt);
    PyObject *out = PyList_New(0);
    if (out == NULL) {
        p_reset(stmt);
        return NULL;
    }
    for (long n = 0;; n++) {
        int rc = step_row(stmt, n);
        if (rc == SQLITE_DONE)
            break;
        if (rc != SQLITE_ROW) {
            raise_sqlite(db, rc);
            forget_bindings(c);
            goto fail;
        }
        PyObject *row = PyTuple_New(columns);
        if (row == NULL)
            goto fail;
        for (int i = 0; i < columns; i++) {
            PyObject *v = column(stmt, i);
            if (v == NULL) {
                Py_DECREF(row);
                goto fail;
            }
            PyTuple_SET_ITEM(row, i, v);
        }
        int err = PyList_Append(out, row);
        Py_DECREF(row);
        if (err < 0)
            goto fail;
    }
    p_reset(stmt);  /* the bindings stay (see cached_stmt) */
    return out;
fail:
    p_reset(stmt);
    Py_DECREF(out);
    return NULL;
}

static PyMethodDef methods[] = {
    {"init", sp_init, METH_VARARGS, init_doc},
    {"execute", (PyCFunction)(void (*)(void))sp_execute, METH_FASTCALL, execute_doc},
    {"execute_many", (PyCFunction)(void (*)(void))sp_execute_many, METH_FASTCALL, execute_many_doc},
    {"fetch", (PyCFunction)(void (*)(void))sp_fetch, METH_FASTCALL, fetch_doc},
    {"records", (PyCFunction)(void (*)(void))sp_records, METH_FASTCALL, records_doc},
    {"lone_setup", sp_lone_setup, METH_VARARGS, lone_setup_doc},
    {"bind_lone", sp_bind_lone, METH_VARARGS, bind_lone_doc},
    {"first_try", (PyCFunction)(void (*)(void))sp_first_try, METH_FASTCALL, first_try_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_speedups",
    "The SQLite store's compiled path (see speedups.py); optional, with a pure-Python path for everything.",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    if (PyType_Ready(&LoneType) < 0)
        return NULL;
    return PyModule_Create(&module);
}
