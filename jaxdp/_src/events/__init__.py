"""Mechanism descriptions ("events") as pytrees.

Each event is a NamedTuple of (possibly traced) array parameters, so it can be
passed through ``jit``/``vmap``/``lax.scan`` and stored in training state.
Parameters may be arrays (a batch of events broadcasting together).

Validation happens at construction on *concrete* numeric values (Python
numbers, NumPy arrays, concrete ``jax.Array``): a bad parameter raises
``ValueError`` naming the field and the value. Tracers (values inside ``jit``)
and non-numeric placeholders that JAX's tree utilities may put in the fields
(``None``, booleans, sentinels) are passed through untouched, so the classes
stay ordinary pytrees. :func:`validate` re-checks an existing event (the
accountants call it before changing any state). The field checks live in
:mod:`jaxdp._src.events.fields`.

Mechanisms are stated for sensitivity 1 (L2 for the Gaussian ones, L1 for
Laplace) under add/remove-one neighbouring datasets unless they carry a
``sensitivity`` field (:class:`Gaussian`, :class:`DiscreteLaplace`,
:class:`DiscreteGaussian`; ``None``, the default, means 1, and keeps the
field out of the pytree leaves so existing code that scans or vmaps over a
batch of events is unaffected); scale the noise parameter by the sensitivity
for other queries. :class:`RandomizedResponse` follows dp_accounting and
compares two different inputs (replace-one).

Vector-valued fields (:class:`MixtureOfGaussians` ``sensitivities`` and
``probabilities``, :class:`PMFPair` ``p`` and ``q``) describe the mechanism's
structure, not a batch of events: they are stored as tuples of Python floats
and are static pytree auxiliary data (never leaves, never traced; they must be
concrete at construction). Their own checks raise ``ValueError`` naming the
field.

The mechanisms' RDP curves and dominating pairs live in
:mod:`jaxdp.mechanisms`.

The sampler events (:class:`TruncatedPoissonGaussian`,
:class:`SampledWithoutReplacementGaussian`, :class:`BallsInBinsGaussian`,
:class:`ShuffledGaussian`; produced by :mod:`jaxdp.sampling`) describe a noisy
sum of per-example vectors of L2 norm at most C (the clip norm) over a batch
drawn by a named sampler, with Gaussian noise of standard deviation σ·C: σ is
dp_accounting's ``GaussianDpEvent.noise_multiplier``. Their integer sizes are
array leaves like every other parameter; a neighbouring ``relation`` (a
string) is static pytree auxiliary data, so these events pass through
``jit``/``vmap``/``scan`` unchanged. ``"replace_one"`` swaps one example for
another (two batch sums then differ by up to 2C). For samplers over a fixed
dataset size (fixed-size batches, shuffling) ``"add_remove"`` is accounted
literally (the neighbour has N ± 1 examples): the added example displaces a
batch member, a change of up to 2C. That reading is the conservative one: it
also bounds zero-out (one example replaced by one that contributes nothing;
dp_accounting's ``REPLACE_SPECIAL``, Kairouz et al. 2021, Def. 1.1).
"""

from __future__ import annotations

import collections
from typing import Any, Union

import numpy as np

from jaxdp._src.events.fields import RELATIONS, EventBase, register_static, validate_fields

__all__ = [
    "Gaussian",
    "SampledGaussian",
    "Laplace",
    "PureDP",
    "RandomizedResponse",
    "DiscreteLaplace",
    "DiscreteGaussian",
    "MixtureOfGaussians",
    "EpsilonDelta",
    "SampledLaplace",
    "PMFPair",
    "TruncatedPoissonGaussian",
    "SampledWithoutReplacementGaussian",
    "BallsInBinsGaussian",
    "ShuffledGaussian",
    "RELATIONS",
    "Event",
    "EVENT_TYPES",
    "validate",
]


