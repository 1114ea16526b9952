"""The PLD accountant's read-out of balls-in-bins epochs (issue 38).

:func:`bounds` gives ``jaxdp.accountant.pld()`` the certified
random-allocation interval of :mod:`jaxdp._src.accounting.allocation_forward`
for a state made of epochs of one balls-in-bins configuration, capped by the
sampler's RDP answer, as ``jaxdp.epsilon(sampler, ..., accountant="pld")``.
"""

from __future__ import annotations

import numpy as np

from jaxdp._src import events as _events
from jaxdp._src.accounting import allocation_forward as _allocation_forward
from jaxdp._src.accounting import sampler_forward as _sampler_forward


def bounds(phases, values, want_epsilon, vdi, same):
  """(lower, upper) for a state made of balls-in-bins epochs of one
  configuration (``events.BallsInBinsGaussian``, count = epochs), or None when
  the state holds other events: the PLD accountant's read-out
  (:mod:`jaxdp._src.accounting.pld_accountant`; ``same(a, b)`` its event
  equality).

  The certified random-allocation interval of :mod:`jaxdp._src.accounting.allocation_forward`
  (issue 38), the same function as ``jaxdp.pld.epsilon(sampling.balls_in_bins(N, B,
  capacity), σ, epochs·k, …)`` with k = N // B: one configuration's epochs
  compose as a whole run (capacity by the bins coupling), its upper end capped
  by the sampler's RDP answer as there. Epochs of different
  configurations, or mixed with other events, have no PLD here yet and raise.
  """
  if not phases or not any(isinstance(ev, _events.BallsInBinsGaussian) for ev, _ in phases):
    return None
  first = phases[0][0]
  if not all(same(ev, first) for ev, _ in phases):
    raise ValueError(
        "the PLD accountant composes balls-in-bins epochs of one configuration only (found "
        f"{[ev for ev, _ in phases]}); use jaxdp.accountant.rdp() for mixed runs.")
  from jaxdp._src.samplers import sampling as _sampling  # pylint: disable=g-import-not-at-top
  n, b = int(first.dataset_size), int(first.batch_size)
  cap = n if first.capacity is None else int(first.capacity)
  sampler = _sampling.balls_in_bins(n, b, cap)
  epochs = sum(c for _, c in phases)
  steps = np.full(values.shape, float(epochs * sampler.steps_per_epoch))
  sigma = np.full(values.shape, float(first.sigma))
  kind = "epsilon" if want_epsilon else "delta"
  lo, up = _allocation_forward.pld_bounds(kind, sampler, sigma, steps, values,
                                          value_discretization_interval=vdi)
  # As jaxdp.epsilon(sampler, ..., accountant="pld") answers: the upper end
  # capped by the sampler's RDP answer (both certified; RDP where the PLD
  # interval is (0, ∞), e.g. an overflow term above δ).
  rdp_up = _sampler_forward.sampler_answer(kind, sampler, sigma, steps, values, "rdp", None)
  from jaxdp._src.pld import fallback as _pld_fallback  # pylint: disable=g-import-not-at-top
  return _pld_fallback.combine(lo, up, None, rdp_up)
