"""The tight answer to one calibration question, with nothing to compile.

``jaxdp calibrate`` answers one question: the smallest σ, or the largest
number of steps or sampling rate, at which the value ``jaxdp epsilon``
prints, min(PLD upper bound, RDP bound) (:func:`jaxdp._src.accounting.rate.tight_one`),
meets a target ε. Each evaluation of the PLD bound is a composition by the
general engine (:mod:`jaxdp.pld_general`, NumPy FFTs, 0.1-0.3 s at DP-SGD
configurations), so the solver spends as few as it can. In a coordinate y
in which ε is non-increasing (log σ, -log T, -log q) the answer is the
smallest feasible y:

1. The RDP answer (:mod:`jaxdp.calibrate`) meets the target under the
   reported minimum, so it is a feasible end of the bracket; beyond it the
   RDP bound fails, so only the PLD bound decides.
2. Secant steps on g(y) = log(ε_upper / target), which is smooth and
   monotone (more noise, fewer steps or a lower rate is post-processing), on
   a coarse grid (``pld_general`` rtol 1e-2) while far from the root; the
   first slope is the RDP bound's, measured at the RDP answer.
3. On the grid ``jaxdp epsilon`` uses (rtol 1e-3), probes a factor
   e^{±0.45·rtol} either side of the secant root. Only these evaluations
   move the bracket [y_infeasible, y_feasible]; it closes when it is
   narrower than -log(1 - rtol) (or, for steps, at adjacent integers).
   Bisection takes over when the secant misbehaves.
4. The probes expected to be infeasible also compute the PLD lower bound.
   Where it exceeds the target, no value at or beyond that probe meets the
   target under ANY accountant (the lower bound is certified, and the exact
   ε is monotone), which certifies an end of the exact answer's interval.

Guarantee: the answer was evaluated with the same bounds ``jaxdp epsilon``
reports, and it meets the target.
"""

from __future__ import annotations

import math
import warnings
from typing import Callable, NamedTuple

import numpy as np

from jaxdp._src.core import numerics as nx
from jaxdp._src.core import roots_scalar
from jaxdp._src.mechanisms.registry import poisson_phases
from jaxdp._src.solvers.boundary_eval import MAX_STEPS_FLOAT as _MAX_STEPS
from jaxdp._src.solvers.tight_ends import quiet, settled

_COARSE_GRID = 1e-2     # pld_general rtol of the probes far from the root
_SWITCH = 2e-2          # |g| below which the coarse probes stop
_MAX_COARSE = 6
_MAX_FINE = 24
_SECANT_FINE = 6        # fine probes steered by the secant before pure bisection
_G_INF = 50.0           # g of an infinite ε (δ not certifiable there)


class TightAnswer(NamedTuple):
  """The answer of :func:`tight_sigma`, :func:`tight_steps` or :func:`tight_sampling_rate`.

  Attributes:
    value: the σ (smallest) or steps / q (largest) found, to rtol, at which
      the reported ε, min(PLD upper, RDP), is <= the target.
    bound: a certified bound on the exact answer: for σ a lower end (no σ at
      or below it meets the target under any accountant; 0.0 when none was
      certified), for steps and q an upper end (no value above it meets the
      target; ``inf`` / 1.0 when none was certified).
    rdp: the RDP answer (:mod:`jaxdp.calibrate`).
  """
  value: float
  bound: float
  rdp: float


class _Unknown(NamedTuple):
  """One unknown in the coordinate y where ε is non-increasing (the answer
  is the smallest feasible y, searched down from a feasible start)."""
  y_lo: float                              # the end of the range
  value: Callable[[float], float]          # y -> the value evaluated there
  y: Callable[[float], float]              # value -> y
  phases: Callable[[float], list]
  integer: bool = False


def _g(eps, target):
  """The secant's coordinate log(ε / target) (finite for ε, target >= 0)."""
  return math.log(max(eps, 1e-300) / max(target, 1e-300))


