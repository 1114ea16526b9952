"""One RDP question answered on the host, with no compilation.

A person who asks one question (the ``jaxdp`` command, or ``jaxdp.epsilon``
on a handful of configurations in a fresh process) would otherwise wait for
XLA to trace, lower and compile the batched programs (~5 s on a 2-core CPU;
~1 s even with the persistent cache warm), for a computation that takes
milliseconds. This module runs the *same* formulas in NumPy:

* the RDP of the Poisson-sampled Gaussian (Mironov, Talwar & Zhang 2019, §3)
  at the orders of :data:`jaxdp.rdp.DEFAULT_ORDERS` (or of an explicit list)
  that the compiled path's order search evaluates
  (:mod:`jaxdp._src.kernels.order_search`: the integer orders ≤ 64, then only
  those whose certified bounds can still win), each as the compiled path
  computes it (exact binomial sums, §3.3 Case I; the windowed quadrature of
  :func:`jaxdp.rdp.quadrature_rdp`), rounded up by the same safety factors;
* the conversion to (ε, δ) (Balle et al. 2020, Prop. 12, or Mironov 2017,
  Prop. 3) and its minimum over the grid;
* the golden-section refinement over all real orders in the grid bracket
  (:mod:`jaxdp._src.kernels.continuous_order`).

The kernels are written once against an array namespace ``xp`` (``jnp`` or
``numpy``); only the executor differs, so the host answer equals the batched
one to rounding (both are rounded up by at least 256 ulps; tested).
"""

# pylint: disable=protected-access  (the kernels' xp-generic internals)
from __future__ import annotations

import math

import numpy as np

from jaxdp._src.core import numerics as nx
from jaxdp._src.kernels import continuous_order as _continuous_order
from jaxdp._src.kernels import order_bounds as _order_bounds
from jaxdp._src.kernels import order_search as _order_search
from jaxdp._src.kernels import rdp
from jaxdp._src.kernels import rdp_binomial
from jaxdp._src.kernels import rdp_convert
from jaxdp._src.kernels import rdp_quadrature

__all__ = ["minimum_over_all_orders", "per_step_rdp", "small_order_ceiling",
           "MAX_CONFIGURATIONS"]

# At most this many configurations take the host path of a plain question
# (the first 64 of a process, rdp_driver._HOST_QUESTIONS). Larger calls go
# to the compiled programs, whose first build (~3 s on a 2-core CPU) a loop
# of calls then pays once; the host costs ~30 ms per call plus ~2 ms per
# configuration, the compiled chunk ~0.5 ms.
MAX_CONFIGURATIONS = 4


def grid_rdp(q, sigma, orders, nodes):
  """Per-step RDP at every order of ``orders`` for flat (n,) ``q``, ``sigma``.

  Each value is computed as the compiled default path computes it
  (:func:`jaxdp._src.kernels.order_search._evaluate`): the quadrature for fractional
  orders, and for integer orders above 64 where σ ≥ 0.3 (accurate to 1e-12
  there, within every value's safety factor, and independent of α); the
  exact binomial sum for the other integer orders ≤ 4096.

  Args:
    q, sigma: float64 arrays of shape (n,).
    orders: 1-D NumPy array of orders > 1.
    nodes: quadrature nodes per window (:func:`jaxdp._src.kernels.rdp._nodes_for`).

  Returns:
    (n, len(orders)) float64 array of rounded-up RDP values.
  """
  exact = rdp._exact_orders(orders)
  big = exact & (orders > _order_search._BASE_MAX)
  wide = sigma >= 0.3
  return _table(q, sigma, orders, nodes, ((wide, ~exact | big), (~wide, ~exact)))


def node_groups(sigma):
  """``[(mask, nodes)]``: the configurations of flat ``sigma`` grouped by the
  quadrature nodes a batch of each one alone would use (:func:`jaxdp._src.kernels.rdp._nodes_for`)."""
  nodes = np.array([rdp._nodes_for(sigma[i:i + 1]) for i in range(sigma.size)])
  return [(nodes == k, int(k)) for k in np.unique(nodes)]


def per_step_rdp(q, sigma, orders):
  """Per-step RDP of a few configurations at ``orders`` (flat (n,) ``q``,
  ``sigma``), each with its own quadrature nodes (:func:`node_groups`)."""
  out = np.empty((q.size, np.size(orders)))
  for sel, nodes in node_groups(sigma):
    out[sel] = grid_rdp(q[sel], sigma[sel], np.asarray(orders, np.float64), nodes)
  return out


