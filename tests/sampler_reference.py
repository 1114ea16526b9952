"""Exact references for the batch samplers of ``jaxdp.rdp_samplers``.

Independent of the formulas under test: for tiny datasets (N ≤ 6, B ≤ 3)
every possible batch (or allocation) is enumerated with its exact
probability, so the output of the noisy sum is an explicit mixture of
Gaussians with a common isotropic σ. Divergences are then computed in mpmath:

* Rényi divergences at integer orders: in closed form when the second
  distribution is a single Gaussian (E_Q[(P/Q)^α] is a finite sum over
  α-tuples of components), otherwise by adaptive quadrature (1-D);
* hockey-stick divergences δ(ε) in 1-D: the crossing points of P - e^ε Q are
  located by a sign scan refined by bisection, and the integral of the
  positive part is then a finite sum of Gaussian CDF differences (exact).

Scalar data: the clip norm is 1, every value lies in [-1, 1]. Worst-case
datasets (which pair attains the sampler's dominating pair):

* Poisson with capacity (add/remove): others -1, differing example +1. A
  truncated batch then swaps a -1 for the +1 (shift 2) and an untruncated one
  adds +1 (shift 1). Others 0 only reach shift 1 in the truncated case.
* fixed batch without replacement: replace-one, +1 vs -1 with others 0 or -1
  (both are tried); add/remove, others -1 and the extra example +1 (it
  displaces a -1: shift 2).
* balls-in-bins: any values of the others give the same pair up to a common
  shift given their allocation; others 0 and the differing example +1 attain
  the dominating pair (1/k) Σ_i N(e_i) vs N(0) exactly.
"""

from __future__ import annotations

import itertools
from collections import defaultdict

import mpmath as mp

# --------------------------------------------------------------------------
# Enumerations → mixtures {mean (tuple): weight (mpf)}
# --------------------------------------------------------------------------


def _add(mix, mean, w):
  key = tuple(round(float(m), 12) for m in mean)
  mix[key] = mix.get(key, mp.mpf(0)) + w


def poisson_capacity_mixture(values, q, capacity):
  """Output-sum mixture of Poisson sampling (rate q) truncated to a uniformly
  random ``capacity``-subset when more are sampled (1-D)."""
  q = mp.mpf(q)
  n = len(values)
  mix = {}
  for mask in range(1 << n):
    chosen = [values[i] for i in range(n) if mask >> i & 1]
    s = len(chosen)
    p = q ** s * (1 - q) ** (n - s)
    if s <= capacity:
      _add(mix, (sum(chosen),), p)
    else:
      subsets = list(itertools.combinations(chosen, capacity))
      for sub in subsets:
        _add(mix, (sum(sub),), p / len(subsets))
  return mix


def without_replacement_mixture(values, batch_size):
  """Output-sum mixture of a uniformly random ``batch_size``-subset (1-D)."""
  subsets = list(itertools.combinations(range(len(values)), batch_size))
  mix = {}
  for sub in subsets:
    _add(mix, (sum(values[i] for i in sub),), mp.mpf(1) / len(subsets))
  return mix


def balls_in_bins_epoch_mixture(values, k):
  """k-dimensional mixture of the k step sums when every example is put in
  one of k steps uniformly and independently."""
  mix = {}
  w = mp.mpf(1) / mp.mpf(k) ** len(values)
  for alloc in itertools.product(range(k), repeat=len(values)):
    sums = [0.0] * k
    for v, b in zip(values, alloc):
      sums[b] += v
    _add(mix, sums, w)
  return mix


def balls_in_bins_step_mixture(values, k):
  """One step's marginal: each example is in the step with probability 1/k."""
  return {key[:1]: w for key, w in _marginal(balls_in_bins_epoch_mixture(values, k)).items()}


def _marginal(mix):
  out = defaultdict(lambda: mp.mpf(0))
  for key, w in mix.items():
    out[(key[0],)] += w
  return dict(out)