class Gaussian(EventBase, collections.namedtuple("Gaussian", ["sigma", "sensitivity"],
                                              defaults=(None,))):
  """Gaussian mechanism N(f(x), σ²) with noise standard deviation ``sigma`` > 0.

  ``sensitivity`` Δ > 0 is the L2 sensitivity of f (``None``, the default,
  means 1, so ``sigma`` is then the noise multiplier). The two outputs are
  N(0, σ²) and N(Δ, σ²): RDP αΔ²/(2σ²) (Mironov 2017, Prop 7), zCDP
  ρ = Δ²/(2σ²); dp_accounting's ``GaussianDpEvent(sigma / Δ)``.
  """
  __slots__ = ()


@register_static
class SampledGaussian(
    EventBase, collections.namedtuple("SampledGaussian", ["q", "sigma", "relation"],
                                   defaults=("add_remove",))):
  """Poisson-subsampled Gaussian mechanism: rate ``q`` in [0, 1], ``sigma`` > 0.

  The DP-SGD step (Mironov–Talwar–Zhang 2019): each example is included
  independently with probability ``q`` and the clipped sum gets N(0, σ²)
  noise (clip norm 1); dp_accounting's ``PoissonSampledDpEvent(q,
  GaussianDpEvent(sigma))`` under the same neighbouring relation.

  ``relation`` (static, not a pytree leaf): ``"add_remove"`` (default; the
  pair (1−q)N(0,σ²) + qN(1,σ²) vs N(0,σ²)) or ``"replace_one"`` (the sampled
  example is swapped for another, a shift of up to 2C when it is sampled: the
  pair (1−q)N(0,σ²) + qN(1,σ²) vs (1−q)N(0,σ²) + qN(−1,σ²), as dp_accounting's
  PLD accountant under REPLACE_ONE). Replace-one RDP:
  :func:`jaxdp.rdp_relations.sampled_gaussian_replace_one`.
  """
  __slots__ = ()


class Laplace(EventBase, collections.namedtuple("Laplace", ["b"])):
  """Laplace mechanism with scale ``b`` > 0 (L1 sensitivity 1): (1/b)-DP."""
  __slots__ = ()


class PureDP(EventBase, collections.namedtuple("PureDP", ["epsilon"])):
  """Any ``epsilon``-DP mechanism (``epsilon`` >= 0)."""
  __slots__ = ()


class RandomizedResponse(EventBase, collections.namedtuple(
    "RandomizedResponse", ["noise_parameter", "num_buckets"])):
  """k-ary randomized response: dp_accounting's ``RandomizedResponseDpEvent``.

  The input is one of k = ``num_buckets`` buckets; with probability
  1 − p (p = ``noise_parameter``) the mechanism outputs the input bucket,
  otherwise a bucket drawn uniformly from all k. Neighbouring inputs are two
  different buckets (replace-one, dp_accounting's ``REPLACE_ONE``): the
  output distributions are P = (1 − p + p/k, p/k, p/k, …) and
  Q = (p/k, 1 − p + p/k, p/k, …), so the mechanism is
  ln(1 + k(1 − p)/p)-DP. p = 1 (or k = 1) releases nothing; p = 0 is not
  private (ε = ∞).

  Fields: ``noise_parameter`` in [0, 1]; ``num_buckets`` a whole number >= 1.
  """
  __slots__ = ()


class DiscreteLaplace(EventBase, collections.namedtuple(
    "DiscreteLaplace", ["parameter", "sensitivity"], defaults=(None,))):
  """Discrete Laplace mechanism: dp_accounting's ``DiscreteLaplaceDpEvent``.

  Adds integer noise Z with P[Z = z] = tanh(a/2)·e^{−a|z|} (a =
  ``parameter``) to an integer-valued query of L1 sensitivity Δ =
  ``sensitivity`` (``None`` means 1): (aΔ)-DP, add/remove neighbours.

  Fields: ``parameter`` > 0; ``sensitivity`` a whole number >= 1.
  """
  __slots__ = ()


