"""What the accountants need to know about one kind of event: :class:`Entry`.

Each mechanism module (:mod:`jaxdp._src.mechanisms.sampled` for the Gaussian
family and the samplers' events, :mod:`~jaxdp._src.mechanisms.continuous`,
:mod:`~jaxdp._src.mechanisms.discrete`) ends with an ``ENTRIES`` dict that
maps its event classes to an :class:`Entry`; :mod:`jaxdp._src.mechanisms.registry`
merges them and is the one place every accountant asks. Adding a mechanism is
one module with its formulas and its ``ENTRIES``, plus its name in the
registry's list of modules (and its event class in :mod:`jaxdp.events`).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional

import jax.numpy as jnp
import numpy as np

from jaxdp._src.core import numerics as nx

__all__ = ["Entry", "column", "field", "scalars"]


class Entry(NamedTuple):
  """Everything known about one event class; ``None`` where it has none.

  Attributes:
    rdp: ``rdp(event, orders, dtype) -> array`` of shape
      ``event_shape + (len(orders),)``: an upper bound on the event's RDP
      ε(α) at every order, pure and jittable in the event's leaves.
    pairs: ``pairs(event) -> list[Mechanism]``: one-step dominating pairs
      (:class:`jaxdp.pairs.Mechanism`, remove and add directions) whose
      composed answers are maxed over (usually one), for a concrete event.
    dominating: ``dominating(event) -> Mechanism``: one pair dominating all of
      ``pairs`` (needed only where ``pairs`` may return several).
    pure_epsilon: ``pure_epsilon(event, dtype) -> array``: a pure-DP ε of the
      event (before the registry's outward rounding); None means +inf.
    rho: ``rho(event, dtype) -> array``: its zCDP ρ, where it has one.
    fast_pld: ``fast_pld(event) -> (q, sigma) | None``: the parameters under
      which the batched FFT PLD kernel (Poisson-sampled Gaussian, add/remove)
      composes it exactly, or None.
  """
  rdp: Optional[Callable[..., Any]] = None
  pairs: Optional[Callable[..., Any]] = None
  dominating: Optional[Callable[..., Any]] = None
  pure_epsilon: Optional[Callable[..., Any]] = None
  rho: Optional[Callable[..., Any]] = None
  fast_pld: Optional[Callable[..., Any]] = None


def column(x, dtype):
  """``x`` in ``dtype`` with a trailing axis for the orders."""
  return jnp.asarray(x, dtype)[..., None]


def field(x, dtype):
  """An event field in ``dtype``; an omitted (None) sensitivity is 1."""
  return jnp.asarray(1.0 if x is None else x, dtype)


def scalars(event, *names):
  """The named fields of a concrete, unbatched event as Python floats (an
  omitted sensitivity is 1.0), for the host-side dominating pairs.

  Raises:
    ValueError: for a traced or batched field.
  """
  out = []
  for name in names:
    value = getattr(event, name)
    if value is None:
      out.append(1.0)  # an omitted sensitivity
      continue
    if not nx.is_concrete(value):
      raise ValueError(f"{type(event).__name__}.{name} must be concrete for its dominating "
                       f"pairs (host-side); found a tracer.")
    arr = np.asarray(value, np.float64)
    if arr.size != 1:
      raise ValueError(f"{type(event).__name__}.{name} must be a scalar for its dominating "
                       f"pairs (one event at a time); found shape {arr.shape}.")
    out.append(float(arr.reshape(())))
  return out
