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

from typing import Any, NamedTuple, Optional, Tuple, Union


import jax
import jax.numpy as jnp
import numpy as np
import optax as _optax

from jaxdp._src.core import numerics as _numerics
from jaxdp._src.core import persist as _persist
from jaxdp._src.accounting import accountant as _accountant
from jaxdp._src import events as _events
from jaxdp._src.interfaces.optax_schedule import schedule_epsilon, schedule_of, table_delta

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
    schedule: the transform's known schedule
      (:class:`jaxdp._src.interfaces.optax_schedule._Schedule`: sampler,
      σ, host accountant, planned steps); static pytree data, no leaves.
      None for states built by hand.
  """
  key: jax.Array
  accountant_state: Any
  steps: jax.Array
  exhausted: jax.Array
  schedule: Any = None


def _global_norms(updates) -> jax.Array:
  """Per-example global L2 norm over all leaves (leading batch axis)."""
  leaves = jax.tree_util.tree_leaves(updates)
  sq = [jnp.sum(jnp.square(x).reshape(x.shape[0], -1), axis=1) for x in leaves]
  return jnp.sqrt(sum(sq))


def _event_of(sigma, sampling_rate, sampler, expected_batch_size):
  """The event :func:`dp_aggregate` composes per update, validated.

  Args:
    sigma, sampling_rate, sampler, expected_batch_size: as in
      :func:`dp_aggregate` (exactly one of ``sampling_rate`` and ``sampler``).

  Returns:
    ``(event, epoch_len, expected_batch_size)``: ``epoch_len`` > 1 for the
    epoch-level events (charged once per epoch); the normaliser defaults to
    the sampler's expected batch size.

  Raises:
    ValueError: for both or neither of ``sampling_rate`` and ``sampler``, a
      sampler not from :mod:`jaxdp.sampling`, or an out-of-range q, σ or B.
  """
  if (sampler is None) == (sampling_rate is None):
    raise ValueError("give exactly one of sampling_rate (Poisson batches) and sampler; "
                     f"found sampling_rate={sampling_rate!r}, sampler={sampler!r}.")
  epoch_len = 1
  if sampler is None:
    event = _events.SampledGaussian(sampling_rate, sigma)  # validates q, σ
  else:
    from jaxdp._src.events import is_sampler  # pylint: disable=g-import-not-at-top
    from jaxdp._src.mechanisms.sampled import EPOCH_EVENTS  # pylint: disable=g-import-not-at-top
    if not is_sampler(sampler):
      raise ValueError(f"sampler must come from jaxdp.sampling; found {sampler!r}.")
    event = sampler.event(sigma)
    if isinstance(event, EPOCH_EVENTS):  # pylint: disable=protected-access
      epoch_len = int(sampler.steps_per_epoch)
    if expected_batch_size is None:
      expected_batch_size = float(sampler.expected_batch_size)
  if expected_batch_size is not None:
    _numerics.check_array("expected_batch_size", expected_batch_size, low=0.0,
                          low_open=True)
  return event, epoch_len, expected_batch_size


def _check_budget(budget) -> None:
  """Raises ValueError unless ``budget`` is None or (ε ≥ 0, δ in (0, 1))."""
  if budget is not None:
    if len(budget) != 2:
      raise ValueError(f"budget must be (epsilon, delta); found {budget!r}.")
    _numerics.check_array("budget epsilon", budget[0], low=0.0)
    _numerics.check_array("budget delta", budget[1], low=0.0, high=1.0,
                          low_open=True, high_open=True)


def _host_and_accountant(accountant, accounting):
  """``(host, accountant)`` of :func:`dp_aggregate`'s ``accountant`` argument:
  a name ("rdp"/"pld", default "rdp") is the host accountant, with the
  in-jit RDP accountant in the state (None with accounting off); an
  :class:`jaxdp.accountant.Accountant` object has no host accountant."""
  host = None
  if accountant is None or isinstance(accountant, str):
    host = "rdp" if accountant is None else accountant
    if host not in ("rdp", "pld"):
      raise ValueError(f"accountant must be 'rdp', 'pld' or an Accountant; found {accountant!r}.")
    accountant = _accountant.rdp() if accounting else None
  return host, accountant


def _noisy_mean(updates, leaves, key, l2_clip, noise_std, expected_batch_size, mask):
  """Clips, sums, noises and normalises per-example gradients (one update).

  Args:
    updates: the per-example gradients (leading batch axis on every leaf).
    leaves: their flattened leaves (non-empty).
    key: the state's PRNG key.
    l2_clip, noise_std: C and σC.
    expected_batch_size: B, or None for the static batch size.
    mask: optional per-example mask (padded entries contribute nothing).

  Returns:
    ``(next_key, out)``: the state's next key and the noisy mean per leaf.
  """
  batch = leaves[0].shape[0]
  norms = _global_norms(updates)
  scale = jnp.minimum(1.0, l2_clip / jnp.maximum(norms, jnp.finfo(norms.dtype).tiny))
  if mask is not None:  # padding of a static-shape batch contributes nothing
    scale = jnp.where(jnp.asarray(mask, bool), scale, 0.0)
  denom = float(batch) if expected_batch_size is None else float(expected_batch_size)
  key, noise_key = jax.random.split(key)
  keys = jax.random.split(noise_key, len(leaves))
  out = []
  for leaf, k in zip(leaves, keys):
    s = scale.astype(leaf.dtype).reshape((batch,) + (1,) * (leaf.ndim - 1))
    total = jnp.sum(leaf * s, axis=0)
    noise = noise_std * jax.random.normal(k, total.shape, total.dtype)
    out.append((total + noise) / denom)
  return key, out


def dp_aggregate(
    l2_clip: float,
    sigma: float,
    sampling_rate: Optional[float] = None,
    seed: int = 0,
    accountant: Union[None, str, _accountant.Accountant] = None,
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
    accountant: "rdp" (default) or "pld": the host accountant that answers
      :func:`epsilon` / :func:`delta` read on the host (``jaxdp.epsilon`` of
      this sampler, σ and steps: the same number bit for bit) and plans the
      budget; the state carries ``jaxdp.accountant.rdp()``'s state, and
      inside jit :func:`epsilon` reads an RDP value of the known schedule
      (never below the host's RDP answer by more than rounding, within
      ~1e-6 relative of it for Poisson sampling). Or a
      :class:`jaxdp.accountant.Accountant`: then that accountant's in-jit
      state and read-out decide everything, the budget included.
    budget: optional ``(epsilon, delta)``; the state's ``exhausted`` flag
      turns True as soon as one more update would exceed ε at δ, so a loop
      that checks :func:`budget_exhausted` before each step never overspends.
      With a host accountant ("rdp"/"pld") the number of steps within the
      budget is computed once, here, by ``jaxdp.calibrate.steps`` (float64,
      the function that also plans a calibration), and the flag compares the
      step counter with it: a σ from ``jaxdp.calibrate.sigma(..., steps=T)``
      trains exactly T steps. With an Accountant object the flag compares its
      in-jit ε with the budget.
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
  event, epoch_len, expected_batch_size = _event_of(sigma, sampling_rate, sampler,
                                                    expected_batch_size)
  _check_budget(budget)
  host, accountant = _host_and_accountant(accountant, accounting)
  if not accounting:
    budget = None
  schedule = (schedule_of(sampler, sampling_rate, sigma, event, epoch_len, budget, host)
              if accounting else None)
  l2_clip = float(l2_clip)
  noise_std = float(sigma) * l2_clip

  def charge(steps_done):
    # Epoch events are charged in full at the first update of each epoch.
    return 1 if epoch_len == 1 else (steps_done % epoch_len == 0).astype(jnp.int32)

  def next_exhausted(acc_state, steps_done):
    if budget is None:
      return jnp.zeros((), bool)
    if schedule.planned is not None:   # the host's plan (float64, certified)
      return jnp.asarray(steps_done) >= schedule.planned
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
                   else jnp.zeros((), bool)),
        schedule=schedule)

  def update_fn(updates, state, params=None, *, mask=None, **extra_args):
    del params, extra_args
    if not jax.tree_util.tree_leaves(updates):
      return updates, state
    return apply_update(updates, state, mask)

  @_persist.jit   # one program for an eager call (not ~40 op by op); inlined in a jit
  def apply_update(updates, state, mask):
    leaves, treedef = jax.tree_util.tree_flatten(updates)
    key, out = _noisy_mean(updates, leaves, state.key, l2_clip, noise_std,
                           expected_batch_size, mask)
    if accounting:
      acc_state = accountant.compose(state.accountant_state, event, charge(state.steps))
      exhausted = next_exhausted(acc_state, state.steps + 1)
    else:
      acc_state, exhausted = (), state.exhausted
    new_state = state._replace(key=key, accountant_state=acc_state, steps=state.steps + 1,
                               exhausted=exhausted)
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
    from jaxdp._src.kernels import rdp as _rdp  # pylint: disable=g-import-not-at-top
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


def _schedule_read(kind, opt_state, value, accountant):
  """The known schedule's answer, or None where the accountant decides."""
  state = find_state(opt_state)
  schedule = state.schedule
  if schedule is None or not (accountant is None or isinstance(accountant, str)):
    return None
  host = schedule.host if accountant is None else accountant
  if host is None:
    return None
  if host not in ("rdp", "pld"):
    raise ValueError(f"accountant must be 'rdp', 'pld' or an Accountant; found {accountant!r}.")
  if _numerics.is_concrete(state.steps) and _numerics.is_concrete(value):
    return schedule.host_value(kind, np.asarray(state.steps), value, host)
  dtype = (state.accountant_state.rdp.dtype
           if isinstance(state.accountant_state, _accountant.RdpState) else jnp.result_type(float))
  if kind == "epsilon":
    _numerics.check_array("delta", value, low=0.0, high=1.0, low_open=True, high_open=True)
    return schedule_epsilon(schedule, state.steps, value, dtype)
  _numerics.check_array("epsilon", value, low=0.0)
  charges = schedule.charges(jnp.asarray(state.steps))
  d = table_delta(schedule, "main", charges, value, dtype)
  d = _accountant._floor_delta(d, value, None)  # pylint: disable=protected-access  # Gaussian: δ > 0
  return jnp.where(jnp.asarray(state.steps) == 0, 0.0, d)


