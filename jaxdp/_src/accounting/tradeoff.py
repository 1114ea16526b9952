"""Attack risk: certified trade-off curves (f-DP), a μ-GDP estimate, and noise
calibrated to a maximum membership-inference TPR.

A membership-inference attack on one example is a test between the two
neighbouring output distributions P and Q.  Its false-positive rate α (FPR,
type-I error) and its true-positive rate 1 - β (TPR, one minus the type-II
error) are limited by the *trade-off function* f = T(P, Q),
f(α) = inf {β_φ : α_φ <= α} over all (randomised) tests φ (Dong, Roth & Su,
"Gaussian differential privacy", JRSS-B 2022, Def. 2.1).  Every attack has
TPR <= 1 - f(FPR).

From privacy profiles (DRS 2022, Prop. 2.12; Wasserman & Zhou 2010)
--------------------------------------------------------------------
Let δ(ε) be the privacy profile, the hockey-stick divergence maximised over
both neighbouring directions (add and remove), for ε >= 0.  A mechanism that is
(ε, δ(ε))-DP for every ε >= 0 is f_δ-DP with

  f_δ(α) = sup_{ε >= 0} max(0, 1 - δ(ε) - e^ε α, e^{-ε} (1 - δ(ε) - α)).

The two lines for each ε are the ε >= 0 and the ε <= 0 halves of one
direction's profile (H_{e^{-ε}}(P‖Q) = 1 - e^{-ε} + e^{-ε} H_{e^ε}(Q‖P)), so
f_δ is the largest symmetric trade-off function below both T(P, Q) and
T(Q, P): f_δ = min(T(P,Q), T(Q,P))** (convex hull), the "symmetrised" curve of
DRS 2022 (§4, where subsampling gives C_p(f) = min(f_p, f_p⁻¹)**).  For a
symmetric pair (the Gaussian mechanism, randomized response) f_δ is exactly the trade-off
function; for the Poisson-subsampled Gaussian it is the symmetrised curve
that DRS analyse.  In TPR terms, with TPR*(α) = 1 - f_δ(α):

* every attack in either direction has TPR <= TPR*(α);
* TPR*(α) is attained by the best test against the symmetrised pair, and it
  is the smallest TPR bound that any argument from the profile alone can give.

:func:`from_profile` turns a profile known only on a grid ε_0 < ... < ε_{n-1}
(each value between certified bounds δ_lo <= δ <= δ_up) into two certified
curves:

``tpr_upper`` (an upper bound on TPR*, hence on every attack's TPR).  Any
subset of the ε's gives a valid lower bound on f_δ, and δ_up >= δ only makes
each line smaller, so

  tpr_upper(α) = min_i min(1, δ_up(ε_i) + e^{ε_i} α, 1 - e^{-ε_i}(1 - δ_up(ε_i) - α)).

(δ_up is first replaced by its running minimum, since δ is non-increasing.)
Between grid points no better line exists: δ is convex in u = e^ε, so its
chord between nodes bounds it above, and each line is monotone in u along a
chord.  The error against TPR* is second order in the grid spacing.

``tpr_lower`` (a lower bound on TPR*: no profile-based bound can go below
it; for symmetric mechanisms a lower bound on the best attack's TPR).  This
needs an UPPER bound on f_δ, i.e. a lower bound on δ(ε) for every ε >= 0, not
only on the grid.  We use that δ, as a function of u = e^ε >= 1, is
non-increasing and convex with slope δ'(u) = -Q(L > log u) in [-1, 0]
(hockey-stick divergence: sup_S P(S) - u Q(S)).  On each cell [u_j, u_{j+1}],
with δ_lo replaced by its running maximum from the right,

  δ(u) >= L(u) = max(δ_lo,j + s̲ (u - u_j), δ_lo,j+1 + s̄ (u - u_{j+1})),

where s̲ = clip((δ_lo,j - δ_up,j-1)/(u_j - u_{j-1}), -1, 0) is a lower bound
on every slope right of u_j (convexity: slopes increase; -1 on the first
cell) and s̄ = clip((δ_up,j+2 - δ_lo,j+1)/(u_{j+2} - u_{j+1}), -1, 0) an upper
bound on every slope left of u_{j+1} (0 on the last cell: monotonicity).  L is
piecewise linear with one kink, and on each linear piece both
1 - L(u) - uα (linear) and (1 - L(u) - α)/u (monotone) attain their sup at an
end point, so sup over the cell of the f_δ lines with L in place of δ is a max
over three points (the cell's ends and the kink).  The ranges outside the
grid are covered the same way: u in [1, u_0] with the upper slope bound of the
first cell, and u >= u_{n-1} with δ >= max(0, δ_lo,n-1 + s̲ (u - u_{n-1})),
whose sup is at the zero crossing (or, at α = 0 only, as u -> ∞).  Then
tpr_lower(α) = max(α, 1 - F(α)) with F the max over these points: certified,
and second order in the grid spacing plus the width δ_up - δ_lo.

Both curves are non-decreasing in α, lie in [α, 1], and are rounded outward by
8 machine epsilons (absolute).  Note ``tpr_lower`` is a statement about TPR*,
the symmetrised curve: for an asymmetric mechanism (add/remove subsampling)
the best attack in a *fixed* direction may have a TPR below ``tpr_lower`` at
FPRs where min(T(P,Q), T(Q,P)) is not convex; ``tpr_upper`` bounds every
attack in every case.

DP-SGD
------
:func:`tradeoff` computes δ_lo and δ_up of the Poisson-subsampled Gaussian by
:func:`jaxdp.pld.delta` (``return_bounds=True``, both directions) on a uniform
ε grid from 0 to the RDP ε at δ = 1e-12 (:func:`epsilon_grid`).  For the plain
Gaussian (q = 1) the exact curve is μ-GDP with μ = √T/σ,
TPR(α) = Φ(Φ⁻¹(α) + μ) (T Gaussian steps compose exactly to √T/σ-GDP, DRS 2022
§3), and the two curves bracket it.

References: Dong, Roth & Su, "Gaussian differential privacy", JRSS-B 84(1),
2022 (Def. 2.1, Prop. 2.12, Cor. 2.13, §§4-5); Bu, Dong, Long & Su, "Deep
learning with Gaussian differential privacy", HDSR 2020 (the CLT μ);
Kulynych, Gomez, Kaissis, du Pin Calmon & Troncoso, "Attack-aware noise
calibration for differential privacy", NeurIPS 2024 (calibration to TPR).
"""

