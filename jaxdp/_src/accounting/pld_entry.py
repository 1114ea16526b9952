"""``jaxdp.pld.epsilon`` and ``jaxdp.pld.delta``: a rate or a sampler.

A sampling rate goes to the batched kernel (:mod:`jaxdp._src.pld.kernel`); a
:mod:`jaxdp.sampling` sampler to its own tight path
(:func:`jaxdp._src.accounting.sampler_forward.pld_entry`), so the interval a
user reads is the one of the batches their steps consumed. The docstrings are
the kernel's.
"""

from __future__ import annotations

import functools

from jaxdp._src.accounting import sampler_forward as _sampler_forward
from jaxdp._src.core import numerics as nx
from jaxdp._src.events import is_sampler
from jaxdp._src.pld import kernel as _kernel

__all__ = ["epsilon", "delta"]


def _answer(kind, q, sigma, steps, value, vdi, rtol, return_bounds):
  """A sampler's own tight path, or the batched kernel for a rate."""
  if is_sampler(q):
    return _sampler_forward.pld_entry(kind, q, sigma, steps, value, vdi, rtol, return_bounds)
  fn = _kernel.epsilon if kind == "epsilon" else _kernel.delta
  return fn(q, sigma, steps, value, value_discretization_interval=vdi, rtol=rtol,
            return_bounds=return_bounds)


@functools.wraps(_kernel.delta)
@nx.host_function
def delta(q, sigma, steps, epsilon, *, value_discretization_interval=None, rtol=1e-3,
          return_bounds=False):
  return _answer("delta", q, sigma, steps, epsilon, value_discretization_interval, rtol,
                 return_bounds)


@functools.wraps(_kernel.epsilon)
@nx.host_function
def epsilon(q, sigma, steps, delta, *, value_discretization_interval=None, rtol=1e-3,
            return_bounds=False):
  return _answer("epsilon", q, sigma, steps, delta, value_discretization_interval, rtol,
                 return_bounds)
