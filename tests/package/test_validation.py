"""Audit (issue 8): every public host-level function rejects bad concrete input.

A bad argument (q outside [0, 1], σ <= 0 or non-finite, δ outside (0, 1),
ε < 0, negative or fractional counts, orders <= 1, NaN anywhere, arguments
that do not broadcast) must raise ``ValueError`` whose message names the
argument and the offending value, and for arrays the index of the first bad
element. Nothing here needs a compiled kernel to succeed: validation runs
before any computation, so the whole file is fast.
"""


import jax
import numpy as np
import pytest

import jaxdp
from jaxdp import accountant as acc_lib
from jaxdp import cdp
from jaxdp import composition
from jaxdp import events
from jaxdp import pld
from jaxdp import profiles
from jaxdp import rdp

A = np.asarray
NAN = float("nan")
INF = float("inf")


def _value_text(value):
  """How check_array prints a float (np.float64 formatting)."""
  return str(np.float64(value))


def _expect(fn, name, value=None, index=None):
  with pytest.raises(ValueError) as info:
    fn()
  msg = str(info.value)
  assert name in msg, f"{name!r} not named in {msg!r}"
  if value is not None:
    assert _value_text(value) in msg, f"value {value!r} not in {msg!r}"
  if index is not None:
    assert f"index {index}" in msg, f"index {index} not in {msg!r}"
  assert "\n" not in msg.strip(), "error message should be one line"
  return msg


# --------------------------------------------------------------------------
# jaxdp.epsilon / jaxdp.delta (rdp and pld dispatch)
# --------------------------------------------------------------------------

GOOD = dict(q=0.01, sigma=1.0, steps=100)

# (argument, bad value) pairs shared by epsilon and delta.
COMMON_BAD = [
    ("q", -0.1), ("q", 1.5), ("q", NAN), ("q", INF),
    ("sigma", 0.0), ("sigma", -1.0), ("sigma", INF), ("sigma", NAN),
    ("steps", -1.0), ("steps", 2.5), ("steps", NAN), ("steps", INF),
]
DELTA_BAD = [0.0, 1.0, 1.5, -1e-3, NAN, -INF]
EPS_BAD = [-1.0, -1e-300, NAN, -INF]


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
@pytest.mark.parametrize("name,value", COMMON_BAD)
def test_top_level_common_arguments(accountant, name, value):
  kw = dict(GOOD, **{name: value})
  _expect(lambda: jaxdp.epsilon(**kw, delta=1e-5, accountant=accountant), name, value)
  _expect(lambda: jaxdp.delta(**kw, epsilon=1.0, accountant=accountant), name, value)


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
@pytest.mark.parametrize("value", DELTA_BAD)
def test_top_level_delta_argument(accountant, value):
  _expect(lambda: jaxdp.epsilon(**GOOD, delta=value, accountant=accountant), "delta", value)


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
@pytest.mark.parametrize("value", EPS_BAD)
def test_top_level_epsilon_argument(accountant, value):
  _expect(lambda: jaxdp.delta(**GOOD, epsilon=value, accountant=accountant), "epsilon", value)


@pytest.mark.parametrize("name,bad", [("q", 2.0), ("sigma", -3.0), ("steps", 0.5)])
def test_top_level_array_index(name, bad):
  arr = np.array([[0.1, 0.2], [0.3, bad]]) if name == "q" else np.array([[1.0, 2.0], [3.0, bad]])
  kw = dict(GOOD, **{name: arr})
  _expect(lambda: jaxdp.epsilon(**kw, delta=1e-5), name, bad, index=(1, 1))
  delta = np.array([1e-5, 1e-6, 0.0])
  _expect(lambda: jaxdp.epsilon(**GOOD, delta=delta), "delta", 0.0, index=(2,))
  eps = np.array([1.0, NAN])
  _expect(lambda: jaxdp.delta(**GOOD, epsilon=eps), "epsilon", NAN, index=(1,))