from __future__ import annotations

import inspect
import math
from typing import NamedTuple

import numpy as np

from jaxdp._src.accounting import tradeoff_dpsgd
from jaxdp._src.accounting.tradeoff_dpsgd import (  # noqa: F401  (public names, GRID_*)
    DEFAULT_NUM_EPS, GRID_DELTA, GRID_EPS_RANGE, epsilon_grid)
from jaxdp._src.core import numerics as num

__all__ = [
    "TradeoffBounds",
    "from_profile",
    "epsilon_grid",
    "tradeoff",
    "tradeoff_of_state",
    "DEFAULT_NUM_EPS",
]


_MARGIN = 8.0 * np.finfo(np.float64).eps   # outward rounding of both curves
_MAX_EPS = 700.0                           # e^ε must stay finite
_CHUNK = 1 << 20                           # elements per (batch × points × fpr) block


class TradeoffBounds(NamedTuple):
  """Certified bounds on the attack TPR at each FPR.

  Attributes:
    fpr: the false-positive rates α (as given, broadcast to the result).
    tpr_upper: certified upper bound on 1 - f_δ(α): no membership-inference
      attack has a larger TPR at FPR α.
    tpr_lower: certified lower bound on 1 - f_δ(α), the TPR of the best test
      against the symmetrised pair (module docstring); NaN where no lower
      bound on the profile was available.
  """
  fpr: np.ndarray
  tpr_upper: np.ndarray
  tpr_lower: np.ndarray