def kernel_rdp(q, sigma, orders, nodes):
  """(n, m) per-step RDP of flat (n,) ``q``, ``sigma`` at ``orders`` (1-D,
  finite, > 1), as the compiled kernel :func:`jaxdp.rdp.sampled_gaussian`
  computes concrete orders: the exact binomial sum for every integer order
  ≤ 4096, the quadrature with ``nodes`` per window for the others."""
  every = np.ones(q.size, bool)
  return _table(q, sigma, orders, nodes, ((every, ~rdp._exact_orders(orders)),))


def _table(q, sigma, orders, nodes, groups):
  """(n, m) per-step RDP, each ``(rows, quad)`` of ``groups`` by quadrature
  at the orders ``quad`` marks and by the exact binomial sum at the others."""
  out = np.empty((q.size, orders.size))
  for rows, quad in groups:
    for cols, by_quadrature in ((quad, True), (~quad, False)):
      if np.any(rows) and np.any(cols):
        out[np.ix_(rows, cols)] = _rdp_at(q[rows], sigma[rows], orders[cols], nodes,
                                          by_quadrature)
  return out


def _rdp_at(q, sigma, orders, nodes, by_quadrature):
  """(n, m) per-step RDP by quadrature, or by the exact binomial sum; each
  distinct (q, σ) once (a PLD profile's guard asks one per ε of its grid),
  row by row the same values."""
  return nx.on_distinct_rows(lambda q, s: _rdp_rows(q, s, orders, nodes, by_quadrature), q, sigma)


def _rdp_rows(q, sigma, orders, nodes, by_quadrature):
  """:func:`_rdp_at` row by row."""
  if by_quadrature:
    return rdp.quadrature_rdp(q[:, None], sigma[:, None], orders[None, :], nodes, np)
  qq, ss, log_q, log_1mq, _ = rdp._prep(q, sigma, np)
  log_am1 = rdp_binomial.log_a_minus_1_binomial(log_q, log_1mq, ss, orders, np)
  return rdp._finish(log_am1, qq[:, None], ss[:, None], orders[None, :], True, nodes, np)


def minimum_over_all_orders(kind, method, q, sigma, steps, x, nodes, with_order=False):
  """The value of the default-orders RDP path for a few configurations.

  What :func:`jaxdp._src.kernels.rdp_driver.run_chunked` computes with ``orders=None`` (grid
  minimum over ``DEFAULT_ORDERS``, then the golden-section refinement), in
  NumPy. The grid minimum takes the compiled path's order search
  (:mod:`jaxdp._src.kernels.order_search`): the integer orders ≤ 64, then only
  the orders whose certified bounds can still win (~3 of the 116 others),
  evaluated as :func:`grid_rdp` evaluates them, so the minimum and its order
  are those of the whole grid (~3× faster than evaluating every order).

  Args:
    kind: "epsilon" or "delta".
    method: conversion ("improved" or "classic"), kind "epsilon" only.
    q, sigma, steps, x: flat float64 arrays of one shape (x: δ or ε).
    nodes: quadrature nodes per window.
    with_order: also return the order at which the value was attained.

  Returns:
    The value per configuration (and the order), float64 NumPy.
  """
  pl = _order_search.plan(None)
  with np.errstate(all="ignore"):
    grid_value, best = grid_minimum(kind, method, pl, q, sigma, steps, x, nodes)
    return _continuous_order.refine(kind, method, nodes, grid_value, pl.orders, best, q, sigma,
                                    steps, x, with_order=with_order, xp=np)


def grid_minimum(kind, method, pl, q, sigma, steps, x, nodes):
  """min over the orders of a search plan (:func:`jaxdp._src.kernels.order_search.plan`),
  and the index of the order attaining it, as the compiled
  :func:`jaxdp._src.kernels.order_search.search` computes it, in NumPy.

  Args:
    kind, method, q, sigma, steps, x, nodes: as in :func:`minimum_over_all_orders`.
    pl: the plan of the order list (not None).

  Returns:
    ``(value, best index)``, float64 and int NumPy arrays.
  """
  orders = pl.orders
  key = tuple(float(o) for o in orders)
  with np.errstate(all="ignore"):
    table = _order_search.search_table(
        pl, q.size, lambda: _rdp_at(q, sigma, orders[pl.base], nodes, False),
        lambda table, known: _order_search.candidates(
            table, known, q, sigma, steps, x, orders=key, kind=kind, method=method, xp=np),
        lambda rows, cols: _pairs_rdp(q[rows], sigma[rows], orders[cols], nodes))
    return _order_search.minimum(table, steps, x, orders=key, kind=kind, method=method, xp=np)