class _Evaluator:
  """The general engine's bounds at y, for one unknown and one δ."""

  def __init__(self, unknown, delta, grid_rtol):
    self.u, self.delta, self.grid = unknown, delta, grid_rtol

  def upper(self, y, grid=None):
    from jaxdp._src.pld import general as pld_general  # pylint: disable=g-import-not-at-top
    return float(pld_general.epsilon_side(self.u.phases(self.u.value(y)), self.delta,
                                          upper=True, rtol=grid or self.grid))

  def lower(self, y):
    from jaxdp._src.pld import general as pld_general  # pylint: disable=g-import-not-at-top
    return float(pld_general.epsilon_side(self.u.phases(self.u.value(y)), self.delta,
                                          upper=False, rtol=self.grid))

  def interval(self, y):
    """(lower, upper): both sides, with the engine's lower <= upper guard."""
    from jaxdp._src.pld import general as pld_general  # pylint: disable=g-import-not-at-top
    lo, up = pld_general.epsilon(self.u.phases(self.u.value(y)), self.delta, rtol=self.grid,
                                 return_bounds=True)
    return float(lo), float(up)


def _certified_end(ev, target, y_start, tolx, hint=None):
  """Largest y tried below ``y_start`` whose certified PLD lower bound on ε
  exceeds the target (then no y at or below it meets the target), or None.
  ``hint``: a first y to try (from a known interval and slope)."""
  step = max(2 * tolx, 1e-3, 0.0 if hint is None else y_start - hint)
  for _ in range(6):
    y = ev.u.y(ev.u.value(max(y_start - step, ev.u.y_lo)))
    if y < y_start and ev.lower(y) > target:
      return y
    if y <= ev.u.y_lo:
      return None
    step *= 4
  return None


def _snap(u, p, yi, yf):
  """The evaluable point nearest ``p`` strictly inside (yi, yf), or None."""
  y = u.y(u.value(p))
  if yi is not None and y <= yi or y >= yf:
    if not u.integer:
      return None
    v_f = u.value(yf)
    v_i = u.value(yi) if yi is not None else _MAX_STEPS + 1
    inside = [v for v in (round(u.value(p)), v_f + 1, v_i - 1) if v_f < v < v_i]
    return u.y(inside[0]) if inside else None
  return y


def _solve(u, target, delta, y_feas, slope, rtol, grid_rtol):
  """Smallest feasible y (to rtol), from the feasible start ``y_feas``.

  Returns (y_feasible, y_certified or None).
  """
  ev = _Evaluator(u, delta, grid_rtol)
  tolx = -math.log1p(-rtol)
  slope = slope if (math.isfinite(slope) and slope < -1e-3) else -1.0
  root, slope = _coarse_root(ev, u, target, y_feas, slope)
  yf, yi, certified, seen, slope = _fine(ev, u, target, y_feas, root, slope, tolx)
  return _close(ev, u, target, yf, yi, certified, seen, slope, tolx, rtol)


def _coarse_root(ev, u, target, yf, slope):
  """Coarse phase of :func:`_solve`: secant steps, then Illinois false
  position once g changes sign (they do not move the answer's bracket; a
  coarse grid only steers). Returns (root estimate, slope)."""
  y = yf
  br, last = None, None
  for _ in range(_MAX_COARSE):
    e = ev.upper(y, _COARSE_GRID)
    g = _g(e, target) if math.isfinite(e) else _G_INF
    if br is None:
      br = roots_scalar.Illinois(y, g) if g <= 0 else None
      if br is None:       # the PLD is no tighter than RDP here: the answer is at the start
        break
    else:
      br.add(y, g)
    if last is not None and math.isfinite(e) and abs(y - last[0]) > 1e-9:
      s = (g - last[1]) / (y - last[0])
      slope = s if s < -1e-3 else slope
    if math.isfinite(e):
      last = (y, g)
    if abs(g) < _SWITCH:
      break
    nxt = br.false_position()
    if nxt is None:       # no sign change yet: a secant step down
      nxt = max(br.b - br.gb / slope, u.y_lo)
      if nxt >= br.b - 1e-12:
        break
    y = nxt
  if last is None or br is None:
    return yf, slope
  root = last[0] - last[1] / slope
  fp = br.false_position()
  if br.a is not None and not br.a < root < br.b and fp is not None:
    root = fp
  return min(max(root, u.y_lo), yf), slope


