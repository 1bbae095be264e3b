"""Small numerical helpers in plain Python (the advisor must run where scipy is not installed:
scipy is only in the optional `spec` extra). Tests compare them with scipy where it is there."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

# Two-sided 95 % Student t quantiles t_{0.975, df}, df = 1..30 (any statistics table); above 30
# the normal 1.96 is within 4 %.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
Z975 = 1.959964


def t975(df: int) -> float:
    """The two-sided 95 % quantile of Student's t with `df` degrees of freedom (df >= 1)."""
    if df < 1:
        raise ValueError("t975 needs at least one degree of freedom")
    return _T975[df - 1] if df <= len(_T975) else Z975


def _gamma_series(s: float, x: float) -> float:
    """Regularised lower incomplete gamma P(s, x) by its series (x < s + 1)."""
    term = total = 1.0 / s
    a = s
    for _ in range(1000):
        a += 1.0
        term *= x / a
        total += term
        if abs(term) < abs(total) * 1e-15:
            break
    return total * math.exp(-x + s * math.log(x) - math.lgamma(s))


def _gamma_fraction(s: float, x: float) -> float:
    """Regularised upper incomplete gamma Q(s, x) by Lentz's continued fraction (x >= s + 1)."""
    tiny = 1e-300
    b = x + 1.0 - s
    c = 1.0 / tiny
    d = 1.0 / b
    h = d
    for i in range(1, 1000):
        an = -i * (i - s)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return math.exp(-x + s * math.log(x) - math.lgamma(s)) * h


def chi2_sf(statistic: float, df: int) -> float:
    """P(X > statistic) for X ~ chi-square(df)."""
    if df < 1:
        raise ValueError("chi-square needs at least one degree of freedom")
    if statistic <= 0:
        return 1.0
    s, x = df / 2.0, statistic / 2.0
    if x < s + 1.0:
        return max(0.0, 1.0 - _gamma_series(s, x))
    return min(1.0, _gamma_fraction(s, x))


def nelder_mead(f: Callable[[Sequence[float]], float], start: Sequence[float], *,
                step: float = 0.5, iterations: int = 400, tolerance: float = 1e-10) -> list[float]:
    """Minimise f from `start` (the textbook simplex method; enough for two parameters)."""
    n = len(start)
    simplex = [list(start)]
    for i in range(n):
        point = list(start)
        point[i] += step
        simplex.append(point)
    values = [f(p) for p in simplex]
    for _ in range(iterations):
        order = sorted(range(n + 1), key=values.__getitem__)
        simplex = [simplex[i] for i in order]
        values = [values[i] for i in order]
        if abs(values[-1] - values[0]) < tolerance:
            break
        centroid = [sum(p[j] for p in simplex[:-1]) / n for j in range(n)]
        worst = simplex[-1]
        reflected = [c + (c - w) for c, w in zip(centroid, worst, strict=True)]
        fr = f(reflected)
        if fr < values[0]:
            expanded = [c + 2 * (c - w) for c, w in zip(centroid, worst, strict=True)]
            fe = f(expanded)
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        else:
            contracted = [c + 0.5 * (w - c) for c, w in zip(centroid, worst, strict=True)]
            fc = f(contracted)
            if fc < values[-1]:
                simplex[-1], values[-1] = contracted, fc
            else:
                best = simplex[0]
                simplex = [best] + [[b + 0.5 * (p - b) for b, p in zip(best, q, strict=True)]
                                    for q in simplex[1:]]
                values = [values[0]] + [f(p) for p in simplex[1:]]
    best_index = min(range(n + 1), key=values.__getitem__)
    return simplex[best_index]


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def sample_sd(values: Sequence[float]) -> float | None:
    """The sample standard deviation, None for fewer than two values."""
    if len(values) < 2:
        return None
    # scaled by the largest magnitude: squares of values near the float limit stay finite
    scale = max(abs(v) for v in values) or 1.0
    m = mean([v / scale for v in values])
    return scale * math.sqrt(sum((v / scale - m) ** 2 for v in values) / (len(values) - 1))


def solve(matrix: list[list[float]], rhs: list[float]) -> list[float] | None:
    """Solve a small linear system by Gaussian elimination with partial pivoting; None when
    singular (a parameter the data cannot identify)."""
    n = len(rhs)
    a = [[*row[:], rhs[i]] for i, row in enumerate(matrix)]
    scale = max((abs(v) for row in matrix for v in row), default=0.0) or 1.0
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(a[r][col]))
        if abs(a[pivot][col]) < 1e-12 * scale:
            return None
        a[col], a[pivot] = a[pivot], a[col]
        for r in range(n):
            if r != col:
                factor = a[r][col] / a[col][col]
                for c in range(col, n + 1):
                    a[r][c] -= factor * a[col][c]
    return [a[i][n] / a[i][i] for i in range(n)]