def test_top_level_shapes_orders_and_options():
  msg = _expect(lambda: jaxdp.epsilon(A([0.1, 0.2]), A([1.0, 2.0, 3.0]), 10, 1e-5), "q")
  assert "sigma" in msg
  msg = _expect(lambda: jaxdp.delta(0.1, 1.0, A([1, 2]), A([1.0, 2.0, 3.0])), "steps")
  assert "epsilon" in msg
  for orders, bad in [([1.0, 2.0], 1.0), ([0.5], 0.5), ([2.0, NAN], NAN)]:
    _expect(lambda: jaxdp.epsilon(**GOOD, delta=1e-5, orders=orders), "orders", bad)
    _expect(lambda: jaxdp.delta(**GOOD, epsilon=1.0, orders=orders), "orders", bad)
  _expect(lambda: jaxdp.epsilon(**GOOD, delta=1e-5, orders=[]), "orders")
  _expect(lambda: jaxdp.epsilon(**GOOD, delta=1e-5, accountant="moments"), "moments")
  _expect(lambda: jaxdp.delta(**GOOD, epsilon=1.0, accountant="moments"), "moments")
  _expect(lambda: jaxdp.epsilon(**GOOD, delta=1e-5, method="best"), "best")


def test_rdp_kernels_document_nan_and_reject_bad_method():
  # Pure kernels do not raise on values (they may be traced): α <= 1 is NaN.
  with jax.enable_x64(True):
    out = np.asarray(rdp.sampled_gaussian(0.1, 1.0, np.array([1.0, 0.5, 2.0])))
  assert np.isnan(out[:2]).all() and np.isfinite(out[2])
  _expect(lambda: rdp.to_epsilon(np.ones(3), np.array([2.0, 3.0, 4.0]), 1e-5, method="x"),
          "method")


# --------------------------------------------------------------------------
# pld
# --------------------------------------------------------------------------


def test_pld_host_functions():
  _expect(lambda: pld.epsilon(1.5, 1.0, 10, 1e-5), "q", 1.5)
  _expect(lambda: pld.epsilon(0.1, 0.0, 10, 1e-5), "sigma", 0.0)
  _expect(lambda: pld.epsilon(0.1, 1.0, -2, 1e-5), "steps", -2.0)
  _expect(lambda: pld.epsilon(0.1, 1.0, 10, 0.0), "delta", 0.0)
  _expect(lambda: pld.delta(0.1, 1.0, 10, -0.5), "epsilon", -0.5)
  _expect(lambda: pld.delta(0.1, 1.0, 10, 1.0, value_discretization_interval=0.0),
          "value_discretization_interval", 0.0)
  _expect(lambda: pld.delta(0.1, 1.0, 10, 1.0, rtol=-1.0), "rtol", -1.0)
  # above 0.1 (the general engine's range: pld.epsilon(rtol=0.3) used to
  # pass here and fail inside the fallback at small σ)
  _expect(lambda: pld.epsilon(0.1, 1.0, 10, 1e-5, rtol=0.3), "rtol", 0.3)
  _expect(lambda: pld.delta(A([0.1, NAN]), 1.0, 10, 1.0), "q", NAN, index=(1,))
  msg = _expect(lambda: pld.delta(A([0.1, 0.2]), A([1.0, 2.0, 3.0]), 10, 1.0), "q")
  assert "sigma" in msg


def test_pld_accountant():
  from jaxdp import accountant
  acc = accountant.pld()
  state = acc.init()
  _expect(lambda: acc.compose(state, events.SampledGaussian(0.1, 1.0), count=-1), "count", -1.0)
  _expect(lambda: acc.compose(state, events.SampledGaussian(0.1, 1.0), count=1.5), "count", 1.5)
  _expect(lambda: acc.epsilon(state, 0.0), "delta", 0.0)
  _expect(lambda: acc.delta(state, -1.0), "epsilon", -1.0)


# --------------------------------------------------------------------------
# profiles
# --------------------------------------------------------------------------