class DiscreteGaussian(EventBase, collections.namedtuple(
    "DiscreteGaussian", ["sigma", "sensitivity"], defaults=(None,))):
  """Discrete Gaussian mechanism (Canonne, Kamath & Steinke 2020).

  Adds integer noise Z with P[Z = z] ∝ exp(−z²/(2σ²)) to an integer-valued
  query of sensitivity Δ = ``sensitivity`` (``None`` means 1); σ =
  ``sigma`` is the scale parameter, not the noise's standard deviation (which
  is slightly below σ). dp_accounting's ``from_discrete_gaussian_mechanism``.
  Add/remove neighbours.

  Fields: ``sigma`` > 0; ``sensitivity`` a whole number >= 1.
  """
  __slots__ = ()


@register_static
class MixtureOfGaussians(EventBase, collections.namedtuple(
    "MixtureOfGaussians", ["sigma", "sensitivities", "probabilities"])):
  """Gaussian noise with a random sensitivity: dp_accounting's ``MixtureOfGaussiansDpEvent``.

  One dataset gives N(0, σ²), its neighbour Σᵢ pᵢ N(sᵢ, σ²) (sᵢ =
  ``sensitivities``, pᵢ = ``probabilities``; σ = ``sigma``), in both
  directions (add and remove). This is user-level DP-SGD: a user's examples
  reach the clipped sum k times with probability p_k, e.g. sᵢ = i and pᵢ the
  Binomial(m, q) probabilities for m examples per user under Poisson sampling
  at rate q. A vector-valued version is dominated by this scalar one with the
  sensitivity vectors replaced by their norms (Choquette-Choo, Ganesh, Steinke
  & Thakurta 2023, Cor. 4.7).

  Fields: ``sigma`` > 0 (a leaf; may be traced or batched);
  ``sensitivities`` (each >= 0, at least one positive with positive
  probability) and ``probabilities`` (each in [0, 1], summing to 1 within
  1e-6; the accountants normalise them) are sequences of
  the same length, stored as static tuples of floats.
  """
  __slots__ = ()


class EpsilonDelta(EventBase, collections.namedtuple("EpsilonDelta", ["epsilon", "delta"])):
  """Any (ε, δ)-DP mechanism: ``epsilon`` >= 0, ``delta`` in [0, 1].

  Accounted by its worst case, the four-point pair of Kairouz, Oh & Viswanath
  (2015): every (ε, δ)-DP pair is a post-processing of it. It has no RDP
  curve unless δ = 0 (then it is :class:`PureDP`); use
  ``jaxdp.accountant.pld()``.
  """
  __slots__ = ()


class SampledLaplace(EventBase, collections.namedtuple("SampledLaplace", ["q", "b"])):
  """Poisson-subsampled Laplace mechanism: rate ``q`` in [0, 1], scale ``b`` > 0.

  Each example is included independently with probability q; the sum (L1
  sensitivity 1) gets Laplace noise of scale b. dp_accounting's
  ``PoissonSampledDpEvent(q, LaplaceDpEvent(b))``. Add/remove neighbours:
  the outputs are Lap(0, b) and (1 − q)Lap(0, b) + q Lap(1, b).
  """
  __slots__ = ()


@register_static
class PMFPair(EventBase, collections.namedtuple("PMFPair", ["p", "q"])):
  """A user-supplied pair of probability mass functions on a common finite support.

  ``p[i]`` and ``q[i]`` are the probabilities of outcome i on the larger and
  the smaller of two neighbouring datasets: the remove direction compares
  (p, q), the add direction (q, p). Both are static tuples of floats (not
  pytree leaves), each entry in [0, 1], summing to 1 within
  1e-6 (the accountants normalise them). Like
  dp_accounting's ``from_two_probability_mass_functions(..., symmetric=False)``.
  """
  __slots__ = ()