def _pairs_rdp(q, sigma, alpha, nodes):
  """Per-step RDP at one order per configuration (flat (k,) arrays), each
  computed as :func:`grid_rdp` computes that order for that σ."""
  out = np.empty(q.size)
  exact = rdp._exact_orders(alpha)
  quad = ~exact | ((alpha > _order_search._BASE_MAX) & (sigma >= 0.3))
  if np.any(quad):
    out[quad] = _continuous_order.distinct_quadrature(q[quad], sigma[quad], alpha[quad], nodes)
  for order in np.unique(alpha[~quad]):   # a few large integer orders at σ < 0.3
    sel = ~quad & (alpha == order)
    out[sel] = _rdp_at(q[sel], sigma[sel], np.array([order]), nodes, False)[:, 0]
  return out


# Orders of :func:`small_order_ceiling`: the integer default orders whose
# exact binomial sums (Mironov, Talwar & Zhang 2019, §3.3 Case I) cost at
# most 64 terms each.
_SMALL_ORDERS = rdp.DEFAULT_ORDERS[rdp._exact_orders(rdp.DEFAULT_ORDERS)
                                   & (rdp.DEFAULT_ORDERS <= _order_search._BASE_MAX)]


def small_order_rdp(q, sigma):
  """Per-step RDP at :data:`_SMALL_ORDERS` (exact sums), (n, len(_SMALL_ORDERS)):
  what :func:`small_order_ceiling`, :func:`epsilon_lower_bound` and
  :func:`delta_lower_bound` start from (pass it as ``per_step`` to compute it once)."""
  return _rdp_at(q, sigma, _SMALL_ORDERS, rdp_quadrature.NODES_PER_WINDOW, False)


def _per_step(q, sigma, per_step):
  return small_order_rdp(q, sigma) if per_step is None else per_step


def small_order_ceiling(kind, q, sigma, steps, x, per_step=None):
  """A cheap RDP upper bound: the default-path value restricted to
  :data:`_SMALL_ORDERS` (exact sums only; no quadrature, no order search).

  It is an upper bound on ε (kind "epsilon", x = δ; improved conversion,
  Balle et al. 2020, Prop. 12) or δ (kind "delta", x = ε) like the full
  default-orders value, and never below it (fewer orders, same per-order
  values); ~0.1 ms per configuration in NumPy, where the full value costs
  ~3 ms on the host (quadrature at fractional orders, golden-section search).

  Args:
    kind: "epsilon" or "delta".
    q, sigma, steps, x: flat float64 arrays of one shape.
    per_step: :func:`small_order_rdp` of (q, σ), if already computed.
  Returns:
    float64 NumPy array of the values.
  """
  with np.errstate(all="ignore"):
    total = steps[:, None] * _per_step(q, sigma, per_step)
    if kind == "epsilon":
      return rdp_convert.to_epsilon_xp(total, _SMALL_ORDERS, x, "improved", np)[0]
    return rdp_convert.to_delta_xp(total, _SMALL_ORDERS, x, np)


