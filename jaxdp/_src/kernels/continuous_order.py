"""The RDP conversion minimised over all real orders α > 1 (host-level helper).

With no explicit order list, :func:`jaxdp.epsilon` / :func:`jaxdp.delta`
(accountant "rdp") report min over *all* real α > 1 rather than over a fixed
grid. The grid minimum is found first (:mod:`jaxdp._src.kernels.order_search`, exact over
:data:`jaxdp.rdp.DEFAULT_ORDERS`); then a golden-section search runs on
u = log(α - 1) inside the bracket formed by the two grid neighbours of the
grid's best order, and the reported value is the minimum of everything
evaluated.

Why the bracket holds the minimiser. f(α) = (α-1)·ε(α) = log A_α is convex
(van Erven & Harremoës 2014, Cor. 2). With the classic conversion,
ε_δ(α) = (T·f(α) + log(1/δ))/(α-1) has convex sublevel sets
{α : T·f(α) - c·(α-1) + log(1/δ) ≤ 0}, so it is quasi-convex (unimodal) and
its minimiser lies between the grid neighbours of the best grid order. The
improved conversion (Balle et al. 2020, Prop. 12) adds the smooth terms
log(1-1/α) - log(α)/(α-1), which leave it unimodal in practice.

Soundness never depends on that: every reported value is the conversion of a
rounded-up RDP value (quadrature path of :func:`jaxdp.rdp.sampled_gaussian`,
valid for every real order) at an order that was actually evaluated, and the
result is never above the grid minimum (which is included in the min).
"""

from __future__ import annotations

import functools
import math

import jax.numpy as jnp
import numpy as np

from jaxdp._src.core import numerics as nx
from jaxdp._src.kernels import rdp
from jaxdp._src.kernels import rdp_convert
from jaxdp._src.kernels import rdp_quadrature
from jaxdp._src.core import persist

# Golden-section iterations (one RDP evaluation each). The bracket in
# u = log(α-1) shrinks by 0.618 per iteration; 22 leave ~2e-5 of a grid gap,
# where ε is flat to ~1e-10 relative (14 left ~1e-8: the in-jit read-out of
# jaxdp.optax, on a finer order table, then read below the host's answer).
ITERATIONS = 22
_INV_PHI = (math.sqrt(5.0) - 1.0) / 2.0


def _value(kind, method, nodes, q, sigma, steps, x, alpha, xp=jnp):
  """Converted ε (or δ) of T steps at one order per configuration (rounded up)."""
  per = rdp.quadrature_rdp(q, sigma, alpha, nodes, xp)
  total = (steps * per)[:, None]
  if kind == "epsilon":
    return rdp_convert.to_epsilon_xp(total, alpha[:, None], x, method, xp)[0]
  return rdp_convert.to_delta_xp(total, alpha[:, None], x, xp)


@functools.partial(persist.jit, static_argnames=("kind", "method", "nodes", "iterations",
                                             "with_argmin"))
def golden_minimum(q, sigma, steps, x, lo, hi, *, kind, method, nodes, iterations=ITERATIONS,
                   with_argmin=False):
  """min of the converted value over orders in [lo, hi] (golden section on log(α-1)).

  Args:
    q, sigma, steps, x: flat float arrays (x is δ for kind "epsilon", ε for "delta").
    lo, hi: the bracket per configuration, 1 < lo < hi.
    kind: "epsilon" or "delta".
    method: conversion ("improved" or "classic"), kind "epsilon" only.
    nodes: quadrature nodes per window (:func:`jaxdp.rdp.sampled_gaussian`).
    iterations: golden-section steps.
    with_argmin: also return the order at which the smallest value was seen.

  Returns:
    The smallest value evaluated, per configuration (a valid bound for each);
    with ``with_argmin``, ``(value, order)``.
  """
  f = functools.partial(_value, kind, method, nodes, q, sigma, steps, x)
  return golden_section(f, lo, hi, iterations, with_argmin)


