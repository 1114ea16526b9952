"""The DP-SGD privacy profile behind :func:`jaxdp.tradeoff.tradeoff`: its ε
grid and the PLD bounds on it, with the last few small profiles kept.

:func:`jaxdp.tradeoff.gdp_mu` fits a μ to the curve that
:func:`jaxdp.tradeoff.tradeoff` reports, and a report asks both for one
configuration (docs/attack_risk.md); both need the same PLD profile, which
takes most of either call. :func:`profile` keeps the last ``_MEMO_SIZE``
profiles of at most ``_MEMO_ROWS`` configurations, keyed by the exact bits of
every input that decides them, so a repeated question reads the very arrays
the first one computed (bit for bit the same answer, nothing recomputed).
Split out of :mod:`jaxdp._src.accounting.tradeoff` (``epsilon_grid`` moves
unchanged).
"""

from __future__ import annotations

import collections
import threading

import numpy as np

from jaxdp._src.core import numerics as num

__all__ = ["epsilon_grid", "profile", "DEFAULT_NUM_EPS", "GRID_DELTA", "GRID_EPS_RANGE"]

#: Number of ε grid points of :func:`jaxdp.tradeoff.tradeoff` (uniform in ε).
DEFAULT_NUM_EPS = 256
#: δ at which :func:`epsilon_grid` ends its grid (RDP ε at this δ).
GRID_DELTA = 1e-12
#: ε grid end is clipped into this range.
GRID_EPS_RANGE = (1e-3, 60.0)

_MEMO_ROWS = 64   # profiles of at most this many configurations are kept ...
_MEMO_SIZE = 4    # ... the last this many (64 × 256 × 3 float64: 0.4 MB each at most)
_memo = collections.OrderedDict()
_memo_lock = threading.Lock()


@num.host_function
def epsilon_grid(q, sigma, steps, *, num_eps=DEFAULT_NUM_EPS, grid_delta=GRID_DELTA):
  """The ε grid :func:`tradeoff` samples the DP-SGD profile on.

  Uniform on [0, ε_end] with ``num_eps`` points, where ε_end is the RDP ε of
  the run at δ = ``grid_delta`` (:func:`jaxdp.epsilon`: an upper bound on the
  exact ε, and cheap), clipped into ``GRID_EPS_RANGE``.  The line of f_δ that
  matters at FPR α has ε near the (1 - α)-quantile of the privacy loss under
  the second distribution; with ``grid_delta = 1e-12`` the grid reaches every
  ε whose line matters for FPRs down to about 1e-10 (below that the curves
  stay certified but widen).  The uniform spacing makes the error of both
  curves second order in ε_end/num_eps: measured upper - lower <= ~4e-4
  absolute in TPR on DP-SGD runs at the defaults (~1e-5 at FPR 1e-3), of
  which the PLD's own interval width is a large part.  Any grid gives certified curves; this one
  only controls their tightness.

  Args:
    q, sigma, steps: DP-SGD configuration (broadcast together, shape S).
    num_eps: number of grid points (>= 2).
    grid_delta: δ in (0, 1) whose ε ends the grid.

  Returns:
    Array of shape S + (num_eps,).
  """
  from jaxdp._src.accounting import rate  # pylint: disable=g-import-not-at-top
  num.check_array("num_eps", num_eps, low=2.0, integer=True)
  num.check_array("grid_delta", grid_delta, low=0.0, high=1.0, low_open=True, high_open=True)
  num.check_array("q", q, low=0.0, high=1.0)
  num.check_array("sigma", sigma, low=0.0, low_open=True)
  num.check_array("steps", steps, low=0.0, integer=True)
  shape = num.check_same_shape(q=q, sigma=sigma, steps=steps)
  q, sigma, steps = (np.broadcast_to(np.asarray(a, np.float64), shape) for a in (q, sigma, steps))
  end = np.asarray(rate.epsilon(q, sigma, steps, grid_delta), np.float64)
  end = np.clip(np.nan_to_num(end, nan=GRID_EPS_RANGE[1], posinf=GRID_EPS_RANGE[1]),
                *GRID_EPS_RANGE)
  t = np.linspace(0.0, 1.0, int(num_eps))
  return end[..., None] * t


def profile(q, sigma, steps, num_eps, rtol, upper_only=False):
  """``(grid, upper, lower)``: the DP-SGD profile's certified bounds on its ε grid.

  Args:
    q, sigma, steps: flat (B,) float64 configurations (validated).
    num_eps: ε grid points (:func:`epsilon_grid`).
    rtol: the PLD grid's accuracy (:func:`jaxdp.pld.delta`).
    upper_only: the PLD kernel's upper end alone (calibrate_sigma's rounds;
      float64 scope): at least the upper bound of the full evaluation, which
      is min(that end, the general engine's where wide, RDP); ``lower`` None.
      Not kept.

  Returns:
    (B, num_eps) arrays ``grid``, ``upper`` and ``lower`` (None with
    ``upper_only``). Kept profiles are shared: read-only.
  """
  from jaxdp._src.kernels import guards  # pylint: disable=g-import-not-at-top
  from jaxdp._src.pld import kernel as pld  # pylint: disable=g-import-not-at-top
  keep = not upper_only and q.size <= _MEMO_ROWS
  if keep:
    # Everything that decides the profile: the configurations' bits, the grid
    # size, the accuracy, and whether a violated guard raises (strict) or
    # answers its safe value.
    key = (q.tobytes(), sigma.tobytes(), steps.tobytes(), int(num_eps),
           np.asarray(rtol, np.float64).tobytes(), np.shape(rtol), guards.strict())
    with _memo_lock:
      hit = _memo.get(key)
      if hit is not None:
        _memo.move_to_end(key)
        return hit
  grid = np.asarray(epsilon_grid(q, sigma, steps, num_eps=num_eps), np.float64)
  if upper_only:
    _, up, _ = pld.guarded_bounds("delta", q[:, None], sigma[:, None], steps[:, None], grid,
                                  rtol=rtol, full_rdp=False, want_lower=False)
    return grid, np.asarray(up, np.float64), None
  lo, up = pld.delta(q[:, None], sigma[:, None], steps[:, None], grid, rtol=rtol,
                     return_bounds=True)
  out = tuple(np.array(a, np.float64) for a in (grid, up, lo))
  if keep:
    for a in out:
      a.setflags(write=False)
    with _memo_lock:
      _memo[key] = out
      while len(_memo) > _MEMO_SIZE:
        _memo.popitem(last=False)
  return out


def clear_memo():
  """Forgets the kept profiles (tests start from an empty memo)."""
  with _memo_lock:
    _memo.clear()