@register_static
class TruncatedPoissonGaussian(EventBase, collections.namedtuple(
    "TruncatedPoissonGaussian", ["dataset_size", "q", "capacity", "sigma", "relation"],
    defaults=("add_remove",))):
  """Gaussian sum over a Poisson sample truncated to at most ``capacity``.

  One step of :func:`jaxdp.sampling.poisson`: each of ``dataset_size``
  examples is kept independently with probability ``q``; when more than
  ``capacity`` are kept, a uniformly random ``capacity``-subset of them is
  used; the clipped sum gets N(0, σ²C²) noise. Add/remove neighbours. The same
  event as dp_accounting's ``TruncatedSubsampledGaussianDpEvent(dataset_size,
  sampling_probability=q, truncated_batch_size=capacity,
  noise_multiplier=sigma)``.

  Accounting: with t = P[Binomial(N−1, q) ≥ capacity] the probability that
  the other examples alone fill the batch, the step is dominated by a
  disjoint mixture (:func:`jaxdp.rdp_samplers.truncated_poisson_pair`,
  arXiv:2508.15089): with weight 1 − t the Poisson-sampled Gaussian pair
  (q, σ); with weight t a shift-2C Poisson pair at the conditional inclusion
  rate q' — the example, when drawn and kept, displaces one other example, so
  the two outputs differ by at most 2C and only with probability q': in units
  of C, (1−q')N(0, σ²) + q'N(2, σ²) against N(0, σ²), in both orders. The
  answer is the larger of those at the neighbour sizes N and N + 1.

  dp_accounting does *not* build its PLD this way. Its
  ``from_truncated_subsampled_gaussian_mechanism`` (used by ``PLDAccountant``
  for ``TruncatedSubsampledGaussianDpEvent``) takes the same weights t and q'
  but, for the truncated branch, its ``REPLACE_ONE`` subsampled Gaussian at
  noise σ/2: (1−q')N(0, σ²) + q'N(−2, σ²) against (1−q')N(0, σ²) +
  q'N(2, σ²), a mixture on both sides, which its source calls "a (slightly
  loose) upper bound in all cases". Both are sound; jaxdp's one-sided pair is
  tighter, and sound by joint convexity: given the other examples' draw, the
  dataset without the example yields a batch U, the one with it yields U or,
  with the conditional probability, U with one member swapped for the
  example, so one side of each conditional pair is a single Gaussian. Example (N = 1437, q = 64/1437, capacity 80, σ = 1.92, 660 steps,
  δ = 1e-5): jaxdp's tight ε is 3.09, dp_accounting's 3.35 (8% higher), and a
  pair of neighbouring datasets that the mechanism attains (every other
  gradient 0: the example is in the batch with probability
  q·E[min(1, capacity/(K+1))], K ~ Binomial(N−1, q)) forces ε ≥ 2.65
  (tests/package/test_doc_examples.py). When
  ``capacity >= dataset_size`` nothing is ever truncated and the event equals
  ``SampledGaussian(q, sigma)``.

  ``relation`` (static): ``"add_remove"`` (default, as above) or
  ``"replace_one"``: the replace-one change passes through the add/remove
  neighbour without the example, so its RDP is the weak-triangle bound of the
  add/remove curve (:func:`jaxdp.rdp_relations.replace_one`); there is no
  replace-one dominating pair for the tight (PLD) path here.

  Fields: ``dataset_size`` >= 1 and ``capacity`` >= 1 whole numbers, ``q`` in
  [0, 1], ``sigma`` > 0, ``relation`` in :data:`RELATIONS`.
  """
  __slots__ = ()


