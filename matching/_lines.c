/* The two per-byte and per-hit loops of doctor explain's block scan, in C (matching/lines.py).
 *
 * On a 1 GB log the multi-pattern scan (Hyperscan) is the work that has to be done; what came
 * next cost almost as much in Python: counting the newlines (bytes.count goes byte by byte) and,
 * for each prefilter hit, finding its line and copying it. Built where a C compiler is at hand;
 * matching/lines.py has the same functions in Python, with the same answers (tests/test_lines.py). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

static Py_ssize_t count_nl(const unsigned char *p, Py_ssize_t n)
{
    Py_ssize_t c = 0, i = 0;
#if defined(__SSE2__)
    const __m128i nl = _mm_set1_epi8('\n'), zero = _mm_setzero_si128();
    while (n - i >= 16) {
        /* each byte lane counts at most 255 matches before the lanes are summed */
        __m128i lanes = zero;
        Py_ssize_t stop = n - i >= 16 * 255 ? i + 16 * 255 : n - 15;
        for (; i < stop; i += 16)
            lanes = _mm_sub_epi8(lanes, _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(p + i)), nl));
        __m128i sums = _mm_sad_epu8(lanes, zero);
        c += _mm_cvtsi128_si32(sums) + _mm_cvtsi128_si32(_mm_srli_si128(sums, 8));
    }
#endif
    for (; i < n; i++)
        c += p[i] == '\n';
    return c;
}

/* a slice's bounds, as Python clips them */
static void clip(Py_ssize_t *start, Py_ssize_t *end, Py_ssize_t len)
{
    if (*start < 0)
        *start = *start + len < 0 ? 0 : *start + len;
    if (*end < 0)
        *end = *end + len < 0 ? 0 : *end + len;
    if (*end > len)
        *end = len;
}

/* count(buf, start, end): newlines in buf[start:end] */
static PyObject *count(PyObject *self, PyObject *args)
{
    Py_buffer b;
    Py_ssize_t start, end, c = 0;
    if (!PyArg_ParseTuple(args, "y*nn", &b, &start, &end))
        return NULL;
    clip(&start, &end, b.len);
    if (end > start) {
        const unsigned char *p = (const unsigned char *)b.buf + start;
        if (end - start >= (1 << 16)) {
            Py_BEGIN_ALLOW_THREADS
            c = count_nl(p, end - start);
            Py_END_ALLOW_THREADS
        } else {
            c = count_nl(p, end - start);
        }
    }
    PyBuffer_Release(&b);
    return PyLong_FromSsize_t(c);
}

