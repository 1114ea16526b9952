"""Replace-one Rényi DP from an add/remove Rényi DP curve (weak triangle inequality).

A replace-one change D → D' = D − {x} ∪ {x'} passes through the add/remove
neighbour M = D − {x} of both. With P, M, R the mechanism's output laws on D,
M and D', Hölder's inequality with exponents (2, 2) gives, for every α > 1,

    (α − 1) D_α(P‖R) = log E_M[(P/M)^α (M/R)^(α−1)]
                     ≤ ½ log E_M[(P/M)^(2α)] + ½ log E_M[(M/R)^(2α−2)]
                     = (α − ½) D_{2α}(P‖M) + (α − 1) D_{2α−1}(M‖R),

i.e. D_α(P‖R) ≤ (α − ½)/(α − 1) · D_{2α}(P‖M) + D_{2α−1}(M‖R): the weak
triangle inequality of Rényi divergences (Mironov, "Rényi Differential
Privacy", CSF 2017, Prop. 11 with p = q = 2; the derivation above is the whole
proof). D_{2α}(P‖M) is the remove direction and D_{2α−1}(M‖R) the add
direction of the add/remove mechanism, so any curve that bounds both
directions at every order (the sampled Gaussian: Mironov, Talwar & Zhang 2019,
Thm. 5) yields a replace-one curve. The bound is sound for every sampler whose
add/remove analysis is sound, whatever its structure; it is not tight (for the
Poisson-sampled Gaussian the tight replace-one answer is the PLD of the pair
((1−q)N(0,σ²) + qN(1,σ²), (1−q)N(0,σ²) + qN(−1,σ²)), see
:func:`jaxdp._src.mechanisms.sampled.poisson_gaussian`).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from jaxdp._src.core import numerics as nx

__all__ = ["replace_one", "sampled_gaussian_replace_one"]


def replace_one(add_remove_curve: Callable, alpha):
  """Replace-one RDP at orders ``alpha`` from an add/remove RDP curve.

  Implements D_α(P‖R) ≤ (α − ½)/(α − 1) · ε_AR(2α) + ε_AR(2α − 1) (module
  docstring; Mironov 2017, Prop. 11).

  Args:
    add_remove_curve: a function of orders β > 1 (array, last axis) returning
      an RDP bound that holds for both directions of an add/remove neighbour
      pair at every order β; it must accept orders 2α and 2α − 1.
    alpha: orders > 1 (concrete orders stay concrete, so kernels with exact
      integer-order paths keep them).

  Returns:
    Replace-one RDP values, the broadcast shape of ``add_remove_curve``'s
    outputs. An infinite add/remove value gives an infinite bound.
  """
  if nx.is_concrete(alpha):
    alpha = np.asarray(alpha, np.float64)
  double, odd = 2.0 * alpha, 2.0 * alpha - 1.0
  weight = (alpha - 0.5) / (alpha - 1.0)
  return weight * add_remove_curve(double) + add_remove_curve(odd)


def sampled_gaussian_replace_one(q, sigma, alpha):
  """RDP of the Poisson-sampled Gaussian under replace-one neighbours.

  Each example is kept with probability ``q``; the clipped sum (clip norm C)
  gets N(0, σ²C²) noise, ``sigma`` = std / C as for dp_accounting's
  ``PoissonSampledDpEvent(q, GaussianDpEvent(sigma))``. Replacing one example
  moves the sum by up to 2C when it is sampled; the bound is
  :func:`replace_one` of :func:`jaxdp.rdp.sampled_gaussian` (add/remove,
  which bounds both directions, Mironov, Talwar & Zhang 2019, Thm. 5).
  dp_accounting's RDP accountant has no replace-one analysis of this event.

  Args:
    q: sampling rate(s) in [0, 1].
    sigma: noise multiplier(s) > 0.
    alpha: orders > 1 (broadcast against ``q`` and ``sigma``).

  Returns:
    RDP values, the broadcast shape of ``(q, sigma, alpha)``.
  """
  from jaxdp._src.kernels import rdp as _rdp  # pylint: disable=g-import-not-at-top
  return replace_one(lambda a: _rdp.sampled_gaussian(q, sigma, a), alpha)