# --------------------------------------------------------------------------
# the core: (B, n) profiles, (B, m) FPRs
# --------------------------------------------------------------------------


def _upper_core(du, u, fpr):
  """TPR upper bound: min over the grid lines (module docstring)."""
  b, n = du.shape
  m = fpr.shape[1]
  out = np.empty((b, m))
  step = max(1, _CHUNK // max(1, b * n))
  d = du[:, :, None]
  uu = u[:, :, None]
  for c0 in range(0, m, step):
    a = fpr[:, None, c0:c0 + step]
    with np.errstate(over="ignore", invalid="ignore"):
      l1 = d + uu * a
      l2 = 1.0 - (1.0 - d - a) / uu
    out[:, c0:c0 + step] = np.minimum(l1, l2).min(axis=1)
  return np.minimum(out + _MARGIN, 1.0)


def _lower_points(du, dl, u):
  """Points (u, L) with L <= δ(u) at which sup of the f_δ lines is attained.

  Returns (uc, lc) of shape (B, C): the two ends and the kink of every cell,
  u = 1 before the grid, and the zero crossing after it (u = inf where the
  slope bound is 0: then L is the last node's value for all larger u).
  """
  b, n = dl.shape
  pts_u = [np.ones((b, 1))]
  if n >= 2:
    du_ = np.diff(u, axis=1)
    s_lo = np.clip((dl[:, 1:] - du[:, :-1]) / du_, -1.0, 0.0)   # slopes right of u_{k+1}
    s_hi = np.clip((du[:, 1:] - dl[:, :-1]) / du_, -1.0, 0.0)   # slopes left of u_k
    s_a = np.concatenate([-np.ones((b, 1)), s_lo[:, :-1]], axis=1)      # cell j: right of u_j
    s_b = np.concatenate([s_hi[:, 1:], np.zeros((b, 1))], axis=1)       # cell j: left of u_{j+1}
    u0, u1 = u[:, :-1], u[:, 1:]
    d0, d1 = dl[:, :-1], dl[:, 1:]

    def env(x):
      return np.maximum(d0 + s_a * (x - u0), d1 + s_b * (x - u1))

    diff = s_a - s_b
    with np.errstate(divide="ignore", invalid="ignore"):
      kink = (d1 - s_b * u1 - d0 + s_a * u0) / np.where(diff != 0, diff, 1.0)
    kink = np.where(diff != 0, kink, u0)
    kink = np.clip(np.nan_to_num(kink, nan=u0[0, 0] if u0.size else 1.0), u0, u1)
    first_slope = s_hi[:, :1]
    last_slope = s_lo[:, -1:]
    pts_l = [dl[:, :1] + first_slope * (1.0 - u[:, :1])]
    pts_u += [u0, u1, kink]
    pts_l += [env(u0), env(u1), env(kink)]
  else:
    last_slope = -np.ones((b, 1))
    pts_l = [dl[:, :1]]
    pts_u.append(u)
    pts_l.append(dl)
  # Beyond the grid: L = max(0, δ_lo,n-1 + s (u - u_{n-1})).
  neg = last_slope < 0
  with np.errstate(divide="ignore"):
    uz = np.where(neg, u[:, -1:] + dl[:, -1:] / np.where(neg, -last_slope, 1.0), np.inf)
  pts_u.append(uz)
  pts_l.append(np.where(neg, 0.0, dl[:, -1:]))
  return np.concatenate(pts_u, axis=1), np.concatenate(pts_l, axis=1)


def _lower_core(du, dl, u, fpr):
  """TPR lower bound 1 - F(α), F the max of the f_δ lines at the points."""
  uc, lc = _lower_points(du, dl, u)
  b, c = uc.shape
  m = fpr.shape[1]
  out = np.empty((b, m))
  step = max(1, _CHUNK // max(1, b * c))
  uu = uc[:, :, None]
  ll = lc[:, :, None]
  for c0 in range(0, m, step):
    a = fpr[:, None, c0:c0 + step]
    with np.errstate(over="ignore", invalid="ignore"):
      ua = np.where(a > 0, uu * a, 0.0)
      g1 = 1.0 - ll - ua
      g2 = np.where(np.isfinite(uu), (1.0 - ll - a) / uu, 0.0)
    f = np.maximum(np.maximum(g1, g2), 0.0).max(axis=1)
    out[:, c0:c0 + step] = 1.0 - f
  return out - _MARGIN


def _bounds(du, dl, eps, fpr):
  """(upper, lower) of shape (B, m) for (B, n) profiles and (B, m) FPRs.

  du, dl: upper/lower profile values (dl may be None); eps: (B, n) increasing.
  """
  du = np.minimum.accumulate(np.clip(du, 0.0, 1.0), axis=1)
  u = np.exp(eps)
  upper = _upper_core(du, u, fpr)
  upper = np.maximum(upper, fpr)
  if dl is None:
    return upper, np.full_like(upper, np.nan)
  dl = np.maximum.accumulate(np.clip(dl, 0.0, 1.0)[:, ::-1], axis=1)[:, ::-1]
  dl = np.minimum(dl, du)  # only lowers a lower bound (round-off between queries)
  lower = _lower_core(du, dl, u, fpr)
  lower = np.minimum(np.maximum(lower, fpr), upper)
  return upper, lower


def _check_fpr(name, fpr):
  num.check_array(name, fpr, low=0.0, high=1.0)
  return np.asarray(fpr, np.float64)


# --------------------------------------------------------------------------
# public entry points
# --------------------------------------------------------------------------


@num.host_function
def from_profile(delta_upper, delta_lower, eps_grid, fpr) -> TradeoffBounds:
  """Certified TPR bounds at each FPR from a privacy profile sampled on a grid.

  With δ(ε) the profile maximised over both neighbouring directions, the
  mechanism is f_δ-DP, f_δ(α) = sup_{ε>=0} max(0, 1 - δ(ε) - e^ε α,
  e^{-ε}(1 - δ(ε) - α)) (Dong, Roth & Su 2022, Prop. 2.12).  Returns

  * ``tpr_upper`` >= 1 - f_δ(α) from the lines at the grid points with
    ``delta_upper`` (every attack's TPR is at most this);
  * ``tpr_lower`` <= 1 - f_δ(α) from ``delta_lower`` extended to every ε >= 0
    by monotonicity and convexity of δ in e^ε (the TPR of the best test
    against the symmetrised pair is at least this).

  See the module docstring for the derivation and what each side certifies.

  Args:
    delta_upper: certified upper bounds on δ(ε) at ``eps_grid``, in [0, 1];
      shape (..., n), broadcast with ``eps_grid``.
    delta_lower: certified lower bounds (<= ``delta_upper``), same shape
      rules, or None (then ``tpr_lower`` is NaN).
    eps_grid: strictly increasing ε's >= 0 on the last axis, at most 700.
    fpr: false-positive rates in [0, 1], any shape F.

  Returns:
    :class:`TradeoffBounds`, each of shape ``batch + F`` where ``batch`` is the
    broadcast of the leading axes of the profile arguments.

  Raises:
    ValueError: naming the argument and value for NaN, out-of-range or
      non-increasing inputs, and for ``delta_lower > delta_upper``.
  """
  num.check_array("eps_grid", eps_grid, low=0.0, high=_MAX_EPS)
  num.check_array("delta_upper", delta_upper, low=0.0, high=1.0)
  fpr = _check_fpr("fpr", fpr)
  eps = np.asarray(eps_grid, np.float64)
  du = np.asarray(delta_upper, np.float64)
  if eps.ndim == 0 or du.ndim == 0:
    raise ValueError(f"eps_grid and delta_upper need a grid axis (last); found shapes "
                     f"{eps.shape} and {du.shape}.")
  if eps.shape[-1] > 1 and np.any(np.diff(eps, axis=-1) <= 0):
    bad = np.argwhere(np.diff(eps, axis=-1) <= 0)[0]
    raise ValueError(f"eps_grid must be strictly increasing along its last axis; found "
                     f"{eps[tuple(bad)]!r} followed by {eps[tuple(bad[:-1]) + (bad[-1] + 1,)]!r} "
                     f"at index {tuple(int(i) for i in bad)}.")
  arrays = {"delta_upper": du, "eps_grid": eps}
  dl = None
  if delta_lower is not None:
    num.check_array("delta_lower", delta_lower, low=0.0, high=1.0)
    dl = np.asarray(delta_lower, np.float64)
    arrays["delta_lower"] = dl
  shape = num.check_same_shape(**arrays)
  if dl is not None:
    dlb, dub = np.broadcast_arrays(dl, du)
    bad = dlb > dub
    if bad.any():
      i = tuple(int(k) for k in np.argwhere(bad)[0])
      raise ValueError(f"delta_lower must not exceed delta_upper; found delta_lower="
                       f"{dlb[i]!r} > delta_upper={dub[i]!r} at index {i}.")
  batch, n = shape[:-1], shape[-1]
  flat = lambda x: np.broadcast_to(x, shape).reshape(-1, n)  # noqa: E731
  bsz = int(np.prod(batch, dtype=np.int64))
  fpr_b = np.broadcast_to(fpr.reshape(1, -1), (bsz, fpr.size))
  up, lo = _bounds(flat(du), None if dl is None else flat(dl), flat(eps), fpr_b)
  out = batch + fpr.shape
  return TradeoffBounds(np.broadcast_to(fpr, out).copy(), up.reshape(out), lo.reshape(out))


def _dpsgd_bounds(q, sigma, steps, fpr, num_eps, rtol, upper_only=False):
  """(upper, lower) of shape (B, m) for flat (B,) configurations and (B, m) FPRs.

  ``upper_only`` (calibrate_sigma's rounds; float64 scope): the PLD kernel's upper end alone,
  >= the profile :func:`tradeoff` uses, hence a TPR bound >= its; ``lower`` NaN.
  The profile is :func:`jaxdp._src.accounting.tradeoff_dpsgd.profile`'s (a
  repeated small question reads the one kept)."""
  grid, up, lo = tradeoff_dpsgd.profile(q, sigma, steps, num_eps, rtol, upper_only)
  return _bounds(up, lo, grid, fpr)


@num.host_function
def tradeoff(q, sigma, steps, fpr, *, num_eps=DEFAULT_NUM_EPS, rtol=1e-3) -> TradeoffBounds:
  """Certified trade-off (TPR at each FPR) of DP-SGD, from its tight PLD.

  ``steps`` compositions of the Poisson-subsampled Gaussian (add/remove,
  sensitivity 1).  The profile bounds δ_lo <= δ <= δ_up come from
  :func:`jaxdp.pld.delta` (``return_bounds=True``, max over both directions)
  on the grid of :func:`epsilon_grid`; :func:`from_profile` turns them into
  ``tpr_upper`` (no attack does better) and ``tpr_lower`` (the symmetrised
  optimal test does at least this well).  For q = 1 the exact curve is
  Φ(Φ⁻¹(α) + √T/σ) and lies between the two.

  Args:
    q: sampling rate in [0, 1].
    sigma: noise multiplier > 0.
    steps: number of steps (whole number >= 0).
    fpr: FPRs in [0, 1], any shape F.
    num_eps: ε grid points (tightness only).
    rtol: accuracy of the PLD grid (:func:`jaxdp.pld.delta`).

  Returns:
    :class:`TradeoffBounds` of shape ``S + F``, S the broadcast shape of
    (q, sigma, steps).

  Raises:
    ValueError: naming the argument and value for out-of-range inputs.
  """
  num.check_array("q", q, low=0.0, high=1.0)
  num.check_array("sigma", sigma, low=0.0, low_open=True)
  num.check_array("steps", steps, low=0.0, integer=True)
  fpr = _check_fpr("fpr", fpr)
  num.check_array("num_eps", num_eps, low=2.0, integer=True)
  num.check_array("rtol", rtol, low=0.0, low_open=True)
  shape = num.check_same_shape(q=q, sigma=sigma, steps=steps)
  q, sigma, steps = (np.broadcast_to(np.asarray(a, np.float64), shape).reshape(-1)
                     for a in (q, sigma, steps))
  fpr_b = np.broadcast_to(fpr.reshape(1, -1), (q.size, fpr.size))
  up, lo = _dpsgd_bounds(q, sigma, steps, fpr_b, int(num_eps), rtol)
  out = shape + fpr.shape
  return TradeoffBounds(np.broadcast_to(fpr, out).copy(), up.reshape(out), lo.reshape(out))


def _accepts(fn, name):
  try:
    return name in inspect.signature(fn).parameters
  except (TypeError, ValueError):
    return False


def _state_profile(acc, state, eps):
  """(upper, lower or None) of acc.delta on a 1-D ε grid."""
  both = _accepts(acc.delta, "return_bounds")
  try:
    res = acc.delta(state, eps, return_bounds=True) if both else acc.delta(state, eps)
    if both:
      lo, up = (np.asarray(r, np.float64) for r in res)
    else:
      up, lo = np.asarray(res, np.float64), None
    if up.shape != eps.shape or (lo is not None and lo.shape != eps.shape):
      raise TypeError("scalar-only delta")
  except (TypeError, ValueError):
    # Accountants whose delta takes one ε at a time.
    ups, los = [], []
    for e in eps:
      res = acc.delta(state, float(e), return_bounds=True) if both else acc.delta(state, float(e))
      if both:
        los.append(float(np.asarray(res[0])))
        ups.append(float(np.asarray(res[1])))
      else:
        ups.append(float(np.asarray(res)))
    up = np.asarray(ups)
    lo = np.asarray(los) if both else None
  return up, lo


@num.host_function
def tradeoff_of_state(acc, state, fpr, *, num_eps=DEFAULT_NUM_EPS, eps_grid=None
                      ) -> TradeoffBounds:
  """Certified TPR upper bound at each FPR for any accountant's state.

  Calls ``acc.delta(state, ε)`` on an ε grid and applies
  :func:`from_profile`.  Every accountant's δ is a certified upper bound on
  the profile (max over both directions), so ``tpr_upper`` is certified for
  the RDP, zCDP and PLD accountants alike (and is as loose as their δ: RDP
  and zCDP give much looser curves than the PLD).  ``tpr_lower`` is NaN
  unless ``acc.delta`` accepts ``return_bounds=True`` and returns
  ``(lower, upper)``.

  Args:
    acc: a :class:`jaxdp.accountant.Accountant`.
    state: its state.
    fpr: FPRs in [0, 1], any shape F.
    num_eps: points of the default grid: uniform on [0, acc.epsilon(state,
      1e-12)] (clipped into ``GRID_EPS_RANGE``).  Accountants whose ``delta``
      takes only scalars are called once per point.
    eps_grid: an explicit strictly increasing 1-D ε grid instead.

  Returns:
    :class:`TradeoffBounds` of shape F.
  """
  fpr = _check_fpr("fpr", fpr)
  if eps_grid is None:
    num.check_array("num_eps", num_eps, low=2.0, integer=True)
    end = math.inf
    for d in (GRID_DELTA, 1e-10, 1e-8, 1e-6):  # tight accountants' δ floor can exceed 1e-12
      end = float(np.asarray(acc.epsilon(state, d), np.float64))
      if math.isfinite(end):
        break
    end = GRID_EPS_RANGE[1] if not math.isfinite(end) else end
    end = min(max(end, GRID_EPS_RANGE[0]), GRID_EPS_RANGE[1])
    eps = np.linspace(0.0, end, int(num_eps))
  else:
    num.check_array("eps_grid", eps_grid, low=0.0, high=_MAX_EPS)
    eps = np.asarray(eps_grid, np.float64).reshape(-1)
  up, lo = _state_profile(acc, state, eps)
  up = np.clip(up, 0.0, 1.0)
  if lo is not None:
    lo = np.minimum(np.clip(lo, 0.0, 1.0), up)
  return from_profile(up, lo, eps, fpr)

