"""Tensor statistics against a plain numpy float64 reference, including NaN, inf and overflow."""

import math

import numpy as np
import pytest
import torch

from recorders.statistics import (MomentBatch, combine, exact_moments, host_rows, measure_now,
                                  params_and_updates, summarize)


@pytest.fixture(autouse=True)
def _both_backends(backend):
    """Every statistic is checked with the fused kernel and with torch's kernels."""


def reference(x: np.ndarray) -> dict:
    x = x.astype(np.float64).ravel()
    finite = x[np.isfinite(x)]
    out = {"numel": x.size, "nonfinite": int((~np.isfinite(x)).sum()),
           "norm": float(np.sqrt(np.sum(finite ** 2))),
           "zero_frac": float(np.mean(x == 0)) if x.size else None}
    if finite.size:
        out.update(max_abs=float(np.max(np.abs(finite))), mean=float(finite.mean()),
                   std=float(finite.std()), min=float(finite.min()), max=float(finite.max()))
    else:
        out.update(max_abs=None, mean=None, std=None, min=None, max=None)
    return out


def assert_matches(stats, ref, rtol=1e-5):
    assert stats.numel == ref["numel"]
    assert stats.nonfinite == ref["nonfinite"]
    assert stats.norm == pytest.approx(ref["norm"], rel=rtol, abs=1e-30)
    if "zero_frac" in ref:  # not measured for parameters
        assert stats.zero_frac == pytest.approx(ref["zero_frac"])
    for key in ("max_abs", "min", "max"):
        if ref[key] is None:
            assert getattr(stats, key) is None
        else:
            assert getattr(stats, key) == pytest.approx(ref[key], rel=1e-6)
    if ref["mean"] is None:
        assert stats.mean is None and stats.std is None
    else:
        scale = max(ref["std"], abs(ref["mean"]), 1e-30)
        assert stats.mean == pytest.approx(ref["mean"], abs=1e-5 * scale)
        assert stats.std == pytest.approx(ref["std"], rel=1e-3, abs=1e-6 * scale)


def make_cases():
    rng = np.random.default_rng(0)
    normal = rng.standard_normal(10_000).astype(np.float32)
    with_nan = normal.copy()
    with_nan[rng.choice(10_000, 37, replace=False)] = np.nan
    with_inf = normal.copy()
    with_inf[[3, 99]] = [np.inf, -np.inf]
    overflowing = (rng.standard_normal(5_000) * 1e20).astype(np.float32)  # squares overflow f32
    near_max = np.array([3e38, -3e38, 1.0], dtype=np.float32)
    relu = np.maximum(normal, 0)
    neg_zero = np.where(normal > 0, normal, np.float32(-0.0)).astype(np.float32)
    constant = np.ones(1_000, dtype=np.float32) + np.float32(1e-3) * normal[:1_000]
    all_nan = np.full(10, np.nan, dtype=np.float32)
    # Float32 extremes come from the int32 bits: all-negative tensors take the other branch,
    # and a NaN with its sign bit set is invisible to the integer maximum.
    all_negative = -np.abs(normal[:500]) - np.float32(0.5)
    negative_and_neg_zero = np.concatenate([all_negative, np.float32([-0.0])])
    negative_nan = normal.copy()
    negative_nan[[5, 17]] = -np.float32(np.nan)
    return {
        "normal": normal, "with_nan": with_nan, "with_inf": with_inf,
        "overflowing": overflowing, "near_max": near_max, "relu": relu, "neg_zero": neg_zero,
        "nearly_constant": constant, "all_nan": all_nan, "all_negative": all_negative,
        "negative_and_neg_zero": negative_and_neg_zero, "negative_nan": negative_nan,
        "float64": rng.standard_normal(777), "offset": (normal + 1000).astype(np.float32),
        "empty": np.zeros(0, dtype=np.float32),
    }


