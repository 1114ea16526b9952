"""Tests for the jaxdp command line (in-process via main(), plus one subprocess)."""

import csv
import json
import subprocess
import sys

import numpy as np
import pytest

import jaxdp
from jaxdp import calibrate, cli

ORD = "2,3,4,6,8,16,32,64"
ORDERS = np.array([2.0, 3, 4, 6, 8, 16, 32, 64])


def run(capsys, *argv):
  code = cli.main(list(argv))
  out, err = capsys.readouterr()
  return code, out, err


def test_epsilon_and_batch_form(capsys):
  code, out, err = run(capsys, "epsilon", "--q", "0.004", "--sigma", "1.1", "--steps", "14062",
                       "--delta", "1e-5", "--orders", ORD)
  assert code == 0 and err == ""
  ref = jaxdp.epsilon(0.004, 1.1, 14062, 1e-5, orders=ORDERS)
  assert out.strip() == f"epsilon = {float(ref)!r}"
  # 240 / 60000 = 0.004, 60 epochs → 15000 steps
  code, out, _ = run(capsys, "epsilon", "--batch-size", "240", "--dataset-size", "60000",
                     "--epochs", "60", "--sigma", "1.1", "--delta", "1e-5", "--orders", ORD)
  assert code == 0
  assert float(out.split("=")[1]) == jaxdp.epsilon(0.004, 1.1, 15000, 1e-5, orders=ORDERS)
  code, out, _ = run(capsys, "delta", "--q", "0.004", "--sigma", "1.1", "--steps", "100",
                     "--epsilon", "1", "--orders", ORD)
  assert code == 0 and float(out.split("=")[1]) == jaxdp.delta(0.004, 1.1, 100, 1.0,
                                                                orders=ORDERS)


def test_calibrate_commands(capsys):
  code, out, _ = run(capsys, "calibrate", "--target-epsilon", "3", "--delta", "1e-5", "--q",
                     "0.004", "--steps", "14062", "--orders", ORD)
  assert code == 0
  s = float(out.split("=")[1])
  assert jaxdp.epsilon(0.004, s, 14062, 1e-5, orders=ORDERS) <= 3
  code, out, _ = run(capsys, "calibrate", "--solve", "steps", "--target-epsilon", "3",
                     "--delta", "1e-5", "--q", "0.004", "--sigma", "1.1", "--orders", ORD)
  t = float(out.split("=")[1])
  assert code == 0 and t == calibrate.steps(3, 1e-5, 0.004, 1.1, orders=ORDERS)
  code, out, _ = run(capsys, "calibrate", "--solve", "sampling-rate", "--target-epsilon", "3",
                     "--delta", "1e-5", "--sigma", "1.1", "--steps", "1000", "--dataset-size",
                     "60000", "--orders", ORD)
  lines = dict(line.split(" = ") for line in out.strip().splitlines())
  q = float(lines["q"])
  assert code == 0 and jaxdp.epsilon(q, 1.1, 1000, 1e-5, orders=ORDERS) <= 3
  assert int(lines["batch_size"]) == int(np.floor(q * 60000 + 1e-9))


@pytest.mark.parametrize("argv, needle", [
    (["epsilon", "--q", "2", "--sigma", "1", "--steps", "10", "--delta", "1e-5"], "q must be"),
    (["epsilon", "--q", "0.1", "--sigma", "1", "--steps", "10"], "--delta"),
    (["epsilon", "--q", "0.1", "--sigma", "1", "--steps", "10", "--delta", "abc"], "abc"),
    (["calibrate", "--target-epsilon", "1", "--delta", "1e-5", "--q", "0.1"], "--steps"),
    (["frobnicate"], "invalid choice"),
    (["sweep", "missing.csv", "--out", "x.csv"], "cannot read"),
])
def test_errors_are_one_line_exit_2(capsys, argv, needle):
  code, out, err = run(capsys, *argv)
  assert code == 2
  assert err.count("\n") == 1 and err.startswith("jaxdp: error: ") and needle in err
  assert "Traceback" not in err


