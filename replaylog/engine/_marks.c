/* The mark file's writer, compiled: a start mark written before every activity in a few
 * stores, without the Python bytecode of engine/marks.py's writer around each store.
 *
 * Optional: engine/marks.py uses it where it was built (REPLAYLOG_PURE_PYTHON unset) and
 * writes the very same bytes with its pure-Python writer otherwise (tests/test_marks.py
 * compares the two). Measured under callgrind (`make bench-instructions`, engine row): a
 * do-nothing writer in its place cost ~3,600 CPU instructions a slot fewer than the
 * Python one; this one is within a few hundred of that (docs/performance.md).
 *
 * A record is a seqlock (engine/marks.py): its sequence number turns odd, the body is
 * written, the number turns even. Readers in other processes copy the file while it is
 * written, so the stores are ordered with release fences, which Python's separate stores
 * got from the calls between them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The record's layout (engine/marks.py, format 3): 8-byte words, from the record's start:
 * 0 sequence, 1 epoch, 2 slot, 3 attempts, 4 started_at (a double), 5 lane; then at
 * TEXT_AT two uint32 lengths, the workflow id (ID_MAX bytes, NUL-padded) and the name
 * (the rest of the record, NUL-padded). marks.py passes these sizes to board(). */

typedef struct {
    PyObject_HEAD
    Py_buffer buf; /* the mapped file, held while open (the mmap cannot close under it) */
    int open;
    Py_ssize_t record, text_at, id_max, name_max;
} Board;

typedef struct {
    PyObject_HEAD
    Board *board;
    Py_ssize_t at;   /* the record's first byte */
    int64_t epoch, lane;
    PyObject *wid;   /* bytes: the workflow id, UTF-8 */
    PyObject *clip;  /* name -> its bytes as the record holds them (marks.py's cached _clip) */
    PyObject *last;  /* the name written last (a strong reference; compared by identity) */
    vectorcallfunc vectorcall;
} Writer;

static PyTypeObject BoardType, WriterType;
static PyObject *writer_vectorcall(PyObject *, PyObject *const *, size_t, PyObject *);

