"""Runtime soundness guards of the batched PLD kernel's answers.

The one-step values a composed answer must exceed, and the RDP upper bound
beside each certified PLD interval: the cheap small-order ceiling where it
suffices, the full default-orders value where it may be the smaller answer
or a guard needs it (:mod:`jaxdp._src.kernels.guards`). Used by
:func:`jaxdp._src.pld.kernel.guarded_bounds`; split out of
:mod:`jaxdp._src.pld.kernel` (moves only).
"""

from __future__ import annotations

import numpy as np

from jaxdp._src.kernels import rdp_driver as _rdp_driver
from jaxdp._src.kernels import guards as _guards
from jaxdp._src.core import numerics as num


def _one_step_values(name, q, sigma, value, shape):
  """The exact one-step ε (or δ) that the guards compare with (a lower bound
  on the composed one), of the broadcast ``shape``."""
  q, sigma, value = (np.broadcast_to(np.asarray(a, np.float64), shape) for a in (q, sigma, value))
  if name == "epsilon":
    return _guards.one_step_epsilon(q, sigma, value)
  return _guards.one_step_delta(q, sigma, value)


def _guard(name, lo, up, q, sigma, steps, value, shape, full_rdp=True, one=None,
           skip_full=False):
  """Runtime soundness guards (:mod:`jaxdp._src.kernels.guards`) on a tight answer;
  returns ``(lower, upper, rdp_upper)``.  ``one``: the one-step values of
  :func:`_one_step_values` if already computed; ``skip_full``: the full RDP
  value only where it may be below ``up`` (:func:`guarded_bounds`,
  ``rdp_value=False``)."""
  if one is None:
    one = _one_step_values(name, q, sigma, value, shape)
  q, sigma, steps, value = (np.broadcast_to(np.asarray(a, np.float64), shape)
                            for a in (q, sigma, steps, value))
  composed = (np.round(steps) >= 1) & (q > 0)
  flat = [a.reshape(-1) for a in (q, sigma, steps, value)]
  with num.x64():
    if full_rdp and skip_full:
      rdp_up, full = _rdp_unless_below_floor(name, flat, lo.reshape(-1), up.reshape(-1))
    elif full_rdp:
      rdp_up, full = _full_rdp(name, flat), np.ones(lo.size, bool)
    else:
      rdp_up, full = _rdp_ceiling(name, flat, lo.reshape(-1), up.reshape(-1))
    rdp_up, full = rdp_up.reshape(shape), full.reshape(shape)

    def safe(mask):   # the full default-orders RDP value where a guard failed
      todo = mask & ~full
      if np.any(todo):
        rdp_up[todo] = _full_rdp(name, [a[todo.reshape(-1)] for a in flat])
      return rdp_up[mask]

    lo, up = _guards.check(name, lo, up, one, composed, safe, certified_upper=rdp_up)
  return lo, up, rdp_up


def _rdp_unless_below_floor(name, flat, lo, up):
  """(RDP value, where it is the full value): the full default-path value
  where it may lie below ``up``; elsewhere (``up`` <= a lower bound on the
  full value, for ε also a certified lower end > 0) the cheap ceiling, which
  then changes neither min(up, RDP) nor the guard lower <= RDP."""
  from jaxdp._src.kernels import host_rdp as _host_rdp  # pylint: disable=g-import-not-at-top
  per_step = _host_rdp.small_order_rdp(*flat[:2])     # once, for the ceiling and the floor
  values = _ceiling(name, flat, per_step)
  # (the ceiling is never below the full value; where it is below up, the
  # full value is needed whatever the floor says)
  if name == "epsilon":
    skip = (lo > 0) & (up <= _host_rdp.epsilon_lower_bound(*flat, per_step=per_step)) & (values >= up)
  else:
    skip = (up <= _host_rdp.delta_lower_bound(*flat, per_step=per_step)) & (values >= up)
  need = ~skip
  if np.any(need):
    values[need] = _full_rdp(name, [a[need] for a in flat])
  return values, need


def _ceiling(name, flat, per_step=None):
  """:func:`jaxdp._src.kernels.host_rdp.small_order_ceiling`, a δ raised to
  the smallest normal float where the true δ is positive (as the full value)."""
  from jaxdp._src.kernels import host_rdp as _host_rdp  # pylint: disable=g-import-not-at-top
  ceiling = _host_rdp.small_order_ceiling(name, *flat, per_step=per_step)
  if name == "delta":
    ceiling = _rdp_driver.delta_floor(ceiling, flat[0], flat[2], flat[3])
  return ceiling


def _full_rdp(name, flat):
  return _rdp_driver.guard_rdp(name, *flat)


def _rdp_ceiling(name, flat, lo, up):
  """The RDP upper bound beside a PLD interval [lo, up] (flat arrays).

  The default-orders RDP value (grid plus continuous order search) costs ~3
  ms per configuration on the host and compiles seconds of XLA past the
  first calls, while the PLD answer it guards costs ~10 ms. So a cheap
  valid RDP bound comes first (:func:`jaxdp._src.kernels.host_rdp.small_order_ceiling`:
  integer orders <= 64, exact sums; never below the full value), and the
  full value is computed only where that bound is below ``up`` (the RDP
  value may then be the smaller answer), below ``lo`` (the guard that the
  certified lower end stays below RDP must not fail on a looser RDP bound)
  or where ``up`` is not finite.  Elsewhere the guard "lower <= RDP" checks
  against the cheap bound (a lower end between the two RDP values passes
  it), and min(up, RDP) reads ``up`` where the full value might lie in
  [lo, up): never below what ``jaxdp.epsilon`` (full value everywhere)
  reports, and above it by at most the certified interval's width.

  Returns:
    ``(values, full)``: the RDP bounds and where they are the full value.
  """
  ceiling = _ceiling(name, flat)
  need = ~((ceiling >= up) & (lo <= ceiling) & np.isfinite(up))
  if np.any(need):
    ceiling[need] = _full_rdp(name, [a[need] for a in flat])
  return ceiling, need