def _write_csv(path, header, rows):
  with open(path, "w", newline="") as f:
    f.write(",".join(header) + "\n")
    for r in rows:
      f.write(",".join(r) + "\n")


def test_sweep_csv_round_trip_with_bad_rows(tmp_path, capsys):
  grid = tmp_path / "grid.csv"
  _write_csv(grid, ["q", "sigma", "steps", "delta", "epsilon"], [
      ["0.01", "1.1", "1000", "1e-5", ""],        # line 2: epsilon unknown
      ["0.01", "", "1000", "1e-5", "2.0"],        # line 3: sigma unknown
      ["0.01", "1.1", "", "1e-5", "2.0"],         # line 4: steps unknown
      ["", "1.1", "1000", "1e-5", "2.0"],         # line 5: q unknown
      ["0.01", "1.1", "1000", "", "2.0"],         # line 6: delta unknown
      ["abc", "1.1", "1000", "1e-5", ""],         # line 7: bad number
      ["0.01", "-1", "1000", "1e-5", ""],         # line 8: bad sigma
      ["0.01", "", "", "1e-5", "2.0"],            # line 9: two unknowns
  ])
  out = tmp_path / "res.csv"
  code, _, err = run(capsys, "sweep", str(grid), "--out", str(out), "--orders", ORD,
                     "--no-progress")
  assert code == 1
  for line in (7, 8, 9):
    assert f"line {line}:" in err
  assert "line 2:" not in err and "Traceback" not in err
  with open(out) as f:
    rows = list(csv.DictReader(f))
  assert len(rows) == 5
  r = [{k: float(v) for k, v in row.items()} for row in rows]
  assert r[0]["epsilon"] == jaxdp.epsilon(0.01, 1.1, 1000, 1e-5, orders=ORDERS)
  assert jaxdp.epsilon(0.01, r[1]["sigma"], 1000, 1e-5, orders=ORDERS) <= 2.0
  assert r[1]["sigma"] == calibrate.sigma(2.0, 1e-5, 0.01, 1000, orders=ORDERS)
  assert r[2]["steps"] == calibrate.steps(2.0, 1e-5, 0.01, 1.1, orders=ORDERS)
  assert jaxdp.epsilon(r[3]["q"], 1.1, 1000, 1e-5, orders=ORDERS) <= 2.0
  assert r[4]["delta"] == jaxdp.delta(0.01, 1.1, 1000, 2.0, orders=ORDERS)


def test_sweep_json_round_trip_batch_form(tmp_path, capsys):
  grid = tmp_path / "grid.json"
  grid.write_text(json.dumps([
      {"batch_size": 600, "dataset_size": 60000, "epochs": 10, "delta": 1e-5, "epsilon": 3.0},
      {"batch_size": 600, "dataset_size": 60000, "epochs": 10, "delta": 1e-5, "sigma": 1.0,
       "epsilon": None},
      {"sigma": 1.0, "steps": 1000, "delta": 1e-5, "epsilon": 3.0, "dataset_size": 60000},
      {"q": "x", "sigma": 1.0, "steps": 10, "delta": 1e-5},
  ]))
  out = tmp_path / "res.json"
  code, _, err = run(capsys, "sweep", str(grid), "--out", str(out), "--orders", ORD)
  assert code == 1 and "entry 4:" in err
  res = json.loads(out.read_text())
  assert len(res) == 3
  assert res[0]["steps"] == 1000 and res[0]["q"] == 0.01
  assert jaxdp.epsilon(0.01, res[0]["sigma"], 1000, 1e-5, orders=ORDERS) <= 3.0
  assert res[1]["epsilon"] == jaxdp.epsilon(0.01, 1.0, 1000, 1e-5, orders=ORDERS)
  assert res[2]["batch_size"] == int(np.floor(res[2]["q"] * 60000 + 1e-9))