PROFILE_CASES = [
    (lambda: profiles.gaussian(-1.0, 1.0), "epsilon", -1.0),
    (lambda: profiles.gaussian(1.0, 0.0), "sigma", 0.0),
    (lambda: profiles.gaussian(1.0, NAN), "sigma", NAN),
    (lambda: profiles.gaussian(1.0, 1.0, sensitivity=-1.0), "sensitivity", -1.0),
    (lambda: profiles.gaussian_log_delta(NAN, 1.0), "epsilon", NAN),
    (lambda: profiles.gaussian_group(1.0, 1.0, 1.5), "k", 1.5),
    (lambda: profiles.gaussian_group(1.0, 1.0, 0), "k", 0.0),
    (lambda: profiles.gaussian_epsilon(0.0, 1.0), "delta", 0.0),
    (lambda: profiles.gaussian_epsilon(1.0, 1.0), "delta", 1.0),
    (lambda: profiles.gaussian_epsilon(1e-5, -2.0), "sigma", -2.0),
    (lambda: profiles.analytic_gaussian_sigma(-1.0, 1e-5), "epsilon", -1.0),
    (lambda: profiles.analytic_gaussian_sigma(1.0, 1.5), "delta", 1.5),
    (lambda: profiles.laplace(1.0, 0.0), "b", 0.0),
    (lambda: profiles.laplace(-0.1, 1.0), "epsilon", -0.1),
    (lambda: profiles.laplace_group(1.0, 1.0, -1), "k", -1.0),
    (lambda: profiles.sampled_gaussian(1.0, 1.5, 1.0), "q", 1.5),
    (lambda: profiles.sampled_gaussian(1.0, 0.1, -1.0), "sigma", -1.0),
    (lambda: profiles.sampled_gaussian(-1.0, 0.1, 1.0), "epsilon", -1.0),
    (lambda: profiles.sampled_gaussian(1.0, 0.1, 1.0, direction="up"), "direction", None),
    (lambda: profiles.sampled_gaussian_log_delta(1.0, NAN, 1.0), "q", NAN),
    (lambda: profiles.hockey_stick(A([0.5, 0.6]), A([0.5, 0.5]), 0.0), "p", None),
    (lambda: profiles.hockey_stick(A([0.5, 0.5]), A([1.5, -0.5]), 0.0), "q", -0.5),
    (lambda: profiles.hockey_stick(A([0.5, 0.5]), A([0.5, 0.5]), -1.0), "epsilon", -1.0),
    (lambda: profiles.log_hockey_stick(A([0.1, -0.1]), A([-1.0, -1.0]), 0.0), "log_p", 0.1),
    (lambda: profiles.amplify_poisson(1.0, 1e-5, 1.5), "gamma", 1.5),
    (lambda: profiles.amplify_poisson(1.0, -1e-5, 0.5), "delta", -1e-5),
    (lambda: profiles.amplify_without_replacement(1.0, 1e-5, 5, 3), "m", 5.0),
    (lambda: profiles.amplify_without_replacement(1.0, 1e-5, 1.5, 3), "m", 1.5),
    (lambda: profiles.amplify_without_replacement(1.0, 1e-5, 1, 0), "n", 0.0),
    (lambda: profiles.amplify_with_replacement(1.0, A([0.1, 2.0]), 2, 10), "group_deltas", 2.0),
    (lambda: profiles.randomized_response(1.0, 1.5), "p", 1.5),
    (lambda: profiles.randomized_membership(1.0, 0.7, -0.5), "eta", -0.5),
]


@pytest.mark.parametrize("case", range(len(PROFILE_CASES)))
def test_profiles_reject(case):
  fn, name, value = PROFILE_CASES[case]
  _expect(fn, name, value)


def test_profiles_array_index_and_shapes():
  _expect(lambda: profiles.gaussian(A([0.0, 1.0, -2.0]), 1.0), "epsilon", -2.0, index=(2,))
  _expect(lambda: profiles.sampled_gaussian(1.0, A([[0.1], [1.2]]), 1.0), "q", 1.2, index=(1, 0))
  for fn, args, names in [
      (profiles.gaussian, (A([1.0, 2.0]), A([1.0, 2.0, 3.0])), ("epsilon", "sigma")),
      (profiles.laplace, (A([1.0, 2.0]), A([1.0, 2.0, 3.0])), ("epsilon", "b")),
      (profiles.sampled_gaussian, (A([1.0, 2.0]), A([0.1, 0.2, 0.3]), 1.0), ("epsilon", "q")),
      (profiles.gaussian_epsilon, (A([1e-5, 1e-6]), A([1.0, 2.0, 3.0])), ("delta", "sigma")),
      (profiles.analytic_gaussian_sigma, (A([1.0, 2.0]), A([1e-5, 1e-6, 1e-7])),
       ("epsilon", "delta")),
      (profiles.amplify_poisson, (A([1.0, 2.0]), A([1e-5, 1e-6, 1e-7]), 0.5),
       ("epsilon", "delta")),
  ]:
    msg = _expect(lambda: fn(*args), names[0])
    assert names[1] in msg, msg


def test_profiles_accept_python_lists():
  out = np.asarray(profiles.gaussian([0.5, 1.0], [1.0, 2.0]))
  assert out.shape == (2,) and np.all(np.isfinite(out))


# --------------------------------------------------------------------------
# cdp, composition
# --------------------------------------------------------------------------

