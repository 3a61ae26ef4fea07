/* verl-pascal STAND-IN for apex's amp_C CUDA extension (CI only): plain C. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *scale(PyObject *self, PyObject *args) {
  double x, s;
  if (!PyArg_ParseTuple(args, "dd", &x, &s)) return NULL;
  return PyFloat_FromDouble(x * s);
}

static PyMethodDef methods[] = {
    {"scale", scale, METH_VARARGS, "x * s (stand-in for multi_tensor_scale)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "amp_C", "apex STAND-IN", -1, methods};

PyMODINIT_FUNC PyInit_amp_C(void) { return PyModule_Create(&module); }