@pytest.mark.parametrize("name", list(make_cases()))
def test_fast_path_matches_reference(name):
    x = make_cases()[name]
    stats = summarize(measure_now(torch.from_numpy(x), sums=True, zeros=True))
    assert_matches(stats, reference(x))


@pytest.mark.parametrize("name", list(make_cases()))
def test_exact_path_matches_reference(name):
    x = make_cases()[name]
    stats = summarize(exact_moments(torch.from_numpy(x), sums=True, zeros=True))
    assert_matches(stats, reference(x))


def test_overflowing_tensor_has_finite_norm():
    x = torch.full((1000,), 1e20)
    stats = summarize(measure_now(x))
    assert math.isfinite(stats.norm)
    assert stats.norm == pytest.approx(1e20 * math.sqrt(1000), rel=1e-6)
    assert stats.nonfinite == 0


def test_half_precision_and_integers():
    """Measured from a float32 copy where float32 holds every value; integers beyond 2**24,
    which it would round, exactly in float64."""
    h = torch.randn(1000).half()
    h[[3, 7]] = torch.tensor([float("inf"), float("nan")]).half()
    assert_matches(summarize(measure_now(h, zeros=True)), reference(h.float().numpy()), rtol=1e-3)
    b = torch.randn(1000).bfloat16()
    assert_matches(summarize(measure_now(b, zeros=True)), reference(b.float().numpy()), rtol=1e-3)
    labels = torch.randint(0, 10, (64,))
    assert_matches(summarize(measure_now(labels, zeros=True)), reference(labels.numpy()))
    pixels = torch.randint(0, 256, (3, 32, 32), dtype=torch.uint8)
    assert_matches(summarize(measure_now(pixels, zeros=True)), reference(pixels.numpy()))
    mask = torch.rand(500) > 0.5
    assert_matches(summarize(measure_now(mask, zeros=True)), reference(mask.numpy()))
    ids = torch.tensor([2 ** 24 + 1, 2 ** 40 + 3, -(2 ** 53) + 1, 0, 5])
    stats = summarize(measure_now(ids, zeros=True))
    assert (stats.min, stats.max) == (-(2 ** 53) + 1, 2 ** 40 + 3)  # float64 holds these
    assert stats.mean == pytest.approx(ids.double().mean().item(), rel=1e-12)
    assert stats.zero_frac == 0.2


def test_batch_reads_many_tensors_at_once():
    cases = make_cases()
    batch = MomentBatch()
    indices = {name: batch.add(torch.from_numpy(x), sums=True, zeros=True)
               for name, x in cases.items()}
    offset = batch.add_value(torch.tensor(2.5))
    moments, values = batch.read()
    assert values[offset] == 2.5
    for name, index in indices.items():
        assert_matches(summarize(moments[index]), reference(cases[name]))


def test_combine_equals_moments_of_concatenation():
    rng = np.random.default_rng(1)
    a = rng.standard_normal(300).astype(np.float32)
    b = (rng.standard_normal(500) * 3 + 1).astype(np.float32)
    b[7] = np.nan
    m = combine(measure_now(torch.from_numpy(a), zeros=True),
                measure_now(torch.from_numpy(b), zeros=True))
    assert_matches(summarize(m), reference(np.concatenate([a, b])))


@pytest.mark.parametrize("kind", ["tanh", "sigmoid"])
def test_saturation_fraction(kind):
    x = torch.randn(5000) * 4
    y = torch.tanh(x) if kind == "tanh" else torch.sigmoid(x)
    expected = ((y.abs() > 0.99) if kind == "tanh" else ((y < 0.01) | (y > 0.99))).double().mean()
    fast = summarize(measure_now(y, saturation=kind))
    exact = summarize(exact_moments(y, saturation=kind))
    assert fast.sat_frac == pytest.approx(float(expected))
    assert exact.sat_frac == pytest.approx(float(expected))
    small = torch.randn(100) * 0.1
    calm = torch.tanh(small) if kind == "tanh" else torch.sigmoid(small)
    assert summarize(measure_now(calm, saturation=kind)).sat_frac == 0.0