CDP_CASES = [
    (lambda: cdp.gaussian(0.0), "sigma", 0.0),
    (lambda: cdp.gaussian(1.0, sensitivity=-1.0), "sensitivity", -1.0),
    (lambda: cdp.group_gaussian(1.0, 1.5), "group_size", 1.5),
    (lambda: cdp.from_pure_dp(-1.0), "epsilon", -1.0),
    (lambda: cdp.compose(A([-1.0]), A([1.0])), "mu", -1.0),
    (lambda: cdp.to_epsilon(0.1, 0.5, 0.0), "delta", 0.0),
    (lambda: cdp.to_epsilon(0.1, NAN, 1e-5), "tau", NAN),
    (lambda: cdp.to_delta(0.1, 0.5, -1.0), "epsilon", -1.0),
    (lambda: cdp.rho_gaussian(-1.0), "sigma", -1.0),
    (lambda: cdp.rho_from_pure_dp(NAN), "epsilon", NAN),
    (lambda: cdp.rho_to_epsilon(-0.1, 1e-5), "rho", -0.1),
    (lambda: cdp.rho_to_epsilon(0.1, 1.5), "delta", 1.5),
    (lambda: cdp.rho_to_delta(0.1, -1.0), "epsilon", -1.0),
    (lambda: cdp.rho_for_epsilon(1.0, 0.0), "delta", 0.0),
    (lambda: cdp.rho_for_epsilon(-1.0, 1e-5), "epsilon", -1.0),
    (lambda: cdp.rho_from_rdp(A([0.1, 0.2]), A([1.0, 2.0])), "orders", 1.0),
    (lambda: cdp.rdp_from_rho(0.1, A([2.0, 0.5])), "orders", 0.5),
    (lambda: composition.basic(-1.0, 0.0, 3), "epsilon", -1.0),
    (lambda: composition.basic(1.0, 1.5, 3), "delta", 1.5),
    (lambda: composition.basic(1.0, 0.0, 2.5), "k", 2.5),
    (lambda: composition.advanced(1.0, 0.0, 3, 0.0), "delta_slack", 0.0),
    (lambda: composition.advanced(1.0, 0.0, -3, 1e-5), "k", -3.0),
    (lambda: composition.advanced_heterogeneous(A([1.0, NAN]), 0.0, 1e-5), "epsilon", NAN),
    (lambda: composition.optimal_homogeneous_delta(1.0, 0.0, 3, -1.0), "epsilon_total", -1.0),
    (lambda: composition.optimal_homogeneous_delta(1.0, 0.0, 0.5, 1.0), "k", 0.5),
    (lambda: composition.optimal_homogeneous_epsilon(1.0, 0.0, 3, NAN), "delta_total", NAN),
    (lambda: composition.optimal_homogeneous_epsilon(INF, 0.0, 3, 1e-5), "epsilon", INF),
]


@pytest.mark.parametrize("case", range(len(CDP_CASES)))
def test_cdp_and_composition_reject(case):
  fn, name, value = CDP_CASES[case]
  _expect(fn, name, value)


def test_cdp_and_composition_shapes():
  two, three = A([1.0, 2.0]), A([0.0, 0.0, 0.0])
  for fn, args, names in [
      (composition.basic, (two, three, 1), ("epsilon", "delta")),
      (composition.advanced, (two, three, 1, 1e-5), ("epsilon", "delta")),
      (composition.advanced_heterogeneous, (two, three, 1e-5), ("epsilon", "delta")),
      (composition.optimal_homogeneous_delta, (two, A([0.0, 0.0, 0.0]), 3, 1.0),
       ("epsilon", "delta")),
      (cdp.compose, (two, A([1.0, 1.0, 1.0])), ("mu", "tau")),
      (cdp.to_epsilon, (two, A([1.0, 1.0, 1.0]), 1e-5), ("mu", "tau")),
      (cdp.to_delta, (two, A([1.0, 1.0, 1.0]), 1.0), ("mu", "tau")),
      (cdp.rho_to_epsilon, (two, A([1e-5, 1e-6, 1e-7])), ("rho", "delta")),
      (cdp.rho_to_delta, (two, A([1.0, 2.0, 3.0])), ("rho", "epsilon")),
      (cdp.rho_for_epsilon, (two, A([1e-5, 1e-6, 1e-7])), ("epsilon", "delta")),
  ]:
    msg = _expect(lambda: fn(*args), names[0])
    assert names[1] in msg, msg


# --------------------------------------------------------------------------
# events, accountants, optax
# --------------------------------------------------------------------------


