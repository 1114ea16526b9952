"""Dominating pairs of the discrete mechanisms (host-side NumPy, concrete parameters).

Randomized response, (ε, δ)-DP, discrete Laplace and discrete Gaussian, each
as a :class:`jaxdp.pairs.DiscretePair` rounded toward more privacy loss
(:func:`discrete_pair`); infinite supports are truncated with their tail
mass moved to ``p_inf`` (loss +∞), and pairs with more than
:data:`MAX_ATOMS` atoms are coarsened pessimistically. Their RDP curves are
in :mod:`jaxdp._src.mechanisms.discrete`.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "discrete_pair",
    "randomized_response_pairs",
    "epsilon_delta_pairs",
    "discrete_laplace_pairs",
    "discrete_gaussian_pairs",
]


# Above this many atoms a pair is coarsened (pessimistically, see _grouped).
MAX_ATOMS = 1 << 20


# P-mass of a truncated infinite support that is moved to p_inf (loss +∞).
TAIL_MASS = 1e-30


_TINY = np.finfo(np.float64).tiny


def discrete_pair(p, q, p_inf=0.0):
  """A :class:`jaxdp.pairs.DiscretePair` rounded toward more privacy loss.

  Atoms where Q has no mass move their P-mass to ``p_inf`` (loss +∞); atoms
  without P-mass are dropped (loss −∞: they never count in δ(ε); one
  placeholder atom P = 0, Q = 1 stays when nothing else does); P is
  rounded up and Q down by one ulp where they differ (equal atoms, loss 0,
  stay exact).

  Args:
    p, q: nonnegative float64 arrays of the same length.
    p_inf: P-mass at loss +∞ already known.

  Returns:
    ``DiscretePair(p, q, p_inf)``.
  """
  from jaxdp._src.mechanisms.pairs import DiscretePair  # pylint: disable=g-import-not-at-top
  p = np.asarray(p, np.float64).ravel()
  q = np.asarray(q, np.float64).ravel()
  lost = (p > 0.0) & ~(q > 0.0)
  p_inf = float(p_inf) + math.fsum(p[lost].tolist())
  keep = (p > 0.0) & (q > 0.0)
  p, q = p[keep], q[keep]
  if not p.size:  # nothing at a finite loss (e.g. a blatantly non-private step)
    p, q = np.zeros(1), np.ones(1)
  differ = p != q
  p = np.where(differ, np.nextafter(p, np.inf), p)
  q = np.where(differ, np.nextafter(q, 0.0), q)
  if p_inf > 0.0:
    p_inf = min(float(np.nextafter(p_inf, np.inf)), 1.0)
  return DiscretePair(p=p, q=q, p_inf=p_inf)


def _mechanism(remove, add):
  from jaxdp._src.mechanisms.pairs import Mechanism  # pylint: disable=g-import-not-at-top
  return Mechanism(remove=remove, add=add)


def randomized_response_pairs(noise_parameter: float, num_buckets: int):
  """Both directions of k-ary randomized response (replace-one; symmetric).

  Outcomes (the true input x, the neighbour's input x', any other bucket):
  P = (1 − p + p/k, p/k, (k − 2)p/k), Q = (p/k, 1 − p + p/k, (k − 2)p/k).

  Args:
    noise_parameter: p in [0, 1]; num_buckets: k >= 1.

  Returns:
    ``Mechanism(pair, pair)`` (:class:`jaxdp.pairs.Mechanism`).
  """
  p, k = float(noise_parameter), int(num_buckets)
  if k <= 1 or p >= 1.0:
    pair = discrete_pair([1.0], [1.0])
  else:
    hi = 1.0 - p * (k - 1) / k
    lo = p / k
    other = (k - 2) * p / k
    pair = discrete_pair([hi, lo, other], [lo, hi, other])
  return _mechanism(pair, pair)


def epsilon_delta_pairs(epsilon: float, delta: float = 0.0):
  """The worst-case pair of an (ε, δ)-DP mechanism (symmetric).

  P = (δ, (1−δ)e^ε/(1+e^ε), (1−δ)/(1+e^ε), 0),
  Q = (0, (1−δ)/(1+e^ε), (1−δ)e^ε/(1+e^ε), δ): every (ε, δ)-DP pair is a
  post-processing of it (Kairouz, Oh & Viswanath 2015, Thm 2.1;
  dp_accounting's ``from_privacy_parameters``). δ(ε') = δ + (1 − δ)(e^ε −
  e^{ε'})₊/(1 + e^ε).

  Args:
    epsilon: ε >= 0; delta: δ in [0, 1].

  Returns:
    ``Mechanism(pair, pair)``.
  """
  eps, dlt = float(epsilon), float(delta)
  big = (1.0 - dlt) / (1.0 + math.exp(-eps))  # (1−δ)e^ε/(1+e^ε)
  small = (1.0 - dlt) / (1.0 + math.exp(eps))
  pair = discrete_pair([big, small], [small, big], p_inf=dlt)
  return _mechanism(pair, pair)


def _grouped(n: int, log_p_fn, loss_fn, max_atoms=None):
  """Atoms 0..n−1 (losses nondecreasing in the index), coarsened to <= max_atoms.

  A group of consecutive atoms is replaced by one atom with the group's total
  P-mass and Q-mass P_group·e^{−ℓ_max}: it dominates the group, because
  Σ P(x)(1 − e^{ε−ℓ(x)})₊ ≤ P_group(1 − e^{ε−ℓ_max})₊ for every ε. Returns
  float64 ``(p, q)`` (q left un-rounded for :func:`discrete_pair`).
  """
  g = max(1, -(-n // (MAX_ATOMS if max_atoms is None else max_atoms)))
  if g == 1:
    idx = np.arange(n, dtype=np.float64)
    log_p = log_p_fn(idx)
    return np.exp(log_p), np.exp(log_p - loss_fn(idx))
  rows = -(-n // g)
  p_out = np.empty(rows)
  loss_out = np.empty(rows)
  chunk = max(1, (1 << 22) // g)
  for r0 in range(0, rows, chunk):
    r1 = min(rows, r0 + chunk)
    idx = np.arange(r0 * g, r1 * g, dtype=np.float64).reshape(r1 - r0, g)
    valid = idx < n
    log_p = np.where(valid, log_p_fn(np.minimum(idx, n - 1)), -np.inf)
    p_out[r0:r1] = np.sum(np.exp(log_p), axis=1) * (1.0 + 4.0 * g * np.finfo(np.float64).eps)
    last = np.minimum(idx[:, -1], n - 1)
    loss_out[r0:r1] = loss_fn(last)
  return p_out, p_out * np.exp(-loss_out)


def discrete_laplace_pairs(parameter: float, sensitivity: int = 1):
  """Both directions of the discrete Laplace mechanism (symmetric), exact.

  P = DLap(a) centred at Δ, Q centred at 0. The loss ℓ(z) = a(|z| − |z − Δ|)
  is −aΔ for z ≤ 0 and aΔ for z ≥ Δ, so the two half-lines are single atoms
  (merging outcomes with equal loss is exact): P = e^{−aΔ}/(1 + e^{−a}) and
  1/(1 + e^{−a}), Q the reverse; between them Δ − 1 atoms
  P(z) = tanh(a/2)e^{−a(Δ−z)}, Q(z) = tanh(a/2)e^{−az}. No truncation.

  Args:
    parameter: a > 0; sensitivity: Δ >= 1 (whole).

  Returns:
    ``Mechanism(pair, pair)``.
  """
  a, d = float(parameter), int(sensitivity)
  log_norm = math.log1p(math.exp(-a))
  log_c = math.log(-math.expm1(-a)) - log_norm
  low_p, high_p = math.exp(-a * d - log_norm), math.exp(-log_norm)
  p_mid, q_mid = _grouped(
      d - 1, lambda i: log_c - a * (d - 1 - i), lambda i: a * (2.0 * (i + 1.0) - d))
  p = np.concatenate([[low_p], p_mid, [high_p]])
  q = np.concatenate([[high_p], q_mid, [low_p]])
  pair = discrete_pair(p, q)
  return _mechanism(pair, pair)


def _gaussian_tail_weight(t: float, sigma: float) -> float:
  """Upper bound on Σ_{j > t} exp(−j²/(2σ²)) for whole t > 0.

  The terms decrease, so the sum is at most ∫_t^∞ e^{−x²/(2σ²)} dx =
  σ√(2π)Φ̄(t/σ) <= (σ²/t)e^{−t²/(2σ²)} (Mills' ratio).
  """
  return (sigma * sigma / t) * math.exp(-t * t / (2.0 * sigma * sigma))


def discrete_gaussian_pairs(sigma: float, sensitivity: int = 1):
  """Both directions of the discrete Gaussian mechanism (symmetric).

  P(z) = e^{−(z−Δ)²/(2σ²)}/Z, Q(z) = e^{−z²/(2σ²)}/Z on z ∈ [−T, Δ + T], with
  T chosen so that the P-mass outside is at most 1e-30; that mass (bounded by
  2(σ²/T)e^{−T²/(2σ²)}/Z) goes to ``p_inf``. Z is replaced by a lower bound
  (the sum over |z| <= T, and σ√(2π)(1 + 2e^{−2π²σ²}) from Poisson
  summation), which scales P and Q up alike and so only raises δ(ε). Above
  2^20 atoms, consecutive atoms are merged pessimistically (see ``_grouped``).

  Args:
    sigma: σ > 0; sensitivity: Δ >= 1 (whole).

  Returns:
    ``Mechanism(pair, pair)``.
  """
  s, d = float(sigma), int(sensitivity)
  s2 = s * s
  t = max(1.0, math.ceil(s * math.sqrt(2.0 * 72.0)))
  while 2.0 * _gaussian_tail_weight(t, s) > TAIL_MASS:
    t = math.ceil(t * 1.1) + 1.0
  t = int(t)
  # Lower bounds on the normaliser Z = Σ_z e^{−z²/(2σ²)}.
  z_poisson = s * math.sqrt(2.0 * math.pi) * (1.0 + 2.0 * math.exp(-2.0 * math.pi ** 2 * s2))
  if t <= 1 << 20:
    j = np.arange(1, t + 1, dtype=np.float64)
    z_direct = 1.0 + 2.0 * math.fsum(np.exp(-j * j / (2.0 * s2)).tolist())
  else:
    z_direct = 0.0
  log_z = math.log(max(z_poisson, z_direct) * (1.0 - 1e-14))
  p_inf = 2.0 * _gaussian_tail_weight(t, s) / math.exp(log_z)
  n = d + 2 * t + 1  # z = i − T for i = 0..n−1
  p, q = _grouped(
      n, lambda i: -np.square(i - t - d) / (2.0 * s2) - log_z,
      lambda i: (2.0 * (i - t) * d - d * d) / (2.0 * s2))
  # Atoms whose mass underflowed carry at most the smallest normal each.
  p_inf += _TINY * float(np.count_nonzero(p == 0.0))
  pair = discrete_pair(p, q, p_inf)
  return _mechanism(pair, pair)
