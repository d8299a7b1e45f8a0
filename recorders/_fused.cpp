// One-pass moments of float32 host memory: the recorder's per-step statistics on the CPU.
//
// torch needs one kernel (one pass over memory) per statistic: sum, sum of squares, extremes,
// zero count, and for a parameter's update a subtraction, a norm and a copy. Here they are
// fused into one pass per tensor. Each block of 8192 elements is reduced in float32 SIMD
// lanes and folded into float64; a block whose float32 results are not finite (a NaN or inf
// element, or squares that overflow float32) is re-reduced exactly in float64, element by
// element, so that statistics over the finite elements and the count of non-finite ones stay
// right in exactly the runs that need them: the dying ones.
//
// A call measures a list of tensors (a step's parameters, gradients or optimizer state), with
// the GIL released, and splits their elements evenly among the threads of torch's own OpenMP
// team, which torch's import made visible to the process (GOMP_parallel). Threads of our own
// measured slower on a 2-core machine: torch's intra-op threads keep spinning on the other
// core after each torch kernel, and 8.4 MB of gradients took 1.0 ms with a worker of ours
// sharing that core, against 0.56 ms on the calling thread alone. Where no OpenMP runtime is
// loaded, the calling thread does all the work.

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>
#include <math.h>

namespace {

enum Flags { kSum = 1, kZeros = 2, kPrevious = 4, kHash = 8 };

constexpr int64_t kBlock = 8192;           // elements folded into float64 at a time (32 KiB)
constexpr int kWidth = 8;                   // float32 lanes per vector
constexpr int kUnroll = 4;                  // independent accumulators per statistic
static_assert(kBlock % (kWidth * kUnroll) == 0, "a block is a whole number of unrolled steps");

typedef float vf __attribute__((vector_size(4 * kWidth)));
typedef int32_t vi __attribute__((vector_size(4 * kWidth)));

// zlib's CRC-32, from the libz.so.1 that Python's zlib module uses (so that a batch hashes to
// what zlib.crc32 gives), loaded at run time: building needs no zlib headers.
typedef unsigned long (*Crc32Fn)(unsigned long, const unsigned char*, unsigned int);
typedef unsigned long (*Crc32CombineFn)(unsigned long, unsigned long, long);

struct Zlib {
  Crc32Fn crc32 = nullptr;
  Crc32CombineFn combine = nullptr;

  Zlib() {
    void* lib = dlopen("libz.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return;
    crc32 = reinterpret_cast<Crc32Fn>(dlsym(lib, "crc32"));
    combine = reinterpret_cast<Crc32CombineFn>(dlsym(lib, "crc32_combine"));
    if (!crc32 || !combine) crc32 = nullptr;
  }
};

const Zlib& zlib() {
  static const Zlib instance;  // initialised once, thread-safe
  return instance;
}

uint32_t crc_of(const float* x, int64_t n) {
  const unsigned char* bytes = reinterpret_cast<const unsigned char*>(x);
  int64_t left = n * static_cast<int64_t>(sizeof(float));
  unsigned long crc = 0;
  while (left > 0) {  // zlib takes at most 4 GiB a call
    const unsigned int chunk = left > (1LL << 30) ? 1U << 30 : static_cast<unsigned int>(left);
    crc = zlib().crc32(crc, bytes, chunk);
    bytes += chunk;
    left -= chunk;
  }
  return static_cast<uint32_t>(crc);
}

struct Partial {
  int64_t nonfinite = 0, zeros = 0, diff_nonfinite = 0;
  int64_t elements = 0;  // how many elements of the tensor these are
  bool hashed = false;
  uint32_t crc = 0;      // CRC-32 of their bytes, when hashed
  double sum = 0, sumsq = 0, diff_sumsq = 0;
  double min = INFINITY, max = -INFINITY;

