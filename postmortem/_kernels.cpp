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
#include <string.h>

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

// A column of int32 dictionary codes, a null read as -1.
struct CodeColumn {
  const int32_t* data;
  const uint8_t* validity;
  int64_t offset;
};

template <bool kNulls>
inline int32_t code_at(const CodeColumn& c, int64_t i) {
  const int64_t j = c.offset + i;
  if (!kNulls) return c.data[j];
  return bit(c.validity, j) ? c.data[j] : -1;
}

constexpr int64_t kChunk = 4096;  // rows whose change flags are worked out at a time

// Appends to out[found...] the rows base + k where flags[k] (k < n) is set, skipping 8 unset
// flags at a time (run starts and kept rows are a few percent of a batch's rows).
inline int64_t append_set(const uint8_t* flags, int64_t n, int64_t base, int64_t* out, int64_t found) {
  for (int64_t k = 0; k < n;) {
    uint64_t word = 1;
    if (k + 8 <= n) memcpy(&word, flags + k, 8);
    if (word == 0) {
      k += 8;
      continue;
    }
    if (flags[k]) out[found++] = base + k;
    k++;
  }
  return found;
}

// The rows where any of three code columns changes: flags chunk by chunk (no loop-carried
// dependency), then the set ones appended.
template <bool kNulls0, bool kNulls1, bool kNulls2>
int64_t find_run_starts(const CodeColumn* c, int64_t rows, int64_t* out) {
  if (rows == 0) return 0;
  out[0] = 0;
  int64_t found = 1;
  uint8_t change[kChunk];
  for (int64_t base = 1; base < rows; base += kChunk) {
    const int64_t n = rows - base < kChunk ? rows - base : kChunk;
    for (int64_t k = 0; k < n; k++) {
      const int64_t i = base + k;
      change[k] = (code_at<kNulls0>(c[0], i) != code_at<kNulls0>(c[0], i - 1)) |
                  (code_at<kNulls1>(c[1], i) != code_at<kNulls1>(c[1], i - 1)) |
                  (code_at<kNulls2>(c[2], i) != code_at<kNulls2>(c[2], i - 1));
    }
    found = append_set(change, n, base, out, found);
  }
  return found;
}

typedef int64_t (*RunStartsFn)(const CodeColumn*, int64_t, int64_t*);
const RunStartsFn kRunStarts[8] = {
    find_run_starts<false, false, false>, find_run_starts<true, false, false>,
    find_run_starts<false, true, false>,  find_run_starts<true, true, false>,
    find_run_starts<false, false, true>,  find_run_starts<true, false, true>,
    find_run_starts<false, true, true>,   find_run_starts<true, true, true>};

// run_starts(out, rows, (column, column, column)), each column (data, validity, offset) of
// int32 codes: the first row of each run of rows equal in all three (a null counts as -1),
// written to out (int64, room for rows); returns how many, as
// series._run_starts(*(series._codes(c) for c in columns)).
PyObject* run_starts(PyObject*, PyObject* args) {
  unsigned long long out_address;
  long long rows;
  PyObject* columns[3];
  if (!PyArg_ParseTuple(args, "KL(OOO)", &out_address, &rows, &columns[0], &columns[1], &columns[2]))
    return nullptr;
  CodeColumn c[3];
  int nulls = 0;
  for (int k = 0; k < 3; k++) {
    unsigned long long address, bits;
    long long start;
    if (!PyArg_ParseTuple(columns[k], "KKL", &address, &bits, &start)) return nullptr;
    c[k] = CodeColumn{reinterpret_cast<const int32_t*>(address), reinterpret_cast<const uint8_t*>(bits),
                      start};
    nulls |= (bits != 0) << k;
  }
  int64_t found;
  Py_BEGIN_ALLOW_THREADS
  found = kRunStarts[nulls](c, rows, reinterpret_cast<int64_t*>(out_address));
  Py_END_ALLOW_THREADS
  return PyLong_FromLongLong(found);
}

