"""ε and δ of training runs whose batches came from a :mod:`jaxdp.sampling` sampler.

``jaxdp.epsilon(sampler, sigma, steps, delta)`` and ``jaxdp.delta(...)``
dispatch here when their first argument is a sampler, so the number a user
reads is the ε of the batches their step consumed, never a Poisson ε
substituted for another sampler.

RDP: the sampler's event (:meth:`event`) is composed ``steps`` times, or once
per started epoch for the epoch-level events (balls-in-bins, shuffle: charging
a started epoch in full is valid, its first steps are a function of all of
its outputs), through :func:`jaxdp.accountant.event_rdp`, then converted with
the improved conversion.  PLD: only where the tight path accounts the
sampler's event exactly (Poisson without truncation; shuffling, one
unamplified Gaussian of sensitivity 2C per epoch); any other sampler raises
a ``ValueError`` instead of silently falling back.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from jaxdp import _numerics as nx
from jaxdp import events as _events

_EPOCH_EVENTS = (_events.BallsInBinsGaussian, _events.ShuffledGaussian)


def is_sampler(x) -> bool:
  return hasattr(x, "event") and hasattr(x, "dataset_size") and not isinstance(x, np.ndarray)


def compositions(sampler, event, steps):
  """Number of times the event is composed for ``steps`` training steps."""
  steps = np.asarray(steps, np.float64)
  if isinstance(event, _EPOCH_EVENTS):
    return np.ceil(steps / sampler.steps_per_epoch - 1e-12)
  return steps


def _rdp_total(sampler, sigma, steps, orders):
  from jaxdp import accountant as _acc  # pylint: disable=g-import-not-at-top
  from jaxdp import rdp as _rdp  # pylint: disable=g-import-not-at-top
  orders = np.asarray(_rdp.DEFAULT_ORDERS if orders is None else orders, np.float64)
  sigma = np.asarray(sigma, np.float64)
  flat = sigma.reshape(-1)
  curves = []
  for s in flat:  # one event per distinct σ (events are scalar per sampler)
    ev = sampler.event(float(s))
    curves.append(np.asarray(_acc.event_rdp(ev, orders, jnp.float64), np.float64))
  curve = np.stack(curves).reshape(sigma.shape + (orders.size,))
  count = compositions(sampler, sampler.event(float(flat[0])), steps)
  # Round the product up (ε grows with it).
  return np.nextafter(curve * np.asarray(count)[..., None], np.inf), orders


def epsilon(sampler, sigma, steps, delta, accountant="rdp", orders=None):
  """ε of ``steps`` DP-SGD steps on batches from ``sampler`` (see module doc)."""
  return _forward("epsilon", sampler, sigma, steps, delta, accountant, orders)


def delta(sampler, sigma, steps, epsilon_, accountant="rdp", orders=None):
  """δ at ``epsilon_`` of ``steps`` DP-SGD steps on batches from ``sampler``."""
  return _forward("delta", sampler, sigma, steps, epsilon_, accountant, orders)


def _forward(kind, sampler, sigma, steps, value, accountant, orders):
  """ε at δ = ``value`` (kind "epsilon") or δ at ε = ``value`` (kind "delta")."""
  nx.check_array("sigma", sigma, low=0.0, low_open=True)
  nx.check_array("steps", steps, low=0.0, integer=True)
  if kind == "epsilon":
    nx.check_array("delta", value, low=0.0, high=1.0, low_open=True, high_open=True)
  else:
    nx.check_array("epsilon", value, low=0.0)
  shape = nx.check_same_shape(sigma=sigma, steps=steps, **{"delta" if kind == "epsilon"
                                                           else "epsilon": value})
  sigma, steps, value = (np.broadcast_to(np.asarray(a, np.float64), shape)
                         for a in (sigma, steps, value))
  if accountant == "pld":
    q, s, count = _pld_equivalent(sampler, sigma, steps)
    from jaxdp import _api  # pylint: disable=g-import-not-at-top
    fn = _api.epsilon if kind == "epsilon" else _api.delta
    return fn(q, s, count, value, accountant="pld")
  if accountant != "rdp":
    raise ValueError(f"accountant must be 'rdp' or 'pld'; found {accountant!r}.")
  from jaxdp import rdp as _rdp  # pylint: disable=g-import-not-at-top
  with nx.x64():
    total, orders = _rdp_total(sampler, sigma, steps, orders)
    if kind == "epsilon":
      out, _ = _rdp.to_epsilon(jnp.asarray(total), orders, jnp.asarray(value))
    else:
      out = _rdp.to_delta(jnp.asarray(total), orders, jnp.asarray(value))
    out = np.nextafter(np.asarray(out, np.float64), np.inf)  # round up
  if kind == "delta":
    out = np.minimum(out, 1.0)
  return nx.to_host(np.where(steps == 0, 0.0, out))


def _pld_equivalent(sampler, sigma, steps):
  """(q, σ, compositions) of the Poisson-sampled Gaussian that IS the sampler's
  event, for the tight path; ValueError where there is none."""
  ev = sampler.event(float(np.asarray(sigma).reshape(-1)[0]))
  count = compositions(sampler, ev, steps)
  if isinstance(ev, _events.SampledGaussian):
    return float(ev.q), sigma, count
  if isinstance(ev, _events.ShuffledGaussian):
    return 1.0, sigma / 2.0, count
  if isinstance(ev, _events.SampledWithoutReplacementGaussian) and ev.relation == "add_remove":
    # Balle–Barthe–Gaboardi coupling (jaxdp.rdp_samplers): the pair is the
    # Poisson-sampled Gaussian with rate B/N and sensitivity 2C, in both
    # directions, i.e. rate B/N at noise multiplier σ/2.
    return float(ev.batch_size) / float(ev.dataset_size), sigma / 2.0, count
  raise ValueError(
      f"accountant='pld' is not available for the {type(sampler).__name__} sampler "
      f"({type(ev).__name__}) yet; use accountant='rdp' (never a Poisson substitute).")


def _check_budget(target_epsilon, delta, name, value, value_check):
  """Scalar budget (ε ≥ 0, δ in (0, 1)) and one more named scalar argument."""
  for n, v in (("target_epsilon", target_epsilon), ("delta", delta), (name, value)):
    if np.ndim(v) != 0:
      raise ValueError(f"{n} must be a scalar with a sampler; found shape {np.shape(v)}.")
  nx.check_array("target_epsilon", target_epsilon, low=0.0)
  nx.check_array(name, value, **value_check)
  nx.check_array("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)


def calibrate_sigma(sampler, target_epsilon, delta, steps, accountant="rdp", rtol=1e-6):
  """Smallest σ (within ``rtol``) whose sampler ε is <= ``target_epsilon``.

  Bisection in log σ over [1e-3, 1e4] on :func:`epsilon` (ε decreases in σ);
  the answer is the upper end of the final bracket, so it always meets the
  target by the same function a user would check it with.  Scalars only.

  Returns:
    σ as a NumPy float64; ``inf`` when even σ = 1e4 does not meet the target.
  """
  _check_budget(target_epsilon, delta, "steps", steps, dict(low=0.0, integer=True))
  nx.check_array("rtol", rtol, low=0.0, low_open=True, high=0.1)
  if steps == 0:
    return np.float64(0.0)

  def eps(s):
    return float(epsilon(sampler, s, steps, delta, accountant))

  lo, hi = math.log(1e-3), math.log(1e4)
  if eps(math.exp(hi)) > target_epsilon:
    return np.float64(np.inf)
  if eps(math.exp(lo)) <= target_epsilon:
    return np.float64(math.exp(lo))
  while hi - lo > rtol / 2:
    mid = 0.5 * (lo + hi)
    if eps(math.exp(mid)) <= target_epsilon:
      hi = mid
    else:
      lo = mid
  return np.float64(math.exp(hi))


def calibrate_steps(sampler, target_epsilon, delta, sigma, accountant="rdp",
                    max_steps=2 ** 40):
  """Largest number of training steps whose sampler ε is <= ``target_epsilon``.

  ε is non-decreasing in the steps, so a galloping search followed by an
  integer bisection on :func:`epsilon` finds the boundary exactly (the
  answer is checked by the same function a user would use).  Scalars only.

  Returns:
    T as a NumPy float64 whole number; ``inf`` when even ``max_steps`` fits.
  """
  _check_budget(target_epsilon, delta, "sigma", sigma, dict(low=0.0, low_open=True))

  def fits(t):
    return float(epsilon(sampler, sigma, t, delta, accountant)) <= target_epsilon

  if not fits(1):
    return np.float64(0.0)
  lo, hi = 1, 2
  while fits(hi):  # invariant: fits(lo), and hi > lo is the next candidate
    if hi >= max_steps:
      return np.float64(np.inf)
    lo, hi = hi, hi * 2
  while hi - lo > 1:
    mid = (lo + hi) // 2
    lo, hi = (mid, hi) if fits(mid) else (lo, mid)
  return np.float64(lo)
