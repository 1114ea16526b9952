"""Calibration for a :mod:`jaxdp.sampling` sampler: σ, steps and sampling rate.

``jaxdp.calibrate.sigma/steps/sampling_rate`` dispatch here when given a
sampler. The RDP answers come from a bracketing search of
:func:`jaxdp._src.accounting.sampler_forward.epsilon`; the tight ones
(``accountant="pld"``) start from the RDP answer, which meets the target, and
bracket beyond it with probes of the public computation only
(:func:`jaxdp._src.core.descend.descend`), so every returned value meets its
target by the same function a user would call.
"""

from __future__ import annotations

import math

import numpy as np

from jaxdp._src.core import numerics as nx
from jaxdp._src.core import roots
from jaxdp._src.accounting.sampler_forward import (sampler_answer, pld_equivalent, is_plain_poisson, tight_upper,
                                                   epsilon)
from jaxdp._src.events import is_sampler


def _check_budget(target_epsilon, delta, name, value, value_check):
  """Scalar budget (ε ≥ 0, δ in (0, 1)) and one more named scalar argument."""
  for n, v in (("target_epsilon", target_epsilon), ("delta", delta), (name, value)):
    if np.ndim(v) != 0:
      raise ValueError(f"{n} must be a scalar with a sampler; found shape {np.shape(v)}.")
  nx.check_array("target_epsilon", target_epsilon, low=0.0)
  nx.check_array(name, value, **value_check)
  nx.check_array("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)


# The tight calibrations search to this relative tolerance at the finest: the
# PLD upper bound's own grid accuracy (rtol 1e-3, as jaxdp._src.solvers.tight).
_PLD_RTOL = 1e-3


def _tight_probe(sampler, steps, delta, target):
  """probe(σ) -> (public ε <= target, log(tight ε / target)), one evaluation:
  the public PLD answer min(tight, RDP) decides, the tight part steers."""
  def probe(sigma, steps=steps):
    args = tuple(np.asarray(float(v), np.float64) for v in (sigma, steps, delta))
    tight, rdp = _pld_parts(sampler, *args)
    public = min(tight, rdp)
    g = math.log(max(tight, 1e-300) / max(target, 1e-300)) if math.isfinite(tight) else math.inf
    return public <= target, g
  return probe


def _pld_parts(sampler, sigma, steps, delta, orders=None):
  """(tight upper ε, RDP ε) whose minimum :func:`epsilon` with
  ``accountant="pld"`` returns (the same computations, scalars)."""
  if steps == 0:
    return 0.0, 0.0
  fast = pld_equivalent(sampler, sigma, steps)
  if fast is not None:
    from jaxdp._src.pld import kernel as pld  # pylint: disable=g-import-not-at-top
    with nx.x64():
      _, up, rdp_eq = pld.guarded_bounds("epsilon", *fast, delta)
    if is_plain_poisson(sampler):
      return float(up), float(rdp_eq)
    rdp = float(sampler_answer("epsilon", sampler, sigma, steps, delta, "rdp", orders))
    return float(up), min(rdp, float(rdp_eq))
  rdp = float(sampler_answer("epsilon", sampler, sigma, steps, delta, "rdp", orders))
  return float(tight_upper("epsilon", sampler, sigma, steps, delta)), rdp


def calibrate_sigma(sampler, target_epsilon, delta, steps, accountant="rdp", rtol=1e-6):
  """Smallest σ (within ``rtol``) whose sampler ε is <= ``target_epsilon``.

  RDP: bisection in log σ over [1e-3, 1e4] on :func:`epsilon` (ε decreases
  in σ); the answer is the upper end of the final bracket, so it always
  meets the target by the same function a user would check it with.

  PLD (``accountant="pld"``; ``rtol`` raised to 1e-3, the PLD grid's own
  accuracy): the RDP answer meets the target (the tight answer is
  min(PLD, RDP)), so the search starts there and brackets below it with the
  tight accountant only (:func:`jaxdp._src.core.descend.descend`: secant
  bracketing, then Illinois false position), a probe the engine cannot
  answer counting as "does not meet the target" (conservative: it can only
  give a larger σ). Every probe is the computation :func:`epsilon` makes,
  and only a probe that met the target is returned. Scalars only.

  Returns:
    σ as a NumPy float64; ``inf`` when even σ = 1e4 does not meet the target.
  """
  _check_budget(target_epsilon, delta, "steps", steps, dict(low=0.0, integer=True))
  nx.check_array("rtol", rtol, low=0.0, low_open=True, high=0.1)
  if steps == 0:
    return np.float64(0.0)
  if accountant == "pld":
    return _tight_sigma(sampler, float(target_epsilon), float(delta), float(steps), rtol)

  fits = _scalar_fits(lambda y: float(epsilon(sampler, math.exp(y), steps, delta, accountant))
                      <= target_epsilon)
  r = roots.bisect(fits, math.log(1e-3), math.log(1e4), tol=rtol / 2, certified="upper")
  return np.float64(math.exp(r.x[0]) if r.feasible[0] else np.inf)


def _scalar_fits(fits):
  """A one-problem predicate for :func:`jaxdp._src.core.roots.bisect` from a
  scalar one (x passed as a Python float)."""
  return lambda x, idx: np.array([fits(float(v)) for v in np.reshape(x, -1)])


def _feasible_start(probe, y, up, tries=8):
  """(y, g) of the first feasible probe from ``y`` moving by ``up`` (the RDP
  start meets the target by construction; round-off between the RDP paths
  of the fast kernel could put it 1e-13 over), or None."""
  for _ in range(tries):
    ok, g = probe(y)
    if ok:
      return y, g
    y = up(y)
  return None


def _tight_sigma(sampler, target, delta, steps, rtol):
  """:func:`calibrate_sigma` with accountant="pld" (see there)."""
  from jaxdp._src.core import descend as tc  # pylint: disable=g-import-not-at-top
  rtol = max(rtol, _PLD_RTOL)
  # A coarse RDP answer is a feasible start (the tight bound decides below it).
  s_rdp = float(calibrate_sigma(sampler, target, delta, steps, "rdp", rtol=1e-2))
  probe = _tight_probe(sampler, steps, delta, target)
  y_probe = lambda y: probe(math.exp(y))
  found = _feasible_start(y_probe, math.log(min(s_rdp, 1e4)), up=lambda y: y + 1e-6)
  if found is None:      # even σ = 1e4 overspends under both accountants
    return np.float64(np.inf)
  if not found[1] < 0.0:   # the tight bound is no better there: the RDP answer, to rtol
    s_fine = float(calibrate_sigma(sampler, target, delta, steps, "rdp", rtol=rtol))
    return np.float64(s_fine if y_probe(math.log(s_fine))[0] else s_rdp)
  y, _ = tc.descend(y_probe, *found, math.log(1e-3), rtol, slope=-1.0)
  return np.float64(math.exp(y))


def _tight_steps(sampler, target, delta, sigma, t_rdp, max_steps):
  """Largest T meeting the target under accountant="pld", from the RDP answer
  (a lower bound of it) upwards, to rtol 1e-3 (adjacent integers below 1000)."""
  from jaxdp._src.core import descend as tc  # pylint: disable=g-import-not-at-top
  probe = _tight_probe(sampler, None, delta, target)
  value = lambda y: float(min(max(round(math.exp(-y)), 1), max_steps))
  y_probe = lambda y: probe(sigma, steps=value(y))
  found = _feasible_start(y_probe, -math.log(max(t_rdp, 1.0)),
                          up=lambda y: -math.log(max(value(y) - 1.0, 1.0)))
  if found is None:
    return np.float64(0.0)
  y, _ = tc.descend(y_probe, *found, -math.log(max_steps), _PLD_RTOL, slope=-0.5,
                    snap=lambda y: -math.log(value(y)))
  return np.float64(np.inf if value(y) >= max_steps else value(y))


def calibrate_steps(sampler, target_epsilon, delta, sigma, accountant="rdp",
                    max_steps=2 ** 40):
  """Largest number of training steps whose sampler ε is <= ``target_epsilon``.

  RDP: ε is non-decreasing in the steps, so a galloping search followed by
  an integer bisection on :func:`epsilon` finds the boundary exactly (the
  answer is checked by the same function a user would use).  PLD
  (``accountant="pld"``): the RDP answer meets the target and is a lower
  bound of the tight one, so the search starts there and brackets upwards
  (:func:`jaxdp._src.core.descend.descend` in y = -log T, whole numbers) to
  relative accuracy 1e-3 (adjacent integers below 1000 steps), every probe
  the public computation; the returned T met the target.  Scalars only.

  Returns:
    T as a NumPy float64 whole number; ``inf`` when even ``max_steps`` fits.
  """
  _check_budget(target_epsilon, delta, "sigma", sigma, dict(low=0.0, low_open=True))

  def fits(t):
    return float(epsilon(sampler, sigma, t, delta, accountant)) <= target_epsilon

  if accountant == "pld":
    t_rdp = float(calibrate_steps(sampler, target_epsilon, delta, sigma, "rdp", max_steps))
    if math.isinf(t_rdp):
      return np.float64(np.inf)
    if t_rdp == 0.0 and not fits(1):
      return np.float64(0.0)
    return _tight_steps(sampler, float(target_epsilon), float(delta), float(sigma), t_rdp,
                        max_steps)
  # Galloping from T = 1 (1, 2, 4, ...) up to max_steps, then integer bisection.
  r = roots.bisect(_scalar_fits(lambda t: fits(int(t))), 1.0, np.inf, tol=1, certified="lower",
                   split="integer", limit=float(max_steps))
  if not r.feasible[0]:
    return np.float64(0.0)
  return np.float64(np.inf if r.x[0] >= max_steps else r.x[0])


def with_rate(sampler, q=None, batch_size=None):
  """A copy of ``sampler`` at another rate: ``q`` for Poisson samplers, else
  ``batch_size`` (other parameters, the capacity and the relation, kept)."""
  import dataclasses  # pylint: disable=g-import-not-at-top
  from jaxdp._src.samplers import sampling as _sampling  # pylint: disable=g-import-not-at-top
  if isinstance(sampler, _sampling.PoissonSampler):
    return dataclasses.replace(sampler, q=float(q))
  return dataclasses.replace(sampler, batch_size=int(batch_size))


def calibrate_sampling_rate(sampler, target_epsilon, delta, sigma, steps, accountant="rdp",
                            rtol=1e-6, min_rate=1e-12, orders=None):
  """Largest rate of ``sampler``'s kind whose ε after ``steps`` steps is <= target.

  Poisson samplers (the capacity kept): bisection in log q over
  [``min_rate``, 1] to relative accuracy ``rtol``, the answer the lower end of
  the final bracket (so it always meets the target, by :func:`epsilon`).
  Fixed-size, balls-in-bins and shuffle samplers: the largest whole batch size
  B in [1, N] by integer bisection, returned as q = B / N (B = q·N exactly).
  Both searches assume ε non-decreasing in the rate (true for every sampler
  here at a fixed number of steps; the answer is checked either way).
  PLD (``accountant="pld"``): from the RDP answer upwards by
  :func:`jaxdp._src.core.descend.descend` (q to relative accuracy 1e-3, B to
  1e-3 or adjacent whole numbers), every probe the public computation.
  Scalars only.

  Returns:
    q as a NumPy float64; 0 when even the smallest rate (``min_rate``, or
    B = 1) overspends.
  """
  from jaxdp._src.samplers import sampling as _sampling  # pylint: disable=g-import-not-at-top
  _check_budget(target_epsilon, delta, "sigma", sigma, dict(low=0.0, low_open=True))
  nx.check_array("steps", steps, low=0.0, integer=True)
  if np.ndim(steps) != 0:
    raise ValueError(f"steps must be a scalar with a sampler; found shape {np.shape(steps)}.")
  nx.check_array("rtol", rtol, low=0.0, low_open=True, high=0.1)
  if steps == 0:
    return np.float64(1.0)
  n = sampler.dataset_size
  if accountant == "pld":
    q_rdp = float(calibrate_sampling_rate(sampler, target_epsilon, delta, sigma, steps, "rdp",
                                          1e-6, min_rate, orders))
    return _tight_rate(sampler, float(target_epsilon), float(delta), float(sigma),
                       float(steps), q_rdp, min_rate, orders)

  if isinstance(sampler, _sampling.PoissonSampler):
    def fits(q):
      return float(epsilon(with_rate(sampler, q=q), sigma, steps, delta, accountant,
                           orders)) <= target_epsilon

    r = roots.bisect(_scalar_fits(lambda y: fits(math.exp(y))), math.log(min_rate), 0.0,
                     tol=rtol / 2, certified="lower")
    return np.float64(math.exp(r.x[0]) if r.feasible[0] else 0.0)

  def fits_b(b):
    return float(epsilon(with_rate(sampler, batch_size=b), sigma, steps, delta, accountant,
                         orders)) <= target_epsilon

  r = roots.bisect(_scalar_fits(lambda b: fits_b(int(b))), 1.0, float(n), tol=1,
                   certified="lower", split="integer")
  return np.float64(r.x[0] / n if r.feasible[0] else 0.0)


def _tight_rate(sampler, target, delta, sigma, steps, q_rdp, min_rate, orders):
  """:func:`calibrate_sampling_rate` with accountant="pld": from the RDP
  answer (it meets the target) upwards in q (Poisson samplers, to rtol 1e-3)
  or in the whole batch size B (the others), by
  :func:`jaxdp._src.core.descend.descend` in y = -log(rate)."""
  from jaxdp._src.core import descend as tc  # pylint: disable=g-import-not-at-top
  from jaxdp._src.samplers import sampling as _sampling  # pylint: disable=g-import-not-at-top
  n = sampler.dataset_size
  if isinstance(sampler, _sampling.PoissonSampler):
    value = lambda y: min(math.exp(-y), 1.0)
    build = lambda y: with_rate(sampler, q=value(y))
    snap, y_end = None, 0.0
    start = max(q_rdp, min_rate)
    ret = value
  else:
    value = lambda y: float(min(max(round(math.exp(-y)), 1), n))
    build = lambda y: with_rate(sampler, batch_size=int(value(y)))
    snap, y_end = (lambda y: -math.log(value(y))), -math.log(n)
    start = max(round(q_rdp * n), 1)
    ret = lambda y: value(y) / n

  def y_probe(y):
    smp = build(y)
    args = tuple(np.asarray(float(v), np.float64) for v in (sigma, steps, delta))
    tight, rdp = _pld_parts(smp, *args, orders=orders)
    g = math.log(max(tight, 1e-300) / max(target, 1e-300)) if math.isfinite(tight) else math.inf
    return min(tight, rdp) <= target, g

  y0 = -math.log(start)
  down = (lambda y: y + 1e-6) if snap is None else (lambda y: -math.log(max(value(y) - 1, 1)))
  found = _feasible_start(y_probe, y0, up=down)
  if found is None:
    return np.float64(0.0)
  y, _ = tc.descend(y_probe, *found, y_end, _PLD_RTOL, slope=-1.0, snap=snap)
  return np.float64(ret(y))
