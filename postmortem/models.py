"""Growth models fitted to log10 of a series: a stable phase, then a jump and/or exponential growth.

Each model is a small keyword-only class with ``fit(x, y) -> self`` (ruptures style). Break
models profile the Gaussian likelihood over every candidate break index at once with cumulative
sums, so a fit is O(n). Conventions: ``x`` are the steps (ascending), ``y`` = log10 of the
series, the break ``t0`` is the first step that deviates from the stable level, and the noise
variance is shared by both phases.
"""

from __future__ import annotations


import numpy as np

__all__ = [
    "NoBreak",
    "JumpAt",
    "ExponentialFrom",
    "JumpThenExponential",
    "BREAK_MODELS",
    "select_break",
]

_SSE_FLOOR = 1e-12  # per point, in decades²: keeps exact fits (constant series) finite


class _Model:
    n_params: int  # including the noise variance (and t0 for break models)

    def _score(self, sse: float, n: int) -> None:
        self.sse_ = max(float(sse), _SSE_FLOOR * n)
        self.loglik_ = -0.5 * n * (np.log(2 * np.pi * self.sse_ / n) + 1)
        self.bic_ = -2 * self.loglik_ + self.n_params * np.log(n)


def median(values: np.ndarray) -> float:
    """np.median of a 1-D array of finite floats, bit for bit (the mean of the two middle
    values of an even count), without its overhead: the fits take ~30 000 medians of short
    series, where np.median's checks cost more than the partition."""
    half = len(values) // 2
    if len(values) % 2:
        return float(np.partition(values, half)[half])
    low, high = np.partition(values, (half - 1, half))[half - 1: half + 1]
    return float((low + high) / 2)


def _validate(x, y) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError("x and y must be 1-D arrays of the same length")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise ValueError("x and y must be finite")
    if len(x) > 1 and np.any(np.diff(x) <= 0):
        raise ValueError("x must be strictly increasing")
    return x, y


class NoBreak(_Model):
    """One stable level for the whole series."""

    n_params = 2

    def fit(self, x, y) -> "NoBreak":
        x, y = _validate(x, y)
        self.level_ = float(np.mean(y))
        self._score(np.sum((y - self.level_) ** 2), len(y))
        return self


# Candidates t0 whose profile deviance is within the 95% chi-square(1) quantile of the best one
# form the likelihood-ratio interval of t0. scipy.stats.chi2.ppf(0.95, df=1), written out:
# importing scipy.stats took ~1 s of every `postmortem analyze` (tests check the value).
CHI2_95 = 3.841458820694124


def _prepared(x, y, min_pre: int) -> tuple[np.ndarray, np.ndarray, "_SuffixSums"]:
    """Validated steps, centred values and their suffix sums: what every break model fits on."""
    x, y = _validate(x, y)
    if len(y) < min_pre + 1:
        raise ValueError(f"need at least {min_pre + 1} points, got {len(y)}")
    y = y - median(y)  # centring keeps the cumulative sums well conditioned
    return x, y, _SuffixSums(x, y)

