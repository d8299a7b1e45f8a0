// One pass per batch for the hottest per-row work of postmortem/series.py's streaming read.
//
// A million-row batch of stat rows went through ~20 numpy passes (each memory-bound, 0.3-1.3
// ms); the functions here do the same work in one pass each, over the batch's Arrow buffers
// (given as addresses, as the recorder's _fused.cpp takes its tensors) with the GIL released.
// Every function has a numpy twin in series.py, used where this module is not built, and the
// tests compare the two on random batches. Arrow bitmaps: bit `offset + i`, least significant
// bit first; an address of 0 means "no bitmap" (every row valid) or "no data" (every row null).

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>

#include <vector>

namespace {

inline bool bit(const uint8_t* bitmap, int64_t at) { return (bitmap[at >> 3] >> (at & 7)) & 1; }

// A float column: values (float32 or float64) with an optional validity bitmap.
struct FloatColumn {
  const void* data;
  const uint8_t* validity;
  int64_t offset;
  int wide;  // 1: float64, 0: float32

  // The value of row i as a double, NaN where null.
  double at(int64_t i) const {
    const int64_t j = offset + i;
    if (data == nullptr || (validity != nullptr && !bit(validity, j))) return NAN;
    return wide ? static_cast<const double*>(data)[j] : static_cast<const float*>(data)[j];
  }
};

bool parse_float_column(PyObject* item, FloatColumn* column) {
  unsigned long long data, validity;
  long long offset;
  if (!PyArg_ParseTuple(item, "KKLi", &data, &validity, &offset, &column->wide)) return false;
  column->data = reinterpret_cast<const void*>(data);
  column->validity = reinterpret_cast<const uint8_t*>(validity);
  column->offset = offset;
  return true;
}

// magnitude(out, rows, (norm, max_abs, min, max)), each column (data, validity, offset, wide):
// out[i] (float64) = norm where valid and not NaN, else max_abs where valid and not NaN, else
// fmax(|min|, |max|) (NaN where null), as series._magnitude_numpy.
PyObject* magnitude(PyObject*, PyObject* args) {
  unsigned long long out_address;
  long long rows;
  PyObject *a, *b, *c, *d;
  if (!PyArg_ParseTuple(args, "KL(OOOO)", &out_address, &rows, &a, &b, &c, &d)) return nullptr;
  FloatColumn norm, max_abs, low, high;
  if (!parse_float_column(a, &norm) || !parse_float_column(b, &max_abs) ||
      !parse_float_column(c, &low) || !parse_float_column(d, &high))
    return nullptr;
  double* out = reinterpret_cast<double*>(out_address);
  Py_BEGIN_ALLOW_THREADS
  for (int64_t i = 0; i < rows; i++) {
    double value = norm.at(i);
    if (isnan(value)) value = max_abs.at(i);
    if (isnan(value)) {
      // float32 columns: |x| and fmax commute with the widening to float64, so this equals
      // numpy's fmax of the float32 absolute values, widened.
      value = fmax(fabs(low.at(i)), fabs(high.at(i)));
    }
    out[i] = value;
  }
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

// run_starts(out, rows, ((data, validity, offset), ...)): the first row of each run of rows
// equal in every int32 code column (a null counts as -1), written to out (int64); returns
// how many, as series._run_starts(*(series._codes(c) for c in columns)).
PyObject* run_starts(PyObject*, PyObject* args) {
  unsigned long long out_address;
  long long rows;
  PyObject* list;
  if (!PyArg_ParseTuple(args, "KLO!", &out_address, &rows, &PyTuple_Type, &list)) return nullptr;
  const Py_ssize_t count = PyTuple_GET_SIZE(list);
  std::vector<const int32_t*> data(count);
  std::vector<const uint8_t*> validity(count);
  std::vector<int64_t> offset(count);
  for (Py_ssize_t c = 0; c < count; c++) {
    unsigned long long address, bits;
    long long start;
    if (!PyArg_ParseTuple(PyTuple_GET_ITEM(list, c), "KKL", &address, &bits, &start)) return nullptr;
    data[c] = reinterpret_cast<const int32_t*>(address);
    validity[c] = reinterpret_cast<const uint8_t*>(bits);
    offset[c] = start;
  }
  int64_t* out = reinterpret_cast<int64_t*>(out_address);
  int64_t found = 0;
  Py_BEGIN_ALLOW_THREADS
  std::vector<int32_t> previous(count, 0);
  for (int64_t i = 0; i < rows; i++) {
    bool change = i == 0;
    for (Py_ssize_t c = 0; c < count; c++) {
      const int64_t j = offset[c] + i;
      const int32_t code = validity[c] != nullptr && !bit(validity[c], j) ? -1 : data[c][j];
      change |= code != previous[c];
      previous[c] = code;
    }
    if (change) out[found++] = i;
  }
  Py_END_ALLOW_THREADS
  return PyLong_FromLongLong(found);
}

// coarse_keep(step, rows, low, kept, seen, keep): per row, offset = step[i] - low (int64);
// seen[offset] = 1 and keep[i] = kept[offset] (uint8 tables over the batch's step range).
PyObject* coarse_keep(PyObject*, PyObject* args) {
  unsigned long long step_address, kept_address, seen_address, keep_address;
  long long rows, low;
  if (!PyArg_ParseTuple(args, "KLLKKK", &step_address, &rows, &low, &kept_address, &seen_address,
                        &keep_address))
    return nullptr;
  const int64_t* step = reinterpret_cast<const int64_t*>(step_address);
  const uint8_t* kept = reinterpret_cast<const uint8_t*>(kept_address);
  uint8_t* seen = reinterpret_cast<uint8_t*>(seen_address);
  uint8_t* keep = reinterpret_cast<uint8_t*>(keep_address);
  Py_BEGIN_ALLOW_THREADS
  for (int64_t i = 0; i < rows; i++) {
    const int64_t offset = step[i] - low;
    seen[offset] = 1;
    keep[i] = kept[offset];
  }
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

// extremes(magnitude, rows, starts, run_sid, runs, series, keep): sets keep[i] (uint8, zeroed
// by the caller) at the first row of each series in the batch and at its first row of the
// largest and of the smallest magnitude (NaN ignored), as series._extremes_numpy. Runs of
// rows of one series begin at starts (int64), of series run_sid (int32, < series).
PyObject* extremes(PyObject*, PyObject* args) {
  unsigned long long mag_address, starts_address, sid_address, keep_address;
  long long rows, runs, series;
  if (!PyArg_ParseTuple(args, "KLKKLLK", &mag_address, &rows, &starts_address, &sid_address, &runs,
                        &series, &keep_address))
    return nullptr;
  const double* mag = reinterpret_cast<const double*>(mag_address);
  const int64_t* starts = reinterpret_cast<const int64_t*>(starts_address);
  const int32_t* run_sid = reinterpret_cast<const int32_t*>(sid_address);
  uint8_t* keep = reinterpret_cast<uint8_t*>(keep_address);
  Py_BEGIN_ALLOW_THREADS
  std::vector<double> high(series, NAN), low(series, NAN);
  std::vector<uint8_t> first(series, 0), high_found(series, 0), low_found(series, 0);
  for (int64_t r = 0; r < runs; r++) {
    const int32_t s = run_sid[r];
    const int64_t end = r + 1 < runs ? starts[r + 1] : rows;
    if (!first[s]) keep[starts[r]] = first[s] = 1;
    double h = high[s], l = low[s];
    for (int64_t i = starts[r]; i < end; i++) {
      const double m = mag[i];
      h = isnan(h) || m > h ? (isnan(m) ? h : m) : h;
      l = isnan(l) || m < l ? (isnan(m) ? l : m) : l;
    }
    high[s] = h, low[s] = l;
  }
  for (int64_t r = 0; r < runs; r++) {
    const int32_t s = run_sid[r];
    if (high_found[s] && low_found[s]) continue;
    const int64_t end = r + 1 < runs ? starts[r + 1] : rows;
    for (int64_t i = starts[r]; i < end; i++) {
      if (!high_found[s] && mag[i] == high[s]) keep[i] = high_found[s] = 1;
      if (!low_found[s] && mag[i] == low[s]) keep[i] = low_found[s] = 1;
    }
  }
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

PyMethodDef methods[] = {
    {"magnitude", magnitude, METH_VARARGS, "magnitude(out, rows, (norm, max_abs, min, max))"},
    {"run_starts", run_starts, METH_VARARGS, "run_starts(out, rows, columns) -> count"},
    {"coarse_keep", coarse_keep, METH_VARARGS, "coarse_keep(step, rows, low, kept, seen, keep)"},
    {"extremes", extremes, METH_VARARGS,
     "extremes(magnitude, rows, starts, run_sid, runs, series, keep)"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kernels", nullptr, -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__kernels(void) { return PyModule_Create(&module); }