static void
board_dealloc(Board *self)
{
    if (self->open) {
        PyBuffer_Release(&self->buf);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
board_close(Board *self, PyObject *Py_UNUSED(ignored))
{
    if (self->open) {
        self->open = 0;
        PyBuffer_Release(&self->buf);
    }
    Py_RETURN_NONE;
}

static PyObject *
board_writer(Board *self, PyObject *args)
{
    Py_ssize_t at;
    PyObject *wid, *clip;
    long long epoch, lane;
    if (!PyArg_ParseTuple(args, "nSLLO:writer", &at, &wid, &epoch, &lane, &clip)) {
        return NULL;
    }
    if (!self->open) {
        PyErr_SetString(PyExc_ValueError, "the mark file is closed");
        return NULL;
    }
    if (at < 0 || at + self->record > self->buf.len || PyBytes_GET_SIZE(wid) > self->id_max) {
        PyErr_SetString(PyExc_ValueError, "a mark's record or workflow id out of the file's bounds");
        return NULL;
    }
    Writer *w = PyObject_New(Writer, &WriterType);
    if (w == NULL) {
        return NULL;
    }
    Py_INCREF(self);
    w->board = self;
    w->at = at;
    w->epoch = epoch;
    w->lane = lane;
    Py_INCREF(wid);
    w->wid = wid;
    Py_INCREF(clip);
    w->clip = clip;
    w->last = NULL;
    w->vectorcall = writer_vectorcall;
    return (PyObject *)w;
}

static void
writer_dealloc(Writer *self)
{
    Py_XDECREF(self->board);
    Py_XDECREF(self->wid);
    Py_XDECREF(self->clip);
    Py_XDECREF(self->last);
    PyObject_Free(self);
}

/* mark(slot, name, attempts, started_at) */
static PyObject *
writer_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Writer *self = (Writer *)callable;
    if (PyVectorcall_NARGS(nargsf) != 4 || kwnames != NULL) {
        PyErr_SetString(PyExc_TypeError, "mark(slot, name, attempts, started_at) takes 4 positional arguments");
        return NULL;
    }
    Board *board = self->board;
    if (!board->open) {
        PyErr_SetString(PyExc_ValueError, "the mark file is closed");
        return NULL;
    }
    long long slot = PyLong_AsLongLong(args[0]);
    long long attempts = PyLong_AsLongLong(args[2]);
    double started_at = PyFloat_AsDouble(args[3]);
    if ((slot == -1 || attempts == -1 || started_at == -1.0) && PyErr_Occurred()) {
        return NULL;
    }
    PyObject *name = args[1];
    PyObject *raw = NULL;
    if (name != self->last) {
        raw = PyObject_CallOneArg(self->clip, name);
        if (raw == NULL) {
            return NULL;
        }
        if (!PyBytes_Check(raw) || PyBytes_GET_SIZE(raw) > board->name_max) {
            Py_DECREF(raw);
            PyErr_SetString(PyExc_ValueError, "a mark's name out of its record's bounds");
            return NULL;
        }
    }
    char *rec = (char *)board->buf.buf + self->at;
    int64_t *words = (int64_t *)rec;
    int64_t seq = __atomic_load_n(&words[0], __ATOMIC_RELAXED) + 1;
    __atomic_store_n(&words[0], seq, __ATOMIC_RELAXED); /* odd: being written */
    __atomic_thread_fence(__ATOMIC_RELEASE);            /* ...before any of the body */
    if (raw != NULL) {
        Py_ssize_t nid = PyBytes_GET_SIZE(self->wid), nname = PyBytes_GET_SIZE(raw);
        char *text = rec + board->text_at;
        uint32_t lengths[2] = {(uint32_t)nid, (uint32_t)nname};
        words[1] = self->epoch;
        words[5] = self->lane;
        memcpy(text, lengths, sizeof lengths);
        text += sizeof lengths;
        memcpy(text, PyBytes_AS_STRING(self->wid), nid);
        memset(text + nid, 0, board->id_max - nid);
        text += board->id_max;
        memcpy(text, PyBytes_AS_STRING(raw), nname);
        memset(text + nname, 0, board->name_max - nname);
        Py_DECREF(raw);
        Py_INCREF(name);
        Py_XSETREF(self->last, name);
    }
    words[2] = slot;
    words[3] = attempts;
    memcpy(&words[4], &started_at, sizeof started_at);
    __atomic_store_n(&words[0], seq + 1, __ATOMIC_RELEASE); /* even: whole, after the body */
    Py_RETURN_NONE;
}

static PyObject *
board_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *mapped;
    Py_ssize_t record, text_at, id_max, name_max;
    if (!PyArg_ParseTuple(args, "Onnnn:Board", &mapped, &record, &text_at, &id_max, &name_max)) {
        return NULL;
    }
    if (text_at < 48 || text_at + 8 + id_max + name_max != record || record % 8 != 0) {
        PyErr_SetString(PyExc_ValueError, "a mark record's layout that is not format 3's");
        return NULL;
    }
    Board *self = (Board *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    if (PyObject_GetBuffer(mapped, &self->buf, PyBUF_WRITABLE | PyBUF_SIMPLE) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    if (((uintptr_t)self->buf.buf) % 8 != 0) {
        PyBuffer_Release(&self->buf);
        Py_DECREF(self);
        PyErr_SetString(PyExc_ValueError, "the mark file's mapping is not 8-byte aligned");
        return NULL;
    }
    self->open = 1;
    self->record = record;
    self->text_at = text_at;
    self->id_max = id_max;
    self->name_max = name_max;
    return (PyObject *)self;
}

static PyMethodDef board_methods[] = {
    {"writer", (PyCFunction)board_writer, METH_VARARGS,
     "writer(record_offset, workflow_id_bytes, epoch, lane, clip): a mark(slot, name, attempts, started_at)."},
    {"close", (PyCFunction)board_close, METH_NOARGS, "Let go of the mapped file (writers then refuse)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject BoardType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "replaylog.engine._marks.Board",
    .tp_basicsize = sizeof(Board),
    .tp_dealloc = (destructor)board_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Board(mmap, record, text_at, id_max, name_max): a worker's mark file, held for its writers.",
    .tp_methods = board_methods,
    .tp_new = board_new,
};

static PyTypeObject WriterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "replaylog.engine._marks.Writer",
    .tp_basicsize = sizeof(Writer),
    .tp_dealloc = (destructor)writer_dealloc,
    .tp_vectorcall_offset = offsetof(Writer, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "mark(slot, name, attempts, started_at): one start mark into a thread's record.",
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_marks",
    "The mark file's compiled writer (engine/marks.py; optional, the same bytes as its Python writer).",
    -1, NULL,
};

PyMODINIT_FUNC
PyInit__marks(void)
{
    if (PyType_Ready(&BoardType) < 0 || PyType_Ready(&WriterType) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    Py_INCREF(&BoardType);
    if (PyModule_AddObject(m, "Board", (PyObject *)&BoardType) < 0) {
        Py_DECREF(&BoardType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