def epsilon_lower_bound(q, sigma, steps, delta, per_step=None):
  """A lower bound on the default-path RDP ε (improved conversion, every real
  order α > 1), from the exact integer-order sums of :func:`small_order_ceiling`.

  ε(α) = (T·g(α) - log δ)/(α - 1) + c(α) with g(α) = (α - 1)·rdp(α), convex
  in α with g(1) = 0 (a cumulant generating function), and c(α) = log(1 -
  1/α) - log(α)/(α - 1), non-decreasing (its derivative is 1/(α(α-1)) +
  (log α - 1 + 1/α)/(α-1)² >= 0). A convex g lies above every secant line
  extended beyond its chord, so on a piece [a, b] between the integer orders
  2..64 (four pieces per unit) g >= each neighbouring secant ℓ, and (T·ℓ(α)
  - log δ)/(α - 1) is monotone in α (a ratio of linear functions), so ε >=
  min(value at a, value at b) + c(a) for each line, the larger taken. On (1,
  2] the line through g(1) = 0 and g(2) bounds g from below for α >= 2 only,
  so there the secant through orders 2 and 3 extended left is used, with rdp
  >= 0 as well; near 1 (α - 1 <= 1/64), c(α) >= log(α - 1) - log 2 - 1 and
  the |log δ|/(α - 1) term dominates. Beyond 64: T·rdp(64) + c(64) (rdp is
  non-decreasing). The default path's per-order rounding terms are >= 0.
  Valid where the KL clause does not set ε = 0 at some order: the caller uses
  it only where a certified lower ε > 0 exists. The binomial sums carry an
  upward rounding allowance (~1e-12 relative): scaled by 1 - 1e-9.

  Args:
    q, sigma, steps, delta: flat float64 arrays of one shape.
    per_step: :func:`small_order_rdp` of (q, σ), if already computed.
  Returns:
    float64 NumPy array (-inf where no bound is available, δ >= 0.9).
  """
  k = _SMALL_ORDERS                                                   # 2, 3, ..., 64
  with np.errstate(all="ignore"):
    rdp_k, g, slope = _lower_bound_parts(steps, _per_step(q, sigma, per_step))
    nld = -np.log(delta)[:, None]

    def c(a):
      return np.log1p(-1.0 / a) - np.log(a) / (a - 1.0)

    def piece_bound(a, b, g0, s0, x0):
      """min over [a, b] of (g0 + s0·(α - x0) + |log δ|)/(α - 1), + c(a)."""
      va = (g0 + s0 * (a - x0) + nld) / (a - 1.0)
      vb = (g0 + s0 * (b - x0) + nld) / (b - 1.0)
      return np.minimum(va, vb) + c(a)

    best = _integer_pieces_min(
        k, g, slope, piece_bound, lambda a, b, i: rdp_k[:, i:i + 1] + nld / (b - 1.0) + c(a))
    best = np.minimum(best, rdp_k[:, -1] + c(k[-1]))                  # beyond 64
    # (1, 2]: secant through orders 2, 3 extended left, and rdp >= 0.
    pts = 1.0 + 2.0 ** -np.arange(6.0, -1.0, -1.0)                    # 1 + 1/64 ... 2
    for a, b in zip(pts[:-1], pts[1:]):
      sec = piece_bound(a, b, g[:, :1], slope[:, :1], 2.0)[:, 0]
      zero = (nld[:, 0] / (b - 1.0)) + c(a)
      best = np.minimum(best, np.maximum(sec, zero))
    x0 = pts[0] - 1.0
    best = np.minimum(best, math.log(x0) - math.log(2.0) - 1.0 + nld[:, 0] / x0)
    best = best - 1e-9 * np.abs(best) - 1e-12
  return np.where((delta < 0.9) & ~np.isnan(best), best, -np.inf)


