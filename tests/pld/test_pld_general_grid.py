"""The general PLD engine's automatic grid interval where the first one does
not fit (jaxdp._src.pld.general._first_attempt): a trial on a coarser grid
skips the full discretisation whose composed window is far over the cap, and
the answer is the one the engine gives on the interval it reaches."""

import numpy as np
import pytest

from jaxdp._src.mechanisms import sampled as S
from jaxdp._src.pld import general as G
from jaxdp._src.pld import general_compose as G_compose


def _recording(monkeypatch):
  """Records (h, overshoot or None) of every composition the engine tries."""
  tried = []
  compose = G.compose

  def spy(pmfs, counts, h, *args, **kw):
    try:
      out = compose(pmfs, counts, h, *args, **kw)
    except G_compose.TooLarge as e:
      tried.append((h, e.overshoot))
      raise
    tried.append((h, None))
    return out

  monkeypatch.setattr(G, "compose", spy)
  return tried


@pytest.mark.slow
@pytest.mark.parametrize("q,sigma,steps", [(4.27e-5, 0.536, 68028), (4.7302862832524435e-06, 0.7401559073982438, 48124)])
def test_first_attempt_is_not_far_over_the_cap(monkeypatch, q, sigma, steps):
  # Before: the first attempts overshot the window cap 8.0x (5.9x) after a
  # full discretisation at the fine interval (3 and 10 s of the 4.8 and 11 s).
  tried = _recording(monkeypatch)
  mech = S.poisson_gaussian(q, sigma)
  lo, up = G.epsilon([(mech, steps)], np.array([1e-5]), return_bounds=True)
  overs = [o for _, o in tried if o is not None]
  assert overs and max(overs) <= 2.5, tried
  # Only the interval tried changed: the answer is the engine's on the
  # interval reached, bit for bit.
  h_final = tried[-1][0]   # the last attempt: every direction composed there
  assert all(o is None for h, o in tried if h == h_final), tried
  lo2, up2 = G.epsilon([(mech, steps)], np.array([1e-5]), return_bounds=True,
                       value_discretization_interval=h_final)
  np.testing.assert_array_equal(up, up2)
  np.testing.assert_array_equal(lo, lo2)
  assert 0 < lo[0] <= up[0] < np.inf


def test_fitting_grids_are_tried_as_before(monkeypatch):
  # Where the automatic interval fits, the trial changes nothing: one
  # composition per direction, at grid_interval's h.
  tried = _recording(monkeypatch)
  mech = S.poisson_gaussian(0.01, 1.0)
  G.epsilon([(mech, 1000)], np.array([1e-5]))
  h = G.grid_interval([(mech, 1000)])
  assert tried == [(h, None), (h, None)]