def _fine_probe(k, u, br, root, tolx):
  """The next fine probe of :func:`_fine` and whether it is expected
  infeasible: e^{±0.45·rtol} around the secant root for the first
  ``_SECANT_FINE`` probes; then safeguarded false position, or halving, or
  (no infeasible end yet) widening steps down."""
  yi, yf = br.yi, br.yf
  a = u.y_lo if yi is None else yi
  if k < _SECANT_FINE and a < root < yf:
    below = yi is None or yf - root <= 0.45 * tolx * 1.01
    p = root - 0.45 * tolx if below else root + 0.45 * tolx
    if yi is not None:   # strictly inside the bracket
      p = min(max(p, yi + 0.01 * (yf - yi)), yf - 0.01 * (yf - yi))
    return min(p, yf - 0.01 * tolx), below
  fp = br.false_position(0.05)   # between the bracket's ends, kept off them by 5%
  if fp is not None:
    return fp, False
  if yi is not None:
    return 0.5 * (yi + yf), False
  return max(yf - 8 * tolx * 4.0**k, u.y_lo), False   # widening steps down


def _fine(ev, u, target, yf, root, slope, tolx):
  """Fine phase of :func:`_solve` (the grid jaxdp epsilon uses): only these
  probes move the answer's bracket (yi, yf), a :class:`roots_scalar.Probed`.
  Returns (yf, yi, certified, seen, slope)."""
  br = roots_scalar.Probed(yf)
  last, certified, seen = None, None, None
  for k in range(_MAX_FINE):
    if br.closed(tolx):
      break
    p, below = _fine_probe(k, u, br, root, tolx)
    p = _snap(u, p, br.yi, br.yf)
    if p is None:          # no evaluable point left inside the bracket
      break
    if below:   # expected infeasible: its lower bound may certify an end
      e_lo, e = ev.interval(p)
      seen = (p, e_lo)
    else:
      e_lo, e = 0.0, ev.upper(p)
    g = _g(e, target) if math.isfinite(e) else _G_INF
    br.add(p, e <= target, g)
    if not e <= target and e_lo > target:
      certified = p if certified is None else max(certified, p)
    if math.isfinite(e):
      if last is not None and abs(p - last[0]) > 0.2 * tolx:
        sl = (g - last[1]) / (p - last[0])
        slope = sl if sl < -1e-3 else slope
      last = (p, g)
      root = p - g / slope
    if br.yi is None and p <= u.y_lo:
      break                # feasible down to the end of the range
  return br.yf, br.yi, certified, seen, slope


def _close(ev, u, target, yf, yi, certified, seen, slope, tolx, rtol):
  """The end of :func:`_solve`: warns where the bracket did not close, and
  certifies an end of the exact answer's interval where no probe did."""
  closed = (yi is not None and (yf - yi <= tolx or _snap(u, 0.5 * (yi + yf), yi, yf) is None)
            or yf <= u.y_lo)
  if not closed:
    warnings.warn(f"tight calibration: the bracket did not close to rtol {rtol:g}; the answer "
                  "meets the target but may be looser.", RuntimeWarning, stacklevel=4)
  if certified is None and yf > u.y_lo:
    start = yf if yi is None else yi
    hint = None
    if seen is not None and seen[1] > 0:   # where the known lower bound would reach the target
      hint = seen[0] + 1.25 * _g(target, seen[1]) / slope
    certified = _certified_end(ev, target, start, tolx, hint)
  if certified is not None and not certified < yf:
    raise AssertionError(f"tight calibration: certified end {certified!r} not below the answer "
                         f"{yf!r}; this is a jaxdp bug.")
  return yf, certified