@register_static
class SampledWithoutReplacementGaussian(EventBase, collections.namedtuple(
    "SampledWithoutReplacementGaussian",
    ["dataset_size", "batch_size", "sigma", "relation"],
    defaults=("replace_one",))):
  """Gaussian sum over a batch drawn uniformly without replacement.

  ``batch_size`` of the ``dataset_size`` examples, a fresh independent draw
  every step (:func:`jaxdp.sampling.fixed`); N(0, σ²C²) noise. Like
  dp_accounting's ``SampledWithoutReplacementDpEvent(dataset_size,
  batch_size, GaussianDpEvent(sigma))``. ``relation`` is static (not a pytree
  leaf).

  Accounting, with γ = batch_size / dataset_size:

  * ``"replace_one"`` (the natural relation for a fixed batch size): Rényi DP
    of subsampling without replacement, Wang, Balle & Kasiviswanathan
    (AISTATS 2019), Thm 27, applied to the Gaussian's RDP. Replacing one
    example moves the clipped sum by up to 2C, so the base Gaussian's RDP is
    2α/σ² at order α. dp_accounting's ``RdpAccountant(REPLACE_ONE)`` uses
    α/(2σ²) instead (a shift of C, while its own PLD accountant shifts
    replace-one Gaussians by 2C), so this event's RDP is dp_accounting's RDP
    for ``SampledWithoutReplacementDpEvent(N, B, GaussianDpEvent(sigma /
    2))``.
  * ``"add_remove"`` (zero-out: the batch slot of the changed example
    contributes nothing on one side): conditioned on the other batch members
    the two outputs are N(0, σ²) and (1−γ)N(0, σ²) + γN(1, σ²) up to a common
    shift, so by joint convexity the event is dominated by
    ``SampledGaussian(γ, sigma)``. Read literally (the neighbour has N ± 1
    examples and its own batches of B), the coupling of Balle, Barthe &
    Gaboardi (NeurIPS 2018) swaps the extra example for a batch member, a
    shift of up to 2C with probability at most γ: ``SampledGaussian(γ, sigma
    / 2)``, which also bounds the zero-out reading (the conservative choice).
    dp_accounting has no add/remove analysis of this event (its RDP
    accountant requires REPLACE_ONE; its PLD accountant rejects it).

  Fields: whole numbers 1 <= ``batch_size`` <= ``dataset_size``, ``sigma`` >
  0, ``relation`` in :data:`RELATIONS`.
  """
  __slots__ = ()


class BallsInBinsGaussian(EventBase, collections.namedtuple(
    "BallsInBinsGaussian", ["dataset_size", "batch_size", "sigma", "capacity"],
    defaults=(None,))):
  """One epoch of balls-in-bins batches, each with a Gaussian sum: k = N // B steps.

  :func:`jaxdp.sampling.balls_in_bins`: at the start of an epoch every one of
  the N = ``dataset_size`` examples is put in one of k = N // ``batch_size``
  steps uniformly at random, independently of the others (expected batch size
  N/k); step i sums the clipped vectors of its bin and adds N(0, σ²C²) noise.
  The event is the whole epoch (k steps): compose it once per epoch; charging a
  started epoch in full is valid (its first steps are a function of all k
  outputs). Add/remove neighbours.

  Accounting: each example takes part in exactly one uniformly random step of
  the k ("random allocation", 1 out of k). Chua et al., "Balls-and-Bins
  Sampling for DP-SGD" (AISTATS 2025) introduce it for DP-SGD; Feldman &
  Shenfeld, "Privacy amplification by random allocation" (2025,
  arXiv:2502.08202) bound its privacy by that of k Poisson-sampled Gaussian
  steps with rate (1 + o(1))/k, with numerical bounds for the Gaussian.

  ``capacity`` (optional, whole number >= 1): batches were truncated to at most
  ``capacity`` examples (a uniformly random subset of an overfull bin).
  ``None`` means never truncated. Truncation is not post-processing: adding an
  example to a full bin may displace another (a replace-one change of that
  step, shift up to 2C), which happens with probability
  P[Binomial(N−1, 1/k) ≥ capacity]; accountants must either include that
  case or reject a capacity below N. ``dataset_size``, ``batch_size`` whole
  numbers with 1 <= ``batch_size`` <= ``dataset_size``; ``sigma`` > 0.
  """
  __slots__ = ()


