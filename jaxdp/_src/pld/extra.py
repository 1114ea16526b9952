"""Host-discretised phases on the grid of the batched FFT kernel (:mod:`jaxdp.pld`).

A configuration that mixes Poisson-sampled Gaussian phases with other events
(Laplace, discrete Gaussian, randomized response, ...) is composed by the
batched kernel of :mod:`jaxdp.pld` on the Gaussian phases' grid ℓ = k·h: each
other event's dominating pair (:func:`jaxdp.mechanisms.dominating_pairs`) is
discretised here, on the host, by :func:`jaxdp.pairs.discretize` on the same
grid, and enters the kernel as one more phase (one more spectrum raised to its
count). Everything else (window, FFT, bounds) is the kernel's.

What each extra phase contributes, per direction (add/remove):

* the pessimistic PMF on k·h (offset 0, so it shares the kernel's grid) with
  its +∞ mass; a finite mass M slightly above 1 is allowed (the composed +∞
  mass is Π(M_j + ∞_j)^{c_j} - Π M_j^{c_j}, the finite part carries Π M_j^{c_j});
* the optimistic PMF, on its own grid o + k·h (``discretize``'s automatic
  offset o, the least rounding debt at the edges of the loss law among 33
  candidates, without its ~10 ms root search); the kernel composes it on k·h,
  and the composed
  optimistic losses are Σ count·o higher than their nodes, an exact shift of
  the lower bound; its +∞ mass is dropped (dropping mass only lowers the
  optimistic δ);
* the window edges of its ``count``-fold sum by Chernoff bounds,
  P(S > x) <= M(t)^c e^{-t x} (and the lower tail alike; M the MGF of the
  stored PMF, of any total mass), with mass <= ``_TAIL`` outside each certified
  edge, exactly as the Gaussian phases' edges (:func:`jaxdp._src.pld.step._chernoff_edges`);
* ``tau``: the pairs' losses are accurate to ``tau`` (:class:`jaxdp.pairs.LossPMF`),
  so the composed losses are shifted by Σ count·tau in the safe direction
  (the kernel adds it to the upper ε and subtracts it from the lower one).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from jaxdp._src.mechanisms import discretise as _pairs_discretise
from jaxdp._src.pld.step import _EDGE_PAD, _TAIL

_ZETA = 1e-3 * _TAIL    # P-mass per truncated tail of a continuous pair (to +∞, pessimistic)
_ORDERS = np.geomspace(1e-3, 1e5, 17)   # Chernoff orders t, in units of 1/(loss span)
_REFINE = 10.0 ** (np.array([-2, -1, 1, 2]) / 6.0)


class OnGrid(NamedTuple):
  """The extra phases of one configuration and direction on the grid k·h."""
  lo: list             # grid index of entry 0 of each phase's arrays
  pess: list           # pessimistic PMFs (one array per phase)
  opt: list            # optimistic PMFs, same length and start as ``pess``
  count: list          # composition count of each phase
  a: int               # summed lower window edges (grid index)
  b: int               # summed upper window edges
  log_mass: float      # Σ c·log M (M: finite pessimistic mass)
  log_inf_ratio: float # Σ c·log1p(∞/M)
  shift_up: float      # Σ c·tau: the upper bound's losses may be that much higher
  shift_lo: float      # Σ c·(o - tau): the lower bound's losses are at least that much higher


def _edge(p, count, h, upper):
  """Chernoff edge (grid index, from index 0 of p) of the count-fold sum:
  mass <= ``_TAIL`` above it (``upper``) or below it. Orders: 17 coarse ones
  across ``_ORDERS``, then 4 around the best (within ~2% of the optimum)."""
  j = np.flatnonzero(p > 0)
  if j.size == 0:
    return 0
  logp = np.log(p[j])
  span = (j[-1] - j[0] + 1) * h
  x = (j - (j[0] if upper else j[-1])) * h          # >= 0 (upper) or <= 0 (lower)

  def edge(t):   # P(±(S - c·x0) > e) <= exp(c·log M(±t) - t·e) <= _TAIL
    z = logp[None, :] + (t[:, None] if upper else -t[:, None]) * x[None, :]
    mx = z.max(axis=1)
    log_mgf = mx + np.log(np.exp(z - mx[:, None]).sum(axis=1))
    return (count * log_mgf - math.log(_TAIL)) / t

  coarse = _ORDERS / span
  e1 = edge(coarse)
  best = coarse[int(np.argmin(e1))]
  e = float(min(e1.min(), edge(best * _REFINE).min()))
  if upper:
    return int(min(count * j[0] + math.ceil(e / h), count * j[-1]))
  return int(max(count * j[-1] - math.ceil(e / h), count * j[0]))


def _phase(pair, count, h):
  """One phase on the grid: (lo, pess, opt, a, b, log M, log1p(∞/M), tau, o - tau),
  the window edges and the sums' terms already multiplied by ``count``."""
  pe, op = _pairs_discretise.discretize(pair, h, zeta=_ZETA / max(count, 1),
                                        align_heaviest=False)
  lo = min(pe.lo, op.lo)
  n = max(pe.lo + pe.p.size, op.lo + op.p.size) - lo
  pp, po = np.zeros(n), np.zeros(n)
  pp[pe.lo - lo:pe.lo - lo + pe.p.size] = pe.p
  po[op.lo - lo:op.lo - lo + op.p.size] = op.p
  # The certified edges (pessimistic top, optimistic bottom), widened to the
  # other PMF's edges, as the Gaussian phases' (jaxdp._src.pld.step._edges).
  a = count * lo + min(_edge(po, count, h, False), _edge(pp, count, h, False)) - _EDGE_PAD
  b = count * lo + max(_edge(pp, count, h, True), _edge(po, count, h, True)) + _EDGE_PAD
  mass = max(float(pp.sum()), 1e-300)
  return (lo, pp, po, a, b, count * math.log(mass), count * math.log1p(float(pe.inf) / mass),
          count * float(pe.tau), count * (float(op.offset) - float(op.tau)))