def test_events_reject():
  _expect(lambda: events.SampledGaussian(1.5, 1.0), "q", 1.5)
  _expect(lambda: events.SampledGaussian(0.1, 0.0), "sigma", 0.0)
  _expect(lambda: events.SampledGaussian(A([0.1, 0.2]), A([1.0, NAN])), "sigma", NAN,
          index=(1,))
  _expect(lambda: events.Gaussian(-1.0), "sigma", -1.0)
  _expect(lambda: events.Gaussian(INF), "sigma", INF)
  _expect(lambda: events.Laplace(0.0), "b", 0.0)
  _expect(lambda: events.PureDP(NAN), "epsilon", NAN)
  _expect(lambda: events.PureDP(-0.5), "epsilon", -0.5)
  msg = _expect(lambda: events.SampledGaussian(A([0.1, 0.2]), A([1.0, 2.0, 3.0])), "q")
  assert "sigma" in msg


@pytest.mark.parametrize("make", [acc_lib.rdp, acc_lib.cdp])
def test_accountants_reject(make):
  acc = make() if make is acc_lib.cdp else make(np.array([2.0, 4.0, 8.0]))
  state = acc.init()
  ev = events.Gaussian(1.0)
  _expect(lambda: acc.compose(state, ev, count=-1), "count", -1.0)
  _expect(lambda: acc.compose(state, ev, count=2.5), "count", 2.5)
  _expect(lambda: acc.compose(state, ev, count=NAN), "count", NAN)
  _expect(lambda: acc.epsilon(state, 0.0), "delta", 0.0)
  _expect(lambda: acc.epsilon(state, 2.0), "delta", 2.0)
  _expect(lambda: acc.delta(state, -1.0), "epsilon", -1.0)
  _expect(lambda: acc.delta(state, NAN), "epsilon", NAN)
  with pytest.raises(TypeError):
    acc.compose(state, (0.1, 1.0))


def test_rdp_accountant_orders():
  _expect(lambda: acc_lib.rdp(np.array([2.0, 1.0])), "orders", 1.0, index=(1,))
  _expect(lambda: acc_lib.rdp(np.array([2.0, NAN])), "orders", NAN)
  _expect(lambda: acc_lib.rdp(np.zeros((0,))), "orders")


def test_optax_dp_aggregate_rejects():
  from jaxdp import optax as dpx
  _expect(lambda: dpx.dp_aggregate(0.0, 1.0, 0.01, 0), "l2_clip", 0.0)
  _expect(lambda: dpx.dp_aggregate(1.0, -1.0, 0.01, 0), "sigma", -1.0)
  _expect(lambda: dpx.dp_aggregate(1.0, 1.0, 1.01, 0), "q", 1.01)
  _expect(lambda: dpx.dp_aggregate(1.0, 1.0, 0.01, 0, expected_batch_size=0.0),
          "expected_batch_size", 0.0)
  _expect(lambda: dpx.dp_aggregate(1.0, 1.0, 0.01, 0, budget=(-1.0, 1e-5)), "epsilon", -1.0)
  _expect(lambda: dpx.dp_aggregate(1.0, 1.0, 0.01, 0, budget=(1.0, 1.0)), "delta", 1.0)


# --------------------------------------------------------------------------
# calibrate and the command line
# --------------------------------------------------------------------------

CAL_CASES = [
    (lambda c: c.sigma(-1.0, 1e-5, 0.01, 100), "target_epsilon", -1.0),
    (lambda c: c.sigma(1.0, 0.0, 0.01, 100), "delta", 0.0),
    (lambda c: c.sigma(1.0, 1e-5, 1.5, 100), "q", 1.5),
    (lambda c: c.sigma(1.0, 1e-5, 0.01, 2.5), "steps", 2.5),
    (lambda c: c.sigma(1.0, 1e-5, 0.01, 100, rtol=0.0), "rtol", 0.0),
    (lambda c: c.sigma(NAN, 1e-5, 0.01, 100), "target_epsilon", NAN),
    (lambda c: c.sampling_rate(1.0, 1e-5, 0.0, 100), "sigma", 0.0),
    (lambda c: c.sampling_rate(1.0, 1.0, 1.0, 100), "delta", 1.0),
    (lambda c: c.sampling_rate(1.0, 1e-5, 1.0, -1), "steps", -1.0),
    (lambda c: c.steps(1.0, 1e-5, -0.1, 1.0), "q", -0.1),
    (lambda c: c.steps(1.0, 1e-5, 0.01, INF), "sigma", INF),
    (lambda c: c.steps(-2.0, 1e-5, 0.01, 1.0), "target_epsilon", -2.0),
]


