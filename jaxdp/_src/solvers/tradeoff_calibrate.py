"""Attack-aware noise calibration: the smallest σ whose certified TPR bound
at a given FPR meets a target (Kulynych et al., NeurIPS 2024).

The certified trade-off curve is :func:`jaxdp.tradeoff.tradeoff`'s (see
:mod:`jaxdp._src.accounting.tradeoff` for the bounds); the search is the
host false-position mode of the one root finder,
:func:`jaxdp._src.core.roots.false_position`. Public as
:func:`jaxdp.tradeoff.calibrate_sigma`.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special as _sps

from jaxdp._src.accounting.tradeoff import DEFAULT_NUM_EPS, _dpsgd_bounds
from jaxdp._src.core import numerics as num
from jaxdp._src.core import roots

__all__ = ["calibrate_sigma"]

_PLD_RTOL = 1e-3                           # PLD accuracy used by calibrate_sigma


def _tpr_at(q, sigma, steps, fpr, num_eps, rtol, upper_only=False):
  up, _ = _dpsgd_bounds(q, sigma, steps, fpr[:, None], num_eps, rtol, upper_only)
  return up[:, 0]


@num.host_function
def calibrate_sigma(q, steps, *, target_tpr, at_fpr, rtol=1e-3, num_eps=DEFAULT_NUM_EPS,
                    sigma_range=(0.1, 1e4)):
  """Smallest σ whose certified TPR bound at ``at_fpr`` is <= ``target_tpr``.

  Attack-aware noise calibration (Kulynych et al., NeurIPS 2024): instead of
  a target (ε, δ), bound the power of membership inference directly: after
  training, no attack distinguishing whether one example was used reaches a
  TPR above ``target_tpr`` at FPR ``at_fpr``.

  Method (host level, all configurations batched into one PLD call per
  iteration), in x = log σ on g(x) = log(tpr_upper / target), which is
  decreasing and smooth: a first guess from the CLT μ (the σ with
  q √(T (e^{1/σ²} - 1)) = Φ⁻¹(target) - Φ⁻¹(α)); geometric bracketing
  (steps of ×1.3 in σ, doubling in log σ); then a safeguarded regula falsi
  (the interpolated root offset by half the tolerance toward the end of the
  bracket that has not moved, a bisection when one end moves twice in a row)
  until the bracket's ends are within a factor 1 + ``rtol``.  The rounds
  read the PLD kernel's certified upper end alone (no optimistic PMFs, no
  full RDP values: ``_dpsgd_bounds(upper_only=True)``), a profile at least
  the one :func:`tradeoff` reports, so a σ feasible for the rounds is
  feasible for :func:`tradeoff` too.  The returned σ is the feasible end,
  checked once more as returned (and stepped up by 1 + ``rtol`` until it
  passes, should the check ever disagree; a σ the search evaluated with
  the same bits reads that evaluation): it always meets the target.
  Tightness, on the curve :func:`tradeoff` reports: σ / (1 + ``rtol``) is
  evaluated there once; where it meets the target too (the upper end alone
  was looser than that curve: a wide kernel interval, or the RDP bound
  below it), the search runs again on that curve.  Typically 4-7 PLD calls
  of the upper end and one full one; against full calls in every round
  (2-core CPU): 2.6 -> 1.8 s for docs/attack_risk.md's calibration (a
  second call in one process), 15-22 s -> 11 s for three mixed
  configurations whose full calls run the general engine, 40 -> 23 s for
  12 mixed targets (11 of the 12 answers bit for bit the same).

  Args:
    q: sampling rate in (0, 1].
    steps: number of steps (whole number >= 1).
    target_tpr: maximum TPR, in (at_fpr, 1).
    at_fpr: the FPR α in (0, 1) at which the TPR is bounded.
    rtol: relative tolerance on σ, in (0, 1).
    num_eps: ε grid points of :func:`tradeoff`.
    sigma_range: (low, high) search range; ``low`` is returned where it
      already meets the target.

  Returns:
    float64 array of σ (broadcast shape of q, steps, target_tpr, at_fpr).

  Raises:
    ValueError: naming the argument and value for out-of-range inputs, when
      ``target_tpr <= at_fpr`` (every test has TPR >= FPR), or when even
      σ = ``sigma_range[1]`` does not meet the target.
  """
  shape, (q, t, tgt, a), (s_min, s_max) = _calibrate_inputs(q, steps, target_tpr, at_fpr, rtol,
                                                             num_eps, sigma_range)

  seen = {}

  def excess(s, rows, upper_only):
    """log(tpr_upper / target) at σ = s for the given rows: <= 0 is feasible.
    A question asked again with the same bits (the search's last σ, checked
    as returned) reads the answer already computed for it."""
    s = np.asarray(s, np.float64)
    key = (rows.tobytes(), s.tobytes(), s.shape, upper_only)
    if key not in seen:
      up = _tpr_at(q[rows], s, t[rows], a[rows], int(num_eps), _PLD_RTOL, upper_only)
      seen[key] = np.log(up) - np.log(tgt[rows])
    return seen[key].copy()

  mu = _sps.ndtri(tgt) - _sps.ndtri(a)
  with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
    guess = 1.0 / np.sqrt(np.log1p((mu / q) ** 2 / t))
  x = np.log(np.clip(np.nan_to_num(guess, nan=1.0, posinf=s_max), s_min, s_max))
  everything = np.arange(q.size)
  hi = _search(excess, everything, x, s_min, s_max, rtol, True, (q, t, tgt, a))
  # Tight under the curve tradeoff() reports: below the answer by 1 + rtol
  # it must be infeasible. Rows where it is not (the kernel's interval wide,
  # or the RDP bound below it, at the σ that binds) search again on it.
  below = np.maximum(hi / (1.0 + rtol), s_min)
  idx = np.nonzero(hi > s_min)[0]
  loose = idx[excess(below[idx], idx, False) <= 0]
  if loose.size:
    hi[loose] = _search(excess, loose, x[loose], s_min, s_max, rtol, False, (q, t, tgt, a))
  return hi.reshape(shape)


def _search(excess, rows, x, s_min, s_max, rtol, upper_only, cfg):
  """Regula falsi on log σ for the given rows, then the answer checked as
  returned (stepped up by 1 + rtol until it passes): the smallest σ found
  with ``excess(σ, rows, upper_only) <= 0``."""
  def ex(s, sel):
    return excess(s, rows[sel], upper_only)

  x_min, x_max = math.log(s_min), math.log(s_max)
  # Geometric bracketing from the CLT guess (steps ×1.3 in σ, doubling in
  # log σ), then safeguarded regula falsi to a factor 1 + rtol.
  x_hi, unreachable, at_min = roots.false_position(ex, x, x_min, x_max, math.log1p(rtol),
                                                   step0=math.log(1.3))
  if unreachable.any():
    q, t, tgt, a = (v[rows[np.argmax(unreachable)]] for v in cfg)
    raise ValueError(f"no sigma <= {s_max!r} meets target_tpr={tgt!r} at at_fpr={a!r} "
                     f"(q={q!r}, steps={t!r}); raise sigma_range[1].")
  hi = np.where(at_min, s_min, np.exp(x_hi))
  # The returned σ is checked as returned.
  hi, ok = roots.step_up(lambda s: ex(s, np.arange(rows.size)) <= 0, hi, 1.0 + rtol, 32)
  if not ok:
    raise ValueError("calibrate_sigma could not certify its answer (a jaxdp bug).")
  return hi


def _calibrate_inputs(q, steps, target_tpr, at_fpr, rtol, num_eps, sigma_range):
  """:func:`calibrate_sigma`'s arguments, checked (ValueError naming the
  bad one) and flattened: (shape, (q, steps, target_tpr, at_fpr), (s_min, s_max))."""
  num.check_array("q", q, low=0.0, high=1.0, low_open=True)
  num.check_array("steps", steps, low=1.0, integer=True)
  num.check_array("at_fpr", at_fpr, low=0.0, high=1.0, low_open=True, high_open=True)
  num.check_array("target_tpr", target_tpr, low=0.0, high=1.0, low_open=True, high_open=True)
  num.check_array("rtol", rtol, low=0.0, high=1.0, low_open=True, high_open=True)
  num.check_array("num_eps", num_eps, low=2.0, integer=True)
  num.check_array("sigma_range", sigma_range, low=0.0, low_open=True)
  s_min, s_max = (float(x) for x in np.asarray(sigma_range, np.float64).reshape(-1)[:2])
  if not s_min < s_max:
    raise ValueError(f"sigma_range must be (low, high) with low < high; found {sigma_range!r}.")
  shape = num.check_same_shape(q=q, steps=steps, target_tpr=target_tpr, at_fpr=at_fpr)
  q, t, tgt, a = (np.broadcast_to(np.asarray(x, np.float64), shape).reshape(-1)
                  for x in (q, steps, target_tpr, at_fpr))
  bad = tgt <= a
  if bad.any():
    i = int(np.argmax(bad))
    raise ValueError(f"target_tpr must exceed at_fpr (every test has TPR >= FPR); found "
                     f"target_tpr={tgt[i]!r} <= at_fpr={a[i]!r}.")
  return shape, (q, t, tgt, a), (s_min, s_max)