@register_static
class ShuffledGaussian(EventBase, collections.namedtuple(
    "ShuffledGaussian", ["dataset_size", "batch_size", "sigma", "relation"],
    defaults=("add_remove",))):
  """One epoch of shuffled batches, each with a Gaussian sum: k = N // B steps.

  :func:`jaxdp.sampling.shuffle`: a permutation of the N =
  ``dataset_size`` examples (pseudorandom, per epoch key), cut into k = N // ``batch_size`` disjoint blocks
  of ``batch_size`` (the last N − kB examples sit the epoch out); step i sums
  block i with N(0, σ²C²) noise. The event is the whole epoch: compose once per
  epoch. ``relation`` is static (not a pytree leaf).

  Accounting: each example is in at most one batch of the epoch, so the epoch
  costs at most one unamplified Gaussian mechanism: ``Gaussian(sigma)`` would
  do for zero-out neighbours, and ``Gaussian(sigma / 2)`` under
  ``"replace_one"`` (a shift of up to 2C). jaxdp accounts ``"add_remove"``
  literally, also as ``Gaussian(sigma / 2)`` (below). Read literally (a neighbour of
  N ± 1 examples with its own permutation), moving the last example of the
  larger permutation into the extra example's slot couples the two so that
  one batch differs by a replacement — ``Gaussian(sigma / 2)`` — provided
  N ± 1 gives the same k; otherwise the number of steps itself differs.
  The sampler's permutations satisfy this coupling for every key, not only
  in distribution (cycle-walking on a network fixed by k and B:
  :mod:`jaxdp._src.samplers.permutation`). The
  one-Gaussian bound is the only general one: Chua et al., "How Private are
  DP-SGD Implementations?" (ICML 2024) prove lower bounds for shuffled batches
  far above Poisson-subsampling accounting at the same (σ, B/N), so Poisson
  accounting must not be used.

  Fields: whole numbers 1 <= ``batch_size`` <= ``dataset_size``; ``sigma`` >
  0; ``relation`` in :data:`RELATIONS`.
  """
  __slots__ = ()


Event = Union[Gaussian, SampledGaussian, Laplace, PureDP, RandomizedResponse,
              DiscreteLaplace, DiscreteGaussian, MixtureOfGaussians, EpsilonDelta,
              SampledLaplace, PMFPair, TruncatedPoissonGaussian,
              SampledWithoutReplacementGaussian, BallsInBinsGaussian, ShuffledGaussian]
EVENT_TYPES = (Gaussian, SampledGaussian, Laplace, PureDP, RandomizedResponse,
               DiscreteLaplace, DiscreteGaussian, MixtureOfGaussians, EpsilonDelta,
               SampledLaplace, PMFPair, TruncatedPoissonGaussian,
               SampledWithoutReplacementGaussian, BallsInBinsGaussian, ShuffledGaussian)


def validate(event: Any) -> Any:
  """Checks an event's concrete parameters and returns the event unchanged.

  Args:
    event: one of :data:`EVENT_TYPES`; traced fields are not checked.

  Returns:
    ``event``.

  Raises:
    TypeError: when ``event`` is not a known event type.
    ValueError: naming the field and the value when a concrete parameter is
      out of range (σ, b, sensitivities > 0; q, δ, noise parameters in
      [0, 1]; ε >= 0; sizes and integer sensitivities whole numbers >= 1 with
      batch_size <= dataset_size; all finite), a relation is not in
      :data:`RELATIONS`, a probability vector is not a PMF of the right length,
      or the fields do not broadcast together.
  """
  if not isinstance(event, EVENT_TYPES):
    raise TypeError(
        f"Unknown event {event!r}; expected one of "
        f"{', '.join(t.__name__ for t in EVENT_TYPES)}.")
  validate_fields(event)
  return event


def is_sampler(x) -> bool:
  """Whether ``x`` is a :mod:`jaxdp.sampling` sampler (duck-typed, so that the
  plain-rate path never imports the sampler machinery and its SciPy)."""
  return hasattr(x, "event") and hasattr(x, "dataset_size") and not isinstance(x, np.ndarray)