static int offset_at(PyObject *list, Py_ssize_t k, Py_ssize_t *out)
{
    PyObject *o = PyList_GET_ITEM(list, k);
    if (!PyLong_CheckExact(o)) {  /* an int subclass could run code that changes the lists */
        PyErr_SetString(PyExc_TypeError, "hit offsets must be ints");
        return -1;
    }
    *out = PyLong_AsSsize_t(o);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

/* The next of two ascending lists of hits, merged: 1 and *pos (*from_b: from the second), 0 when
 * both are done, -1 on an error. */
static int next_hit(PyObject *a, Py_ssize_t *i, PyObject *b, Py_ssize_t *j, Py_ssize_t *pos, int *from_b)
{
    Py_ssize_t x = 0, y = 0;
    int more_a = *i < PyList_GET_SIZE(a), more_b = *j < PyList_GET_SIZE(b);
    if ((more_a && offset_at(a, *i, &x) < 0) || (more_b && offset_at(b, *j, &y) < 0))
        return -1;
    if (!more_a && !more_b)
        return 0;
    *from_b = !more_a || (more_b && y < x);
    *pos = *from_b ? y : x;
    *from_b ? (*j)++ : (*i)++;
    return 1;
}

static const unsigned char *last_nl(const unsigned char *p, Py_ssize_t n)
{
    while (n-- > 0)
        if (p[n] == '\n')
            return p + n;
    return NULL;
}

/* The line being collected: it goes to `special` when Python has work on it. */
typedef struct {
    Py_ssize_t index, end, hit;
    int too_long, other;
} Current;

static int flush(PyObject *special, const Current *c)
{
    if (c->index < 0 || !(c->too_long || c->other))
        return 0;
    PyObject *t = Py_BuildValue("(nnnO)", c->index, c->end, c->hit, c->other ? Py_True : Py_False);
    int rc = t ? PyList_Append(special, t) : -1;
    Py_XDECREF(t);
    return rc;
}

static int append_line(PyObject *starts, PyObject *lines, const unsigned char *p, Py_ssize_t ls,
                       Py_ssize_t le, int too_long)
{
    PyObject *start = PyLong_FromSsize_t(ls);
    PyObject *raw = too_long ? Py_NewRef(Py_None) : PyBytes_FromStringAndSize((const char *)p + ls, le - ls);
    int rc = start && raw && PyList_Append(starts, start) == 0 && PyList_Append(lines, raw) == 0 ? 0 : -1;
    Py_XDECREF(start);
    Py_XDECREF(raw);
    return rc;
}

/* hit_lines(buf, end, cheap, other, max_line) -> (starts, lines, special); see matching/lines.py */
static PyObject *hit_lines(PyObject *self, PyObject *args)
{
    Py_buffer b;
    Py_ssize_t end, max_line, i = 0, j = 0, pos = 0;
    PyObject *cheap, *other, *starts = NULL, *lines = NULL, *special = NULL, *out = NULL;
    Current cur = {-1, -1, -1, 0, 0};
    int from_other = 0, more;
    if (!PyArg_ParseTuple(args, "y*nO!O!n", &b, &end, &PyList_Type, &cheap, &PyList_Type, &other,
                          &max_line))
        return NULL;
    const unsigned char *p = (const unsigned char *)b.buf;
    if (end > b.len)
        end = b.len;
    if (!(starts = PyList_New(0)) || !(lines = PyList_New(0)) || !(special = PyList_New(0)))
        goto done;
    while ((more = next_hit(cheap, &i, other, &j, &pos, &from_other)) == 1) {
        if (pos <= cur.end) {  /* the current line's: an `other` hit marks it (one before */
            cur.other |= from_other;  /* the first line, an empty match at 0, marks that line) */
            continue;
        }
        if (pos >= end)
            break;
        if (flush(special, &cur) < 0)
            goto done;
        const unsigned char *nl = last_nl(p, pos), *e = memchr(p + pos, '\n', end - pos);
        Py_ssize_t ls = nl ? nl - p + 1 : 0;
        cur = (Current){cur.index + 1, e ? e - p : end, pos, 0, from_other || (cur.index < 0 && cur.other)};
        cur.too_long = cur.end - ls > max_line;
        if (append_line(starts, lines, p, ls, cur.end, cur.too_long) < 0)
            goto done;
    }
    if (more >= 0 && flush(special, &cur) == 0)
        out = PyTuple_Pack(3, starts, lines, special);
done:
    Py_XDECREF(starts);
    Py_XDECREF(lines);
    Py_XDECREF(special);
    PyBuffer_Release(&b);
    return out;
}

static PyMethodDef methods[] = {
    {"count", count, METH_VARARGS, "count(buf, start, end): newlines in buf[start:end]"},
    {"hit_lines", hit_lines, METH_VARARGS,
     "hit_lines(buf, end, cheap, other, max_line): the lines of buf[:end] that hold the hits"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_lines", NULL, -1, methods};

PyMODINIT_FUNC PyInit__lines(void)
{
    PyObject *m = PyModule_Create(&module);
    /* matching/lines.py uses the module only if this matches its C_VERSION: bump both on a change */
    if (m && PyModule_AddIntConstant(m, "VERSION", 1) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
