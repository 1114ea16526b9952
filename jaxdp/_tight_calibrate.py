"""σ for one question against the tight (PLD) ε, with nothing to compile.

``jaxdp calibrate`` answers one question. Its tight answer is the smallest σ
(to ``rtol``) at which the value ``jaxdp epsilon`` prints,
min(PLD upper bound, RDP bound) (:func:`jaxdp._api.tight_one`), meets the
target. Each evaluation of the PLD bound is a composition by the general
engine (:mod:`jaxdp.pld_general`, NumPy FFTs, ~0.3 s at the README's MNIST
configuration), so the solver spends as few as it can:

1. σ_rdp, the RDP answer (host path of :func:`jaxdp.calibrate.sigma`), meets
   the target under the reported minimum, so it is a feasible end of the
   bracket; every σ below it fails the RDP bound, so below σ_rdp only the PLD
   bound decides.
2. Secant steps in x = log σ on g(x) = log(ε_upper(e^x) / target), which is
   smooth and monotone (more noise is post-processing), on a coarse grid
   (``pld_general`` rtol 1e-2, ~0.18 s) while far from the root; the first
   slope is the RDP bound's, measured at σ_rdp.
3. On the grid ``jaxdp epsilon`` uses (rtol 1e-3), probes a factor
   e^{±0.45·rtol} either side of the secant root. Only these evaluations move
   the bracket [x_infeasible, x_feasible]; it closes when it is narrower than
   -log(1 - rtol). Bisection takes over when the secant misbehaves.
4. The infeasible probe also computes the PLD lower bound. When that lower
   bound exceeds the target, no σ at or below that probe meets the target
   under ANY accountant (the lower bound is certified and ε is non-increasing
   in σ), so it is a certified ``sigma_lower`` on the true optimal σ.

Guarantees: ``sigma`` was evaluated with the same upper bound as
``jaxdp epsilon`` at that σ, and it is <= the target; σ·(1 - rtol) was
evaluated and is not (or σ = σ_rdp, below which the RDP bound fails as
well and the PLD bound there exceeds the target).
"""

from __future__ import annotations

import math
import warnings
from typing import NamedTuple

import numpy as np

from jaxdp import _numerics as nx

_COARSE_GRID = 1e-2     # pld_general rtol of the probes far from the root
_SWITCH = 2e-2          # |g| below which the coarse probes stop
_MAX_COARSE = 6
_MAX_FINE = 14
_SECANT_FINE = 6        # fine probes steered by the secant before pure bisection


class TightSigma(NamedTuple):
  """The answer of :func:`tight_sigma`.

  Attributes:
    sigma: the smallest σ found (to rtol) whose reported ε, min(PLD upper,
      RDP), is <= the target; ``inf`` when even σ = 1e7 fails.
    sigma_lower: a certified lower bound on the exact smallest σ (no σ below
      it meets the target under any accountant); 0.0 when none was certified.
    sigma_rdp: the RDP answer (:func:`jaxdp.calibrate.sigma`).
  """
  sigma: float
  sigma_lower: float
  sigma_rdp: float


def poisson_phases(q, sigma, steps):
  """The general engine's phases for ``steps`` Poisson-sampled Gaussian steps."""
  from jaxdp import events, mechanisms  # pylint: disable=g-import-not-at-top
  return [(mechanisms.dominating_pairs(events.SampledGaussian(q, sigma)), steps)]


def _bound(q, sigma, steps, delta, upper, grid):
  """One side of the general engine's ε interval (half the cost of both)."""
  from jaxdp import pld_general  # pylint: disable=g-import-not-at-top
  return float(pld_general.epsilon_side(poisson_phases(q, sigma, steps), delta, upper=upper,
                                        rtol=grid))


def _interval(q, sigma, steps, delta, grid):
  """(lower, upper): both sides, with the engine's lower <= upper guard."""
  from jaxdp import pld_general  # pylint: disable=g-import-not-at-top
  lo, up = pld_general.epsilon(poisson_phases(q, sigma, steps), delta, rtol=grid,
                               return_bounds=True)
  return float(lo), float(up)


def _g(eps, target):
  """The secant's coordinate log(ε / target) (finite for ε, target >= 0)."""
  return math.log(max(eps, 1e-300) / max(target, 1e-300))


def _certified_lower(q, steps, delta, target, x_start, tolx, grid):
  """Largest σ tried below e^x_start whose certified PLD lower bound on ε
  exceeds the target (then no σ at or below it can meet the target); 0.0
  when none of the tries is."""
  step = max(2 * tolx, 1e-3)
  for _ in range(6):
    s = float(np.exp(x_start - step))
    if _bound(q, s, steps, delta, False, grid) > target:
      return s
    step *= 4
  return 0.0


