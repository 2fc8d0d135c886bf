/*
 * ncclbench.nccl._timedloop: the timed loop's calls issued from C (optional).
 *
 * Why: at one rank NCCL's small-message op costs ~0.3 us of host time, and a
 * Python loop around it (closure call, the binding's argument handling, the
 * GIL released and taken per call) plus a wait that polls the stream through
 * Python added ~0.45 us per op over nccl-tests (bench/results/stability-*).
 * This module runs a prepared list of calls -- function addresses taken from
 * the libraries ncclbench already loaded, and their arguments -- in one C
 * loop, then polls the streams to completion as nccl-tests'
 * testStreamSynchronize does, and reads the clock around both, so the
 * measurement contains what nccl-tests' contains and nothing else.
 *
 * It knows no NCCL or CUDA header: a call is a "shape" (its C signature), a
 * function address and up to 8 integer arguments.  Everything is decided in
 * Python (ncclbench.nccl.native_loop) before the clock starts; without this
 * module (no compiler at install time) the pure-Python loop runs instead.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <sched.h>
#include <stdint.h>
#include <time.h>

/* Call shapes: the C signatures of the calls the timed loop makes. */
enum {
    SHAPE_VOID = 0,       /* int f(void)                                   ncclGroupStart/End */
    SHAPE_PP_S_I_I_P_P,   /* int f(p, p, size_t, int, int, p, p)           AllReduce, ReduceScatter, Broadcast, Gather, Scatter */
    SHAPE_PP_S_III_P_P,   /* int f(p, p, size_t, int, int, int, p, p)      Reduce */
    SHAPE_PP_S_I_P_P,     /* int f(p, p, size_t, int, p, p)                AllGather, AlltoAll */
    SHAPE_P_S_II_P_P,     /* int f(p, size_t, int, int, p, p)              Send, Recv */
    SHAPE_U_U_S_P,        /* int f(u64, u64, size_t, p)                    cuMemcpyDtoDAsync */
    SHAPE_COUNT
};

typedef struct {
    int32_t shape;
    int32_t reserved;
    uint64_t fn;
    uint64_t a[8];
} nb_call;

typedef struct {
    uint64_t query_fn;  /* int cuStreamQuery(CUstream): 0 done, 600 not ready */
    uint64_t stream;
    uint64_t async_fn;  /* int ncclCommGetAsyncError(comm, int*) or 0 */
    uint64_t comm;
} nb_poll;

typedef int (*f_void)(void);
typedef int (*f_pp_s_i_i_p_p)(const void *, void *, size_t, int, int, void *, void *);
typedef int (*f_pp_s_iii_p_p)(const void *, void *, size_t, int, int, int, void *, void *);
typedef int (*f_pp_s_i_p_p)(const void *, void *, size_t, int, void *, void *);
typedef int (*f_p_s_ii_p_p)(void *, size_t, int, int, void *, void *);
typedef int (*f_u_u_s_p)(uint64_t, uint64_t, size_t, void *);

#define P(x) ((void *)(uintptr_t)(x))

static inline int issue_one(const nb_call *c)
{
    const uint64_t *a = c->a;
    switch (c->shape) {
    case SHAPE_VOID:
        return ((f_void)P(c->fn))();
    case SHAPE_PP_S_I_I_P_P:
        return ((f_pp_s_i_i_p_p)P(c->fn))(P(a[0]), P(a[1]), (size_t)a[2], (int)a[3], (int)a[4], P(a[5]), P(a[6]));
    case SHAPE_PP_S_III_P_P:
        return ((f_pp_s_iii_p_p)P(c->fn))(P(a[0]), P(a[1]), (size_t)a[2], (int)a[3], (int)a[4], (int)a[5], P(a[6]),
                                          P(a[7]));
    case SHAPE_PP_S_I_P_P:
        return ((f_pp_s_i_p_p)P(c->fn))(P(a[0]), P(a[1]), (size_t)a[2], (int)a[3], P(a[4]), P(a[5]));
    case SHAPE_P_S_II_P_P:
        return ((f_p_s_ii_p_p)P(c->fn))(P(a[0]), (size_t)a[1], (int)a[2], (int)a[3], P(a[4]), P(a[5]));
    case SHAPE_U_U_S_P:
        return ((f_u_u_s_p)P(c->fn))(a[0], a[1], (size_t)a[2], P(a[3]));
    default:
        return -1;
    }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* the clock of Python's time.perf_counter() on Linux */
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Outcome kinds returned to Python. */
enum { OUT_OK = 0, OUT_CALL_FAILED = 1, OUT_QUERY_FAILED = 2, OUT_TIMEOUT = 3, OUT_ASYNC_ERROR = 4 };

static int run_calls(const nb_call *calls, Py_ssize_t n, Py_ssize_t *failed)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        int r = issue_one(&calls[i]);
        if (r) {
            *failed = i;
            return r;
        }
    }
    return 0;
}

