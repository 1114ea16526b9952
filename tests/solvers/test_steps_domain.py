"""calibrate.steps over its whole domain: each answer meets its target when
``jaxdp.epsilon`` is asked that question alone.

At a huge T (10⁹–10¹⁶) ε(T) sits within a few ulps of the target, so the
path that checks T (the batched compiled check, the host check with its
margin, a single question) can decide the answer. A first-guess change that
moved which checks run left one of these 300 draws 4.2e-15 over its target
for a single question (configuration 241); the CI sample holds it.
"""

import warnings

import numpy as np
import pytest

import jaxdp
from jaxdp._src.kernels import rdp_driver
from jaxdp._src.solvers import boundary_eval


def _draw(n=300, seed=7):
  rng = np.random.default_rng(seed)
  q = np.minimum(10 ** rng.uniform(-9, 0, n), 1.0)
  sigma = 10 ** rng.uniform(-2, 4, n)
  target = 10 ** rng.uniform(-3, 3, n)
  delta = 10 ** rng.uniform(-12, np.log10(0.5), n)
  return target, delta, q, sigma


def _check(pick, fresh):
  """Each answer, asked alone, on both paths of a single question: the host
  (NumPy) path of a process's first questions and the compiled one after.

  ``fresh``: solved as in a new process (its few open targets checked on the
  host); otherwise as in a process that has used its host rounds up (every
  check compiled)."""
  target, delta, q, sigma = (x[pick] for x in _draw())
  budget = rdp_driver._host_questions   # pylint: disable=protected-access
  rounds = boundary_eval._host_rounds   # pylint: disable=protected-access
  saved, saved_rounds = budget.left, rounds.left
  if not fresh:
    budget.left = rounds.left = 0
  try:
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", RuntimeWarning)
      steps = np.asarray(jaxdp.calibrate.steps(target, delta, q, sigma), np.float64)
  finally:
    budget.left, rounds.left = saved, saved_rounds
  over = []
  try:
    for path, questions in (("host", 10**9), ("compiled", 0)):
      budget.left = questions
      for i in range(steps.size):
        e = float(jaxdp.epsilon(q[i], sigma[i], steps[i], delta[i]))   # the question alone
        if not e <= target[i]:
          over.append((path, int(pick[i]), steps[i], e, target[i]))
  finally:
    budget.left = saved
  assert not over, over


def test_steps_meet_their_targets_alone_ci():
  # Which check decides an answer depends on the whole batch and on the
  # process's host rounds: this sample (101 targets, host rounds used up)
  # catches that change; 241 with 23 or 35 neighbours, or fresh, did not.
  _check(np.r_[241, np.arange(0, 300, 3)], fresh=False)


@pytest.mark.slow
@pytest.mark.parametrize("fresh", [True, False])
def test_steps_meet_their_targets_alone_slow(fresh):
  _check(np.arange(300), fresh)


def test_steps_are_the_boundary_at_the_edges():
  """T within budget and T + 1 over it (up to the 1e-10 margin every check
  carries) on a product grid of the domain's edges: q down to 1e-12 and 1,
  σ from 1e-3 to 1e6, targets 1e-6 to 1e3, δ from 1e-15 to 0.9.

  Two flaws left T short here: host checks carried the margin twice (T + 1
  then 1e-10 under its target, 13 of these configurations), and at δ = 0.9
  ε(T) was not monotone in T (the order search dropped the orders where the
  KL clause gives ε = 0: q = 1, σ = 1 reported ε(2) = 0.557 and ε(3) = 0).
  """
  import itertools  # pylint: disable=g-import-not-at-top
  grid = np.array(list(itertools.product([1e-12, 1e-6, 0.3, 1.0], [1e-3, 0.05, 1.0, 1e3, 1e6],
                                         [1e-6, 0.5, 1e3], [1e-15, 1e-5, 0.9])))
  q, sigma, target, delta = grid.T
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)
    steps = np.asarray(jaxdp.calibrate.steps(target, delta, q, sigma), np.float64)
  assert np.all(np.asarray(jaxdp.epsilon(q, sigma, steps, delta)) <= target)
  inside = steps < float(jaxdp.calibrate.MAX_STEPS)
  above = np.asarray(jaxdp.epsilon(q[inside], sigma[inside], steps[inside] + 1, delta[inside]))
  margin = (1.0 + boundary_eval._HOST_MARGIN) * (1.0 + 1e-12)   # pylint: disable=protected-access
  short = np.nonzero(above * margin <= target[inside])[0]
  assert short.size == 0, list(zip(grid[inside][short], steps[inside][short], above[short]))