def _rdp_slope(q, sigma, steps, delta, dq=1.0, ds=1.0, dt=1.0):
  """d log ε_RDP between the configuration and one scaled by (dq, ds, dt) (host)."""
  from jaxdp._src.solvers import boundary_eval as _calibrate_boundary  # pylint: disable=g-import-not-at-top
  e0, e1 = _calibrate_boundary._host_epsilon(  # pylint: disable=protected-access
      np.array([q, min(q * dq, 1.0)]), np.array([sigma, sigma * ds]),
      np.array([steps, steps * dt]), np.full(2, delta))
  return _g(e1, 1.0) - _g(e0, 1.0)


def _validate(target_epsilon, delta, rtol, grid_rtol, **named):
  nx.check_array("target_epsilon", target_epsilon, low=0.0)
  nx.check_array("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
  nx.check_array("rtol", rtol, low=0.0, high=0.1, low_open=True)
  nx.check_array("grid_rtol", grid_rtol, low=0.0, high=0.1, low_open=True)
  for name, value in named.items():
    if name == "q":
      nx.check_array("q", value, low=0.0, high=1.0)
    elif name == "sigma":
      nx.check_array("sigma", value, low=0.0, low_open=True)
    else:
      nx.check_array("steps", value, low=0.0, integer=True)
  return tuple(float(np.asarray(a, np.float64)) for a in (target_epsilon, delta))


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
    A :class:`TightAnswer`: σ (``inf`` when even σ = 1e7 fails), a certified
    lower end on the exact smallest σ, and the RDP σ. A
    :class:`RuntimeWarning` says when the bracket did not close to ``rtol``.

  Raises:
    ValueError: naming the argument and value when an input is invalid.
  """
  from jaxdp._src.solvers import calibrate  # pylint: disable=g-import-not-at-top
  target, delta = _validate(target_epsilon, delta, rtol, grid_rtol, q=q, steps=steps)
  q, steps = float(q), float(steps)
  if q == 0.0 or steps == 0.0:
    return TightAnswer(0.0, 0.0, 0.0)
  s_rdp = quiet(calibrate.sigma, target, delta, q, steps)
  lo, hi = (math.log(s) for s in calibrate.SIGMA_RANGE)
  u = _Unknown(lo, math.exp, math.log, lambda s: poisson_phases(q, s, steps))
  if math.isfinite(s_rdp):
    y0, slope = math.log(s_rdp), _rdp_slope(q, s_rdp, steps, delta, ds=math.exp(0.02)) / 0.02
  else:
    y0, slope = hi, -1.0
    ev = _Evaluator(u, delta, grid_rtol)
    if ev.upper(hi) > target:
      c = _certified_end(ev, target, hi, -math.log1p(-rtol))
      return TightAnswer(math.inf, 0.0 if c is None else math.exp(c), math.inf)
  yf, c = _solve(u, target, delta, y0, slope, rtol, grid_rtol)
  lower = 0.0 if c is None else math.exp(c)
  return TightAnswer(*settled("sigma", math.exp(yf), lower, target, delta, q, None, steps, rtol),
                     s_rdp)


def tight_steps(target_epsilon, delta, q, sigma, *, rtol=1e-3, grid_rtol=1e-3):
  """Largest number of steps whose tight ε (as ``jaxdp epsilon`` reports it)
  meets a target (to rtol; adjacent integers below 1/rtol steps).

  Args:
    target_epsilon, delta, rtol, grid_rtol: as in :func:`tight_sigma`.
    q: sampling rate in [0, 1].
    sigma: noise multiplier > 0.

  Returns:
    A :class:`TightAnswer`: steps (``inf`` where every number of steps fits:
    q = 0, or the RDP bound stays within the target), a certified upper end on
    the exact largest number of steps, and the RDP answer.

  Raises:
    ValueError: naming the argument and value when an input is invalid.
  """
  from jaxdp._src.solvers import calibrate  # pylint: disable=g-import-not-at-top
  target, delta = _validate(target_epsilon, delta, rtol, grid_rtol, q=q, sigma=sigma)
  q, sigma = float(q), float(sigma)
  t_rdp = quiet(calibrate.steps, target, delta, q, sigma)
  if math.isinf(t_rdp) or t_rdp >= _MAX_STEPS:   # calibrate.steps: MAX_STEPS = 2**53 fits
    return TightAnswer(math.inf, math.inf, math.inf)
  u = _Unknown(-math.log(_MAX_STEPS), lambda y: float(min(max(round(math.exp(-y)), 1), _MAX_STEPS)),
               lambda t: -math.log(t), lambda t: poisson_phases(q, sigma, t), integer=True)
  ev = _Evaluator(u, delta, grid_rtol)
  if t_rdp == 0.0 and ev.upper(0.0) > target:   # not even one step
    return TightAnswer(0.0, 0.0 if ev.lower(0.0) > target else math.inf, 0.0)
  t0 = max(t_rdp, 1.0)
  slope = -_rdp_slope(q, sigma, t0, delta, dt=math.exp(0.02)) / 0.02
  from jaxdp._src.pld import general as pld_general  # pylint: disable=g-import-not-at-top
  try:
    yf, c = _solve(u, target, delta, -math.log(t0), slope, rtol, grid_rtol)
  except pld_general.GridTooLarge:
    # The engine cannot compose that many steps within its memory budget
    # (q = 1e-4, σ = 0.9533, target 0.5: ~10⁶ steps): the RDP answer, then the
    # batched PLD calibration's where it is larger and meets the target as
    # ``jaxdp epsilon`` reports it (which falls back to the batched path there
    # too); the certified upper end from the batched kernel's lower bounds.
    return TightAnswer(*settled("steps", t_rdp, math.inf, target, delta, q, sigma, None, rtol),
                       t_rdp)
  bound = math.inf if c is None else u.value(c) - 1.0
  return TightAnswer(*settled("steps", u.value(yf), bound, target, delta, q, sigma, None, rtol),
                     t_rdp)


def tight_sampling_rate(target_epsilon, delta, sigma, steps, *, rtol=1e-3, grid_rtol=1e-3):
  """Largest sampling rate q <= 1 whose tight ε (as ``jaxdp epsilon`` reports
  it) meets a target.

  Args:
    target_epsilon, delta, rtol, grid_rtol: as in :func:`tight_sigma`.
    sigma: noise multiplier > 0.
    steps: number of steps (whole number >= 0).

  Returns:
    A :class:`TightAnswer`: q (0 where even q = 1e-12 overspends), a
    certified upper end on the exact largest q, and the RDP answer.

  Raises:
    ValueError: naming the argument and value when an input is invalid.
  """
  from jaxdp._src.solvers import calibrate  # pylint: disable=g-import-not-at-top
  target, delta = _validate(target_epsilon, delta, rtol, grid_rtol, sigma=sigma, steps=steps)
  sigma, steps = float(sigma), float(steps)
  if steps == 0.0:
    return TightAnswer(1.0, 1.0, 1.0)
  q_rdp = quiet(calibrate.sampling_rate, target, delta, sigma, steps)
  hi = -math.log(calibrate.MIN_SAMPLING_RATE)
  u = _Unknown(0.0, lambda y: min(math.exp(-y), 1.0), lambda q: -math.log(q),
               lambda q: poisson_phases(q, sigma, steps))
  ev = _Evaluator(u, delta, grid_rtol)
  if q_rdp >= 1.0:
    return TightAnswer(1.0, 1.0, q_rdp)
  if q_rdp > 0.0:
    y0 = -math.log(q_rdp)
    slope = -_rdp_slope(q_rdp, sigma, steps, delta, dq=math.exp(0.02)) / 0.02
  else:
    if ev.upper(hi) > target:
      c = _certified_end(ev, target, hi, -math.log1p(-rtol))
      return TightAnswer(0.0, 1.0 if c is None else u.value(c), 0.0)
    y0, slope = hi, -1.0
  yf, c = _solve(u, target, delta, y0, slope, rtol, grid_rtol)
  upper = 1.0 if c is None else u.value(c)
  return TightAnswer(*settled("q", u.value(yf), upper, target, delta, None, sigma, steps, rtol),
                     q_rdp)


# --------------------------------------------------------------------------
# A bracketing search on any answerable probe (the samplers' tight calibration)
# --------------------------------------------------------------------------