/* Poll every stream until done, checking the communicator's async error, like
 * nccl-tests' testStreamSynchronize (sched_yield while nothing finished). */
static int wait_all(const nb_poll *polls, Py_ssize_t n, double start, double timeout_s, int *kind,
                    Py_ssize_t *which)
{
    char done[64];
    Py_ssize_t pending = n;
    if (n > 64)
        return -1;
    for (Py_ssize_t i = 0; i < n; i++)
        done[i] = 0;
    while (pending) {
        int idle = 1;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (done[i])
                continue;
            int q = ((int (*)(void *))P(polls[i].query_fn))(P(polls[i].stream));
            if (q == 0) {
                done[i] = 1;
                pending--;
                idle = 0;
                continue;
            }
            if (q != 600) { /* CUDA_ERROR_NOT_READY */
                *kind = OUT_QUERY_FAILED;
                *which = i;
                return q;
            }
            if (polls[i].async_fn) {
                int res = 0;
                int r = ((int (*)(void *, int *))P(polls[i].async_fn))(P(polls[i].comm), &res);
                if (r == 0 && res != 0 && res != 7) /* 7 = ncclInProgress */
                    r = res;
                if (r) {
                    *kind = OUT_ASYNC_ERROR;
                    *which = i;
                    return r;
                }
            }
            if (timeout_s > 0 && now_s() - start > timeout_s) {
                *kind = OUT_TIMEOUT;
                *which = i;
                return 0;
            }
        }
        if (idle && pending)
            sched_yield();
    }
    return 0;
}

PyDoc_STRVAR(issue_doc,
             "issue(calls: bytes) -> (code, index)\n\n"
             "Run the packed calls in order; stop at the first nonzero return.\n"
             "code 0 and index -1 when all succeeded.");

static PyObject *py_issue(PyObject *self, PyObject *args)
{
    /* "y#": a bytes object's own memory, valid while `args` holds it (the limited API has no
       Py_buffer before 3.11, and one wheel serves every CPython >= 3.10) */
    const char *calls;
    Py_ssize_t calls_len;
    if (!PyArg_ParseTuple(args, "y#", &calls, &calls_len))
        return NULL;
    Py_ssize_t n = calls_len / (Py_ssize_t)sizeof(nb_call), failed = -1;
    int code;
    Py_BEGIN_ALLOW_THREADS
    code = run_calls((const nb_call *)calls, n, &failed);
    Py_END_ALLOW_THREADS
    return Py_BuildValue("(in)", code, failed);
}

PyDoc_STRVAR(timed_doc,
             "timed(calls: bytes, polls: bytes, timeout_s: float, wait: bool)\n"
             "    -> (kind, code, index, t_start, t_enqueued, t_done)\n\n"
             "Read the clock, run the packed calls, read the clock, then (if wait)\n"
             "poll the streams to completion and read the clock again.  kind: 0 ok,\n"
             "1 a call failed (index = the call), 2 a stream query failed, 3 -T timeout,\n"
             "4 an NCCL async error (index = the poll entry).  The GIL is released.");

static PyObject *py_timed(PyObject *self, PyObject *args)
{
    const char *calls, *polls;
    Py_ssize_t calls_len, polls_len;
    double timeout_s;
    int wait;
    if (!PyArg_ParseTuple(args, "y#y#dp", &calls, &calls_len, &polls, &polls_len, &timeout_s, &wait))
        return NULL;
    Py_ssize_t n = calls_len / (Py_ssize_t)sizeof(nb_call);
    Py_ssize_t np = polls_len / (Py_ssize_t)sizeof(nb_poll);
    Py_ssize_t index = -1;
    int kind = OUT_OK, code = 0;
    double t0, t1, t2;
    if (np > 64) {
        PyErr_SetString(PyExc_ValueError, "at most 64 streams");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    t0 = now_s();
    code = run_calls((const nb_call *)calls, n, &index);
    t1 = now_s();
    t2 = t1;
    if (code) {
        kind = OUT_CALL_FAILED;
    } else if (wait) {
        code = wait_all((const nb_poll *)polls, np, t1, timeout_s, &kind, &index);
        t2 = now_s();
    }
    Py_END_ALLOW_THREADS
    return Py_BuildValue("(iinddd)", kind, code, index, t0, t1, t2);
}

static PyMethodDef methods[] = {
    {"issue", py_issue, METH_VARARGS, issue_doc},
    {"timed", py_timed, METH_VARARGS, timed_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_timedloop",
    "The timed loop's calls issued from C (see ncclbench.nccl.native_loop).", -1, methods,
};

PyMODINIT_FUNC PyInit__timedloop(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "CALL_SIZE", (long)sizeof(nb_call)) < 0 ||
        PyModule_AddIntConstant(m, "POLL_SIZE", (long)sizeof(nb_poll)) < 0 ||
        PyModule_AddIntConstant(m, "SHAPES", SHAPE_COUNT) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
