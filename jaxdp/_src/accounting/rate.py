"""ε and δ of DP-SGD at a sampling rate q (Poisson sampling, add/remove).

The numeric-rate path of ``jaxdp.epsilon``/``jaxdp.delta`` (the front door in
:mod:`jaxdp._src.interfaces.api` sends samplers to
:mod:`jaxdp._src.accounting.sampler_forward`): RDP by the chunked driver
(:mod:`jaxdp._src.kernels.rdp_driver`), PLD by the best certified answer
(:func:`jaxdp._src.pld.kernel.guarded_bounds`), and :func:`tight_one`, one
tight question with nothing to compile.
"""

from __future__ import annotations

import numpy as np

from jaxdp._src.core import numerics as nx
from jaxdp._src.kernels.rdp_driver import run_chunked, validate_rate_inputs, validate_orders


def epsilon(q, sigma, steps, delta, *, accountant: str = "rdp", orders=None,
            method: str = "improved"):
  """:func:`jaxdp.epsilon` for a sampling rate ``q`` (see it for the
  arguments); float64 NumPy."""
  validate_rate_inputs(q, sigma, steps)
  nx.check_array("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
  nx.check_same_shape(q=q, sigma=sigma, steps=steps, delta=delta)
  if accountant == "pld":
    from jaxdp._src.pld import kernel as pld
    # The best certified answer (jaxdp._src.pld.fallback): the kernel's upper
    # bound, guarded (jaxdp._src.kernels.guards), intersected with the general engine's
    # where the kernel's interval is +∞ or wide, and never above the RDP
    # bound; the very number jaxdp.pld.epsilon and accountant.pld() return.
    with nx.x64():
      _, eps, _ = pld.guarded_bounds("epsilon", q, sigma, steps, delta, best=True,
                                     rdp_value=False)
    return nx.to_host(eps)
  if accountant != "rdp":
    raise ValueError(f"accountant must be 'rdp' or 'pld'; found {accountant!r}.")
  if method not in ("improved", "classic"):
    raise ValueError(f"method must be 'improved' or 'classic'; found {method!r}.")
  orders = validate_orders(orders)
  with nx.x64():
    return nx.to_host(run_chunked("epsilon", q, sigma, steps, delta, orders, method))


def delta(q, sigma, steps, epsilon, *, accountant: str = "rdp", orders=None):
  """:func:`jaxdp.delta` for a sampling rate ``q`` (see :func:`jaxdp.epsilon`
  for the arguments); float64 NumPy."""
  validate_rate_inputs(q, sigma, steps)
  nx.check_array("epsilon", epsilon, low=0.0)
  nx.check_same_shape(q=q, sigma=sigma, steps=steps, epsilon=epsilon)
  if accountant == "pld":
    from jaxdp._src.pld import kernel as pld
    with nx.x64():   # the best certified answer, as for epsilon above
      _, tight, _ = pld.guarded_bounds("delta", q, sigma, steps, epsilon, best=True)
    return nx.to_host(tight)
  if accountant != "rdp":
    raise ValueError(f"accountant must be 'rdp' or 'pld'; found {accountant!r}.")
  orders = validate_orders(orders)
  with nx.x64():
    return nx.to_host(run_chunked("delta", q, sigma, steps, epsilon, orders, "improved"))


# tight_one's general-engine interval is widened by the batched path's best
# answer where it is +∞ or wider than this fraction (the issue-35 width goal;
# the batched path costs seconds of compilation in a fresh process).
_CLI_WIDE = 0.01


def tight_one(name, q, sigma, steps, value, *, rtol=1e-3):
  """The tight (PLD) answer to one question, with nothing to compile.

  One Poisson-sampled Gaussian configuration (add/remove), composed ``steps``
  times, by the general PLD engine (:mod:`jaxdp.pld_general`: NumPy/SciPy
  FFTs, certified pessimistic/optimistic interval, its own runtime guards),
  and the RDP bound beside it (the host path of :func:`epsilon`). This is
  what the ``jaxdp`` command answers: a fresh process would otherwise spend
  seconds compiling the batched kernel (:mod:`jaxdp.pld`) for one
  configuration. Both engines are certified; their intervals overlap (tested).
  Where the general engine cannot answer (a grid beyond its memory budget,
  e.g. σ = 1e-4) the answer is the batched path's, exactly what
  :func:`epsilon` / :func:`delta` with ``accountant="pld"`` report
  (:func:`_kernel_one`), never an error about an internal grid; where its
  interval is +∞ or over 1% wide (:data:`_CLI_WIDE`; e.g. 8.6% at q = 1e-3,
  σ = 1, T = 10⁵, δ = 1e-12) it is intersected with that answer's.

  Args:
    name: "epsilon" (``value`` is δ) or "delta" (``value`` is ε).
    q, sigma, steps, value: scalars, validated as in :func:`epsilon`.
    rtol: target relative accuracy of the PLD grid.

  Returns:
    ``(lower, upper, rdp_upper)`` floats: the certified PLD interval (after
    the guards :func:`jaxdp._src.kernels.guards.check`, which also hold it below the RDP
    bound) and the RDP upper bound. The answer to report is
    ``min(upper, rdp_upper)``: both are upper bounds.
  """
  from jaxdp._src.kernels import guards as _guards  # pylint: disable=g-import-not-at-top
  from jaxdp._src.pld import general as pld_general  # pylint: disable=g-import-not-at-top
  from jaxdp._src.mechanisms.registry import poisson_phases  # pylint: disable=g-import-not-at-top
  validate_rate_inputs(q, sigma, steps)
  if name == "epsilon":
    nx.check_array("delta", value, low=0.0, high=1.0, low_open=True, high_open=True)
  else:
    nx.check_array("epsilon", value, low=0.0)
  q, sigma, steps, value = (float(np.asarray(a, np.float64)) for a in (q, sigma, steps, value))
  with nx.x64():
    rdp_up = float(run_chunked(name, q, sigma, steps, value, None, "improved"))
  if q == 0.0 or steps == 0.0:
    return 0.0, 0.0, rdp_up
  phases = poisson_phases(q, sigma, steps)
  fn = pld_general.epsilon if name == "epsilon" else pld_general.delta
  try:
    lo, up = fn(phases, value, rtol=rtol, return_bounds=True)
  except pld_general.GridTooLarge:
    return _kernel_one(name, q, sigma, steps, value)
  from jaxdp._src.pld import fallback as _pld_fallback  # pylint: disable=g-import-not-at-top
  wide, _ = _pld_fallback._wide(name, np.atleast_1d(lo), np.atleast_1d(up),  # pylint: disable=protected-access
                                np.atleast_1d(value), threshold=_CLI_WIDE)
  if wide[0]:   # +∞ or wide: the batched path's best answer, intersected with this one
    k_lo, k_up, rdp_up = _kernel_one(name, q, sigma, steps, value)
    b_lo, b_up = _pld_fallback.combine(k_lo, k_up, float(np.ravel(lo)[0]),
                                       float(np.ravel(up)[0]))
    return float(b_lo), float(b_up), rdp_up
  # One-step consistency was checked by pld_general's own guard (for ε as
  # δ_1(ε_upper) <= δ); the one-step δ raises the lower bound for δ.
  one = (pld_general.one_step_delta(phases, value) if name == "delta" else None)
  one = np.zeros(1) if one is None else np.atleast_1d(one) * (1.0 - 1e-6)
  lo, up = _guards.check(name, np.atleast_1d(lo), np.atleast_1d(up), one, np.ones(1, bool),
                         lambda mask: np.full(int(mask.sum()), rdp_up), certified_upper=rdp_up)
  return float(lo[0]), float(up[0]), rdp_up


def _kernel_one(name, q, sigma, steps, value):
  """:func:`tight_one` where the general engine cannot answer (its grid would
  exceed the memory budget, e.g. σ = 1e-4) or answers +∞ or wide: the best
  certified interval of the batched path (``pld.guarded_bounds(best=True)``,
  its upper end already capped by RDP) and the RDP bound, the very numbers
  :func:`epsilon` / :func:`delta` with ``accountant="pld"`` report, at the
  price of compiling the kernel (seconds, once per process)."""
  from jaxdp._src.pld import kernel as pld  # pylint: disable=g-import-not-at-top
  with nx.x64():
    lo, up, rdp_up = pld.guarded_bounds(name, q, sigma, steps, value, best=True)
  return float(lo), float(up), float(rdp_up)