  // Another part of the same tensor, the one that follows this one.
  void add(const Partial& o) {
    if (o.hashed) {
      crc = hashed ? zlib().combine(crc, o.crc, o.elements * sizeof(float)) : o.crc;
      hashed = true;
    }
    elements += o.elements;
    nonfinite += o.nonfinite; zeros += o.zeros; diff_nonfinite += o.diff_nonfinite;
    sum += o.sum; sumsq += o.sumsq; diff_sumsq += o.diff_sumsq;
    if (o.min < min) min = o.min;
    if (o.max > max) max = o.max;
  }

};

// Element by element in float64, over finite values only: the block had a NaN, an inf, or
// values whose float32 squares overflow.
template <bool Sum, bool Zeros, bool Prev>
void exact_block(const float* x, const float* prev, int64_t n, Partial& r) {
  for (int64_t i = 0; i < n; i++) {
    double v = x[i];
    if (isfinite(v)) {
      if (Sum) r.sum += v;
      r.sumsq += v * v;
      if (v < r.min) r.min = v;
      if (v > r.max) r.max = v;
      if (Zeros && v == 0) r.zeros++;
    } else {
      r.nonfinite++;
    }
    if (Prev) {
      double e = v - (double)prev[i];
      if (isfinite(e)) r.diff_sumsq += e * e;
      else r.diff_nonfinite++;
    }
  }
}

template <bool Sum, bool Zeros, bool Prev>
inline __attribute__((always_inline)) void reduce_impl(const float* x, float* prev, int64_t n,
                                                      Partial& r) {
  vf mn[kUnroll], mx[kUnroll];
  for (int u = 0; u < kUnroll; u++) {
    mn[u] = vf{} + INFINITY;
    mx[u] = vf{} - INFINITY;
  }
  constexpr int64_t step = kUnroll * kWidth;
  int64_t start = 0;
  for (; start + step <= n; start += kBlock) {
    const int64_t end = start + kBlock < n ? start + kBlock : n - (n - start) % step;
    vf s[kUnroll], q[kUnroll], d[kUnroll], bmn[kUnroll], bmx[kUnroll];
    vi z[kUnroll];
    for (int u = 0; u < kUnroll; u++) {
      s[u] = q[u] = d[u] = vf{};
      z[u] = vi{};
      bmn[u] = mn[u];
      bmx[u] = mx[u];
    }
    for (int64_t i = start; i < end; i += step) {
      for (int u = 0; u < kUnroll; u++) {
        vf a;
        memcpy(&a, x + i + u * kWidth, sizeof a);
        if (Sum) s[u] += a;
        q[u] += a * a;
        bmn[u] = a < bmn[u] ? a : bmn[u];
        bmx[u] = a > bmx[u] ? a : bmx[u];
        if (Zeros) z[u] -= (a == 0.0f);
        if (Prev) {
          vf p;
          memcpy(&p, prev + i + u * kWidth, sizeof p);
          vf e = a - p;
          d[u] += e * e;
        }
      }
    }
    Partial b;
    for (int u = 1; u < kUnroll; u++) {
      s[0] += s[u]; q[0] += q[u]; d[0] += d[u]; z[0] += z[u];
    }
    for (int k = 0; k < kWidth; k++) {
      b.sum += s[0][k]; b.sumsq += q[0][k]; b.diff_sumsq += d[0][k]; b.zeros += z[0][k];
    }
    if (isfinite(b.sumsq) && isfinite(b.sum) && isfinite(b.diff_sumsq)) {
      r.sum += b.sum; r.sumsq += b.sumsq; r.diff_sumsq += b.diff_sumsq; r.zeros += b.zeros;
      for (int u = 0; u < kUnroll; u++) {
        mn[u] = bmn[u];
        mx[u] = bmx[u];
      }
    } else {
      exact_block<Sum, Zeros, Prev>(x + start, prev ? prev + start : nullptr, end - start, r);
    }
    if (Prev) memcpy(prev + start, x + start, (end - start) * sizeof(float));
    if (end != start + kBlock) {
      start = end;
      break;
    }
  }
  if (start < n) {  // the tail, shorter than one unrolled step
    exact_block<Sum, Zeros, Prev>(x + start, prev ? prev + start : nullptr, n - start, r);
    if (Prev) memcpy(prev + start, x + start, (n - start) * sizeof(float));
  }
  for (int u = 0; u < kUnroll; u++) {
    for (int k = 0; k < kWidth; k++) {
      if (mn[u][k] < r.min) r.min = mn[u][k];
      if (mx[u][k] > r.max) r.max = mx[u][k];
    }
  }
}

#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__)
#define CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define CLONES
#endif

#define VARIANT(name, S, Z, P) \
  CLONES void name(const float* x, float* prev, int64_t n, Partial& r) { \
    reduce_impl<S, Z, P>(x, prev, n, r); \
  }
VARIANT(reduce_000, false, false, false)
VARIANT(reduce_100, true, false, false)
VARIANT(reduce_010, false, true, false)
VARIANT(reduce_110, true, true, false)
VARIANT(reduce_001, false, false, true)
VARIANT(reduce_101, true, false, true)
VARIANT(reduce_011, false, true, true)
VARIANT(reduce_111, true, true, true)

typedef void (*Reducer)(const float*, float*, int64_t, Partial&);
const Reducer kReducers[8] = {reduce_000, reduce_100, reduce_010, reduce_110,
                              reduce_001, reduce_101, reduce_011, reduce_111};

struct Item {
  const float* x;
  float* prev;
  int64_t n;
  Reducer reduce;
  bool hash;
};


constexpr int64_t kMinPerThread = 1 << 16;  // 256 KiB: less is not worth starting a team
// Work is split among threads by cost: an element that is also hashed costs this many (zlib's
// CRC-32 runs ~7x slower than the reduction), so the hashing is shared out too.
constexpr int64_t kHashCost = 8;

int64_t cost_per_element(const Item& it) { return it.hash ? kHashCost : 1; }

struct Work {
  const Item* items;
  int64_t count;
  Partial* partials;  // [part][item]
  int64_t per_part;   // cost per part, a whole number of blocks of unhashed elements
};

// The first element of `it` at or after `cost` units into it.
int64_t element_at(const Item& it, int64_t cost) {
  const int64_t per = cost_per_element(it);
  return (cost + per - 1) / per;
}

// Part `part` of the cost of all items laid end to end.
void run_part(const Work& w, int64_t part) {
  const int64_t begin = part * w.per_part, end = begin + w.per_part;
  int64_t offset = 0;  // cost of the items before item i
  for (int64_t i = 0; i < w.count && offset < end; i++) {
    const Item& it = w.items[i];
    const int64_t length = it.n * cost_per_element(it);
    const int64_t lo = element_at(it, begin > offset ? begin - offset : 0);
    const int64_t hi = element_at(it, end - offset < length ? end - offset : length);
    offset += length;
    if (lo < hi) {
      Partial& r = w.partials[part * w.count + i];
      it.reduce(it.x + lo, it.prev ? it.prev + lo : nullptr, hi - lo, r);
      r.elements = hi - lo;
      if (it.hash) {
        r.crc = crc_of(it.x + lo, hi - lo);  // still in this core's cache
        r.hashed = true;
      }
    }
  }
}

typedef void (*ParallelFn)(void (*)(void*), void*, unsigned, unsigned);
typedef int (*IntFn)(void);

struct OpenMP {
  ParallelFn parallel = nullptr;  // GOMP_parallel(fn, data, threads, flags)
  IntFn thread_num = nullptr;
  IntFn num_threads = nullptr;
  IntFn max_threads = nullptr;
};

// The OpenMP runtime torch loaded, if any; looked up on each call so that an import order
// where this module loads first still finds it later.
OpenMP find_openmp() {
  OpenMP omp;
  omp.parallel = reinterpret_cast<ParallelFn>(dlsym(RTLD_DEFAULT, "GOMP_parallel"));
  omp.thread_num = reinterpret_cast<IntFn>(dlsym(RTLD_DEFAULT, "omp_get_thread_num"));
  omp.num_threads = reinterpret_cast<IntFn>(dlsym(RTLD_DEFAULT, "omp_get_num_threads"));
  omp.max_threads = reinterpret_cast<IntFn>(dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
  if (!omp.thread_num || !omp.num_threads || !omp.max_threads) omp.parallel = nullptr;
  return omp;
}

struct TeamWork {
  const Work* work;
  int64_t parts;
  const OpenMP* omp;
};

// Each thread of the team runs the parts its rank strides over: every part runs even when the
// runtime grants fewer threads than asked (a thread limit, a call from inside a parallel region).
void team_body(void* data) {
  const TeamWork* t = static_cast<const TeamWork*>(data);
  const int64_t team = t->omp->num_threads();
  for (int64_t part = t->omp->thread_num(); part < t->parts; part += team) {
    run_part(*t->work, part);
  }
}

void run(const Item* items, int64_t count, Partial* out) {
  int64_t total = 0;
  for (int64_t i = 0; i < count; i++) total += items[i].n * cost_per_element(items[i]);
  const OpenMP omp = total >= 2 * kMinPerThread ? find_openmp() : OpenMP();
  int64_t parts = omp.parallel ? omp.max_threads() : 1;
  if (total / kMinPerThread < parts) parts = total / kMinPerThread;
  if (parts < 2) {
    Work w{items, count, out, total};
    run_part(w, 0);
    return;
  }
  const int64_t blocks = (total + kBlock - 1) / kBlock;
  Partial* partials = new Partial[parts * count];
  Work w{items, count, partials, (blocks + parts - 1) / parts * kBlock};
  TeamWork team{&w, parts, &omp};
  omp.parallel(team_body, &team, static_cast<unsigned>(parts), 0);
  for (int64_t p = 0; p < parts; p++) {
    for (int64_t i = 0; i < count; i++) out[i].add(partials[p * count + i]);
  }
  delete[] partials;
}

constexpr int kColumns = 9;  // numel, finite, sum, sumsq, min, max, zeros, saturated, nonfinite
// Per item: moments, moments of the difference, CRC-32, and whether the variance cancels.
constexpr int kRow = 2 * kColumns + 2;
// Below this, var = E[x^2] - mean^2 from float32-accumulated sums has lost too many digits
// (recorders/statistics.py applies the same rule to torch's results).
constexpr double kCancellationLimit = 1e-3;

bool variance_cancels(double sum, double sumsq, int64_t finite) {
  const double mean = sum / finite, mean_sq = sumsq / finite;
  return mean_sq > 0 && !(mean_sq - mean * mean > kCancellationLimit * mean_sq);
}

// One row of moments in the layout of recorders.statistics.Moments, NaN where not measured.
void write_row(double* row, int64_t numel, int64_t nonfinite, double sum, double sumsq,
               double min, double max, double zeros) {
  const int64_t finite = numel - nonfinite;
  const double values[kColumns] = {
      static_cast<double>(numel), static_cast<double>(finite), sum, sumsq,
      finite ? min : NAN, finite ? max : NAN, zeros, NAN, static_cast<double>(nonfinite)};
  memcpy(row, values, sizeof values);
}

// moments_many([(address, numel, previous, flags), ...]) -> bytearray of float64: per item, the
// moments row of the tensor, that of `tensor - previous` (all NaN unless kPrevious), the
// CRC-32 of the tensor's bytes (NaN unless kHash, or where libz.so.1 cannot be loaded), and 1
// where its variance cancels (kSum only), else 0.
PyObject* moments_many(PyObject*, PyObject* args) {
  PyObject* list;
  if (!PyArg_ParseTuple(args, "O!", &PyList_Type, &list)) return nullptr;
  const Py_ssize_t count = PyList_GET_SIZE(list);
  Item* items = new Item[count > 0 ? count : 1];
  int* flags = new int[count > 0 ? count : 1];
  for (Py_ssize_t i = 0; i < count; i++) {
    unsigned long long address, previous;
    long long numel;
    if (!PyArg_ParseTuple(PyList_GET_ITEM(list, i), "KLKi", &address, &numel, &previous,
                          &flags[i])) {
      delete[] items;
      delete[] flags;
      return nullptr;
    }
    if (numel < 0 || flags[i] < 0 || flags[i] > (kSum | kZeros | kPrevious | kHash) ||
        (numel > 0 && (address == 0 || (flags[i] & kPrevious && previous == 0)))) {
      delete[] items;
      delete[] flags;
      PyErr_SetString(PyExc_ValueError, "moments_many: bad address, size or flags");
      return nullptr;
    }
    float* prev = flags[i] & kPrevious ? reinterpret_cast<float*>(previous) : nullptr;
    items[i] = Item{reinterpret_cast<const float*>(address), prev, numel,
                    kReducers[flags[i] & (kSum | kZeros | kPrevious)],
                    (flags[i] & kHash) && zlib().crc32 != nullptr};
  }
  PyObject* result = PyByteArray_FromStringAndSize(nullptr, count * kRow * sizeof(double));
  if (result) {
    Partial* out = new Partial[count > 0 ? count : 1];
    Py_BEGIN_ALLOW_THREADS
    run(items, count, out);
    Py_END_ALLOW_THREADS
    double* rows = reinterpret_cast<double*>(PyByteArray_AS_STRING(result));
    for (Py_ssize_t i = 0; i < count; i++) {
      const Partial& r = out[i];
      double* row = rows + i * kRow;
      write_row(row, items[i].n, r.nonfinite, flags[i] & kSum ? r.sum : NAN, r.sumsq, r.min,
                r.max, flags[i] & kZeros ? static_cast<double>(r.zeros) : NAN);
      if (flags[i] & kPrevious) {
        write_row(row + kColumns, items[i].n, r.diff_nonfinite, NAN, r.diff_sumsq, NAN, NAN, NAN);
      } else {
        for (int k = 0; k < kColumns; k++) row[kColumns + k] = NAN;
      }
      // An empty tensor's bytes hash to 0, as zlib.crc32(b"") does.
      row[2 * kColumns] = items[i].hash ? static_cast<double>(r.crc) : NAN;
      const int64_t finite = items[i].n - r.nonfinite;
      row[2 * kColumns + 1] = flags[i] & kSum && finite > 0 && variance_cancels(r.sum, r.sumsq, finite);
    }
    delete[] out;
  }
  delete[] items;
  delete[] flags;
  return result;
}

PyMethodDef methods[] = {
    {"moments_many", moments_many, METH_VARARGS,
     "moments_many([(address, numel, previous, flags), ...]) -> bytearray of float64: per "
     "item, 9 moments of the tensor (numel, finite, sum, sumsq, min, max, zeros, saturated, "
     "nonfinite; NaN where not measured), 9 of tensor - previous, its bytes' CRC-32, and "
     "whether its variance cancels"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fused", nullptr, -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__fused(void) {
  return PyModule_Create(&module);
}
