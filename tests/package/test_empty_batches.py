"""Empty batches: every batched host entry point answers an empty batch with
an empty array of the broadcast shape, as NumPy and jax.scipy.special do.

Before: ``jaxdp.epsilon`` / ``jaxdp.delta`` (RDP) raised ``IndexError`` from
the chunk planner, and ``tradeoff.tradeoff`` / ``gdp_mu`` from the lower
curve's kink fallback, on an empty batch.
"""

import warnings

import numpy as np
import pytest

import jaxdp
from jaxdp import calibrate, pld, profiles, rdp, sweep, tradeoff

E = np.zeros(0)

CASES = {
    "epsilon rdp": lambda: jaxdp.epsilon(E, 1.0, 10, 1e-5),
    "epsilon rdp (0, 3)": lambda: jaxdp.epsilon(np.zeros((0, 3)), 1.0, 10, 1e-5),
    "delta rdp": lambda: jaxdp.delta(E, 1.0, 10, 1.0),
    "epsilon rdp, empty delta": lambda: jaxdp.epsilon(0.01, 1.0, 10, E),
    "epsilon rdp, explicit orders": lambda: jaxdp.epsilon(E, 1.0, 10, 1e-5, orders=[2.0, 8.0, 32.0]),
    "epsilon pld": lambda: jaxdp.epsilon(E, 1.0, 10, 1e-5, accountant="pld"),
    "delta pld": lambda: jaxdp.delta(E, 1.0, 10, 1.0, accountant="pld"),
    "pld.epsilon": lambda: pld.epsilon(E, 1.0, 10, 1e-5),
    "pld.delta": lambda: pld.delta(E, 1.0, 10, 1.0),
    "calibrate.sigma rdp": lambda: calibrate.sigma(E, 1e-5, 0.01, 100),
    "calibrate.sigma pld": lambda: calibrate.sigma(E, 1e-5, 0.01, 100, accountant="pld"),
    "calibrate.steps": lambda: calibrate.steps(E, 1e-5, 0.01, 1.0),
    "sweep.epsilon": lambda: sweep.epsilon(E, 1.0, 10, 1e-5),
    "profiles": lambda: profiles.sampled_gaussian(epsilon=E, q=0.01, sigma=1.0),
    "rdp kernel": lambda: rdp.sampled_gaussian(E[:, None], 1.0, rdp.DEFAULT_ORDERS),
    "tradeoff": lambda: tradeoff.tradeoff(E, 1.0, 10, [0.1]).tpr_upper,
    "tradeoff lower": lambda: tradeoff.tradeoff(E, 1.0, 10, [0.1]).tpr_lower,
    "tradeoff, empty fpr": lambda: tradeoff.tradeoff(0.01, 1.0, 10, E).tpr_lower,
    "gdp_mu": lambda: tradeoff.gdp_mu(E, 1.0, 10).mu,
    "tradeoff.calibrate_sigma": lambda: tradeoff.calibrate_sigma(E, 100, target_tpr=0.5,
                                                                 at_fpr=0.1),
}

SHAPES = {"epsilon rdp (0, 3)": (0, 3), "rdp kernel": (0, len(rdp.DEFAULT_ORDERS)),
          "tradeoff": (0, 1), "tradeoff lower": (0, 1)}


@pytest.mark.parametrize("name", sorted(CASES))
def test_an_empty_batch_gives_an_empty_answer(name):
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", jaxdp.GuardWarning)
    out = np.asarray(CASES[name]())
  assert out.shape == SHAPES.get(name, (0,))
