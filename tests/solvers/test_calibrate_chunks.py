"""A batched calibration compiles one set of programs.

``jaxdp.calibrate.sigma`` on more than 16 targets runs its rounds in chunks
of 256 configurations; its later rounds, where only a few targets are still
open, must keep that length instead of switching to the 16-configuration
programs (a fresh process's 1000 calibrations compiled the window solver and
the public-path check a second time, ~4 s, to finish 2 targets).
"""

import numpy as np

import jaxdp
from jaxdp._src.solvers import boundary_eval


def _problems(n, seed=0):
  rng = np.random.default_rng(seed)
  return (rng.uniform(0.3, 10.0, n), np.full(n, 1e-5), 10 ** rng.uniform(-3.5, -1.0, n),
          np.round(10 ** rng.uniform(2, np.log10(50000), n)))


def test_rounds_with_few_open_targets_keep_the_batch_chunk(monkeypatch):
  seen = []
  original = boundary_eval._chunk_size   # pylint: disable=protected-access

  def spy(n):
    size = original(n)
    seen.append((n, size))
    return size

  monkeypatch.setattr(boundary_eval, "_chunk_size", spy)
  target, delta, q, steps = _problems(40)
  sigma = jaxdp.calibrate.sigma(target, delta, q, steps)
  assert any(n <= 16 for n, _ in seen), seen          # some round had few open targets
  assert {size for _, size in seen} == {256}, seen
  # ...and the answers still meet their targets by the public function.
  assert np.all(np.asarray(jaxdp.epsilon(q, sigma, steps, delta)) <= target)
  # Outside a batched solve, small calls keep the 16-configuration chunk.
  assert original(5) == 16 and original(17) == 256


def test_steps_guess_compiles_no_all_orders_program_and_answers_are_the_boundary(monkeypatch):
  """``calibrate.steps`` on a batch (default orders) guesses from the cheap
  orders and one quadrature at the public path's real order, instead of a
  179-order program of its own; its answers are the boundary of
  ``jaxdp.epsilon``: T within budget, T + 1 over it, up to the 1e-10 relative
  margin of the calibrations' host checks (a few open targets are checked on
  the host, inflated by that margin so that a host pass holds on either path
  of ``jaxdp.epsilon``; T can then be one step short of the exact boundary:
  the first configuration below, in this batch)."""
  from jaxdp._src.solvers import boundary_eval as be  # pylint: disable=g-import-not-at-top
  from jaxdp._src.solvers import calibrate  # pylint: disable=g-import-not-at-top
  keys = []
  original = calibrate._per_step_fn   # pylint: disable=protected-access

  def spy(key):
    keys.append(key)
    return original(key)

  monkeypatch.setattr(calibrate, "_per_step_fn", spy)
  monkeypatch.setattr(be, "_per_step_fn", spy)
  rng = np.random.default_rng(0)
  n = 1000
  target = rng.uniform(0.3, 10.0, n)
  q = 10 ** rng.uniform(-3.5, -1, n)
  sigma = rng.uniform(0.6, 5, n)
  pick = np.r_[109, np.arange(39)]
  target, q, sigma = target[pick], q[pick], sigma[pick]
  steps = np.asarray(jaxdp.calibrate.steps(target, 1e-5, q, sigma), np.float64)
  assert keys and max(max(k) for k in keys) <= 64, keys
  eps = np.asarray(jaxdp.epsilon(np.r_[q, q], np.r_[sigma, sigma], np.r_[steps, steps + 1],
                                 1e-5))
  assert np.all(eps[:40] <= target)
  margin = 1.0 + be._HOST_MARGIN   # pylint: disable=protected-access
  assert np.all(eps[40:] * margin > target), np.nonzero(eps[40:] * margin <= target)
