"""Runtime soundness guards for the tight (PLD) answers.

Every tight answer is checked against facts that do not depend on the PLD
machinery, so that a bug of the kind that once under-reported ε by orders of
magnitude at small σ cannot reach a user silently:

* the certified interval is ordered: lower <= upper;
* composition never lowers the privacy loss, so for T >= 1 steps
  ε_T(δ) >= ε_1(δ) and δ_T(ε) >= δ_1(ε), where the one-step values are the
  exact closed form :func:`jaxdp.profiles.sampled_gaussian` (Balle, Barthe &
  Gaboardi 2018, Thm 8 with the Gaussian profile of Balle & Wang 2018);
* the caller also returns min(tight, RDP): both are upper bounds.

A violated guard is a bug.  By default the safe value (the RDP bound, which
never goes through the PLD code) is returned with a :class:`GuardWarning`;
with the environment variable ``JAXDP_STRICT_GUARDS=1`` (set by the test
suite) a :class:`GuardViolation` is raised instead.
"""

from __future__ import annotations

import functools
import os
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import profiles as _profiles

__all__ = ["GuardViolation", "GuardWarning", "one_step_epsilon", "one_step_delta", "check"]

_REL = 1e-9      # relative tolerance of the comparisons (round-off of either side)
_EPS_MAX = 1e8   # bisection range for the one-step ε (far above any finite answer)


class GuardViolation(AssertionError):
  """A tight answer contradicted an independent bound (a jaxdp bug)."""


class GuardWarning(RuntimeWarning):
  """A tight answer contradicted an independent bound; the safe value was used."""


def strict() -> bool:
  return os.environ.get("JAXDP_STRICT_GUARDS", "") not in ("", "0")


@functools.partial(jax.jit, static_argnames=("iters",))
def _bisect_one_step(q, sigma, log_delta, iters=110):
  """Largest ε in [0, _EPS_MAX] with log δ_1(ε) > log_delta (bisection).

  δ_1 is non-increasing in ε, so the bracket [lo, hi] keeps
  δ_1(lo) > δ >= δ_1(hi); 110 halvings of 1e8 reach below 1e-24.
  """
  def f(e):
    return _profiles._sampled_gaussian_core(e, q, sigma, "max")  # pylint: disable=protected-access

  lo = jnp.zeros_like(q)
  hi = jnp.full_like(q, _EPS_MAX)

  def body(_, lh):
    lo, hi = lh
    mid = 0.5 * (lo + hi)
    above = f(mid) > log_delta
    return jnp.where(above, mid, lo), jnp.where(above, hi, mid)

  lo, hi = jax.lax.fori_loop(0, iters, body, (lo, hi))
  return jnp.where(f(jnp.zeros_like(q)) > log_delta, lo, 0.0)


def one_step_epsilon(q, sigma, delta):
  """Exact ε_1(δ) of one Poisson-sampled Gaussian step (float64 NumPy), as a
  lower bound: deflated by a relative 1e-9 for the profile's rounding up.

  Args:
    q, sigma, delta: broadcastable host arrays (q in [0, 1], σ > 0, δ in (0, 1)).
  Returns:
    ε_1 <= the exact one-step ε (0 where δ_1(0) <= δ).
  """
  q, sigma, delta = np.broadcast_arrays(*(np.asarray(a, np.float64) for a in (q, sigma, delta)))
  shape = q.shape
  args = _padded(q, sigma, np.log(delta))
  with jax.enable_x64(True):
    e = np.asarray(_bisect_one_step(*(jnp.asarray(a) for a in args)))
  return (e[:q.size] * (1.0 - _REL)).reshape(shape)


def one_step_delta(q, sigma, epsilon):
  """Exact δ_1(ε) of one step (closed form), deflated by a relative 1e-6 for
  the profile's rounding up, as a lower bound (float64 NumPy)."""
  q, sigma, epsilon = np.broadcast_arrays(*(np.asarray(a, np.float64) for a in (q, sigma, epsilon)))
  shape = q.shape
  qq, ss, ee = _padded(q, sigma, epsilon)
  with jax.enable_x64(True):
    d = np.asarray(_profiles._sampled_gaussian_core(  # pylint: disable=protected-access
        jnp.asarray(ee), jnp.asarray(qq), jnp.asarray(ss), "max"))
  return (np.exp(d[:q.size]) * (1.0 - 1e-6)).reshape(shape)


def _padded(*arrays):
  """Flattens and pads to a power-of-two length >= 64 (few compiled shapes:
  one for every batch of up to 64, e.g. all the rounds of a calibration)."""
  n = arrays[0].size
  m = 1 << max(6, (max(n, 1) - 1).bit_length())
  fills = (0.5, 1.0, 0.0)
  return [np.concatenate([a.ravel(), np.full(m - n, f)]) for a, f in zip(arrays, fills)]


def _violation(msg):
  """A failed guard: raise in strict mode, else warn (the caller then
  substitutes its safe value)."""
  if strict():
    raise GuardViolation(msg)
  warnings.warn(msg, GuardWarning, stacklevel=4)


def check(name, lower, upper, one_step, composed, safe, certified_upper=None):
  """Applies the guards to tight bounds and returns the sound ``(lower, upper)``.

  Args:
    name: what is checked ("epsilon" or "delta"), for messages.
    lower, upper: the certified interval from the PLD (NumPy arrays).
    one_step: the exact one-step value (a lower bound on the composed one).
    composed: boolean mask, True where T >= 1 (the one-step bound applies).
    safe: callable(mask) -> safe upper values (the RDP bound) at ``mask``.
    certified_upper: optional independent upper bound (the RDP value) that
      the lower bound must not exceed.

  Returns:
    ``(lower, upper)`` with lower raised to the one-step bound (it is a
    certified lower bound too) and, where a guard failed, upper replaced by
    the safe value.

  Raises:
    GuardViolation: in strict mode, when a guard fails.
  """
  lower = np.asarray(lower, np.float64).copy()
  upper = np.asarray(upper, np.float64).copy()
  tol = _REL * np.maximum(np.abs(upper), 1e-300) + 1e-300
  below_one_step = composed & (upper < one_step - tol)
  unordered = lower > upper + tol + _REL * np.abs(lower)
  bad = below_one_step | unordered | np.isnan(upper)
  if certified_upper is not None:
    cu = np.asarray(certified_upper, np.float64)
    above = lower > cu + _REL * np.abs(cu) + 1e-300
    if np.any(above):
      i = int(np.flatnonzero(above)[0])
      msg = (f"tight {name}: the certified lower bound exceeds the RDP upper bound at flat "
             f"index {i}: lower={lower.flat[i]!r}, RDP={cu.flat[i]!r} ({int(above.sum())} "
             f"entries). This is a jaxdp bug; the lower bound falls back to the one-step value.")
      _violation(msg)
      lower = np.where(above, np.where(composed, one_step, 0.0), lower)
      bad = bad | above
  if np.any(bad):
    i = int(np.flatnonzero(bad)[0])
    msg = (f"tight {name} failed a soundness guard at flat index {i}: lower={lower.flat[i]!r}, "
           f"upper={upper.flat[i]!r}, one-step exact={one_step.flat[i]!r} "
           f"({int(bad.sum())} entries). This is a jaxdp bug; the RDP bound is returned instead.")
    _violation(msg)
    upper[bad] = safe(bad)
  lower = np.where(composed, np.maximum(lower, one_step), lower)
  lower = np.minimum(lower, upper)
  return lower, upper
