"""The noise of a paired learning-signal difference around its fitted trend, modelled as AR(1), and the standard
error it gives any weighted mean of the series (the window mean, the last third).

Why a model: a trend fitted to a short window absorbs the slow part of slowly drifting noise, the part that moves a
mean most, so the residuals look smaller and less correlated than the noise is. Their plain variance and
autocorrelation time made a one-sided 95% bound of the window mean miss 15% of the time at 24 steps (7% at 200).
Here the AR(1) coefficient and variance are those whose residuals, after that same fit, have the observed variance
and lag-1 cross-product in expectation (method of moments through the fit), and the coefficient is taken half a
standard error above its estimate: estimated from a few steps it is often too low, and too low a coefficient makes
the interval too narrow (with it the bound misses 5.5% at 24 steps and 5.1% at 200 on AR(1) 0.5 noise).

O(n log n): R @ x (R_ij = phi^|i-j|) is an FFT convolution, and the traces come from p x p products of the fit's
design: 10,000 steps take about 60 ms a signal on one loaded core.
"""

from __future__ import annotations

import math

import numpy as np

MAX_PHI = 0.97
"""Beyond this the noise is a random walk over any window: the moment equation has no useful solution."""
PHI_UPPER_ERRORS = 0.5
"""How many standard errors (sqrt((1 - phi^2) / n)) above its estimate the coefficient is taken."""


def correlate(phi: float, columns: np.ndarray) -> np.ndarray:
    """R @ columns for the AR(1) correlation matrix R_ij = phi^|i - j| (columns: n x p), by FFT."""
    n = columns.shape[0]
    kernel = phi ** np.abs(np.arange(-(n - 1), n, dtype=float))
    size = 1 << (3 * n - 2).bit_length()
    spectrum = np.fft.rfft(kernel, size)[:, None] * np.fft.rfft(columns, size, axis=0)
    return np.fft.irfft(spectrum, size, axis=0)[n - 1 : 2 * n - 1]


def _neighbours(columns: np.ndarray) -> np.ndarray:
    """A @ columns with A the symmetric lag-1 matrix (1/2 on both off-diagonals): x'Ax = sum x_t x_(t+1)."""
    out = np.zeros_like(columns)
    out[:-1] += 0.5 * columns[1:]
    out[1:] += 0.5 * columns[:-1]
    return out


def _expected_lag_ratio(phi: float, design: np.ndarray, gram_inverse: np.ndarray, lagged: np.ndarray) -> float:
    """E[sum r_t r_(t+1)] / E[sum r_t^2] for the residuals r = M e of AR(1) noise e after the least-squares fit
    (M = I - H): tr(A M R M) / tr(M R), from p x p products only."""
    n = design.shape[0]
    rx = correlate(phi, design)
    xrx, xax = design.T @ rx, design.T @ lagged
    trace_mr = n - float(np.trace(gram_inverse @ xrx))
    trace_amrm = (n - 1) * phi - 2 * float(np.trace(gram_inverse @ rx.T @ lagged))
    trace_amrm += float(np.trace(gram_inverse @ xrx @ gram_inverse @ xax))
    return trace_amrm / trace_mr if trace_mr > 0 else 0.0


def fit_ar1(residuals: np.ndarray, design: np.ndarray) -> tuple[float, float]:
    """(phi, sigma^2) of AR(1) noise that leaves these residuals after a least-squares fit of `design` (module
    docstring): phi its one-sided upper bound, sigma^2 from the residuals' variance at that phi."""
    n = len(residuals)
    sum_squares = float(np.dot(residuals, residuals))
    if sum_squares <= 0 or n <= design.shape[1] + 1:
        return 0.0, 0.0
    gram_inverse = np.linalg.pinv(design.T @ design)
    lagged = _neighbours(design)
    observed = float(np.dot(residuals[:-1], residuals[1:])) / sum_squares
    low, high = 0.0, MAX_PHI
    if _expected_lag_ratio(low, design, gram_inverse, lagged) >= observed:
        high = low
    elif _expected_lag_ratio(high, design, gram_inverse, lagged) <= observed:
        low = high
    for _ in range(30 if low < high else 0):
        middle = (low + high) / 2
        if _expected_lag_ratio(middle, design, gram_inverse, lagged) < observed:
            low = middle
        else:
            high = middle
    phi = min(MAX_PHI, (low + high) / 2 + PHI_UPPER_ERRORS * math.sqrt(max(0.0, 1 - ((low + high) / 2) ** 2) / n))
    trace_mr = n - float(np.trace(gram_inverse @ design.T @ correlate(phi, design)))
    return phi, sum_squares / max(trace_mr, 1e-12)


def mean_errors(phi: float, variance: float, weights: np.ndarray) -> np.ndarray:
    """Standard error of each weighted mean w'd (weights: n x q columns) under AR(1) noise (phi, variance)."""
    return np.sqrt(np.maximum(0.0, variance * np.sum(weights * correlate(phi, weights), axis=0)))


def variance_degrees(phi: float, design: np.ndarray) -> float:
    """Degrees of freedom of sigma^2 = RSS / tr(M R) (Satterthwaite: tr(M R)^2 / tr(M R M R)): what the steps are
    worth for a variance after the fit, fewer the slower the noise drifts."""
    n = design.shape[0]
    gram_inverse = np.linalg.pinv(design.T @ design)
    rx = correlate(phi, design)
    xrx = design.T @ rx
    lags = np.arange(1, n)
    trace_rr = n + 2 * float(np.sum((n - lags) * phi ** (2 * lags)))
    trace_mr = n - float(np.trace(gram_inverse @ xrx))
    trace_mrmr = trace_rr - 2 * float(np.trace(gram_inverse @ rx.T @ rx))
    trace_mrmr += float(np.trace(gram_inverse @ xrx @ gram_inverse @ xrx))
    return trace_mr**2 / trace_mrmr if trace_mrmr > 0 else 1.0