@pytest.mark.parametrize("case", range(len(CAL_CASES)))
def test_calibrate_rejects(case):
  from jaxdp import calibrate
  fn, name, value = CAL_CASES[case]
  _expect(lambda: fn(calibrate), name, value)


def test_calibrate_array_index_and_shapes():
  from jaxdp import calibrate
  _expect(lambda: calibrate.sigma(1.0, 1e-5, A([0.1, 0.2, -0.3]), 100), "q", -0.3, index=(2,))
  msg = _expect(lambda: calibrate.sigma(A([1.0, 2.0]), 1e-5, A([0.1, 0.2, 0.3]), 100),
                "target_epsilon")
  assert "q" in msg
  _expect(lambda: calibrate.sigma(1.0, 1e-5, 0.01, 100, accountant="x"), "accountant")


CLI_BAD = [
    (["epsilon", "--q", "1.5", "--sigma", "1", "--steps", "10", "--delta", "1e-5"], "q"),
    (["epsilon", "--q", "0.1", "--sigma", "0", "--steps", "10", "--delta", "1e-5"], "sigma"),
    (["epsilon", "--q", "0.1", "--sigma", "nan", "--steps", "10", "--delta", "1e-5"], "sigma"),
    (["epsilon", "--q", "0.1", "--sigma", "1", "--steps", "2.5", "--delta", "1e-5"], "steps"),
    (["epsilon", "--q", "0.1", "--sigma", "1", "--steps", "10", "--delta", "0"], "delta"),
    (["epsilon", "--q", "0.1", "--sigma", "1", "--steps", "10", "--delta", "1"], "delta"),
    (["epsilon", "--q", "0.1", "--sigma", "1", "--steps", "10"], "delta"),
    (["epsilon", "--q", "0.1", "--sigma", "1", "--steps", "10", "--delta", "1e-5",
      "--orders", "0.5,2"], "orders"),
    (["epsilon", "--q", "0.1", "--sigma", "x", "--steps", "10", "--delta", "1e-5"], "sigma"),
    (["delta", "--q", "0.1", "--sigma", "1", "--steps", "10", "--epsilon", "-1"], "epsilon"),
    (["calibrate", "--target-epsilon", "-1", "--delta", "1e-5", "--q", "0.01", "--steps", "10"],
     "epsilon"),
    (["calibrate", "--target-epsilon", "1", "--delta", "2", "--q", "0.01", "--steps", "10"],
     "delta"),
    (["bogus"], "bogus"),
]


@pytest.mark.parametrize("case", range(len(CLI_BAD)))
def test_cli_one_line_error_exit_2(case, capsys):
  from jaxdp import cli
  argv, name = CLI_BAD[case]
  code = cli.main(argv)
  out, err = capsys.readouterr()
  assert code == 2, (argv, code, out, err)
  lines = err.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("jaxdp: error:"), err
  assert name in lines[0], (name, err)


def test_cli_sweep_reports_bad_rows_and_writes_good_ones(tmp_path, capsys):
  from jaxdp import cli
  grid = tmp_path / "grid.csv"
  grid.write_text("q,sigma,steps,delta,epsilon\n"
                  "0.01,1.0,100,1e-5,\n"      # line 2: good
                  "1.5,1.0,100,1e-5,\n"       # line 3: q out of range
                  "0.01,-1,100,1e-5,\n"       # line 4: sigma <= 0
                  "0.02,1.0,100,1e-5,\n"      # line 5: good
                  "0.01,1.0,2.5,1e-5,\n")     # line 6: fractional steps
  out = tmp_path / "out.csv"
  code = cli.main(["sweep", str(grid), "--out", str(out), "--no-progress"])
  _, err = capsys.readouterr()
  assert code != 0
  for line, name in [(3, "q"), (4, "sigma"), (6, "steps")]:
    hits = [l for l in err.splitlines() if f"line {line}" in l]
    assert hits and name in hits[0], (line, err)
  assert "line 2:" not in err and "line 5:" not in err
  rows = out.read_text().strip().splitlines()
  assert len(rows) == 3, rows  # header + the two good rows
  eps = [float(r.split(",")[-1]) for r in rows[1:]]
  assert all(np.isfinite(eps)) and eps[0] < eps[1]