def test_module_and_console_script():
  out = subprocess.run([sys.executable, "-m", "jaxdp.cli", "--help"], capture_output=True,
                       text=True, timeout=120)
  assert out.returncode == 0 and "calibrate" in out.stdout and "sweep" in out.stdout
  out = subprocess.run([sys.executable, "-m", "jaxdp.cli", "calibrate", "--target-epsilon",
                        "-1", "--delta", "1e-5", "--q", "0.1", "--steps", "10"],
                       capture_output=True, text=True, timeout=120)
  assert out.returncode == 2
  assert out.stderr.strip().splitlines() == [
      "jaxdp: error: target_epsilon must be in [0.0, inf]; found -1.0."]


def test_sweep_tuning_column(tmp_path, capsys):
  """--tuning: rows solving for epsilon get epsilon_tuned = jaxdp.tuning's ε of
  the tuned release (repeat-and-select), >= the per-run ε; other rows none."""
  from jaxdp import events, tuning
  grid = tmp_path / "grid.csv"
  _write_csv(grid, ["q", "sigma", "steps", "delta", "epsilon"], [
      ["0.01", "1.1", "1000", "1e-5", ""],     # line 2: epsilon unknown
      ["0.004", "0.8", "5000", "1e-6", ""],    # line 3: epsilon unknown
      ["0.01", "", "1000", "1e-5", "2.0"],     # line 4: sigma unknown (no tuned column)
  ])
  q, s, t, d = np.array([0.01, 0.004]), np.array([1.1, 0.8]), np.array([1000., 5000.]), \
      np.array([1e-5, 1e-6])
  for spec, mean, shape in [("poisson:10", 10.0, np.inf), ("geometric:5", 5.0, 1.0),
                            ("negative-binomial:8,0.5", 8.0, 0.5)]:
    out = tmp_path / "res.csv"
    code, _, err = run(capsys, "sweep", str(grid), "--out", str(out), "--orders", ORD,
                       "--no-progress", "--tuning", spec)
    assert code == 0, err
    with open(out) as f:
      reader = csv.DictReader(f)
      rows = list(reader)
    assert reader.fieldnames.index("epsilon_tuned") == reader.fieldnames.index("epsilon") + 1
    per_run = np.array([float(r["epsilon"]) for r in rows[:2]])
    tuned = np.array([float(r["epsilon_tuned"]) for r in rows[:2]])
    np.testing.assert_array_equal(per_run, jaxdp.epsilon(q, s, t, d, orders=ORDERS))
    ref = tuning.epsilon(events.SampledGaussian(q, s), t, d, mean, shape, orders=ORDERS).tuned
    np.testing.assert_array_equal(tuned, np.maximum(ref, per_run))
    assert np.all(tuned >= per_run) and np.all(tuned > per_run * 1.01), (spec, tuned, per_run)
    assert rows[2]["epsilon_tuned"] == "" and float(rows[2]["sigma"]) > 0
  # Bad distribution parameters or the PLD accountant: one line, exit 2, nothing written.
  for extra, needle in [(["--tuning", "poisson:0.5"], "mean"),
                        (["--tuning", "negative-binomial:3,-1"], "shape"),
                        (["--tuning", "poisson:10", "--accountant", "pld"], "--accountant rdp")]:
    code, _, err = run(capsys, "sweep", str(grid), "--out", str(tmp_path / "bad.csv"), *extra)
    assert code == 2 and err.startswith("jaxdp: error: ") and needle in err, err
    assert not (tmp_path / "bad.csv").exists()