@pytest.mark.parametrize("name", list(make_cases()))
def test_activation_path_matches_reference(name):
    from recorders.statistics import activation_moments

    x = make_cases()[name]
    stats = summarize(activation_moments(torch.from_numpy(x), None))
    assert_matches(stats, reference(x))


@pytest.mark.parametrize("name", list(make_cases()))
def test_update_path_matches_reference(name):
    """The update is measured at once (sum of squares only), exactly where float32 fails."""
    from recorders.statistics import update_moments

    x = make_cases()[name]
    stats, ref = summarize(update_moments(torch.from_numpy(x))), reference(x)
    assert stats.numel == ref["numel"] and stats.nonfinite == ref["nonfinite"]
    assert stats.norm == pytest.approx(ref["norm"], rel=1e-5, abs=1e-30)
    assert math.isfinite(stats.norm)


@pytest.mark.parametrize("kind", [None, "tanh"])
def test_large_activation_measured_in_slices_matches_reference(kind):
    """Outputs larger than two cache slices are measured slice by slice and combined."""
    from recorders.statistics import activation_moments, cache_slice

    rng = np.random.default_rng(2)
    size = cache_slice()
    x = (rng.standard_normal(2 * size + 12_345) * 3).astype(np.float32)
    if kind == "tanh":
        x = np.tanh(x)
    x[rng.choice(x.size, 50_000, replace=False)] = 0.0
    x[[7, size + 1]] = np.float32(-0.0)
    x[[11, 2 * size + 5]] = [np.nan, np.inf]
    x[size - 1] = np.float32(1e30)  # squares overflow float32 in one slice
    stats = summarize(activation_moments(torch.from_numpy(x), kind))
    assert_matches(stats, reference(x))
    if kind == "tanh":
        finite = x[np.isfinite(x)]
        assert stats.sat_frac == pytest.approx(np.sum(np.abs(x) > 0.99) / x.size)
        assert finite.size == x.size - 2