def golden_section(f, lo, hi, iterations, with_argmin, xp=jnp):
  """The loop of :func:`golden_minimum` for a value function ``f(alpha)`` on
  either array namespace (``jnp``: traced; ``numpy``: the host path).

  Besides the golden-section points, the two ends of the bracket are
  evaluated (the last two loop steps): where the minimiser is an end (the
  bracket beyond the grid's largest or smallest order, e.g. tiny ε at
  δ = 1e-12 wants α ≥ 8192) the interior points only approach it.
  """
  a = xp.log(lo - 1.0)
  b = xp.log(hi - 1.0)
  c = b - _INV_PHI * (b - a)
  d = a + _INV_PHI * (b - a)
  a0, b0 = a, b
  last = iterations + 2

  # One evaluation of f per loop step, the two interior points included
  # (steps 0 and 1) and the two ends (the last two steps): f, the RDP kernel,
  # appears once in the compiled program (three copies compiled ~3x longer,
  # ~3 s on the 2-core CPU).
  def body(i, s):
    a, b, c, d, fc, fd, best, arg = s
    left = fc <= fd   # the minimiser is in [a, d]
    a2 = xp.where(left, a, c)
    b2 = xp.where(left, d, b)
    new = xp.where(left, b2 - _INV_PHI * (b2 - a2), a2 + _INV_PHI * (b2 - a2))
    point = xp.where(i == 0, c, xp.where(i == 1, d, new))
    point = xp.where(i == last, b0, xp.where(i == last + 1, a0, point))
    fn = f(1.0 + xp.exp(point))
    golden = (i >= 2) & (i < last)
    a3, b3 = xp.where(golden, a2, a), xp.where(golden, b2, b)
    c3 = xp.where(golden, xp.where(left, new, d), c)
    d3 = xp.where(golden, xp.where(left, c, new), d)
    fc3 = xp.where(golden, xp.where(left, fn, fd), xp.where(i == 0, fn, fc))
    fd3 = xp.where(golden, xp.where(left, fc, fn), xp.where(i == 1, fn, fd))
    arg2 = xp.where(i == 0, point, xp.where(fn < best, point, arg))
    return a3, b3, c3, d3, fc3, fd3, xp.minimum(best, fn), arg2

  inf = xp.full_like(a, xp.inf)
  state = (a, b, c, d, inf, inf, inf, c)
  out = nx.fori_loop(0, last + 2, body, state, xp)
  return (out[-2], 1.0 + xp.exp(out[-1])) if with_argmin else out[-2]


def bracket(orders, best_index):
  """The grid neighbours of each configuration's best grid order.

  Below the smallest order the bracket reaches 1 + (α_min - 1)/4; above the
  largest, 2·α_max.
  """
  orders = np.asarray(orders, np.float64)
  k = np.asarray(best_index)
  lo = np.where(k > 0, orders[np.maximum(k - 1, 0)], 1.0 + (orders[0] - 1.0) / 4.0)
  hi = np.where(k < orders.size - 1, orders[np.minimum(k + 1, orders.size - 1)], 2.0 * orders[-1])
  return lo, hi


def refine(kind, method, nodes, grid_value, orders, best_index, q, sigma, steps, x,
           with_order=False, xp=jnp):
  """min(grid value, golden-section value in the grid bracket), NumPy float64.

  Must run under float64 (``nx.x64()``) unless ``xp`` is ``numpy`` (the host
  path, which runs the same golden section in NumPy). With ``with_order``,
  also the order at which that minimum was evaluated: ``(value, order)``.
  """
  lo, hi = bracket(orders, best_index)
  if xp is np:   # the host path (jaxdp._src.kernels.host_rdp): no compilation
    f = functools.partial(_value, kind, method, nodes, q, sigma, steps, x, xp=np)
    val, arg = golden_section(f, lo, hi, ITERATIONS, True, np)
  else:
    val, arg = golden_minimum(*(jnp.asarray(v) for v in (q, sigma, steps, x, lo, hi)),
                              kind=kind, method=method, nodes=nodes, with_argmin=True)
  val = np.asarray(val, np.float64)
  grid_value = np.asarray(grid_value, np.float64)
  use_grid = np.isnan(val) | (grid_value <= val)
  value = np.where(use_grid, grid_value, val)
  if not with_order:
    return value
  grid_order = np.asarray(orders, np.float64)[np.asarray(best_index)]
  return value, np.where(use_grid, grid_order, np.asarray(arg, np.float64))


def minimum_over_all_orders(kind, method, q, sigma, steps, x, *,
                            nodes=rdp_quadrature.NODES_PER_WINDOW):
  """Jittable: the grid minimum over ``DEFAULT_ORDERS`` refined by
  :func:`golden_minimum` (what the host path computes, in one traced program;
  used by the sharded sweep kernels).

  Args:
    kind: "epsilon" or "delta".
    method: conversion, kind "epsilon" only.
    q, sigma, steps, x: arrays of one shape.
    nodes: quadrature nodes per window.

  Returns:
    The value per configuration, never above the grid minimum.
  """
  orders = rdp.DEFAULT_ORDERS
  total = rdp.dpsgd_rdp(q, sigma, steps, orders, _nodes=nodes)
  o = jnp.asarray(orders, total.dtype)
  if kind == "epsilon":
    grid_value = rdp.to_epsilon(total, o, x, method)[0]
    per_order = rdp_convert.epsilon_per_order(total, o, x, method)[0]
  else:
    grid_value = rdp.to_delta(total, o, x)
    per_order = rdp_convert.log_delta_per_order(total, o, x)[0]
  k = jnp.argmin(per_order, axis=-1)
  lo = jnp.where(k > 0, o[jnp.maximum(k - 1, 0)], 1.0 + (o[0] - 1.0) / 4.0)
  hi = jnp.where(k < o.size - 1, o[jnp.minimum(k + 1, o.size - 1)], 2.0 * o[-1])
  shape = grid_value.shape
  flat = [jnp.broadcast_to(v, shape).reshape(-1) for v in (q, sigma, steps, x, lo, hi)]
  val = golden_minimum(*flat, kind=kind, method=method, nodes=nodes).reshape(shape)
  return jnp.where(jnp.isnan(val), grid_value, jnp.minimum(grid_value, val))
