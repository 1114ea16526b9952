"""Independent references for the soundness harness (tests/package/test_harness.py).

Nothing here calls jaxdp. The mechanism is the Poisson-subsampled Gaussian
(add/remove neighbours, L2 sensitivity 1, noise multiplier σ, sampling rate q):

* remove: P = (1-q) N(0,σ²) + q N(1,σ²)  vs  Q = N(0,σ²);
* add:    P = N(0,σ²)                     vs  Q = (1-q) N(0,σ²) + q N(1,σ²).

In both directions the privacy loss L(x) = log P(x)/Q(x) is monotone in x, so
the hockey-stick divergence δ(ε) = P(L > ε) - e^ε Q(L > ε) is a difference of
Gaussian tail probabilities at the crossing point x*(ε).

Contents
--------
* :func:`one_step_log_delta` / :func:`one_step_delta` / :func:`one_step_epsilon`
  — exact one-step profile and its inverse, NumPy/SciPy, vectorised, in log
  space (σ down to 0.01, ε up to 1e5, δ down to 1e-300).  Since composing
  more steps never lowers the privacy loss, ε_T(δ) >= one_step_epsilon for all
  T >= 1 and δ_T(ε) >= one_step_delta(ε).
* :func:`mp_one_step_delta` / :func:`mp_one_step_epsilon` — slow mpmath
  versions written straight from the tail-probability formula, to spot-check
  the fast ones.
* :func:`brute_force_delta_bounds` / :func:`brute_force_epsilon_bounds` —
  T <= 4 compositions by discretising the one-step loss on a fine uniform grid,
  rounding every bucket UP (δ upper bound) or DOWN (δ lower bound), composing
  by exact direct convolution and evaluating δ(ε) exactly on the discrete
  distributions.  Max over both directions.
* :func:`gaussian_composition_delta` — closed form for q = 1 (T-fold Gaussian
  = one Gaussian with σ/√T), used to validate the brute force.
* :func:`dp_accounting_optimistic_epsilon` — dp_accounting's optimistic PLD ε,
  an *approximate* lower bound (its tail truncation drops up to ~1e-15 of
  mass per composition, so it may exceed the true ε by a hair; callers allow a
  small relative tolerance).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import signal as _signal
from scipy import special as _sp

_LOG_SQRT_HALF_PI = 0.5 * math.log(math.pi / 2.0)
_SQRT2 = math.sqrt(2.0)


# --------------------------------------------------------------------------
# Exact one-step profile (NumPy / SciPy)
# --------------------------------------------------------------------------


def _log_expm1(x):
  """log(e^x - 1) for x >= 0 (-inf at 0), no overflow."""
  x = np.asarray(x, np.float64)
  with np.errstate(divide="ignore", invalid="ignore"):
    big = x > 30.0
    xs = np.where(big, 1.0, x)
    return np.where(big, x + np.log1p(-np.exp(-np.where(big, x, 30.0))), np.log(np.expm1(xs)))


def gaussian_log_delta(t, theta):
  """log δ_G(t; θ) of the Gaussian pair N(θ,1) vs N(0,1), t >= 0 (vectorised).

  δ_G(t) = Φ̄(a) - e^t Φ̄(b), a = t/θ - θ/2, b = t/θ + θ/2 (the tails of the
  two Gaussians at the crossing point).  Since e^t φ(b) = φ(a),
  δ_G = φ(a) · (R(a) - R(b)) with the Mills ratio R(z) = Φ̄(z)/φ(z)
  = sqrt(π/2) · erfcx(z/√2), which stays accurate deep in the tail (no
  underflow, no cancellation of two tiny tails).  For a < 0 the direct
  difference is used (both terms are O(1) there).
  """
  t = np.asarray(t, np.float64)
  theta = np.asarray(theta, np.float64)
  t, theta = np.broadcast_arrays(t, theta)
  a = t / theta - theta / 2.0
  b = t / theta + theta / 2.0
  out = np.full(t.shape, -np.inf)
  with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
    tail = a >= 0.0
    # Mills-ratio form.
    diff = _sp.erfcx(a / _SQRT2) - _sp.erfcx(b / _SQRT2)
    log_phi_a = -0.5 * a * a - 0.5 * math.log(2.0 * math.pi)
    v_tail = log_phi_a + _LOG_SQRT_HALF_PI + np.log(np.maximum(diff, 0.0))
    # Direct form for a < 0 (Φ̄(a) >= 1/2).
    d = _sp.ndtr(-a) - np.exp(t + _sp.log_ndtr(-b))
    v_bulk = np.log(np.maximum(d, 0.0))
  out = np.where(tail, v_tail, v_bulk)
  return out


def one_step_log_delta(epsilon, q, sigma, direction="max"):
  """log δ(ε) of one Poisson-sampled Gaussian step (vectorised NumPy).

  remove: x* = σ² log((e^ε - 1 + q)/q) + 1/2 and
    δ = q Φ̄((x*-1)/σ) - (e^ε - 1 + q) Φ̄(x*/σ) = q δ_G(t),  e^t = 1 + (e^ε-1)/q.
  add (ε < -log(1-q), else 0): x* = 1/2 - σ² r with e^{-r} = (e^{-ε} - 1 + q)/q,
    δ = Φ(x*/σ)(1 - (1-q) e^ε) - q e^ε Φ((x*-1)/σ) = u e^ε δ_G(r),  u = q e^{-r}.
  """
  eps = np.asarray(epsilon, np.float64)
  q = np.asarray(q, np.float64)
  sigma = np.asarray(sigma, np.float64)
  eps, q, sigma = np.broadcast_arrays(eps, q, sigma)
  theta = 1.0 / sigma
  with np.errstate(divide="ignore", invalid="ignore"):
    lq = np.log(q)
    # remove
    t = np.logaddexp(0.0, _log_expm1(eps) - lq)
    rem = lq + gaussian_log_delta(t, theta)
    rem = np.where(q > 0, rem, -np.inf)
    # add
    u = np.where(q >= 0.5, np.exp(-eps) - (1.0 - q), q + np.expm1(-eps))
    active = (u > 0) & (q > 0)
    us = np.where(active, u, 1.0)
    r = np.maximum(np.where(active, lq - np.log(us), 0.0), 0.0)
    add = np.where(active, eps + np.log(us) + gaussian_log_delta(r, theta), -np.inf)
  if direction == "remove":
    return rem[()]
  if direction == "add":
    return add[()]
  if direction != "max":
    raise ValueError(direction)
  return np.maximum(rem, add)[()]


def one_step_delta(epsilon, q, sigma, direction="max"):
  """Exact δ(ε) of one step (see :func:`one_step_log_delta`)."""
  return np.exp(one_step_log_delta(epsilon, q, sigma, direction))


def one_step_epsilon(q, sigma, delta, direction="max", iters=200):
  """Exact ε(δ) of ONE step (max over directions), vectorised bisection.

  Returns the lower end of the final bracket: the largest ε found with
  δ(ε) > delta (0 if δ(0) <= delta), i.e. a value the true ε is never below
  (up to the ~1e-15 relative accuracy of the profile evaluation); the bracket
  is closed to ~1e-15 relative.
  """
  q, sigma, delta = (np.asarray(x, np.float64) for x in (q, sigma, delta))
  q, sigma, delta = np.broadcast_arrays(q, sigma, delta)
  ld = np.log(delta)
  f = lambda e: one_step_log_delta(e, q, sigma, direction) - ld  # decreasing in ε
  lo = np.zeros(q.shape)
  zero = f(lo) <= 0
  hi = np.ones(q.shape)
  for _ in range(80):  # grow until δ(hi) <= delta
    grow = ~zero & (f(hi) > 0)
    if not grow.any():
      break
    hi = np.where(grow, 2.0 * hi, hi)
  for _ in range(iters):
    mid = 0.5 * (lo + hi)
    above = f(mid) > 0
    lo = np.where(above, mid, lo)
    hi = np.where(above, hi, mid)
    if np.all(hi - lo <= 4e-16 * hi):
      break
  return np.where(zero, 0.0, lo)[()]


# --------------------------------------------------------------------------
# mpmath spot-check versions (slow, scalar)
# --------------------------------------------------------------------------


def mp_one_step_delta(epsilon, q, sigma, direction="max", dps=60):
  """δ(ε) of one step in mpmath, from the tail probabilities at x* (mpf)."""
  import mpmath as mp
  with mp.workdps(dps):
    e, qq, s = mp.mpf(epsilon), mp.mpf(q), mp.mpf(sigma)
    sf = lambda z: mp.ncdf(-z)
    out = []
    if direction in ("max", "remove"):
      x = s ** 2 * mp.log((mp.exp(e) - 1 + qq) / qq) + mp.mpf(1) / 2
      out.append(qq * sf((x - 1) / s) - (mp.exp(e) - 1 + qq) * sf(x / s))
    if direction in ("max", "add"):
      c = mp.exp(-e) - 1 + qq
      if c <= 0:
        out.append(mp.mpf(0))
      else:
        x = mp.mpf(1) / 2 + s ** 2 * mp.log(c / qq)
        out.append(mp.ncdf(x / s) * (1 - (1 - qq) * mp.exp(e))
                   - qq * mp.exp(e) * mp.ncdf((x - 1) / s))
    return max(out)


def mp_one_step_epsilon(q, sigma, delta, direction="max", dps=60, iters=120):
  """ε(δ) of one step by bisection on :func:`mp_one_step_delta` (mpf)."""
  import mpmath as mp
  with mp.workdps(dps):
    d = mp.mpf(delta)
    f = lambda e: mp_one_step_delta(e, q, sigma, direction, dps) - d
    if f(0) <= 0:
      return mp.mpf(0)
    lo, hi = mp.mpf(0), mp.mpf(1)
    while f(hi) > 0:
      lo, hi = hi, 2 * hi
    for _ in range(iters):
      mid = (lo + hi) / 2
      if f(mid) > 0:
        lo = mid
      else:
        hi = mid
    return (lo + hi) / 2


# --------------------------------------------------------------------------
# Closed form for q = 1
# --------------------------------------------------------------------------


def gaussian_composition_delta(epsilon, sigma, steps):
  """δ(ε) of ``steps`` Gaussian steps (q = 1), μ = √T/σ:

  Φ(-ε/μ + μ/2) - e^ε Φ(-ε/μ - μ/2).
  """
  mu = np.sqrt(np.asarray(steps, np.float64)) / np.asarray(sigma, np.float64)
  return np.exp(gaussian_log_delta(np.asarray(epsilon, np.float64), mu))


def mp_gaussian_composition_delta(epsilon, sigma, steps, dps=60):
  import mpmath as mp
  with mp.workdps(dps):
    mu = mp.sqrt(steps) / mp.mpf(sigma)
    e = mp.mpf(epsilon)
    return mp.ncdf(-e / mu + mu / 2) - mp.exp(e) * mp.ncdf(-e / mu - mu / 2)


# --------------------------------------------------------------------------
# Brute-force bracket for T <= 4
# --------------------------------------------------------------------------


def _interval_mass(a, b):
  """N(0,1) mass of (a, b], a <= b, accurate in both tails (a may be -inf, b +inf)."""
  a = np.asarray(a, np.float64)
  b = np.asarray(b, np.float64)
  right = a >= 0
  left = b <= 0
  with np.errstate(invalid="ignore"):
    m_right = _sp.ndtr(-a) - _sp.ndtr(-b)
    m_left = _sp.ndtr(b) - _sp.ndtr(a)
    m_mid = 1.0 - _sp.ndtr(a) - _sp.ndtr(-b)
  m = np.where(right, m_right, np.where(left, m_left, m_mid))
  return np.maximum(m, 0.0)


def _remove_loss(x, q, sigma):
  with np.errstate(divide="ignore"):
    return np.logaddexp(np.log1p(-q), math.log(q) + (2.0 * x - 1.0) / (2.0 * sigma ** 2))


def _x_of_remove_loss(u, q, sigma):
  """Inverse of the remove loss (-inf at or below log(1-q))."""
  u = np.asarray(u, np.float64)
  if q == 1.0:
    return sigma ** 2 * u + 0.5
  l1q = math.log1p(-q)
  d = u - l1q
  ok = d > 0
  with np.errstate(divide="ignore", invalid="ignore"):
    x = sigma ** 2 * (l1q + _log_expm1(np.where(ok, d, 1.0)) - math.log(q)) + 0.5
  return np.where(ok, x, -np.inf)


class _Direction:
  """Discretised one-step P-distribution of the loss of one direction.

  ``up``/``dn`` are finite sub-probability vectors on the loss lattice
  ``offset + k·h``; ``inf_up`` is the mass sent to +∞ by the upper bound.
  """

  def __init__(self, up, dn, offset, inf_up):
    self.up, self.dn, self.offset, self.inf_up = up, dn, offset, inf_up


def _discretise(q, sigma, h, u_lo, n):
  """Remove and add directions on the remove-loss lattice u_k = u_lo + k·h, k = 0..n."""
  u = u_lo + h * np.arange(n + 1)
  x = _x_of_remove_loss(u, q, sigma)
  x_lo, x_top = x[0], x[-1]
  m0 = _interval_mass(x[:-1] / sigma, x[1:] / sigma)           # N(0,σ²) mass of bucket k
  m1 = _interval_mass((x[:-1] - 1) / sigma, (x[1:] - 1) / sigma)  # N(1,σ²)
  below0 = _sp.ndtr(x_lo / sigma) if np.isfinite(x_lo) else 0.0
  below1 = _sp.ndtr((x_lo - 1) / sigma) if np.isfinite(x_lo) else 0.0
  above0 = _sp.ndtr(-x_top / sigma)
  above1 = _sp.ndtr(-(x_top - 1) / sigma)

  # remove: P = mixture, loss u.  Bucket k (u_k, u_{k+1}] -> up: u_{k+1}, down: u_k.
  pm = (1 - q) * m0 + q * m1
  r_up = np.zeros(n + 1)
  r_dn = np.zeros(n + 1)
  r_up[1:] += pm
  r_up[0] += (1 - q) * below0 + q * below1   # below the grid: round up to u_0
  r_dn[:-1] += pm                            # below the grid: dropped (-inf)
  r_dn[-1] += (1 - q) * above0 + q * above1  # above the grid: round down to u_n
  remove = _Direction(r_up, r_dn, u_lo, (1 - q) * above0 + q * above1)  # up: above -> +inf

  # add: P = N(0,σ²), loss v = -u on lattice v_j = -u_n + j·h (v_j = -u_{n-j}).
  # Bucket k: v in [-u_{k+1}, -u_k) = [v_{n-k-1}, v_{n-k}) -> up v_{n-k}, down v_{n-k-1}.
  a_up = np.zeros(n + 1)
  a_dn = np.zeros(n + 1)
  a_up[1:] += m0[::-1]
  a_dn[:-1] += m0[::-1]
  a_up[0] += above0   # x above the grid: v < v_0 -> round up to v_0 (down: dropped)
  a_dn[-1] += below0  # x below the grid: v > v_n -> round down to v_n (up: +inf)
  add = _Direction(a_up, a_dn, -u[-1], below0)
  return remove, add


def _direct_convolve(a, b, blk=2048):
  """Exact-order direct convolution (sums of non-negative products), in cache-sized blocks.

  Same result as ``np.convolve`` (~1e-15 relative per entry, no FFT round-off
  floor), several times faster for long inputs.
  """
  out = np.zeros(a.size + b.size - 1)
  for i in range(0, a.size, blk):
    ai = a[i:i + blk]
    for j in range(0, b.size, blk):
      bj = b[j:j + blk]
      out[i + j:i + j + ai.size + bj.size - 1] += np.convolve(ai, bj)
  return out


def _tail_weights(b, h):
  """S[J] = Σ_{j>=J} b_j and C[J] = Σ_{j>=J} b_j e^{-(j-J)h}, with S[n] = C[n] = 0."""
  n = b.size
  S = np.zeros(n + 1)
  S[:n] = np.cumsum(b[::-1])[::-1]
  C = np.zeros(n + 1)
  C[:n] = _signal.lfilter([1.0], [1.0, -math.exp(-h)], b[::-1])[::-1]
  return S, C


def _pair_delta(a, A, S, C, B, nb, h, eps):
  """Σ_i Σ_j a_i b_j (1 - e^{ε - ℓ_i - m_j})_+, ℓ_i = A + i h, m_j = B + j h."""
  i = np.arange(a.size)
  out = np.empty(np.size(eps))
  for k, e in enumerate(np.atleast_1d(eps)):
    J = np.floor((e - A - B) / h - i) + 1.0
    J = np.clip(J, 0, nb).astype(np.int64)
    expo = e - A - B - (i + J) * h  # < 0 wherever J < nb
    w = S[J] - np.exp(np.minimum(expo, 0.0)) * C[J]
    out[k] = np.sum(a * np.maximum(w, 0.0))
  return out


class BruteForcePLD:
  """T-fold composition (T <= 4) of the discretised one-step losses, both directions.

  Args:
    q, sigma, steps: the mechanism, T = steps in 1..4.
    h: loss grid interval; n: number of buckets; u_lo: lowest remove loss.
    Use :meth:`auto` to pick them.
  """

  def __init__(self, q, sigma, steps, h, u_lo, n):
    if not 1 <= steps <= 4:
      raise ValueError("brute force only for 1 <= T <= 4")
    self.q, self.sigma, self.T = float(q), float(sigma), int(steps)
    self.h, self.n = float(h), int(n)
    dirs = _discretise(self.q, self.sigma, self.h, float(u_lo), self.n)
    self._parts = []
    for d in dirs:
      for which in ("up", "dn"):
        p = getattr(d, which)
        self._parts.append((which, self._prepare(p, d.offset), d.inf_up if which == "up" else 0.0))

  def _prepare(self, p, off):
    T, h = self.T, self.h
    if T == 1:
      a, A, b, B = np.ones(1), 0.0, p, off
    elif T == 2:
      a, A, b, B = p, off, p, off
    else:
      p2 = _direct_convolve(p, p)  # direct: every entry a sum of non-negative products
      if T == 3:
        a, A, b, B = p2, 2 * off, p, off
      else:
        a, A, b, B = p2, 2 * off, p2, 2 * off
    S, C = _tail_weights(b, h)
    return a, A, S, C, B, b.size

  @classmethod
  def auto(cls, q, sigma, steps, eps_ref, delta_ref, rel=5e-4, n_min=2 ** 12, n_max=None):
    """Pick the grid: tails cut at P-mass τ = 1e-7·δ_ref/T (<= 1e-14) per side,
    h = min(range/n_min, rel·eps_ref/T) but at least range/n_max.

    Rounding moves each step's loss by at most h, so the ε bracket is at most
    about 2·T·h wide: ``rel·eps_ref`` with the default n_max unless capped.
    ``n_max`` defaults to 2**21 for T <= 2 (O(n) per δ evaluation) and 2**15
    for T >= 3 (one direct convolution, O(n²)).
    """
    q, sigma = float(q), float(sigma)
    if n_max is None:
      n_max = 2 ** 21 if steps <= 2 else 2 ** 15
    tau = min(max(1e-7 * float(delta_ref) / steps, 1e-250), 1e-14)
    z = -_sp.ndtri(tau)
    x_lo = -sigma * z
    x_top = 1.0 + sigma * z
    u_lo = float(_remove_loss(x_lo, q, sigma))
    u_top = float(_remove_loss(x_top, q, sigma))
    rng = u_top - u_lo
    h = rng / n_min
    if eps_ref > 0:
      h = min(h, rel * float(eps_ref) / steps)
    h = max(h, rng / n_max)
    n = int(math.ceil(rng / h))
    return cls(q, sigma, steps, h, u_lo, n)

  def _bound(self, eps, which):
    out = np.zeros(eps.shape)
    for w, (a, A, S, C, B, nb), inf in self._parts:
      if w != which:
        continue
      v = _pair_delta(a, A, S, C, B, nb, self.h, eps)
      if inf > 0:
        v = v + -math.expm1(self.T * math.log1p(-inf))
      out = np.maximum(out, v)
    return np.minimum(out, 1.0)

  def delta_bounds(self, eps):
    """(lower, upper) bounds on δ_T(ε), max over directions; arrays like ``eps``."""
    eps = np.atleast_1d(np.asarray(eps, np.float64))
    return self._bound(eps, "dn"), self._bound(eps, "up")

  def epsilon_bounds(self, delta, iters=100):
    """(lower, upper) bounds on ε_T(δ) from the δ bracket, by bisection."""
    out = []
    for k in ("dn", "up"):  # dn: root of the lower δ curve (ε lower bound); up: upper
      f = lambda e, k=k: self._bound(np.array([e]), k)[0] - delta
      if f(0.0) <= 0:
        out.append(0.0)
        continue
      lo, hi = 0.0, 1.0
      while f(hi) > 0 and hi < 1e7:
        lo, hi = hi, 2 * hi
      if f(hi) > 0:  # beyond the range searched
        out.append(lo if k == "dn" else np.inf)
        continue
      for _ in range(iters):
        mid = 0.5 * (lo + hi)
        if f(mid) > 0:
          lo = mid
        else:
          hi = mid
        if hi - lo <= 1e-13 * hi:
          break
      out.append(lo if k == "dn" else hi)
    return out[0], out[1]


def brute_force_delta_bounds(q, sigma, T, epsilon, **kw):
  """(lower, upper) on δ_T(ε) for T <= 4 by fine discretisation (see module doc).

  The grid is chosen from the loss range and from ε (relative ε resolution
  ~5e-4 by default); ``epsilon`` may be an array (one grid for all).
  """
  eps = np.atleast_1d(np.asarray(epsilon, np.float64))
  pos = eps[eps > 0]
  eps_ref = float(pos.min()) if pos.size else 0.0
  d_ref = float(np.min(one_step_delta(eps.max(), q, sigma)))
  bf = BruteForcePLD.auto(q, sigma, T, eps_ref, max(d_ref, 1e-300), **kw)
  lo, up = bf.delta_bounds(eps)
  shape = np.shape(epsilon)
  return lo.reshape(shape), up.reshape(shape)


def brute_force_epsilon_bounds(q, sigma, T, delta, **kw):
  """(lower, upper) on ε_T(δ) for T <= 4; grid from the one-step ε (a lower bound on ε_T)."""
  e1 = float(one_step_epsilon(q, sigma, delta))
  bf = BruteForcePLD.auto(q, sigma, T, e1, delta, **kw)
  return bf.epsilon_bounds(delta)


# --------------------------------------------------------------------------
# dp_accounting optimistic PLD (approximate lower bound)
# --------------------------------------------------------------------------


def dp_accounting_optimistic_epsilon(q, sigma, T, delta, value_discretization_interval=1e-3):
  """ε from dp_accounting's OPTIMISTIC PLD: approximately a lower bound on ε_T(δ).

  Approximate because dp_accounting truncates tails (``log_mass_truncation_bound``
  and ``tail_mass_truncation`` of self_compose, ~1e-15 of mass dropped), which
  can move ε by a tiny amount in either direction; compare with a small
  relative tolerance.  Only cheap for moderate σ (>= ~0.5) and T.
  """
  from dp_accounting.pld import privacy_loss_distribution as pldlib
  p = pldlib.from_gaussian_mechanism(
      standard_deviation=float(sigma), sampling_prob=float(q), pessimistic_estimate=False,
      value_discretization_interval=value_discretization_interval)
  if int(T) > 1:
    p = p.self_compose(int(T))
  return float(p.get_epsilon_for_delta(float(delta)))