def tight_sigma(target_epsilon, delta, q, steps, *, rtol=1e-3, grid_rtol=1e-3):
  """Smallest σ whose tight ε (as ``jaxdp epsilon`` reports it) meets a target.

  One Poisson-sampled Gaussian configuration, add/remove neighbours, host
  NumPy only (see the module docstring for the method and its guarantees).

  Args:
    target_epsilon: ε budget >= 0.
    delta: δ in (0, 1).
    q: sampling rate in [0, 1].
    steps: number of steps (whole number >= 0).
    rtol: relative tolerance on σ, in (0, 0.1].
    grid_rtol: accuracy of the PLD grid (:func:`jaxdp.pld_general.epsilon`'s
      rtol; 1e-3 is what ``jaxdp epsilon`` uses).

  Returns:
    A :class:`TightSigma`. A :class:`RuntimeWarning` says when the bracket did
    not close to ``rtol`` (the answer is then sound but looser).

  Raises:
    ValueError: naming the argument and value when an input is invalid.
  """
  from jaxdp import _calibrate_boundary, calibrate  # pylint: disable=g-import-not-at-top
  nx.check_array("target_epsilon", target_epsilon, low=0.0)
  nx.check_array("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
  nx.check_array("q", q, low=0.0, high=1.0)
  nx.check_array("steps", steps, low=0.0, integer=True)
  nx.check_array("rtol", rtol, low=0.0, high=0.1, low_open=True)
  nx.check_array("grid_rtol", grid_rtol, low=0.0, high=0.1, low_open=True)
  target, delta, q, steps = (float(np.asarray(a, np.float64))
                             for a in (target_epsilon, delta, q, steps))
  if q == 0.0 or steps == 0.0:
    return TightSigma(0.0, 0.0, 0.0)
  if math.isinf(target):
    return TightSigma(calibrate.SIGMA_RANGE[0], 0.0, float(calibrate.sigma(target, delta, q, steps)))
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)
    sigma_rdp = float(calibrate.sigma(target, delta, q, steps))
  lo_x, hi_x = (math.log(s) for s in calibrate.SIGMA_RANGE)
  tolx = -math.log1p(-rtol)

  def upper(x, grid):
    return _bound(q, float(np.exp(x)), steps, delta, True, grid)

  # The feasible end: sigma_rdp (the reported minimum is <= target there).
  if math.isfinite(sigma_rdp):
    xf, sf = math.log(sigma_rdp), sigma_rdp
    # the RDP bound's slope at sigma_rdp: the first secant slope (host, no compile)
    e_mid, e_side = _calibrate_boundary._host_epsilon(  # pylint: disable=protected-access
        np.full(2, q), sigma_rdp * np.exp([0.0, 0.02]), np.full(2, steps), np.full(2, delta))
    slope = (_g(e_side, 1.0) - _g(e_mid, 1.0)) / 0.02
  else:
    xf, sf = hi_x, calibrate.SIGMA_RANGE[1]
    if upper(xf, grid_rtol) > target:
      return TightSigma(math.inf, _certified_lower(q, steps, delta, target, xf, tolx, grid_rtol),
                        math.inf)
    slope = -1.0
  slope = slope if (math.isfinite(slope) and slope < -1e-3) else -1.0

  # Coarse secant steps toward the root (they do not move the bracket).
  x, last = xf, None
  for _ in range(_MAX_COARSE):
    e = upper(x, _COARSE_GRID)
    if math.isinf(e):         # δ not certifiable this far down: back off
      x = 0.5 * (x + xf)
      continue
    g = _g(e, target)
    if last is not None and abs(x - last[0]) > 1e-9:
      s = (g - last[1]) / (x - last[0])
      slope = s if s < -1e-3 else slope
    last = (x, g)
    if abs(g) < _SWITCH:
      break
    x = min(max(x - g / slope, lo_x), xf)
  root = xf if last is None else min(max(last[0] - last[1] / slope, lo_x), xf)

  # Fine probes (the grid jaxdp epsilon uses): only these move the bracket.
  xi, last, lower_at = None, None, 0.0
  for k in range(_MAX_FINE):
    if xi is not None and xf - xi <= tolx:
      break
    a = lo_x if xi is None else xi
    if k < _SECANT_FINE and a < root < xf:
      below = xi is None or xf - root <= 0.45 * tolx * 1.01
      p = root - 0.45 * tolx if below else root + 0.45 * tolx
      if xi is not None:   # strictly inside the bracket
        p = min(max(p, xi + 0.01 * (xf - xi)), xf - 0.01 * (xf - xi))
      p = min(p, xf - 0.01 * tolx)
    else:   # bisection, or a widening step down while no infeasible end is known
      below = True
      p = 0.5 * (a + xf) if xi is not None else max(xf - 8 * tolx * 4.0**k, lo_x)
    s = float(np.exp(p))
    if below:   # expected infeasible: its lower bound may certify sigma_lower
      e_lo, e = _interval(q, s, steps, delta, grid_rtol)
    else:
      e_lo, e = 0.0, upper(p, grid_rtol)
    if e <= target:
      xf, sf = p, s
    else:
      xi = p
      if e_lo > target:
        lower_at = max(lower_at, s)
    if math.isfinite(e):
      g = _g(e, target)
      if last is not None and abs(p - last[0]) > 0.2 * tolx:
        sl = (g - last[1]) / (p - last[0])
        slope = sl if sl < -1e-3 else slope
      last = (p, g)
      root = p - g / slope
  if xi is None or xf - xi > tolx:
    warnings.warn(f"tight sigma: the bracket closed only to a relative width "
                  f"{-math.expm1(-(xf - (lo_x if xi is None else xi))):.3g} (rtol {rtol:g}); "
                  "the answer meets the target but may be looser.", RuntimeWarning, stacklevel=2)
  if lower_at == 0.0:
    lower_at = _certified_lower(q, steps, delta, target, xf if xi is None else xi, tolx,
                                grid_rtol)
  if not lower_at <= sf:
    raise AssertionError(f"tight_sigma: certified lower end {lower_at!r} above sigma {sf!r}; "
                         "this is a jaxdp bug.")
  return TightSigma(sf, lower_at, sigma_rdp)
