/* verl-pascal STAND-IN for apex's apex_C extension (CI only). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *flatten_count(PyObject *self, PyObject *args) {
  PyObject *seq;
  if (!PyArg_ParseTuple(args, "O", &seq)) return NULL;
  Py_ssize_t n = PyObject_Length(seq);
  if (n < 0) return NULL;
  return PyLong_FromSsize_t(n);
}

static PyMethodDef methods[] = {
    {"flatten_count", flatten_count, METH_VARARGS, "Length of a sequence (stand-in)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "apex_C", "apex STAND-IN", -1, methods};

PyMODINIT_FUNC PyInit_apex_C(void) { return PyModule_Create(&module); }