def test_epsilon_tradeoff_lines(capsys):
  from jaxdp import tradeoff
  argv = ["epsilon", "--q", "0.01", "--sigma", "1.0", "--steps", "1000", "--delta", "1e-5",
          "--orders", ORD]
  code, out, err = run(capsys, *argv, "--tradeoff", "0.001,0.01,0.1")
  assert code == 0 and err == ""
  lines = out.strip().splitlines()
  assert lines[0] == f"epsilon = {float(jaxdp.epsilon(0.01, 1.0, 1000, 1e-5, orders=ORDERS))!r}"
  ref = tradeoff.tradeoff(0.01, 1.0, 1000, [0.001, 0.01, 0.1])
  assert len(lines) == 4
  for line, f, up, lo in zip(lines[1:], ref.fpr, ref.tpr_upper, ref.tpr_lower):
    assert line == f"fpr={float(f)!r} tpr_upper={float(up)!r} tpr_lower={float(lo)!r}"
    assert f <= lo <= up <= 1
  for extra, needle in [(["--tradeoff", "0.1,1.5"], "false-positive rates"),
                        (["--tradeoff", "x"], "false-positive rates"),
                        (["--tradeoff", "0.1", "--tuning", "poisson:10"], "--tuning")]:
    code, _, err = run(capsys, *argv, *extra)
    assert code == 2 and err.startswith("jaxdp: error: ") and needle in err, err


def test_default_epsilon_is_tight_with_interval_and_rdp(capsys):
  """No --accountant: the PLD answer (general engine), its interval and the RDP
  value; the interval overlaps the batched kernel's, the value is <= RDP and
  within 0.5% of dp_accounting's PLD accountant (a test-only oracle)."""
  from jaxdp import pld
  q, sigma, steps, delta = 0.004, 1.1, 5000, 1e-5
  code, out, err = run(capsys, "epsilon", "--q", str(q), "--sigma", str(sigma), "--steps",
                       str(steps), "--delta", str(delta))
  assert code == 0 and err == ""
  lines = dict(line.split(" = ") for line in out.strip().splitlines())
  assert list(lines) == ["epsilon", "epsilon_lower", "epsilon_rdp"]
  value, lower, rdp_value = (float(lines[k]) for k in lines)
  assert rdp_value == float(jaxdp.epsilon(q, sigma, steps, delta))
  assert lower <= value <= rdp_value
  k_lo, k_up = pld.epsilon(q, sigma, steps, delta, return_bounds=True)
  assert lower <= k_up and k_lo <= value
  dpa = pytest.importorskip("dp_accounting")
  from dp_accounting.pld import pld_privacy_accountant
  acc = pld_privacy_accountant.PLDAccountant()
  acc.compose(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(sigma)), steps)
  assert value == pytest.approx(acc.get_epsilon(delta), rel=5e-3)


def test_default_delta_is_tight(capsys):
  code, out, _ = run(capsys, "delta", "--q", "0.01", "--sigma", "1.0", "--steps", "300",
                     "--epsilon", "1.5")
  lines = dict(line.split(" = ") for line in out.strip().splitlines())
  assert code == 0 and list(lines) == ["delta", "delta_lower", "delta_rdp"]
  value, lower, rdp_value = (float(lines[k]) for k in lines)
  assert lower <= value <= rdp_value
  assert rdp_value == float(jaxdp.delta(0.01, 1.0, 300, 1.5))
  # An exact reference: δ(ε) is at least the one-step exact value.
  from jaxdp import profiles
  assert value >= float(profiles.sampled_gaussian(epsilon=1.5, q=0.01, sigma=1.0)) * (1 - 1e-9)


@pytest.mark.parametrize("extra", [["--accountant", "rdp"], ["--orders", ORD],
                                   ["--tuning", "poisson:10"]])
def test_rdp_where_asked_or_implied(capsys, extra):
  code, out, _ = run(capsys, "epsilon", "--q", "0.01", "--sigma", "1.0", "--steps", "300",
                     "--delta", "1e-5", *extra)
  assert code == 0
  first = out.strip().splitlines()[0]
  orders = ORDERS if "--orders" in extra else None
  assert first == f"epsilon = {float(jaxdp.epsilon(0.01, 1.0, 300, 1e-5, orders=orders))!r}"


