"""The one rule that turns per-seed numbers into a verdict on a paper's claim.

A claim compares two rows (or a row and a fixed number). With ``d`` the
difference of their means in the metric's "better" direction and ``se`` its
standard error (Welch: ``sqrt(s_a^2/n_a + s_b^2/n_b)``, sample standard
deviations over seeds):

- "A is better than B" **agrees** when ``d > 2 se`` and ``d > min_gap``,
  **disagrees** when ``d < -2 se`` (B is clearly better) or, with a
  ``min_gap``, when A's lead is clearly below it (``d + 2 se < min_gap``),
  and is **inconclusive** otherwise.
- "A is on par with B" (within ``tolerance``, in metric units) **agrees**
  when ``|d| <= tolerance``, **disagrees** when ``|d| - 2 se > tolerance``
  (clearly outside it), and is **inconclusive** otherwise.
- "A is on par with or better than B" **agrees** when ``|d| <= tolerance``
  or ``d > 2 se``, **disagrees** when ``d < -(tolerance + 2 se)`` (A clearly
  worse by more than the tolerance), and is **inconclusive** otherwise.

Two standard errors is about a 95% two-sided level for large samples; with 3
seeds it is a heuristic, stated as such in docs/results.md. Nothing here is
per-experiment: every experiment states its claims through these functions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

Verdict = str  # "agrees" | "disagrees" | "inconclusive"
#: How many standard errors a difference must clear to count.
Z = 2.0


def mean_se(values: Sequence[float]) -> tuple[float, float]:
    """Mean and squared standard error of the mean (0 for one value)."""
    v = np.asarray(values, dtype=float)
    if len(v) < 2:
        return float(v.mean()), 0.0
    return float(v.mean()), float(v.var(ddof=1) / len(v))


def difference(a: Sequence[float], b: Sequence[float] | float,
               higher_is_better: bool) -> tuple[float, float]:
    """``(d, se)``: how much better ``a`` is than ``b`` and the standard error of that."""
    mean_a, var_a = mean_se(a)
    if isinstance(b, (int, float)):
        mean_b, var_b = float(b), 0.0
    else:
        mean_b, var_b = mean_se(b)
    d = mean_a - mean_b if higher_is_better else mean_b - mean_a
    return d, math.sqrt(var_a + var_b)


def better(a: Sequence[float], b: Sequence[float] | float, higher_is_better: bool,
           min_gap: float = 0.0) -> tuple[Verdict, str]:
    """Verdict on "a is better than b (by more than ``min_gap``)", with the evidence."""
    d, se = difference(a, b, higher_is_better)
    if d > Z * se and d > min_gap:
        verdict = "agrees"
    elif d < -Z * se or (min_gap > 0 and d + Z * se < min_gap):
        verdict = "disagrees"
    else:
        verdict = "inconclusive"
    gap = f", needed > {min_gap:.4g}" if min_gap else ""
    return verdict, f"advantage {d:+.4g} (2 SE = {Z * se:.3g}{gap})"


def on_par(a: Sequence[float], b: Sequence[float] | float, higher_is_better: bool,
           tolerance: float) -> tuple[Verdict, str]:
    """Verdict on "a is on par with b, within ``tolerance``", with the evidence."""
    d, se = difference(a, b, higher_is_better)
    if abs(d) <= tolerance:
        verdict = "agrees"
    elif abs(d) - Z * se > tolerance:
        verdict = "disagrees"
    else:
        verdict = "inconclusive"
    return verdict, f"difference {d:+.4g} (2 SE = {Z * se:.3g}, tolerance {tolerance:.4g})"


def all_of(verdicts: Sequence[Verdict]) -> Verdict:
    """A claim made of several parts: agrees if all agree, disagrees if any disagrees."""
    if any(v == "disagrees" for v in verdicts):
        return "disagrees"
    if all(v == "agrees" for v in verdicts):
        return "agrees"
    return "inconclusive"


def on_par_or_better(a: Sequence[float], b: Sequence[float] | float, higher_is_better: bool,
                     tolerance: float) -> tuple[Verdict, str]:
    """Verdict on "a is on par with b (within ``tolerance``) or better": **agrees** when
    ``|d| <= tolerance`` or ``d > 2 se``, **disagrees** when ``d < -(tolerance + 2 se)``
    (a is clearly worse by more than the tolerance), **inconclusive** otherwise."""
    d, se = difference(a, b, higher_is_better)
    if abs(d) <= tolerance or d > Z * se:
        verdict = "agrees"
    elif d < -(tolerance + Z * se):
        verdict = "disagrees"
    else:
        verdict = "inconclusive"
    return verdict, f"advantage {d:+.4g} (2 SE = {Z * se:.3g}, tolerance {tolerance:.4g})"