def shuffle_epoch_mixture(values, batch_size, steps):
  """k-dimensional mixture of the step sums of one shuffled epoch: a uniform
  permutation, the first steps·batch_size positions cut into batches."""
  n = len(values)
  perms = list(itertools.permutations(range(n)))
  mix = {}
  for perm in perms:
    sums = [sum(values[perm[j * batch_size + i]] for i in range(batch_size)) for j in range(steps)]
    _add(mix, sums, mp.mpf(1) / len(perms))
  return mix


# --------------------------------------------------------------------------
# Divergences
# --------------------------------------------------------------------------


def _single(mix):
  return len(mix) == 1


def renyi_closed_form(p_mix, q_mix, alpha, sigma):
  """D_α(P‖Q) for integer α ≥ 2 when Q is a single Gaussian N(μ_Q, σ²I).

  E_Q[(P/Q)^α] = Σ_{counts c, |c| = α} multinomial(c) Π w_i^{c_i}
                 exp((‖Σ c_i m_i‖² - Σ c_i ‖m_i‖²) / (2σ²)),  m_i = μ_i - μ_Q.
  """
  assert _single(q_mix)
  (mu_q,) = q_mix.keys()
  comps = [(tuple(mp.mpf(a) - mp.mpf(b) for a, b in zip(m, mu_q)), w) for m, w in p_mix.items()]
  s2 = mp.mpf(sigma) ** 2
  total = mp.mpf(0)
  ncomp = len(comps)

  def rec(i, left, counts):
    nonlocal total
    if i == ncomp - 1:
      counts = counts + [left]
      mult = mp.factorial(alpha)
      weight = mp.mpf(1)
      vec = [mp.mpf(0)] * len(mu_q)
      sq = mp.mpf(0)
      for (m, w), c in zip(comps, counts):
        mult /= mp.factorial(c)
        weight *= w ** c
        for d in range(len(vec)):
          vec[d] += c * m[d]
        sq += c * sum(x * x for x in m)
      total += mult * weight * mp.exp((sum(x * x for x in vec) - sq) / (2 * s2))
      return
    for c in range(left + 1):
      rec(i + 1, left - c, counts + [c])

  rec(0, alpha, [])
  return mp.log(total) / (alpha - 1)


def _density_1d(mix, sigma):
  s = mp.mpf(sigma)
  comps = [(mp.mpf(m[0]), w) for m, w in mix.items()]
  return lambda x: sum(w * mp.npdf(x, m, s) for m, w in comps)


def renyi_1d(p_mix, q_mix, alpha, sigma, dps=20):
  """D_α(P‖Q) for 1-D mixtures by quadrature of P^α Q^{1-α} over the whole
  line (tanh-sinh; the mass of P^α Q^{1-α} sits within α·(spread of the
  means) of them, and both infinite tails are integrated as well)."""
  with mp.workdps(dps):
    if _single(q_mix):
      return renyi_closed_form(p_mix, q_mix, alpha, sigma)
    p, q = _density_1d(p_mix, sigma), _density_1d(q_mix, sigma)
    means = sorted(float(m[0]) for m in list(p_mix) + list(q_mix))
    s = float(sigma)
    spread = alpha * (means[-1] - means[0])
    lo, hi = means[0] - spread - 6 * s, means[-1] + spread + 6 * s
    pts = [lo + (hi - lo) * i / 8 for i in range(9)]
    val = mp.quad(lambda x: p(x) ** alpha * q(x) ** (1 - alpha), [-mp.inf] + pts + [mp.inf])
    return mp.log(val) / (alpha - 1)


def renyi_both_1d(m1, m2, alpha, sigma):
  """max(D_α(m1‖m2), D_α(m2‖m1)) — the RDP of the pair at order α."""
  return max(renyi_1d(m1, m2, alpha, sigma), renyi_1d(m2, m1, alpha, sigma))