def test_calibrate_default_is_tight_with_lower_end_and_rdp(capsys):
  """No --accountant: σ of the tight path (jaxdp._src.solvers.tight), a certified
  lower end and the RDP answer; --accountant pld is the same, rdp one line."""
  from jaxdp._src.solvers import tight as _tight_calibrate
  argv = ["calibrate", "--target-epsilon", "2", "--delta", "1e-5", "--q", "0.01", "--steps", "300"]
  code, out, err = run(capsys, *argv)
  assert code == 0 and err == ""
  lines = dict(line.split(" = ") for line in out.strip().splitlines())
  assert list(lines) == ["sigma", "sigma_lower", "sigma_rdp"]
  ans = _tight_calibrate.tight_sigma(2.0, 1e-5, 0.01, 300)
  assert tuple(float(v) for v in lines.values()) == ans
  assert ans.rdp == float(calibrate.sigma(2, 1e-5, 0.01, 300))
  code, out2, _ = run(capsys, *argv, "--accountant", "pld")
  assert code == 0 and out2 == out
  code, out, _ = run(capsys, *argv, "--accountant", "rdp")
  assert code == 0 and out.strip() == f"sigma = {float(calibrate.sigma(2, 1e-5, 0.01, 300))!r}"
  code, out, _ = run(capsys, *argv, "--rtol", "1e-2")
  assert code == 0
  coarse = float(out.split("\n")[0].split(" = ")[1])
  assert ans.value <= coarse <= ans.value * 1.011


def test_calibrate_steps_and_rate_default_to_tight(capsys):
  from jaxdp._src.solvers import tight as _tight_calibrate
  code, out, _ = run(capsys, "calibrate", "--solve", "steps", "--target-epsilon", "2",
                     "--delta", "1e-5", "--q", "0.01", "--sigma", "1.0")
  lines = dict(line.split(" = ") for line in out.strip().splitlines())
  assert code == 0 and list(lines) == ["steps", "steps_upper", "steps_rdp"]
  assert tuple(float(v) for v in lines.values()) == _tight_calibrate.tight_steps(2, 1e-5, 0.01, 1.0)
  code, out, _ = run(capsys, "calibrate", "--solve", "sampling-rate", "--target-epsilon", "2",
                     "--delta", "1e-5", "--sigma", "1.0", "--steps", "1000",
                     "--dataset-size", "60000")
  lines = dict(line.split(" = ") for line in out.strip().splitlines())
  assert code == 0 and list(lines) == ["q", "q_upper", "q_rdp", "batch_size"]
  ans = _tight_calibrate.tight_sampling_rate(2, 1e-5, 1.0, 1000)
  assert (float(lines["q"]), float(lines["q_upper"]), float(lines["q_rdp"])) == ans
  assert int(lines["batch_size"]) == int(np.floor(ans.value * 60000 + 1e-9))
  code, out, _ = run(capsys, "calibrate", "--solve", "steps", "--target-epsilon", "2",
                     "--delta", "1e-5", "--q", "0.01", "--sigma", "1.0", "--accountant", "rdp")
  assert code == 0
  assert out.strip() == f"steps = {int(calibrate.steps(2, 1e-5, 0.01, 1.0))}"


def test_balls_in_bins_epsilon_defaults_to_its_certified_pld(capsys):
  """Issue 38: the tight answer is the default for balls-in-bins where it is
  for Poisson (epsilon and delta): the CLI prints jaxdp.epsilon(...,
  accountant="pld"), which is below the RDP answer; --accountant rdp still
  gives the RDP one."""
  from jaxdp import sampling
  argv = ["epsilon", "--sampler", "balls-in-bins", "--capacity", "1000", "--dataset-size", "1000",
          "--batch-size", "100", "--steps", "25", "--sigma", "1.1", "--delta", "1e-5"]
  smp = sampling.balls_in_bins(1000, 100, 1000)
  tight = float(jaxdp.epsilon(smp, 1.1, 25, 1e-5, accountant="pld"))
  rdp = float(jaxdp.epsilon(smp, 1.1, 25, 1e-5))
  assert tight < rdp
  code, out, _ = run(capsys, *argv)
  assert code == 0 and out.strip().splitlines()[0] == f"epsilon = {tight!r}"
  code, out, _ = run(capsys, *argv, "--accountant", "rdp")
  assert code == 0 and out.strip().splitlines()[0] == f"epsilon = {rdp!r}"