// The largest and smallest non-NaN value of values[begin:end] (a NaN compares false, so it
// never replaces one), four lanes each for independent chains; `any` whether there is one.
void run_range(const double* __restrict__ values, int64_t begin, int64_t end, double* high, double* low,
               bool* any) {
  double h[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
  double l[4] = {INFINITY, INFINITY, INFINITY, INFINITY};
  int64_t numbers = 0, i = begin;
  for (; i + 4 <= end; i += 4) {
    for (int k = 0; k < 4; k++) {
      const double m = values[i + k];
      h[k] = m > h[k] ? m : h[k];
      l[k] = m < l[k] ? m : l[k];
      numbers += m == m;
    }
  }
  for (; i < end; i++) {
    const double m = values[i];
    h[0] = m > h[0] ? m : h[0];
    l[0] = m < l[0] ? m : l[0];
    numbers += m == m;
  }
  for (int k = 1; k < 4; k++) h[0] = h[k] > h[0] ? h[k] : h[0], l[0] = l[k] < l[0] ? l[k] : l[0];
  *high = h[0] > *high ? h[0] : *high;
  *low = l[0] < *low ? l[0] : *low;
  *any |= numbers > 0;
}

// keep[i] = kept[step[i] - low] | (nonfinite[i] > 0), and seen[step[i] - low] = 1.
void mark_steps(const int64_t* __restrict__ step, const int64_t* __restrict__ nf, int64_t rows, const int64_t low,
                const uint8_t* __restrict__ kept, uint8_t* __restrict__ seen, uint8_t* __restrict__ keep) {
  for (int64_t i = 0; i < rows; i++) {
    const int64_t offset = step[i] - low;
    seen[offset] = 1;
    keep[i] = kept[offset] | (nf[i] > 0);
  }
}

// coarse_rows(step, nonfinite, magnitude, rows, starts, run_sid, runs, series, low, kept, seen,
// out_rows, out_sid) -> count: the rows a coarse pass keeps, as series._Builder._coarse's numpy
// path: those whose step (int64; offset step - low into the uint8 tables over the batch's step
// range) is `kept`, those with a non-finite count (int64) above 0, and (series._extremes) the
// first row of each series in the batch and its first row of the largest and of the smallest
// magnitude (NaN ignored; none in a series of NaN only); marks each step present in `seen`.
// Runs of rows of one series begin at starts, of series run_sid (< series). Writes the kept
// rows (int64) and their series (int32) in row order, each with room for `rows`.
//
// First the steps, row by row; then each run's largest and smallest number (four independent
// lanes, no branches), which give each series' own; then a series' extreme is looked for only
// in the runs whose extreme equals it, in order, up to the first row that does (no earlier row
// of the series can equal it: its run's extreme would).
PyObject* coarse_rows(PyObject*, PyObject* args) {
  unsigned long long step_address, nf_address, mag_address, starts_address, sid_address, kept_address,
      seen_address, rows_address, out_sid_address;
  long long rows, runs, series, low;
  if (!PyArg_ParseTuple(args, "KKKLKKLLLKKKK", &step_address, &nf_address, &mag_address, &rows,
                        &starts_address, &sid_address, &runs, &series, &low, &kept_address,
                        &seen_address, &rows_address, &out_sid_address))
    return nullptr;
  const int64_t* step = reinterpret_cast<const int64_t*>(step_address);
  const int64_t* nf = reinterpret_cast<const int64_t*>(nf_address);
  const double* mag = reinterpret_cast<const double*>(mag_address);
  const int64_t* starts = reinterpret_cast<const int64_t*>(starts_address);
  const int32_t* run_sid = reinterpret_cast<const int32_t*>(sid_address);
  const uint8_t* kept = reinterpret_cast<const uint8_t*>(kept_address);
  uint8_t* seen = reinterpret_cast<uint8_t*>(seen_address);
  int64_t* out_rows = reinterpret_cast<int64_t*>(rows_address);
  int32_t* out_sid = reinterpret_cast<int32_t*>(out_sid_address);
  int64_t found = 0;
  Py_BEGIN_ALLOW_THREADS
  std::vector<uint8_t> keep(rows);
  mark_steps(step, nf, rows, low, kept, seen, keep.data());
  std::vector<double> run_high(runs), run_low(runs), high(series, -INFINITY), low_mag(series, INFINITY);
  std::vector<uint8_t> run_any(runs), first(series, 0), high_found(series, 0), low_found(series, 0);
  for (int64_t r = 0; r < runs; r++) {
    const int32_t s = run_sid[r];
    const int64_t begin = starts[r], end = r + 1 < runs ? starts[r + 1] : rows;
    if (!first[s]) keep[begin] = first[s] = 1;
    double h = -INFINITY, l = INFINITY;
    bool any = false;
    run_range(mag, begin, end, &h, &l, &any);
    run_high[r] = h, run_low[r] = l, run_any[r] = any;
    if (any) {
      high[s] = h > high[s] ? h : high[s];
      low_mag[s] = l < low_mag[s] ? l : low_mag[s];
    }
  }
  for (int64_t r = 0; r < runs; r++) {
    const int32_t s = run_sid[r];
    if (!run_any[r]) continue;
    const int64_t begin = starts[r];
    if (!high_found[s] && run_high[r] == high[s]) {
      int64_t i = begin;
      while (mag[i] != high[s]) i++;  // the run holds it: run_range's extreme is one of its values
      keep[i] = high_found[s] = 1;
    }
    if (!low_found[s] && run_low[r] == low_mag[s]) {
      int64_t i = begin;
      while (mag[i] != low_mag[s]) i++;
      keep[i] = low_found[s] = 1;
    }
  }
  for (int64_t r = 0; r < runs; r++) {
    const int64_t end = r + 1 < runs ? starts[r + 1] : rows;
    const int64_t before = found;
    found = append_set(keep.data() + starts[r], end - starts[r], starts[r], out_rows, found);
    for (int64_t k = before; k < found; k++) out_sid[k] = run_sid[r];
  }
  Py_END_ALLOW_THREADS
  return PyLong_FromLongLong(found);
}

PyMethodDef methods[] = {
    {"magnitude", magnitude, METH_VARARGS, "magnitude(out, rows, (norm, max_abs, min, max))"},
    {"run_starts", run_starts, METH_VARARGS, "run_starts(out, rows, columns) -> count"},
    {"coarse_rows", coarse_rows, METH_VARARGS,
     "coarse_rows(step, nonfinite, magnitude, rows, starts, run_sid, runs, series, low, kept, seen, "
     "out_rows, out_sid) -> count"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kernels", nullptr, -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__kernels(void) { return PyModule_Create(&module); }
