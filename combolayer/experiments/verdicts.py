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

A claim that compares a row which did not **train** is **invalid**, whatever
the numbers say: a row trained when its final metric on a validation split
beats its own untrained value on that split by more than ``margin`` (a
fraction of the untrained value's distance to the metric's ideal, see
`trained`). `gate` turns any verdict into ``"invalid"`` with the
failing row named.

An "on par" claim counts only on a task that can tell methods apart: each
experiment has a **control** row that must lose (its gradient zeroed after
the first epoch), and `require_control` turns an "agrees" into a
*trivial* "inconclusive" unless both compared rows beat the control by
``2 se`` (`discriminates`).

Every claim is judged once, on all the seeds of its rows, and every row of an
experiment runs the same seeds, fixed in its config before any result: no
claim gets more seeds because of where its verdict fell.

Two standard errors is about a 95% two-sided level for large samples; with 5
to 10 seeds it is a heuristic, stated as such in docs/results.md. Nothing here is
per-experiment: every experiment states its claims through these functions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..errors import InputError

Verdict = str  # "agrees" | "disagrees" | "inconclusive" | "invalid"
#: Every verdict, in the order reports count them.
VERDICTS = ("agrees", "disagrees", "inconclusive", "invalid")
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
    """A claim made of several parts: invalid if any part is, else agrees if all
    agree, disagrees if any disagrees."""
    if any(v == "invalid" for v in verdicts):
        return "invalid"
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


def trained(untrained: Sequence[float], final: Sequence[float], higher_is_better: bool,
            margin: float, ideal: float | None = None) -> tuple[bool, str]:
    """Did a row train? ``untrained`` and ``final`` are its per-seed values of the
    metric on the **validation** split before and after training.

    The row trained when the mean improvement is more than ``margin`` times the
    room the untrained value left: ``|ideal - untrained|`` when the metric has an
    ideal (0 for an error, 1 for an accuracy), else ``|untrained|``. So
    ``margin=0.05`` asks for 5% of the way from untrained to perfect.
    """
    if len(untrained) != len(final) or not len(final):
        raise InputError(f"untrained and final need one value per seed each, got "
                         f"{len(untrained)} and {len(final)}")
    if margin < 0:
        raise InputError(f"margin must be >= 0, got {margin}")
    start = float(np.mean(untrained))
    end = float(np.mean(final))
    gain = end - start if higher_is_better else start - end
    room = abs((ideal if ideal is not None else 0.0) - start)
    needed = margin * room
    ok = gain > needed
    return ok, (f"validation {start:.4g} untrained -> {end:.4g} trained, gain {gain:+.4g} "
                f"({'>' if ok else '<='} {needed:.4g} = {margin:g} x room {room:.4g})")


def gate(verdict_and_evidence: tuple[Verdict, str],
         gates: dict[str, tuple[bool, str]]) -> tuple[Verdict, str]:
    """The claim's verdict, or ``"invalid"`` when a row it compares did not train.

    ``gates`` maps each compared row's label to `trained`'s answer. The
    evidence keeps the numbers and names every row that failed, with its reason.
    """
    verdict, evidence = verdict_and_evidence
    failed = [f"{label} did not train ({why})" for label, (ok, why) in gates.items() if not ok]
    if failed:
        return "invalid", "; ".join(failed) + f". Numbers: {evidence}"
    return verdict, evidence


def discriminates(a: Sequence[float], b: Sequence[float], control: Sequence[float],
                  higher_is_better: bool) -> tuple[bool, str]:
    """Does the task tell trained rows from the control? Both ``a`` and ``b``
    must beat ``control`` by more than ``2 se`` (`better`)."""
    verdicts = [better(row, control, higher_is_better) for row in (a, b)]
    ok = all(v == "agrees" for v, _ in verdicts)
    return ok, ("control detectably worse than both rows" if ok else
                "control not detectably worse than both rows (" +
                "; ".join(e for _, e in verdicts) + ")")


def require_control(verdict_and_evidence: tuple[Verdict, str],
                    discriminating: tuple[bool, str] | None) -> tuple[Verdict, str]:
    """An "on par" verdict that counts only where the task discriminates: an
    ``"agrees"`` becomes a *trivial* ``"inconclusive"`` when the control was not
    detectably worse than both rows (`discriminates`); other verdicts pass."""
    verdict, evidence = verdict_and_evidence
    if discriminating is None:
        return verdict, evidence
    ok, why = discriminating
    if verdict == "agrees" and not ok:
        return "inconclusive", f"trivial: {why}. Numbers: {evidence}"
    return verdict, f"{evidence}; {why}"


def scaled_threshold(untrained: float, best: float, fraction: float) -> tuple[float, str]:
    """A minimum gap or "on par" tolerance on the analogue's own scale:
    ``fraction`` of the spread between the untrained value and the best row's
    mean, with the text a claim states it by."""
    if not 0 < fraction <= 1:
        raise InputError(f"fraction must be in (0, 1], got {fraction}")
    spread = abs(untrained - best)
    return fraction * spread, (f"{fraction:g} x spread untrained {untrained:.4g} -> "
                               f"best {best:.4g} = {fraction * spread:.4g}")