def on_grid(phases, h, remove, cache=None):
  """Discretises ``phases`` (a list of (``pairs.Mechanism``, count)) on k·h.

  Args:
    phases: the configuration's non-Gaussian phases.
    h: the configuration's grid interval.
    remove: which direction of each mechanism.
    cache: optional dict reused across calls for one configuration (a pair
      that serves both directions is discretised once).

  Returns:
    :class:`OnGrid`, or None when a one-step grid would exceed the
    discretiser's memory cap (the caller grows h).
  """
  cache = {} if cache is None else cache
  parts = []
  for mech, count in phases:
    pair = mech.remove if remove else mech.add
    key = (id(pair), h, count)
    if key not in cache:
      try:
        cache[key] = (_phase(pair, count, h), pair)   # the pair keeps its id alive
      except _pairs_discretise._GridTooLarge:  # pylint: disable=protected-access
        return None
    parts.append(cache[key][0])
  col = list(zip(*parts))
  return OnGrid(list(col[0]), list(col[1]), list(col[2]), [c for _, c in phases],
                int(sum(col[3])), int(sum(col[4])), *(float(sum(x)) for x in col[5:]))


def join(on, extra, grow, a_cfg, b_cfg, log_keep):
  """Adds the other events of each configuration to its totals (in place for
  ``grow``, ``a_cfg``, ``b_cfg``): windows add (a union bound over phases);
  +inf masses combine as Π(M + ∞)^c - Π M^c (the Gaussian phases, with
  ``log_keep`` = Σ T·log(1 - ∞), have M = 1 - ∞). A configuration whose
  :func:`on_grid` failed (None) is flagged to grow its h.

  Returns:
    (inf mass (n,), loss shifts (2, n) (upper, lower), widest PMF (n,)).
  """
  n = len(on)
  log_mass, log_ratio = log_keep.copy(), -log_keep
  shift = np.zeros((2, n))
  width = np.ones(n, np.int64)
  for u in range(n):
    if not extra[u] or grow[u] > 1.0:
      continue
    o = on[u]
    if o is None:   # a one-step grid beyond the discretiser's cap
      grow[u] = max(grow[u], 2.0)
      continue
    a_cfg[u] += o.a
    b_cfg[u] += o.b
    log_mass[u] += o.log_mass
    log_ratio[u] += o.log_inf_ratio
    shift[:, u] = o.shift_up, o.shift_lo
    width[u] = max(len(p) for p in o.pess)
  # 1 + 1e-12: the product form's rounding goes toward more +inf mass
  return np.exp(log_mass) * np.expm1(log_ratio) * (1 + 1e-12), shift, width


def place(o, first, pp, po, lo, steps):
  """Writes one configuration's other phases into its kernel rows from phase
  index ``first`` on (``pp``/``po``: (phases, width); ``lo``, ``steps``: (phases,))."""
  for e, (lo_e, pe, oe, c) in enumerate(zip(o.lo, o.pess, o.opt, o.count)):
    pp[first + e, :len(pe)] = pe
    po[first + e, :len(oe)] = oe
    lo[first + e] = lo_e
    steps[first + e] = c