def epsilon(opt_state, delta, accountant=None):
  """ε spent so far at ``delta``, read from the optimizer state.

  For a transform built with a host accountant ("rdp", the default, or
  "pld"): read on the host (concrete state and δ) it is
  ``jaxdp.epsilon(sampler_or_q, sigma, steps, delta, accountant=...)``, the
  same number; inside jit, the RDP value of the known schedule (every real
  order for Poisson sampling: its per-step curve on a fine order grid,
  float64 on the host once, with the chord bound between orders; the
  host's grid for the other samplers; truncated Poisson also through the
  overflow coupling). ``accountant`` may name the host accountant ("rdp" or
  "pld") to read, or must be the Accountant given to :func:`dp_aggregate`
  when that was one (then its own read-out, pure).

  Args:
    opt_state: an optimizer state holding one :class:`DpAggregateState`.
    delta: δ in (0, 1).
    accountant: None, "rdp", "pld" or an Accountant (see above).

  Returns:
    ε: NumPy float64 on the host path, else a scalar array.
  """
  out = _schedule_read("epsilon", opt_state, delta, accountant)
  if out is not None:
    return out
  acc, acc_state = _acc_and_state(opt_state, accountant)
  return acc.epsilon(acc_state, delta)


def delta(opt_state, epsilon, accountant=None):  # pylint: disable=redefined-outer-name
  """δ spent so far at ``epsilon``, read from the optimizer state (as :func:`epsilon`)."""
  out = _schedule_read("delta", opt_state, epsilon, accountant)
  if out is not None:
    return out
  acc, acc_state = _acc_and_state(opt_state, accountant)
  return acc.delta(acc_state, epsilon)


def budget_exhausted(opt_state) -> jax.Array:
  """True once one more :func:`dp_aggregate` update would exceed the budget."""
  return find_state(opt_state).exhausted
