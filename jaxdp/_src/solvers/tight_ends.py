"""The certified other end and the batched-calibration narrowing of the tight
(PLD) calibrations of :mod:`jaxdp._src.solvers.tight` (``jaxdp calibrate``
with the tight accountant), split out of it: :func:`narrowed` takes the
batched PLD calibration's answer where the general engine's interval is
wide, :func:`kernel_end` tightens the certified end with the batched PLD
kernel's certified lower bounds.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from jaxdp._src.core import numerics as nx
from jaxdp._src.solvers.boundary_eval import MAX_STEPS_FLOAT as _MAX_STEPS


def quiet(fn, *args):
  """``float(fn(*args))`` without its RuntimeWarnings."""
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)
    return float(fn(*args))


def narrowed(kind, value, end, target, delta, q, sigma, steps, rtol):
  """The answer of a tight calibration (``kind`` "sigma", "steps" or "q"), or
  the batched PLD calibration's (``jaxdp.calibrate.<kind>(...,
  accountant="pld")``) where the general engine's certified interval between
  ``value`` and ``end`` is over 1% wide and that answer is better (smaller σ,
  more steps, larger q) and meets the target as ``jaxdp epsilon`` reports it
  (:func:`jaxdp._src.accounting.rate.tight_one`, which intersects a wide
  interval with the batched path's answer the same way). At q = 1e-4,
  T = 10⁶, δ = 1e-5, target 0.5 the engine's grid left σ in [0.749, 1.004]
  and the command answered σ = 1.004, where ``jaxdp.calibrate.sigma(...,
  accountant="pld")`` answers 0.953 (ε 0.503 at σ = 0.95); at σ = 0.9533 the
  rate was 8.8e-5 (interval up to 1.3e-4) against 1.0e-4."""
  from jaxdp._src.accounting import rate  # pylint: disable=g-import-not-at-top
  from jaxdp._src.solvers import calibrate  # pylint: disable=g-import-not-at-top
  wide = rate._CLI_WIDE   # pylint: disable=protected-access
  if kind == "sigma":
    if not (math.isfinite(value) and end > 0 and value / end - 1.0 > wide):
      return value
    batched = quiet(lambda: calibrate.sigma(target, delta, q, steps, accountant="pld", rtol=rtol))
    better, args = batched < value, (q, batched, steps)
  else:
    if not (0 < value < math.inf and (not math.isfinite(end) or end / value - 1.0 > wide)):
      return value
    if kind == "steps":
      batched = quiet(lambda: calibrate.steps(target, delta, q, sigma, accountant="pld"))
      better, args = batched > value and batched < _MAX_STEPS, (q, sigma, batched)
    else:
      batched = quiet(lambda: calibrate.sampling_rate(target, delta, sigma, steps,
                                                       accountant="pld", rtol=rtol))
      better, args = batched > value, (batched, sigma, steps)
  if not better:
    return value
  _, up, rdp_up = rate.tight_one("epsilon", *args, delta)
  return batched if min(up, rdp_up) <= target else value


# Relative steps from an answer at which the batched PLD kernel's certified
# lower ε is read for a certified end (one batch of the kernel).
_END_STEPS = (0.0005, 0.002, 0.01, 0.05, 0.25, 1.0, 7.0, 63.0)


def kernel_end(kind, value, end, target, delta, q, sigma, steps):
  """``end``, a certified end on the exact answer (the general engine's, or
  ``inf`` for steps it cannot compose), tightened with the batched PLD
  kernel's certified lower ε bounds (:mod:`jaxdp._src.pld.kernel`, no general
  engine) where it is over 1% from ``value``.

  ε is non-increasing in σ and non-decreasing in q and T, so a point whose
  lower ε exceeds the target bounds the exact answer: σ above it, q below it,
  T below it. The points are ``value`` moved by ``_END_STEPS`` toward
  ``end``; the closest one that overspends gives the end (``kind``:
  "sigma", "q" or "steps"; the other of ``q``/``sigma``/``steps`` given).
  """
  from jaxdp._src.accounting import rate  # pylint: disable=g-import-not-at-top
  from jaxdp._src.pld import kernel as pld_kernel  # pylint: disable=g-import-not-at-top
  f = np.array(_END_STEPS)
  near = 1.0 + rate._CLI_WIDE   # pylint: disable=protected-access
  if not 0.0 < value < math.inf:
    return end
  if kind == "sigma":
    if end * near >= value:
      return end
    tries = value / (1.0 + f)
    tries = tries[tries > end]
    args = (q, tries, steps)
  elif kind == "q":
    if value * near >= end:
      return end
    tries = np.unique(np.minimum(value * (1.0 + f), 1.0))
    tries = tries[tries < end]
    args = (tries, sigma, steps)
  else:
    if value * near >= end:
      return end
    tries = np.unique(np.minimum(np.ceil(value * (1.0 + f)), _MAX_STEPS))
    tries = tries[(tries > value) & (tries - 1.0 < end)]
    args = (q, sigma, tries)
  if not tries.size:
    return end
  try:
    with nx.x64(), warnings.catch_warnings():
      warnings.simplefilter("ignore", RuntimeWarning)
      lower, _, _ = pld_kernel.guarded_bounds("epsilon", *args, delta, full_rdp=False)
  except ValueError:
    return end
  over = tries[np.asarray(lower).reshape(-1) > target]
  if not over.size:
    return end
  if kind == "sigma":
    return float(max(end, over.max()))
  return float(min(end, over.min() - (1.0 if kind == "steps" else 0.0)))


def settled(kind, value, end, target, delta, q, sigma, steps, rtol):
  """``(answer, certified end)`` of a tight calibration from the general
  engine's ``value`` and ``end``: :func:`narrowed`, then :func:`kernel_end`
  at the answer it keeps."""
  value = narrowed(kind, value, end, target, delta, q, sigma, steps, rtol)
  return value, kernel_end(kind, value, end, target, delta, q, sigma, steps)