@pytest.mark.parametrize("size", [1, 31, 32, 33, 8191, 8192, 8193, 3 * 8192 + 40])
@pytest.mark.parametrize("poison", [None, "nan", "inf", "overflow"])
def test_block_edges_and_non_finite_blocks(size, poison):
    """Sizes around the kernel's vector step and 8192-element blocks; a bad element in the
    middle block or the tail sends only that part to the exact float64 path."""
    rng = np.random.default_rng(size)
    x = rng.standard_normal(size).astype(np.float32)
    x[::5] = 0.0
    if poison and size > 2:
        x[size // 2] = {"nan": np.nan, "inf": -np.inf, "overflow": np.float32(2e19)}[poison]
        x[-1] = {"nan": np.nan, "inf": np.inf, "overflow": np.float32(-3e38)}[poison]
    assert_matches(summarize(measure_now(torch.from_numpy(x), sums=True, zeros=True)), reference(x))


@pytest.mark.parametrize("name", list(make_cases()))
def test_param_and_update_in_one_pass(name):
    """Moments of a parameter and of its change since `previous`, which then holds the
    parameter: exact where float32 fails (non-finite values on either side, overflow)."""
    now = make_cases()[name]
    rng = np.random.default_rng(3)
    previous = (now.astype(np.float64) + rng.standard_normal(now.size) * 1e-2).astype(now.dtype)
    if now.size > 20:
        previous[[1, 9]] = [np.inf, np.nan]
    with np.errstate(invalid="ignore"):  # inf - inf
        change = now.astype(np.float64) - previous.astype(np.float64)
    prev_t = torch.from_numpy(previous.copy())
    (moments,), (update,) = params_and_updates([(torch.from_numpy(now), prev_t)])
    ref = reference(now)
    del ref["zero_frac"]
    assert_matches(summarize(moments), ref)
    finite = change[np.isfinite(change)]
    assert summarize(update).nonfinite == change.size - finite.size
    assert summarize(update).norm == pytest.approx(np.sqrt(np.sum(finite ** 2)), rel=1e-5, abs=1e-30)
    np.testing.assert_array_equal(prev_t.numpy(), now)


def test_non_contiguous_and_strided_tensors_are_measured_whole():
    x = torch.randn(64, 48)
    for t in (x.t(), x[:, ::3], x[::2]):
        assert_matches(summarize(measure_now(t, sums=True, zeros=True)),
                       reference(t.contiguous().numpy()))


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_many_tensors_in_one_call(threads):
    """One call measures several tensors of mixed sizes, each with its own update; with
    several threads their elements are split at block edges inside tensors, and each
    tensor's parts are combined again."""
    torch.set_num_threads(threads)
    rng = np.random.default_rng(4)
    sizes = [5, 200_000, 8193, 0, 300_001, 77, 150_000]
    nows = [rng.standard_normal(n).astype(np.float32) for n in sizes]
    nows[1][[0, 131_072, 199_999]] = [np.nan, np.inf, np.float32(1e30)]
    nows[4][150_000] = -np.inf
    previous = [(x + rng.standard_normal(x.size).astype(np.float32)) for x in nows]
    with np.errstate(invalid="ignore"):  # inf - inf
        expected = [x.astype(np.float64) - p.astype(np.float64)
                    for x, p in zip(nows, previous)]
    prev_t = [torch.from_numpy(p.copy()) for p in previous]
    results = params_and_updates([(torch.from_numpy(x), p) for x, p in zip(nows, prev_t)])
    for x, p, change, moments, update in zip(nows, prev_t, expected, *results):
        ref = reference(x)
        del ref["zero_frac"]
        assert_matches(summarize(moments), ref)
        finite = change[np.isfinite(change)]
        assert summarize(update).nonfinite == change.size - finite.size
        assert summarize(update).norm == pytest.approx(np.sqrt(np.sum(finite ** 2)), rel=1e-5,
                                                       abs=1e-30)
        np.testing.assert_array_equal(p.numpy(), x)
    batch = MomentBatch()
    indices = [batch.add(torch.from_numpy(x), sums=True, zeros=True) for x in nows]
    moments, _ = batch.read()
    for x, i in zip(nows, indices):
        assert_matches(summarize(moments[i]), reference(x))


def test_sparse_tensor_measured_as_if_dense():
    """A sparse gradient (duplicate indices summed, unstored zeros counted) is measured
    without being densified, with the same statistics as its dense form."""
    indices = torch.tensor([[0, 3, 3, 7], [1, 2, 2, 0]])
    values = torch.tensor([1.5, -2.0, 0.5, 4.0])
    sparse = torch.sparse_coo_tensor(indices, values, (9, 4), check_invariants=True)
    dense = sparse.to_dense().numpy()
    assert_matches(summarize(measure_now(sparse, sums=True, zeros=True)), reference(dense))
    csr = sparse.to_sparse_csr()
    assert_matches(summarize(measure_now(csr, sums=True, zeros=True)), reference(dense))


def test_channels_last_tensors_are_measured_in_place():
    """Channels-last convolution tensors store every element once, in another order: measured
    without a copy, and a parameter's update pairs elements right whatever the two layouts."""
    from recorders.statistics import activation_moments

    x = torch.randn(4, 3, 5, 7)
    x[0, 1] = 0.0
    cl = x.to(memory_format=torch.channels_last)
    ref = reference(x.numpy())
    assert_matches(summarize(activation_moments(cl, None)), ref)
    assert_matches(summarize(measure_now(cl, sums=True, zeros=True)), ref)
    now = cl + 1.0
    for previous in (cl.clone(), x.clone()):  # same layout, then a contiguous copy
        (moments,), (update,) = params_and_updates([(now, previous)])
        assert summarize(update).norm == pytest.approx(np.sqrt(x.numel()), rel=1e-5)
        np.testing.assert_array_equal(previous.numpy(), now.numpy())


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_content_hash_is_the_crc32_of_the_bytes_in_c_order(threads):
    """A batch's hash is zlib's CRC-32 of its bytes in C order, whoever computes it: the
    fused kernel in the pass that measures it (its parts hashed by several threads and
    combined), or zlib itself (other dtypes, other layouts, no kernel)."""
    import zlib

    from recorders.statistics import content_hash

    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(5)
    tensors = [torch.randn(300_001, generator=g), torch.randn(0), torch.randn(7, generator=g),
               torch.randn(2, 3, 40, 50, generator=g).to(memory_format=torch.channels_last),
               torch.randint(0, 10, (64,), generator=g), torch.randn(3, 500, generator=g).t(),
               torch.randn(200_000, generator=g).double()]
    expected = [f"{zlib.crc32(t.contiguous().numpy().tobytes()):08x}" for t in tensors]
    batch = MomentBatch()
    indices = [batch.add(t, sums=True, zeros=True, hashed=True) for t in tensors]
    unhashed = batch.add(torch.randn(100_000, generator=g))  # in the same kernel call
    moments, _ = batch.read()
    assert [batch.content_hash(i) for i in indices] == expected
    assert [content_hash(t) for t in tensors] == expected
    assert_matches(summarize(moments[indices[0]]), reference(tensors[0].numpy()))
    assert summarize(moments[unhashed]).numel == 100_000


@pytest.mark.parametrize("zeros", [False, True])
def test_cancelling_variance_is_measured_exactly_in_float64(zeros):
    """Values near a large mean (a LayerNorm weight near 1.0) lose the variance in float32
    sums: what is re-measured gives the float64 reference's moments bit for bit, a NaN among
    them or not."""
    rng = np.random.default_rng(3)
    values = (1.0 + 1e-4 * rng.standard_normal(3_000)).astype(np.float32)
    values[::7] = 1.0
    with_nan = values.copy()
    with_nan[5] = np.nan
    for x in (values, with_nan):
        t = torch.from_numpy(x)
        batch = MomentBatch()
        batch.add(t, sums=True, zeros=zeros)
        got = batch.read()[0][0]
        exact = exact_moments(t, sums=True, zeros=zeros)
        assert np.array_equal(got, np.array(exact, dtype=np.float64), equal_nan=True)
        finite = x[np.isfinite(x)].astype(np.float64)
        assert exact.sumsq == pytest.approx(float(np.sum(finite ** 2)), rel=1e-12)
        std = summarize(got).std
        assert std == pytest.approx(float(finite.std()), rel=1e-3)


@pytest.mark.parametrize("threads", [1, 2])
def test_host_rows_are_the_rows_a_batch_reads(threads, backend):
    """`host_rows` (one call for a backward's gradients) gives, bit for bit, the rows that a
    MomentBatch reads for the same tensors, and None for a tensor it cannot take as it is."""
    torch.set_num_threads(threads)
    rng = np.random.default_rng(7)
    tensors = [torch.from_numpy(rng.standard_normal(n).astype(np.float32))
               for n in (5, 200_000, 0, 77, 150_000)]
    tensors[1][[0, 5, 9]] = torch.tensor([-0.0, 0.0, 1e30])
    tensors[3][2], tensors[4][1] = math.nan, -math.inf
    rows = host_rows(tensors, zeros=True)
    if backend == "torch":
        assert rows is None
        return
    batch = MomentBatch()
    indices = [batch.add(t, zeros=True) for t in tensors]
    assert rows.tobytes() == np.ascontiguousarray(batch.read()[0][indices]).tobytes()
    assert host_rows(tensors + [torch.zeros(3, dtype=torch.float64)], zeros=True) is None
    assert host_rows([torch.zeros(4, 3).t()], zeros=True) is None