def delta_lower_bound(q, sigma, steps, epsilon, per_step=None):
  """A lower bound on the default-path RDP δ (every real order the path can
  evaluate, α ∈ (1, 2·max(DEFAULT_ORDERS)]), from the exact integer-order
  sums of :func:`small_order_ceiling`: :func:`epsilon_lower_bound`'s argument for
  δ (Balle et al. 2020, Prop. 12, with the KL clause).

  log δ(α) = min(½·log(1 - e^{-T·rdp(α)}), T·g(α) - (α-1)·ε + h(α)) with
  g(α) = (α - 1)·rdp(α) convex, g(1) = 0, and h(α) = (α-1)·log(1 - 1/α) -
  log α, decreasing (h' = log(1 - 1/α) < 0). The KL part is increasing in
  rdp(α), which is at least 2·TV² (D_α ≥ D_1 = KL ≥ 2·TV², Pinsker; TV =
  q·erf(1/(2√2σ))), at least rdp(k_i) on [k_i, k_i+1] and beyond 64 at
  least rdp(64) (non-decreasing), and on (1, 2] at least the secant through
  orders 2 and 3 divided by α - 1 (a ratio of linear functions: its smaller
  end value on each piece). The other part, on each piece [a, b]: below
  by any line under T·g (the secants through neighbouring integer orders
  2..64, and (α - 1)·T·rdp(k_i) for α ≥ k_i: rdp is non-decreasing) minus
  (α - 1)·ε, linear, so its smaller end value, plus h(b). On (1, 2]: the
  secant through orders 2 and 3 extended left, and g ≥ 0; below 1 + 1/64:
  g ≥ 0 and x·log x - (1 + x)·log(1 + x) ≥ its value at x = 1/64 (x = α -
  1); beyond 64: (α - 1)·(T·rdp(64) - ε) - 1 - log α. The sums' rounding
  allowance (~1e-12 relative) is undone by the factor 1 - 1e-9.

  Args:
    q, sigma, steps, epsilon: flat float64 arrays of one shape.
    per_step: :func:`small_order_rdp` of (q, σ), if already computed.
  Returns:
    float64 NumPy array of δ lower bounds in [0, 1].
  """
  k = _SMALL_ORDERS                                                   # 2, 3, ..., 64
  top = 2.0 * float(rdp.DEFAULT_ORDERS[-1])                           # the golden bracket's end
  with np.errstate(all="ignore"):
    rdp_k, g, slope = _lower_bound_parts(steps, _per_step(q, sigma, per_step))
    eps = epsilon[:, None]
    h = lambda a: (a - 1.0) * np.log1p(-1.0 / a) - np.log(a)

    def piece_bound(a, b, g0, s0, x0):
      """min over [a, b] of g0 + s0·(α - x0) - (α - 1)·ε, + h(b)."""
      va = g0 + s0 * (a - x0) - (a - 1.0) * eps
      vb = g0 + s0 * (b - x0) - (b - 1.0) * eps
      return np.minimum(va, vb) + h(b)

    tv = _order_bounds.total_variation(q, sigma, np)
    pinsker = steps * 2.0 * (tv * (1.0 - 1e-9)) ** 2                 # T·D_α ≥ T·KL ≥ T·2TV²
    kl = lambda total: 0.5 * np.log(-np.expm1(-np.maximum(total, pinsker)))   # the KL part
    best = _integer_pieces_min(k, g, slope, piece_bound,
                               lambda a, b, i: piece_bound(a, b, 0.0, rdp_k[:, i:i + 1], 1.0),
                               cap=lambda i: kl(rdp_k[:, i]))         # rdp ≥ rdp(k_i) there
    r64 = rdp_k[:, -1] - epsilon                                       # beyond 64
    best = np.minimum(best, np.minimum(
        np.minimum((k[-1] - 1.0) * r64, (top - 1.0) * r64) - 1.0 - math.log(top), kl(rdp_k[:, -1])))
    pts = 1.0 + 2.0 ** -np.arange(6.0, -1.0, -1.0)                    # 1 + 1/64 ... 2
    sec_rdp = lambda a: (g[:, 0] + (a - 2.0) * slope[:, 0]) / (a - 1.0)  # T·rdp ≥ it on (1, 2]
    for a, b in zip(pts[:-1], pts[1:]):
      sec = piece_bound(a, b, g[:, :1], slope[:, :1], 2.0)[:, 0]
      zero = -(b - 1.0) * epsilon + h(b)
      best = np.minimum(best, np.minimum(np.maximum(sec, zero),
                                         kl(np.minimum(sec_rdp(a), sec_rdp(b)))))
    x0 = pts[0] - 1.0
    best = np.minimum(best, np.minimum(
        -x0 * epsilon + x0 * math.log(x0) - (1.0 + x0) * math.log1p(x0), kl(0.0)))
    best = best - 1e-9 * np.abs(best) - 1e-12
  return np.where(np.isnan(best), 0.0, np.minimum(np.exp(best), 1.0))


def _lower_bound_parts(steps, per_step):
  """T·rdp at the orders 2..64 scaled by 1 - 1e-9 (below the true values:
  the sums' rounding allowance is ~1e-12 relative; NaN read as 0), T·g =
  (α - 1)·T·rdp there, and g's slopes between neighbouring orders."""
  rdp_k = steps[:, None] * per_step
  rdp_k = np.where(np.isnan(rdp_k), 0.0, rdp_k) * (1.0 - 1e-9)
  g = (_SMALL_ORDERS - 1.0) * rdp_k
  return rdp_k, g, np.diff(g, axis=1)


def _integer_pieces_min(k, g, slope, piece_bound, monotone_bound, cap=None):
  """min over the pieces [a, b] (four per unit) between the integer orders
  ``k`` = 2..64 of the largest of the lower bounds valid there: ``piece_bound``
  of the secant lines through the neighbouring pairs of orders (g convex lies
  above each, extended beyond its chord) and ``monotone_bound(a, b, i)``
  from rdp(α) >= rdp(k_i) for α >= k_i; with ``cap(i)``, the smaller of
  that and ``cap(i)`` on [k_i, k_i+1]. (n,) array."""
  best = np.full(g.shape[:1], np.inf)
  frac = np.array([0.0, 0.25, 0.5, 0.75, 1.0])
  for i in range(len(k) - 1):      # [k_i, k_i+1], lines through (i-1, i) and (i+1, i+2)
    for j in range(4):
      a, b = k[i] + frac[j], k[i] + frac[j + 1]
      lines = []
      if i >= 1:
        lines.append(piece_bound(a, b, g[:, i:i + 1], slope[:, i - 1:i], k[i]))
      if i + 2 < len(k):
        lines.append(piece_bound(a, b, g[:, i + 1:i + 2], slope[:, i + 1:i + 2], k[i + 1]))
      lines.append(monotone_bound(a, b, i))
      piece = np.max(np.concatenate(lines, axis=1), axis=1)
      best = np.minimum(best, piece if cap is None else np.minimum(piece, cap(i)))
  return best