def hockey_stick_1d(p_mix, q_mix, epsilon, sigma, dps=40):
  """δ(ε) = ∫ (P - e^ε Q)_+ for 1-D mixtures, exactly up to root finding."""
  with mp.workdps(dps):
    s = mp.mpf(sigma)
    e = mp.exp(mp.mpf(epsilon))
    pc = [(mp.mpf(m[0]), w) for m, w in p_mix.items()]
    qc = [(mp.mpf(m[0]), w) for m, w in q_mix.items()]
    f = lambda x: sum(w * mp.npdf(x, m, s) for m, w in pc) - e * sum(w * mp.npdf(x, m, s) for m, w in qc)
    means = sorted(set(m for m, _ in pc + qc))
    # Crossings of two-component pieces lie within ε σ² / (smallest gap) of the
    # means; beyond the range the extreme components decide the sign.
    gap = min([b - a for a, b in zip(means, means[1:])] or [mp.mpf(1)])
    reach = 20 * s + abs(mp.mpf(epsilon)) * s * s / gap
    lo, hi = means[0] - reach, means[-1] + reach
    grid = [lo + (hi - lo) * i / 600 for i in range(601)]
    vals = [f(x) for x in grid]
    roots = []
    for a, b, fa, fb in zip(grid, grid[1:], vals, vals[1:]):
      if (fa > 0) != (fb > 0):
        for _ in range(4 * mp.mp.prec // 3):
          mid = (a + b) / 2
          if (f(mid) > 0) == (fa > 0):
            a = mid
          else:
            b = mid
        roots.append((a + b) / 2)
    edges = [-mp.inf] + roots + [mp.inf]
    cdf = lambda comps, a, b: sum(w * (mp.ncdf((b - m) / s) - mp.ncdf((a - m) / s)) for m, w in comps)
    total = mp.mpf(0)
    for a, b in zip(edges, edges[1:]):
      mid = (a + b) / 2 if mp.isfinite(a) and mp.isfinite(b) else (a + 1 if mp.isfinite(a) else b - 1)
      if f(mid) > 0:
        total += cdf(pc, a, b) - e * cdf(qc, a, b)
    return total


def balls_in_bins_add_renyi(k, alpha, sigma, dps=30):
  """D_α(Q‖P) for Q = N(0, σ²I_k), P = (1/k) Σ N(e_i, σ²I_k), k ∈ {1, 2}.

  With c = 1/(2σ²) and M = dP/dQ: k = 2 separates after the rotation
  u = (y1+y2)/√2, v = (y1-y2)/√2: M = e^{-c} e^{u/(√2σ²)} cosh(v/(√2σ²)), so
  E_Q[M^{1-α}] = e^{(α-1)c} e^{(α-1)²/(4σ²)} E[cosh(v/(√2σ²))^{1-α}].
  """
  with mp.workdps(dps):
    s = mp.mpf(sigma)
    c = 1 / (2 * s * s)
    beta = mp.mpf(alpha) - 1
    if k == 1:
      return mp.mpf(alpha) * c
    assert k == 2
    inner = mp.quad(lambda v: mp.npdf(v, 0, s) * mp.cosh(v / (mp.sqrt(2) * s * s)) ** (-beta),
                    [-mp.inf, -4 * s, 0, 4 * s, mp.inf])
    total = mp.exp(beta * c + beta ** 2 / (4 * s * s)) * inner
    return mp.log(total) / beta


def shifted(mix, offset):
  """The mixture shifted by ``offset`` in every coordinate."""
  return {tuple(m + offset for m in key): w for key, w in mix.items()}


__all__ = [
    "poisson_capacity_mixture", "without_replacement_mixture", "balls_in_bins_epoch_mixture",
    "balls_in_bins_step_mixture", "shuffle_epoch_mixture", "renyi_closed_form", "renyi_1d",
    "renyi_both_1d", "hockey_stick_1d", "balls_in_bins_add_renyi", "shifted",
]
