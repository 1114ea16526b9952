"""DP-SGD as an optax gradient transformation with in-loop privacy accounting.

:func:`dp_aggregate` turns *per-example* gradients into a privatised average
gradient (clip, sum, add Gaussian noise, normalise) and composes one
Poisson-sampled Gaussian event per update into an accountant state carried in
the optimizer state, next to the PRNG key::

    tx = optax.chain(
        jaxdp.optax.dp_aggregate(l2_clip=1.0, sigma=1.1, sampling_rate=256/60000,
                                 seed=0, expected_batch_size=256),
        optax.adam(1e-3))
    opt_state = tx.init(params)
    # per_example_grads: every leaf has a leading batch axis
    updates, opt_state = tx.update(per_example_grads, opt_state, params)
    eps = jaxdp.optax.epsilon(opt_state, delta=1e-5)

The accounting is exact bookkeeping of the mechanism actually run only if the
batches really are Poisson samples with rate ``sampling_rate`` (each example
included independently); that is the caller's data pipeline's job.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional, Tuple

import jax
import jax.numpy as jnp
import optax as _optax

from jaxdp import _numerics
from jaxdp import accountant as _accountant
from jaxdp import events as _events

__all__ = [
    "DpAggregateState",
    "dp_aggregate",
    "epsilon",
    "delta",
    "budget_exhausted",
    "find_state",
]


class DpAggregateState(NamedTuple):
  """State of :func:`dp_aggregate`.

  Attributes:
    key: PRNG key for the noise.
    accountant_state: the accountant's state (e.g.
      :class:`jaxdp.accountant.RdpState`), or ``()`` with accounting off.
    steps: number of updates applied (int32).
    exhausted: bool; True once one more update would take ε above the
      budget (always False without a budget).
  """
  key: jax.Array
  accountant_state: Any
  steps: jax.Array
  exhausted: jax.Array


def _global_norms(updates) -> jax.Array:
  """Per-example global L2 norm over all leaves (leading batch axis)."""
  leaves = jax.tree_util.tree_leaves(updates)
  sq = [jnp.sum(jnp.square(x).reshape(x.shape[0], -1), axis=1) for x in leaves]
  return jnp.sqrt(sum(sq))


def dp_aggregate(
    l2_clip: float,
    sigma: float,
    sampling_rate: Optional[float] = None,
    seed: int = 0,
    accountant: Optional[_accountant.Accountant] = None,
    budget: Optional[Tuple[float, float]] = None,
    expected_batch_size: Optional[float] = None,
    accounting: bool = True,
    sampler: Any = None,
) -> _optax.GradientTransformationExtraArgs:
  """DP-SGD aggregation of per-example gradients with in-state accounting.

  Each update (Abadi et al. 2016, Alg. 1):

  1. clips every example's gradient to global L2 norm ``l2_clip`` = C
     (scaling by min(1, C/‖g_i‖), the norm taken over all leaves);
  2. sums the clipped gradients over the batch axis;
  3. adds N(0, (σC)²) noise to every coordinate (a fresh key each step);
  4. divides by the expected batch size B.

  The noisy sum is the Gaussian mechanism with noise multiplier σ on a query
  of L2 sensitivity C (add/remove one example); with Poisson sampling at
  rate q it is one ``SampledGaussian(q, σ)`` event, composed into the
  accountant state at every update.

  Args:
    l2_clip: C > 0.
    sigma: noise multiplier σ > 0 (noise std is σC on the sum).
    sampling_rate: Poisson sampling rate q in [0, 1] (B / dataset size);
      only when the batches really are Poisson samples.  Give ``sampler``
      instead for the samplers of :mod:`jaxdp.sampling`.
    seed: integer seed of the noise PRNG key.
    accountant: a :class:`jaxdp.accountant.Accountant`; default
      ``jaxdp.accountant.rdp()``.
    budget: optional ``(epsilon, delta)``; the state's ``exhausted`` flag
      turns True as soon as one more update would exceed ε at δ, so a loop
      that checks :func:`budget_exhausted` before each step never overspends.
    expected_batch_size: B, the normaliser (q × dataset size for Poisson
      sampling). Default: the static leading-axis size of the gradients,
      right for fixed-size batches. Normalising by a constant (not the
      realised Poisson batch size) keeps the output a post-processing of the
      noisy sum.
    accounting: False disables the accountant (state carries ``()``); for
      measuring its overhead.
    sampler: a :mod:`jaxdp.sampling` sampler that draws the batches (give
      exactly one of ``sampler`` and ``sampling_rate``). Its event
      (``sampler.event(sigma)``) is composed at every update, or at the first
      update of every epoch for the epoch-level events (balls-in-bins,
      shuffle), so ε is never under-reported mid-epoch. The default
      normaliser is then ``sampler.expected_batch_size``: a constant fixed
      when the transform is built, never the size of the data it runs on (a
      normaliser recomputed from the private dataset's size would differ
      between neighbouring datasets). Pass the sampler's mask as
      ``update(grads, state, mask=mask)``: padded entries contribute nothing.

  Returns:
    An ``optax.GradientTransformation``. ``update(per_example_grads, state,
    params=None)`` expects a leading batch axis on every leaf and returns
    updates without it.

  Raises:
    ValueError: for out-of-range C, σ, q, B or budget.
  """
  _numerics.check_array("l2_clip", l2_clip, low=0.0, low_open=True)
  if (sampler is None) == (sampling_rate is None):
    raise ValueError("give exactly one of sampling_rate (Poisson batches) and sampler; "
                     f"found sampling_rate={sampling_rate!r}, sampler={sampler!r}.")
  epoch_len = 1
  if sampler is None:
    event = _events.SampledGaussian(sampling_rate, sigma)  # validates q, σ
  else:
    from jaxdp import _sampler_api  # pylint: disable=g-import-not-at-top
    if not _sampler_api.is_sampler(sampler):
      raise ValueError(f"sampler must come from jaxdp.sampling; found {sampler!r}.")
    event = sampler.event(sigma)
    if isinstance(event, _sampler_api._EPOCH_EVENTS):  # pylint: disable=protected-access
      epoch_len = int(sampler.steps_per_epoch)
    if expected_batch_size is None:
      expected_batch_size = float(sampler.expected_batch_size)
  if expected_batch_size is not None:
    _numerics.check_array("expected_batch_size", expected_batch_size, low=0.0,
                          low_open=True)
  if budget is not None:
    if len(budget) != 2:
      raise ValueError(f"budget must be (epsilon, delta); found {budget!r}.")
    _numerics.check_array("budget epsilon", budget[0], low=0.0)
    _numerics.check_array("budget delta", budget[1], low=0.0, high=1.0,
                          low_open=True, high_open=True)
  if accounting and accountant is None:
    accountant = _accountant.rdp()
  if not accounting:
    budget = None
  l2_clip = float(l2_clip)
  noise_std = float(sigma) * l2_clip

  def charge(steps_done):
    # Epoch events are charged in full at the first update of each epoch.
    if epoch_len == 1:
      return 1
    return (steps_done % epoch_len == 0).astype(jnp.int32)

  def next_exhausted(acc_state, steps_done):
    if budget is None:
      return jnp.zeros((), bool)
    ahead = accountant.compose(acc_state, event, charge(steps_done))
    return accountant.epsilon(ahead, budget[1]) > budget[0]

  def init_fn(params):
    del params
    acc_state = accountant.init() if accounting else ()
    return DpAggregateState(
        key=jax.random.PRNGKey(seed),
        accountant_state=acc_state,
        steps=jnp.zeros((), jnp.int32),
        exhausted=(next_exhausted(acc_state, jnp.zeros((), jnp.int32)) if accounting
                   else jnp.zeros((), bool)))

  def update_fn(updates, state, params=None, *, mask=None, **extra_args):
    del params, extra_args
    leaves, treedef = jax.tree_util.tree_flatten(updates)
    if not leaves:
      return updates, state
    batch = leaves[0].shape[0]
    norms = _global_norms(updates)
    scale = jnp.minimum(1.0, l2_clip / jnp.maximum(norms, jnp.finfo(norms.dtype).tiny))
    if mask is not None:  # padding of a static-shape batch contributes nothing
      scale = jnp.where(jnp.asarray(mask, bool), scale, 0.0)
    denom = float(batch) if expected_batch_size is None else float(expected_batch_size)
    key, noise_key = jax.random.split(state.key)
    keys = jax.random.split(noise_key, len(leaves))
    out = []
    for leaf, k in zip(leaves, keys):
      s = scale.astype(leaf.dtype).reshape((batch,) + (1,) * (leaf.ndim - 1))
      total = jnp.sum(leaf * s, axis=0)
      noise = noise_std * jax.random.normal(k, total.shape, total.dtype)
      out.append((total + noise) / denom)
    if accounting:
      acc_state = accountant.compose(state.accountant_state, event, charge(state.steps))
      exhausted = next_exhausted(acc_state, state.steps + 1)
    else:
      acc_state, exhausted = (), state.exhausted
    new_state = DpAggregateState(key=key, accountant_state=acc_state,
                                 steps=state.steps + 1, exhausted=exhausted)
    return jax.tree_util.tree_unflatten(treedef, out), new_state

  return _optax.GradientTransformationExtraArgs(init_fn, update_fn)


def find_state(opt_state) -> DpAggregateState:
  """The (single) :class:`DpAggregateState` inside an optimizer state.

  Raises:
    ValueError: when there is none or more than one.
  """
  found = [x for x in jax.tree_util.tree_leaves(
      opt_state, is_leaf=lambda x: isinstance(x, DpAggregateState))
           if isinstance(x, DpAggregateState)]
  if len(found) != 1:
    raise ValueError(
        f"opt_state must contain exactly one DpAggregateState; found {len(found)}.")
  return found[0]


def _default_accountant(acc_state):
  if isinstance(acc_state, _accountant.RdpState):
    from jaxdp import rdp as _rdp  # pylint: disable=g-import-not-at-top
    if acc_state.rdp.shape[-1] != len(_rdp.DEFAULT_ORDERS):
      raise ValueError(
          "The state was built with custom RDP orders; pass the same "
          "accountant (accountant=jaxdp.accountant.rdp(orders)).")
    return _accountant.rdp()
  if isinstance(acc_state, _accountant.CdpState):
    return _accountant.cdp()
  raise ValueError(
      f"Cannot infer the accountant for a {type(acc_state).__name__}; pass "
      "accountant=.")


def _acc_and_state(opt_state, accountant):
  state = find_state(opt_state)
  if isinstance(state.accountant_state, tuple) and not state.accountant_state:
    raise ValueError("This dp_aggregate was built with accounting=False.")
  if accountant is None:
    accountant = _default_accountant(state.accountant_state)
  return accountant, state.accountant_state


def epsilon(opt_state, delta, accountant=None):
  """ε spent so far at ``delta``, read from the optimizer state.

  Pure (works inside jit). ``accountant`` must be the one given to
  :func:`dp_aggregate` when that was not the default RDP/CDP accountant.
  """
  acc, acc_state = _acc_and_state(opt_state, accountant)
  return acc.epsilon(acc_state, delta)


def delta(opt_state, epsilon, accountant=None):  # pylint: disable=redefined-outer-name
  """δ spent so far at ``epsilon``, read from the optimizer state."""
  acc, acc_state = _acc_and_state(opt_state, accountant)
  return acc.delta(acc_state, epsilon)


def budget_exhausted(opt_state) -> jax.Array:
  """True once one more :func:`dp_aggregate` update would exceed the budget."""
  return find_state(opt_state).exhausted
