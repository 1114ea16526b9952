"""The root finder's scalar host modes: brackets driven by a caller's probes.

Part of the one root finder (:mod:`jaxdp._src.core.roots`, whose module
docstring states the contract: only evaluated points become ends, and the
``certified`` end is the one proven to meet the target). These two classes
keep the bracket of a non-increasing g (g <= 0 feasible) for a scalar search
that spends expensive evaluations one at a time and chooses its own probes:
the tight calibration (:mod:`jaxdp._src.solvers.tight`), whose coarse phase
uses :class:`Illinois` and whose fine phase uses :class:`Probed`.
"""

from __future__ import annotations

import math


class Illinois:
  """Sign-change bracket of g (non-increasing in y) with Illinois false position.

  The scalar host false-position step of the tight calibration
  (:mod:`jaxdp._src.solvers.tight`): ``a`` is the largest y seen with g > 0
  (infeasible), ``b`` the smallest with g <= 0 (feasible, the certified end
  with ``certified="upper"``). :meth:`add` records an evaluation, halving the
  g of an end kept twice in a row (Illinois); :meth:`false_position` is the
  interpolated root, or None before g has changed sign."""

  def __init__(self, b, gb):
    self.a = self.ga = None
    self.b, self.gb = b, gb
    self.kept = None    # which end the last update kept ("a" or "b")

  def add(self, y, g):
    if g > 0:
      if self.a is None or y > self.a:
        self.a, self.ga = y, g
      if self.kept == "b":
        self.gb *= 0.5      # Illinois: the end kept twice has its g halved
      self.kept = "b"
    else:
      if y < self.b:
        self.b, self.gb = y, g
      if self.kept == "a" and self.ga is not None:
        self.ga *= 0.5
      self.kept = "a"

  def false_position(self):
    if self.a is None or not math.isfinite(self.ga) or not math.isfinite(self.gb):
      return None
    return self.a + (self.b - self.a) * self.ga / (self.ga - self.gb)


class Probed:
  """A scalar host bracket [yi, yf] of a non-increasing g, with a caller's
  probe schedule (the fine phase of the tight calibration).

  ``yf`` is the smallest y evaluated feasible (g <= 0; the certified end
  with ``certified="upper"``; it may start at a point known feasible from
  elsewhere), ``yi`` the largest y evaluated infeasible (None before any).
  :meth:`add` records an evaluation and moves the end it proves;
  :meth:`false_position` interpolates between the two ends where both were
  evaluated here, kept a fraction ``margin`` of the width inside;
  :meth:`closed` says whether the bracket is at most ``tol`` wide. Only
  evaluated points ever become ends, so the answer ``yf`` meets the target
  by the evaluating function."""

  def __init__(self, yf):
    self.yi, self.yf = None, yf
    self.g_at = {}      # g of the points evaluated here, by y

  def add(self, y, feasible, g):
    self.g_at[y] = g
    if feasible:
      self.yf = y
    else:
      self.yi = y

  def closed(self, tol):
    return self.yi is not None and self.yf - self.yi <= tol

  def false_position(self, margin=0.05):
    """The interpolated root strictly inside the bracket, or None."""
    yi, yf, g = self.yi, self.yf, self.g_at
    if yi not in g or yf not in g or not math.isfinite(g[yi] - g[yf]):
      return None
    fp = yi + (yf - yi) * g[yi] / (g[yi] - g[yf])
    if yi + margin * (yf - yi) < fp < yf - margin * (yf - yi):
      return fp
    return None
