"""A certified descent from a feasible point to the boundary of a monotone constraint.

Used by the tight calibrations of samplers: each probe is the public
computation a user would call, and the returned point is one whose probe met
the target (see :func:`descend`): the contract of the one root finder
(:mod:`jaxdp._src.core.roots`), ``certified="upper"`` in y, scalar, from a
feasible start.
"""

from __future__ import annotations

import math


def descend(probe, y_feasible, g_feasible, y_end, rtol, slope=-1.0, snap=None, max_probes=40):
  """Smallest feasible y (to ``rtol``) below a feasible start, by probes only.

  The tight calibrations of :mod:`jaxdp._src.solvers.sampler_calibrate` search in a coordinate
  y where ε is non-increasing (log σ, -log T, -log q), down from a start that
  is known to meet the target (the RDP answer: the tight answer is
  min(PLD, RDP), so it meets the target there). Only points that ``probe``
  evaluated and found feasible are ever returned, so the answer meets the
  target by the function the probe evaluates (the public one).

  1. Bracketing: steps down from the feasible end, sized by the secant of
     g = log(ε_tight / target) (``slope``, dg/dy, refined from the probes),
     1.5x past the predicted root and growing 4x while feasible, never below
     ``y_end``.
  2. Illinois false position between the infeasible and the feasible end,
     aimed 0.45·tol either side of the root estimate so the bracket closes
     in a few probes, kept 5% inside the bracket, bisection when g is not
     finite (a probe the engine could not answer is infeasible, g = +∞).

  Args:
    probe: y -> (feasible, g); g = log(tight ε / target), +inf when unknown.
    y_feasible: a feasible y (its g is ``g_feasible``).
    y_end: the smallest y to consider.
    rtol: relative tolerance of the answer's value (y is a log).
    slope: initial dg/dy estimate (< 0).
    snap: optional y -> y of the nearest evaluable value (whole numbers).
    max_probes: cap on evaluations (the answer stays feasible when reached).

  Returns:
    ``(y, probes)``: the smallest feasible y found and the number of probes.
  """
  tolx = -math.log1p(-rtol)
  snap = snap or (lambda y: y)
  yf, gf = y_feasible, g_feasible
  yi, gi = None, None
  probes = 0
  if not (math.isfinite(gf) and gf < 0.0):   # the tight bound does not go below the start
    return yf, probes
  slope = slope if (math.isfinite(slope) and slope < -1e-3) else -1.0
  step = max(1.5 * gf / slope, 2.0 * tolx)
  kept = None
  while probes < max_probes:
    if yi is None:
      p = max(yf - step, y_end)
      if p >= yf:
        break
    else:
      w = yf - yi
      if w <= tolx:
        break
      if math.isfinite(gi) and math.isfinite(gf) and gi > gf:
        r = yi + w * gi / (gi - gf)
        p = r + 0.45 * tolx if kept == "i" else r - 0.45 * tolx
        p = min(max(p, yi + 0.05 * w), yf - 0.05 * w)
      else:
        p = 0.5 * (yi + yf)
    inside = lambda y: (yi is None or yi < y) and y < yf
    p = snap(p)
    if not inside(p):
      p = snap(0.5 * ((y_end if yi is None else yi) + yf))
      if not inside(p):
        break                          # no evaluable point left inside the bracket
    ok, g = probe(p)
    probes += 1
    if ok:
      if yi is None and math.isfinite(g) and p < yf:
        s = (g - gf) / (p - yf)
        slope = s if s < -1e-3 else slope
        step = max(4.0 * step, 1.5 * g / slope) if math.isfinite(g) else 4.0 * step
      yf, gf = p, g
      if kept == "f" and gi is not None:
        gi *= 0.5                      # Illinois: the end kept twice has its g halved
      kept = "f" if yi is not None else kept
      if yi is None and p <= y_end:
        break
    else:
      yi, gi = p, g if g > 0 else 1e-12
      if kept == "i":
        gf *= 0.5
      kept = "i"
  return yf, probes
