"""Top-level DP-SGD entry points: ``jaxdp.epsilon`` and ``jaxdp.delta``.

The front door: a sampler from :mod:`jaxdp.sampling` goes to its own
accounting (:mod:`jaxdp._src.accounting.sampler_forward`), a sampling rate to
:mod:`jaxdp._src.accounting.rate`. Host-level: arguments are validated
eagerly, the computation runs in float64 (scoped, the user's
``jax_enable_x64`` is left alone) over chunks of a fixed size, so arbitrarily
large grids compile once and fit in memory.
"""

from __future__ import annotations

from jaxdp._src.accounting import rate
from jaxdp._src.events import is_sampler


def epsilon(q, sigma, steps, delta, *, accountant: str = "rdp", orders=None,
            method: str = "improved"):
  """ε of DP-SGD: ``steps`` compositions of the Poisson-sampled Gaussian.

  Broadcasts over all of ``q``, ``sigma``, ``steps`` and ``delta`` (e.g. a
  100×100 grid of (q, σ) in one call) and returns float64 NumPy values that
  upper-bound the true ε.

  With RDP and an explicit ``orders`` list the result is the minimum over
  those orders of the converted ε(α) (:func:`jaxdp.rdp.dpsgd_epsilon`); for
  large order sets only the orders that can still attain the minimum are
  evaluated (convexity bounds, see ``jaxdp._src.kernels.order_search``), with the same
  value. With ``orders=None`` (default) it is the minimum over all real
  α > 1: the grid minimum over :data:`jaxdp.rdp.DEFAULT_ORDERS`, refined by
  a golden-section search between the best order's grid neighbours
  (``jaxdp._src.kernels.continuous_order``), never above the grid value.

  Args:
    q: sampling rate(s) in [0, 1] (Poisson sampling), or a sampler from
      :mod:`jaxdp.sampling` (then ``steps`` counts training steps and the
      sampler's own event is accounted; see ``jaxdp._src.accounting.sampler_forward``).
    sigma: noise multiplier(s) > 0.
    steps: number(s) of steps, whole numbers ≥ 0.
    delta: target δ in (0, 1).
    accountant: "rdp" (Mironov–Talwar–Zhang RDP, then the improved
      conversion) or "pld" (tight, privacy-loss distributions; see
      :mod:`jaxdp.pld`).  The PLD answer passes the runtime guards of
      :mod:`jaxdp._src.kernels.guards` (ε_T >= exact one-step ε, ordered interval) and
      is the best certified upper bound: the kernel's, the general PLD
      engine's where the kernel's interval is +∞ or over 10% wide (up to 4
      configurations per call, seconds each) and the RDP bound, whichever
      is smallest (:mod:`jaxdp._src.pld.fallback`); the same number as
      :func:`jaxdp.pld.epsilon` and ``jaxdp.accountant.pld()``. The default stays
      "rdp": its kernels are jittable, broadcast over whole grids and cost
      microseconds per configuration once compiled, while the PLD is a
      host-level computation whose first call compiles several programs.
      Ask for "pld" for the tightest single answer.
    orders: RDP orders (default None: every real α > 1); RDP only.
    method: RDP→(ε,δ) conversion, "improved" or "classic"; RDP only.

  Returns:
    ε as ``numpy.float64`` (scalar inputs) or ``numpy.ndarray``.

  Raises:
    ValueError: on an argument outside its domain (named, with its value).
  """
  if is_sampler(q):
    from jaxdp._src.accounting import sampler_forward  # pylint: disable=g-import-not-at-top
    return sampler_forward.epsilon(q, sigma, steps, delta, accountant, orders)
  return rate.epsilon(q, sigma, steps, delta, accountant=accountant, orders=orders,
                      method=method)


def delta(q, sigma, steps, epsilon, *, accountant: str = "rdp", orders=None):
  """δ of DP-SGD at ``epsilon`` (see :func:`epsilon` for the arguments).

  Returns:
    δ ∈ (0, 1] upper-bounding the true δ, float64 NumPy.
  """
  if is_sampler(q):
    from jaxdp._src.accounting import sampler_forward  # pylint: disable=g-import-not-at-top
    return sampler_forward.delta(q, sigma, steps, epsilon, accountant, orders)
  return rate.delta(q, sigma, steps, epsilon, accountant=accountant, orders=orders)
