/* Newlines in a span of a buffer, for doctor explain's line numbers (matching/newlines.py).
 *
 * bytes.count(b"\n") is a byte-at-a-time loop: on a 1 GB log it costs about as much as the
 * multi-pattern scan itself. Sixteen bytes at a time with SSE2 (every x86-64 CPU has it) it costs
 * a tenth of that. Built when a C compiler is at hand; matching/newlines.py falls back to
 * bytes.count otherwise, with the same answers (tests/test_newlines.py). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
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

/* count(buf, start, end): newlines in buf[start:end], the span clipped as a slice is */
static PyObject *count(PyObject *self, PyObject *args)
{
    Py_buffer b;
    Py_ssize_t start, end, c = 0;
    if (!PyArg_ParseTuple(args, "y*nn", &b, &start, &end))
        return NULL;
    if (start < 0)
        start = start + b.len < 0 ? 0 : start + b.len;
    if (end < 0)
        end = end + b.len < 0 ? 0 : end + b.len;
    if (end > b.len)
        end = b.len;
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

static PyMethodDef methods[] = {
    {"count", count, METH_VARARGS, "count(buf, start, end): newlines in buf[start:end]"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_newlines", NULL, -1, methods};

PyMODINIT_FUNC PyInit__newlines(void)
{
    return PyModule_Create(&module);
}