class _BreakModel(_Model):
    """Stable level before t0, a model-specific shape from t0 on; t0 by profile likelihood."""

    def __init__(self, *, min_pre: int = 3) -> None:
        self.min_pre = min_pre

    def fit(self, x, y) -> "_BreakModel":
        return self._fit(*_prepared(x, y, self.min_pre))

    def _fit(self, x: np.ndarray, y: np.ndarray, sums: "_SuffixSums") -> "_BreakModel":
        """The fit on validated steps `x` and centred `y` (the same for every break model)."""
        n = len(y)
        candidates = np.arange(self.min_pre, n)
        sse = np.maximum(self._profile(sums, candidates), _SSE_FLOOR * n)
        best = int(np.argmin(sse))
        k = int(candidates[best])
        self._score(sse[best], n)
        deviance = n * np.log(sse / sse[best])
        inside = candidates[deviance <= CHI2_95]
        self.index_ = k
        self.t0_ = float(x[k])
        self.interval_ = (float(x[inside.min()]), float(x[inside.max()]))
        self._parameters(x, y, k)
        return self

    def _profile(self, sums: "_SuffixSums", k: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _parameters(self, x: np.ndarray, y: np.ndarray, k: int) -> None:
        raise NotImplementedError

    @property
    def growth_per_step(self) -> float:
        """Multiplicative growth per step after t0 (1.0 for no growth)."""
        return float(10.0**self.rate_)

    @property
    def doubling_steps(self) -> float | None:
        return float(np.log10(2.0) / self.rate_) if self.rate_ > 0 else None

    @property
    def jump(self) -> float:
        """Factor between the stable level and the fitted value at t0."""
        return float(10.0**self.jump_decades_)


class JumpAt(_BreakModel):
    """A step change of level at t0."""

    n_params = 4  # level, level after, t0, variance

    def _profile(self, sums, k):
        return sums.pre_sse(k) + sums.post_constant_sse(k)

    def _parameters(self, x, y, k):
        self.level_ = float(np.mean(y[:k]))
        self.jump_decades_ = float(np.mean(y[k:]) - self.level_)
        self.rate_ = 0.0


class ExponentialFrom(_BreakModel):
    """Continuous growth: log-linear from the last stable step on (a hinge), no jump."""

    n_params = 4  # level, rate, t0, variance

    def _profile(self, sums, k):
        return sums.hinge_sse(k)

    def _parameters(self, x, y, k):
        hinge = np.maximum(x - x[k - 1], 0.0)
        design = np.column_stack([np.ones_like(x), hinge])
        (level, rate), *_ = np.linalg.lstsq(design, y, rcond=None)
        self.level_ = float(level)
        self.rate_ = float(rate)
        self.jump_decades_ = float(rate * (x[k] - x[k - 1]))


class JumpThenExponential(_BreakModel):
    """A jump at t0 followed by log-linear growth (or decay) from t0 on."""

    n_params = 5  # level, level at t0, rate, t0, variance

    def _profile(self, sums, k):
        return sums.pre_sse(k) + sums.post_linear_sse(k)

    def _parameters(self, x, y, k):
        self.level_ = float(np.mean(y[:k]))
        post_x, post_y = x[k:] - x[k], y[k:]
        if len(post_x) >= 2:
            rate, start = np.polyfit(post_x, post_y, 1)
        else:
            rate, start = 0.0, post_y[0]
        self.rate_ = float(rate)
        self.jump_decades_ = float(start - self.level_)


BREAK_MODELS = (JumpAt, ExponentialFrom, JumpThenExponential)


def select_break(x, y, *, min_pre: int = 3) -> tuple[_BreakModel, float]:
    """Best break model by BIC and its BIC advantage over the no-break model."""
    baseline = NoBreak().fit(x, y)
    prepared = _prepared(x, y, min_pre)  # once for the three models, not once per fit()
    fitted = [model(min_pre=min_pre)._fit(*prepared) for model in BREAK_MODELS]
    best = min(fitted, key=lambda m: m.bic_)
    return best, float(baseline.bic_ - best.bic_)


class _SuffixSums:
    """Prefix sums of y and suffix sums in a coordinate measured back from the last step.

    Measuring x back from the end keeps short suffixes (a late break) free of cancellation.
    """

    def __init__(self, x: np.ndarray, y: np.ndarray) -> None:
        self.n = len(y)
        u = x[-1] - x

        def prefix(v):
            return np.concatenate([[0.0], np.cumsum(v)])

        def suffix(v):
            return np.concatenate([np.cumsum(v[::-1])[::-1], [0.0]])

        self.u = u
        self.py, self.pyy = prefix(y), prefix(y * y)
        self.sy, self.syy = suffix(y), suffix(y * y)
        self.su, self.suu, self.suy = suffix(u), suffix(u * u), suffix(u * y)

    def pre_sse(self, k):
        return self.pyy[k] - self.py[k] ** 2 / k

    def post_constant_sse(self, k):
        m = self.n - k
        return self.syy[k] - self.sy[k] ** 2 / m

    def post_linear_sse(self, k):
        m = self.n - k
        syy = self.syy[k] - self.sy[k] ** 2 / m
        suu = self.suu[k] - self.su[k] ** 2 / m
        suy = self.suy[k] - self.su[k] * self.sy[k] / m
        with np.errstate(divide="ignore", invalid="ignore"):
            explained = np.where(suu > 1e-12, suy**2 / suu, 0.0)
        return syy - explained

    def hinge_sse(self, k):
        # Regress y on [1, h] over all points, h = (x - x[k-1])+ = u[k-1] - u on the suffix.
        n, m = self.n, self.n - k
        c = self.u[k - 1]
        sh = m * c - self.su[k]
        shh = m * c * c - 2 * c * self.su[k] + self.suu[k]
        shy = c * self.sy[k] - self.suy[k]
        total_y = self.py[-1]
        syy = self.pyy[-1] - total_y**2 / n
        hh = shh - sh**2 / n
        hy = shy - sh * total_y / n
        with np.errstate(divide="ignore", invalid="ignore"):
            explained = np.where(hh > 1e-12, hy**2 / hh, 0.0)
        return syy - explained
