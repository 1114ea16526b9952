"""The ``jaxdp`` command line: privacy accounting for DP-SGD from the shell.

Examples::

  jaxdp epsilon --q 0.0042667 --sigma 1.1 --steps 14040 --delta 1e-5
  jaxdp epsilon --batch-size 256 --dataset-size 60000 --epochs 60 --sigma 1.1 --delta 1e-5
  jaxdp epsilon --q 0.0042667 --sigma 1.1 --steps 14040 --delta 1e-5 --tuning geometric:10
  jaxdp epsilon --q 0.0042667 --sigma 1.1 --steps 14040 --delta 1e-5 --tradeoff 0.001,0.01,0.1
  jaxdp delta --q 0.0042667 --sigma 1.1 --steps 14040 --epsilon 3
  jaxdp calibrate --target-epsilon 3 --delta 1e-5 --q 0.0042667 --steps 14040
  jaxdp calibrate --solve steps --target-epsilon 3 --delta 1e-5 --q 0.0042667 --sigma 1.1
  jaxdp calibrate --solve sampling-rate --target-epsilon 3 --delta 1e-5 --sigma 1.1 \\
      --steps 14040 --dataset-size 60000
  jaxdp sweep grid.csv --out results.csv
  jaxdp sweep grid.csv --out results.csv --tuning poisson:10

Exit status: 0 on success, 1 when some sweep rows (or a calibration) failed,
2 on invalid arguments (one ``jaxdp: error: ...`` line on stderr).
"""

from __future__ import annotations

import argparse
import csv
import decimal
import json
import math
import os
import sys
import warnings
from typing import List, Optional

import numpy as np

__all__ = ["main"]

_PROG = "jaxdp"
# Sweep columns: the five DP-SGD quantities (one is the unknown) and helpers.
_QUANTITIES = ("epsilon", "delta", "sigma", "steps", "q")
_HELPERS = ("batch_size", "dataset_size", "epochs")


class _UsageError(Exception):
  pass


class _Parser(argparse.ArgumentParser):
  """ArgumentParser whose errors are one line on stderr and exit status 2."""

  def error(self, message):
    raise _UsageError(f"{message} (see '{self.prog} --help')")


def _fmt(x) -> str:
  x = float(x)
  if math.isinf(x) or math.isnan(x):
    return str(x)
  if x == int(x) and abs(x) <= 2**53:
    return str(int(x))
  return repr(x)


# --------------------------------------------------------------------------
# Argument parsing
# --------------------------------------------------------------------------


def _add_mechanism(p, *, sigma=True, q_steps=True):
  g = p.add_argument_group("DP-SGD configuration (give --q/--steps, or the batch form)")
  if q_steps:
    g.add_argument("--q", type=float, help="sampling rate: probability that an example is in a "
                   "batch (Poisson sampling), e.g. batch size / dataset size")
    g.add_argument("--steps", type=_count_arg("steps"), help="number of noisy gradient steps")
    g.add_argument("--batch-size", type=_count_arg("batch_size"), help="expected batch size B (with "
                   "--dataset-size: q = B/N)")
    g.add_argument("--dataset-size", type=_count_arg("dataset_size"), help="number of training examples N")
    g.add_argument("--epochs", type=float, help="passes over the data: steps = epochs x "
                   "steps per epoch (N // B for fixed, balls-in-bins and shuffle; "
                   "round(1/q) for Poisson sampling, q = --q or B/N; "
                   "jaxdp.sampling.epochs_to_steps)")
  if sigma:
    g.add_argument("--sigma", type=float, help="noise multiplier: Gaussian noise std divided "
                   "by the clipping norm")
  if q_steps:
    g.add_argument("--sampler", choices=_SAMPLER_CHOICES, default=None,
                   help="how batches were drawn (default: Poisson at rate --q). "
                   "truncated-poisson needs --dataset-size, --batch-size (expected) and "
                   "--capacity; fixed, balls-in-bins and shuffle need --dataset-size and "
                   "--batch-size (balls-in-bins also --capacity)")
    g.add_argument("--capacity", type=_count_arg("capacity"), default=None,
                   help="static batch capacity B_MAX of truncated-poisson / balls-in-bins")
    g.add_argument("--relation", choices=("add-remove", "replace-one"), default=None,
                   help="neighbouring relation (fixed: default replace-one; others: default "
                   "add-remove; balls-in-bins: add-remove only)")
  p.add_argument("--accountant", choices=("rdp", "pld"), default=None,
                 help="pld: privacy-loss distributions (tight; the default for Poisson "
                 "sampling, printed with its certified interval or end and the RDP value; "
                 "for plain --q from the general PLD engine, which has nothing to compile: "
                 "jaxdp.epsilon(..., accountant='pld') uses the batched kernel, and the two "
                 "certified values differ by at most the width of their certified "
                 "intervals, e.g. 3.2e-4 at MNIST 60 epochs); "
                 "rdp: Renyi DP (the default of samplers and with --orders or --tuning)")
  _add_orders(p)


def _add_orders(p):
  p.add_argument("--orders", type=_orders_arg, default=None, metavar="A1,A2,...",
                 help="RDP orders (comma-separated, each > 1; default: every real order "
                 "alpha > 1, the minimum over the grid jaxdp.rdp.DEFAULT_ORDERS refined "
                 "between its points, as jaxdp.epsilon)")


def _count_arg(name):
  """argparse type of a count (--steps, --batch-size, ...): parsed exactly
  (not through a float), a whole number beyond 2**53 refused."""

  def parse(text):
    try:
      return _exact(name, text, whole=True)
    except ValueError as e:
      raise argparse.ArgumentTypeError(str(e)) from None

  parse.__name__ = name   # argparse names the type in its messages
  return parse


def _orders_arg(text):
  try:
    return tuple(float(x) for x in text.split(",") if x.strip())
  except ValueError:
    raise argparse.ArgumentTypeError(f"expected comma-separated numbers; found {text!r}") from None


def _fpr_list_arg(text):
  """--tradeoff FPR[,FPR...] → tuple of FPRs in [0, 1]."""
  try:
    values = tuple(float(x) for x in text.split(",") if x.strip())
  except ValueError:
    values = ()
  if not values or not all(0.0 <= v <= 1.0 for v in values):
    raise argparse.ArgumentTypeError(
        f"expected comma-separated false-positive rates in [0, 1]; found {text!r}")
  return values


_TUNING_SHAPES = {"poisson": math.inf, "geometric": 1.0, "logarithmic": 0.0}


_TUNING_HELP = ("the epsilon of hyperparameter tuning: a random number K of such runs, only "
                "the best released (Papernot-Steinke 2022). DIST is poisson:MEAN, "
                "geometric:MEAN, logarithmic:MEAN or negative-binomial:MEAN,SHAPE "
                "(MEAN = E[K] >= 1; dp_accounting's RepeatAndSelectDpEvent).")


def _tuning_arg(text):
  """--tuning DIST → (mean, shape) (dp_accounting's RepeatAndSelectDpEvent)."""
  name, sep, params = text.partition(":")
  name = name.strip().lower()
  try:
    values = [float(x) for x in params.split(",")] if sep else []
  except ValueError:
    values = None
  if name in _TUNING_SHAPES and values is not None and len(values) == 1:
    return values[0], _TUNING_SHAPES[name]
  if name == "negative-binomial" and values is not None and len(values) == 2:
    return values[0], values[1]
  raise argparse.ArgumentTypeError(
      f"expected poisson:MEAN, geometric:MEAN, logarithmic:MEAN or "
      f"negative-binomial:MEAN,SHAPE; found {text!r}")


def _build_parser() -> argparse.ArgumentParser:
  parser = _Parser(
      prog=_PROG,
      description="Differential-privacy accounting for DP-SGD (Poisson-sampled Gaussian "
      "mechanism): compute the privacy budget (epsilon, delta) of a training run, or "
      "calibrate the noise, number of steps or sampling rate to meet a budget.",
      epilog="examples:" + __doc__.split("Examples::", 1)[1].split("Exit status", 1)[0].rstrip()
      + "\n\nRun 'jaxdp COMMAND --help' for the options of a command. Exit status: 0 ok, "
      "1 some rows/targets failed, 2 invalid arguments.",
      formatter_class=argparse.RawDescriptionHelpFormatter)
  sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

  p = sub.add_parser("epsilon", help="epsilon spent by a DP-SGD run at a given delta",
                     description="Print the epsilon (an upper bound) of a DP-SGD run at the "
                     "given delta.")
  _add_mechanism(p)
  p.add_argument("--delta", type=float, required=True, help="target delta, e.g. 1e-5 "
                 "(typically below 1/dataset size)")
  p.add_argument("--tuning", type=_tuning_arg, default=None, metavar="DIST",
                 help="also print " + _TUNING_HELP + " Prints 'epsilon' (one run), then "
                 "'epsilon_tuned'. Poisson --q with --accountant rdp only")
  p.add_argument("--tradeoff", type=_fpr_list_arg, default=None, metavar="FPR[,FPR...]",
                 help="also print the attack risk: for each false-positive rate FPR, certified "
                 "bounds on the true-positive rate of the best membership-inference attack "
                 "(f-DP trade-off curve from the tight PLD, whatever --accountant says). One "
                 "line 'fpr=... tpr_upper=... tpr_lower=...' per FPR: no attack exceeds "
                 "tpr_upper; tpr_lower is a lower bound on the optimal (symmetrised) test. "
                 "Poisson sampling only")

  p = sub.add_parser("delta", help="delta of a DP-SGD run at a given epsilon",
                     description="Print the delta (an upper bound) of a DP-SGD run at the "
                     "given epsilon.")
  _add_mechanism(p)
  p.add_argument("--epsilon", type=float, required=True, help="epsilon >= 0")

  p = sub.add_parser("calibrate", help="solve for sigma, steps or sampling rate given a budget",
                     description="Find the smallest noise multiplier (default), the largest "
                     "number of steps, or the largest sampling rate that meets the budget "
                     "(target epsilon, delta). The answer is checked: it never overspends.")
  _add_mechanism(p)
  p.add_argument("--target-epsilon", type=float, required=True, help="epsilon budget")
  p.add_argument("--delta", type=float, required=True, help="delta, e.g. 1e-5")
  p.add_argument("--solve", choices=("sigma", "steps", "sampling-rate"), default="sigma",
                 help="the unknown (default: sigma)")
  p.add_argument("--rtol", type=float, default=None, help="relative tolerance of the answer "
                 "(default 1e-3 for the tight answer, 1e-6 otherwise)")

  p = sub.add_parser(
      "sweep", help="evaluate a CSV/JSON grid of configurations",
      description="Read one configuration per row from a CSV (header line) or JSON (list of "
      "objects) file with columns among: epsilon, delta, sigma, steps, q, batch_size, "
      "dataset_size, epochs. In each row exactly one of epsilon, delta, sigma, steps, q must "
      "be unknown (empty cell, null, or missing column); when sigma, steps or q is unknown, "
      "epsilon is the target budget. q may be given as batch_size/dataset_size and steps as "
      "epochs (steps = epochs x round(1/q), jaxdp.sampling.epochs_to_steps). Other columns "
      "(ids, notes) are copied to the output unchanged. Whole numbers (steps, batch_size, "
      "dataset_size) are read exactly; beyond 2**53 they are refused. Invalid rows are reported on stderr with their line number and skipped; the "
      "exit status is 1 if any row failed.",
      formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("grid", help="input file, .csv or .json")
  p.add_argument("--out", required=True, help="output file, .csv or .json (all input columns, "
                 "unrecognised ones unchanged, plus the solved ones)")
  p.add_argument("--accountant", choices=("rdp", "pld"), default="rdp",
                 help="rdp (default) or pld")
  _add_orders(p)
  p.add_argument("--tuning", type=_tuning_arg, default=None, metavar="DIST",
                 help="for rows whose unknown is epsilon, also write the column "
                 "'epsilon_tuned' (next to the per-run 'epsilon'): " + _TUNING_HELP +
                 " --accountant rdp only")
  p.add_argument("--progress", dest="progress", action="store_true", default=None,
                 help="show a progress bar (default: when stderr is a terminal)")
  p.add_argument("--no-progress", dest="progress", action="store_false")
  return parser


# --------------------------------------------------------------------------
# Single-configuration commands
# --------------------------------------------------------------------------


def _steps_per_epoch(q, smp=None):
  """Steps per epoch (:mod:`jaxdp.sampling`'s one rule): the sampler's own, or
  Poisson sampling's round(1/q) at a bare rate."""
  from jaxdp._src.samplers import sampling  # pylint: disable=g-import-not-at-top
  if smp is not None:
    k = smp.steps_per_epoch
  else:
    k = sampling.poisson_steps_per_epoch(q)
  if k is None:
    raise ValueError(f"--epochs needs a sampling rate above 0 (no epoch ends at q = {q:g}).")
  return k


def _resolve_q_steps(args, need_q=True, need_steps=True, smp=None):
  """q and steps from --q/--steps or the batch form; None when not needed.

  --epochs E gives E × steps per epoch (:func:`jaxdp.sampling.epochs_to_steps`:
  the sampler's steps per epoch, or round(1/q) for Poisson sampling at rate q).
  """
  from jaxdp._src.samplers import sampling  # pylint: disable=g-import-not-at-top
  q, steps = args.q, args.steps
  b, n, e = args.batch_size, args.dataset_size, args.epochs
  if q is not None and b is not None:
    raise ValueError("give either --q or --batch-size/--dataset-size, not both.")
  if q is None and (b is not None or n is not None) and need_q:
    if b is None or n is None:
      raise ValueError("--batch-size needs --dataset-size (q = batch size / dataset size).")
    if not n >= 1 or not b >= 1 or b > n:
      raise ValueError(f"need 1 <= --batch-size <= --dataset-size; found {b:g} and {n:g}.")
    q = b / n
  if steps is not None and e is not None:
    raise ValueError("give either --steps or --epochs, not both.")
  if steps is None and e is not None and need_steps:
    if not e > 0 or not math.isfinite(e):
      raise ValueError(f"--epochs must be positive; found {e:g}.")
    if smp is None and q is None:
      raise ValueError("--epochs needs --q or --batch-size/--dataset-size.")
    steps = sampling.epochs_to_steps(e, _steps_per_epoch(q, smp))
  if need_q and q is None:
    raise ValueError("missing --q (or --batch-size with --dataset-size).")
  if need_steps and steps is None:
    raise ValueError("missing --steps (or --epochs).")
  return q, steps


def _default_accountant(args):
  """Resolves --accountant when it was not given.

  epsilon and delta of Poisson sampling at a rate answer with the tight PLD
  value (certified interval and RDP value beside it): one question is
  answered by the general PLD engine and the host RDP path, with nothing to
  compile (jaxdp._src.accounting.rate.tight_one), ~1.5 s in a fresh process. calibrate does
  the same (jaxdp._src.solvers.tight: about four PLD evaluations, ~2.5 s for
  σ). The RDP accountant stays the default of samplers, and with --orders or
  --tuning (RDP notions).
  """
  if args.accountant is not None:
    return
  args.accountant = "pld" if _tight_question(args) else "rdp"


def _tight_question(args) -> bool:
  """True for the questions the tight path answers: Poisson sampling at a
  rate, epsilon, delta or calibrate, no RDP-only option."""
  return (args.command in ("epsilon", "delta", "calibrate") and _poisson_at_rate(args)
          and args.orders is None and getattr(args, "tuning", None) is None)


def _poisson_at_rate(args) -> bool:
  """Plain Poisson sampling at a rate with add/remove neighbours (what the
  tight one-question paths account)."""
  return args.sampler in (None, "poisson") and not _replace_one(args)


def _print_tight(args, q, sigma, steps) -> None:
  """The tight answer of one Poisson question: the value (min of the PLD and
  RDP upper bounds, both certified), the PLD interval's lower end, and the
  RDP value.

  Two engines, one documented tolerance (issue 34, row 8). The command asks
  the general PLD engine (:func:`jaxdp._src.accounting.rate.tight_one`: NumPy FFTs, nothing
  to compile, ~3 s in a fresh process); ``jaxdp.epsilon(...,
  accountant="pld")`` asks the batched kernel (:mod:`jaxdp.pld`), whose
  first call in a fresh process compiles for 12-18 s on two CPU cores, so the
  command does not print that value. Both engines discretise differently and
  both certify an interval [lower, upper] holding the exact ε, so the two
  intervals overlap: each printed value is at least the other engine's
  certified lower end, and the two values differ by at most the wider
  interval's width (tests/test_surfaces_cli_sweep.py,
  tests/test_surface_consistency.py). MNIST, q = 256/60000, σ = 1.1, 60
  epochs = 14040 steps, δ = 1e-5: command 2.379657 (lower 2.379366), Python
  2.379977 (lower 2.378692); difference 3.2e-4 <= widths 2.9e-4 / 1.3e-3.
  """
  from jaxdp._src.accounting import rate  # pylint: disable=g-import-not-at-top
  name = args.command
  value = args.delta if name == "epsilon" else args.epsilon
  lo, up, rdp_up = rate.tight_one(name, q, sigma, steps, value)
  print(f"{name} = {_fmt(min(up, rdp_up))}")
  print(f"{name}_lower = {_fmt(min(lo, up, rdp_up))}")
  print(f"{name}_rdp = {_fmt(rdp_up)}")


def _acc(args):
  """accountant/orders keyword arguments (orders only for RDP)."""
  if args.orders is not None and args.accountant == "pld":
    raise ValueError("--orders applies to --accountant rdp only.")
  kw = dict(accountant=args.accountant)
  if args.orders is not None:
    kw["orders"] = np.asarray(args.orders)
  return kw


def _need(args, name, flag):
  v = getattr(args, name)
  if v is None:
    raise ValueError(f"missing {flag}.")
  return v


_SAMPLER_CHOICES = ("poisson", "truncated-poisson", "fixed", "balls-in-bins", "shuffle")
_MAX_N = 2**31 - 1  # a placeholder dataset size where the event does not depend on N


def _sampler(args):
  """The jaxdp.sampling sampler named by --sampler, or None for plain --q."""
  from jaxdp._src.samplers import sampling
  name = getattr(args, "sampler", None)
  relation = None if args.relation is None else args.relation.replace("-", "_")
  if name in (None, "poisson"):
    if args.capacity is not None:
      raise ValueError("--capacity needs --sampler truncated-poisson or balls-in-bins.")
    if relation in (None, "add_remove"):
      return None
    # Replace-one Poisson without truncation: the event SampledGaussian(q, σ,
    # "replace_one") does not depend on N, so any N >= 1 with capacity N
    # gives it; q = 1 is a template for --solve sampling-rate (replaced).
    q = 1.0
    if args.q is not None or args.batch_size is not None:
      q, _ = _resolve_q_steps(args, need_steps=False)
    n = _MAX_N if args.dataset_size is None else int(args.dataset_size)
    return sampling.poisson(n, q, n, relation)
  n, b = args.dataset_size, args.batch_size
  if n is None or b is None:
    raise ValueError(f"--sampler {name} needs --dataset-size and --batch-size.")
  n, b = int(n), int(b)
  if name in ("truncated-poisson", "balls-in-bins"):
    if args.capacity is None:
      raise ValueError(f"--sampler {name} needs --capacity.")
    cap = int(args.capacity)
    if name == "truncated-poisson":
      return sampling.poisson(n, b / n, cap, relation or "add_remove")
    if relation not in (None, "add_remove"):
      raise ValueError(f"--relation {args.relation} is not available for --sampler {name}.")
    return sampling.balls_in_bins(n, b, cap)
  if args.capacity is not None:
    raise ValueError(f"--capacity does not apply to --sampler {name}.")
  kw = {} if relation is None else dict(relation=relation)
  if name == "fixed":
    return sampling.fixed(n, b, **kw)
  return sampling.shuffle(n, b, **kw)


def _replace_one(args) -> bool:
  return getattr(args, "relation", None) == "replace-one"


def _cmd_forward(args) -> int:
  from jaxdp._src.interfaces import api  # pylint: disable=g-import-not-at-top
  _default_accountant(args)
  tuning = getattr(args, "tuning", None)
  if tuning is not None:
    if args.accountant != "rdp":
      raise ValueError("--tuning needs --accountant rdp (the tuning theorems are RDP bounds).")
    if args.sampler not in (None, "poisson") or _replace_one(args):
      raise ValueError("--tuning is available for add/remove Poisson sampling at rate --q "
                       "only, not with --sampler or --relation replace-one.")
  fprs = getattr(args, "tradeoff", None)
  if fprs is not None and tuning is not None:
    raise ValueError("--tradeoff cannot be combined with --tuning (the curve is of one run).")
  if fprs is not None and (args.sampler not in (None, "poisson") or _replace_one(args)):
    raise ValueError("--tradeoff is available for add/remove Poisson sampling at rate --q "
                     "only, not with --sampler or --relation replace-one.")
  smp = _sampler(args)
  q, steps = _resolve_q_steps(args, smp=smp)
  if smp is not None:
    q = smp
  sigma = _need(args, "sigma", "--sigma")
  if args.accountant == "pld" and smp is None and tuning is None:
    _acc(args)   # rejects --orders with pld
    _print_tight(args, q, sigma, steps)
    if args.command == "epsilon":
      _print_tradeoff(q, sigma, steps, fprs)
    return 0
  if args.command == "epsilon":
    value = api.epsilon(q, sigma, steps, args.delta, **_acc(args))
    if tuning is not None:
      from jaxdp._src import events
      from jaxdp._src.solvers import tuning as tuning_mod
      tuned = tuning_mod.epsilon(events.SampledGaussian(q, sigma), steps, args.delta, *tuning,
                                 orders=_acc(args).get("orders")).tuned
      # Both are upper bounds; the tuned release is never less private than one run.
      print(f"epsilon = {_fmt(value)}")
      print(f"epsilon_tuned = {_fmt(max(float(tuned), float(value)))}")
      return 0
  else:
    value = api.delta(q, sigma, steps, args.epsilon, **_acc(args))
  print(f"{args.command} = {_fmt(value)}")
  if args.command == "epsilon":
    _print_tradeoff(q, sigma, steps, fprs)
  return 0


def _print_tradeoff(q, sigma, steps, fprs):
  """One line per FPR: certified TPR bounds (jaxdp.tradeoff.tradeoff)."""
  if fprs is None:
    return
  from jaxdp._src.accounting import tradeoff as tradeoff_mod
  b = tradeoff_mod.tradeoff(q, sigma, steps, np.asarray(fprs, np.float64))
  for f, up, lo in zip(fprs, np.ravel(b.tpr_upper), np.ravel(b.tpr_lower)):
    print(f"fpr={_fmt(f)} tpr_upper={_fmt(up)} tpr_lower={_fmt(lo)}")


def _solve_one(args, tight, name, plain, tight_fn, bound_name, *values, **kw):
  """One calibration: the RDP/PLD answer (one line), or the tight one (the
  value, its certified end ``bound_name`` and the RDP answer). Returns the value."""
  if not tight:
    value = plain(args.target_epsilon, args.delta, *values, **kw, **_acc(args))
    print(f"{name} = {_fmt(value)}")
    return float(value)
  kw.pop("sampler", None)
  ans = tight_fn(args.target_epsilon, args.delta, *values, **kw)
  value, bound, rdp_value = ans.value, ans.bound, ans.rdp
  if name == "steps":   # every count fits: jaxdp's largest, as calibrate.steps says
    from jaxdp._src.solvers import calibrate  # pylint: disable=g-import-not-at-top
    value, bound, rdp_value = (min(float(v), calibrate.MAX_STEPS)
                               for v in (value, bound, rdp_value))
  print(f"{name} = {_fmt(value)}")
  print(f"{name}_{bound_name} = {_fmt(bound)}")
  print(f"{name}_rdp = {_fmt(rdp_value)}")
  return value


def _cmd_calibrate(args) -> int:
  """calibrate: tight by default for Poisson sampling at a rate
  (:mod:`jaxdp._src.solvers.tight`, default rtol 1e-3), else the accountant's
  batched solver (rtol 1e-6)."""
  from jaxdp._src.solvers import tight as tc  # pylint: disable=g-import-not-at-top
  from jaxdp._src.solvers import calibrate
  _default_accountant(args)
  tight = args.accountant == "pld" and _poisson_at_rate(args)
  if tight and args.orders is not None:
    raise ValueError("--orders applies to --accountant rdp only.")
  if args.rtol is None:
    args.rtol = 1e-3 if tight else 1e-6
  if args.solve == "sampling-rate" and args.sampler not in (None, "poisson"):
    if args.q is not None or args.batch_size is not None:
      raise ValueError("--solve sampling-rate: do not give --q or --batch-size.")
    # A template at batch size 1; the solver replaces the rate (capacity kept).
    smp = _sampler(argparse.Namespace(**{**vars(args), "batch_size": 1}))
  else:
    smp = _sampler(args)
  with warnings.catch_warnings():
    if not tight:   # the batched solvers warn for unreachable targets; the exit status says it
      warnings.simplefilter("ignore", RuntimeWarning)
    if args.solve == "sigma":
      q, steps = _resolve_q_steps(args, smp=smp)
      value = _solve_one(args, tight, "sigma", calibrate.sigma, tc.tight_sigma, "lower",
                         q if smp is None else smp, steps, rtol=args.rtol)
      if math.isinf(value):
        print(f"{_PROG}: the target cannot be met by any sigma <= "
              f"{calibrate.SIGMA_RANGE[1]:g} at this delta.", file=sys.stderr)
        return 1
      return 0
    sigma = _need(args, "sigma", "--sigma")
    if args.solve == "steps":
      if args.steps is not None or args.epochs is not None:
        raise ValueError("--solve steps: do not give --steps or --epochs.")
      q, _ = _resolve_q_steps(args, need_steps=False)
      kw = dict(rtol=args.rtol) if tight else {}
      value = _solve_one(args, tight, "steps", calibrate.steps, tc.tight_steps, "upper",
                         q if smp is None else smp, sigma, **kw)
      if value >= calibrate.MAX_STEPS:
        print(f"{_PROG}: every number of steps up to {calibrate.MAX_STEPS} (jaxdp's largest) "
              "meets the target.", file=sys.stderr)
      elif args.dataset_size is not None and args.batch_size is not None:
        # epochs by the one rule: steps / steps per epoch (jaxdp.sampling)
        print(f"epochs = {_fmt(value / _steps_per_epoch(q, smp))}")
      return 0
    if args.q is not None or args.batch_size is not None:
      raise ValueError("--solve sampling-rate: do not give --q or --batch-size.")
    steps = args.steps
    if steps is None:
      raise ValueError("missing --steps (epochs depend on the unknown batch size).")
    value = _solve_one(args, tight, "q", calibrate.sampling_rate, tc.tight_sampling_rate,
                       "upper", sigma, steps, rtol=args.rtol, sampler=smp)
    if smp is not None and args.sampler not in (None, "poisson", "truncated-poisson"):
      print(f"batch_size = {round(value * smp.dataset_size)}")
    elif args.dataset_size is not None:
      print(f"batch_size = {_fmt(math.floor(value * args.dataset_size + 1e-9))}")
    if value == 0.0:
      print(f"{_PROG}: no sampling rate >= {calibrate.MIN_SAMPLING_RATE:g} meets the target.",
            file=sys.stderr)
      return 1
    return 0


# --------------------------------------------------------------------------
# Sweep
# --------------------------------------------------------------------------


def _read_rows(path):
  """Rows as (label, dict of str → raw value), plus the column order."""
  ext = os.path.splitext(path)[1].lower()
  if ext not in (".csv", ".json"):
    raise ValueError(f"grid file must end in .csv or .json; found {path!r}.")
  try:
    with open(path, newline="") as f:
      if ext == ".csv":
        reader = csv.DictReader(f)
        rows = []
        for raw in reader:
          rows.append((f"line {reader.line_num}", raw))
        columns = list(reader.fieldnames or [])
      else:
        data = json.load(f, parse_float=decimal.Decimal)   # numbers exactly
        if isinstance(data, dict) and "rows" in data:
          data = data["rows"]
        if not isinstance(data, list):
          raise ValueError(f"JSON grid must be a list of objects; found {type(data).__name__}.")
        rows, columns = [], []
        for i, raw in enumerate(data, 1):
          rows.append((f"entry {i}", raw))
          if isinstance(raw, dict):
            columns += [k for k in raw if k not in columns]
  except OSError as e:
    raise ValueError(f"cannot read {path!r}: {e.strerror or e}.") from None
  except (json.JSONDecodeError, csv.Error, UnicodeDecodeError) as e:
    raise ValueError(f"cannot parse {path!r}: {e}.") from None
  return rows, columns


# Columns and options holding whole numbers: parsed exactly (never through a
# float, which rounds 2**53 + 1 to 2**53) and refused beyond 2**53.
_INTEGER_COLUMNS = ("steps", "batch_size", "dataset_size")


def _exact(name, value, whole=None):
  """A number (int, float, Decimal or text) as float, refusing a whole number
  beyond 2**53 (compared exactly) for the whole-number columns (``whole``;
  default: ``name`` is one of them)."""
  from jaxdp._src.core import numerics as nx  # pylint: disable=g-import-not-at-top
  if isinstance(value, str):
    try:
      value = decimal.Decimal(value.strip())
    except decimal.InvalidOperation:
      raise ValueError(f"{name} must be a number; found {value!r}.") from None
  if isinstance(value, decimal.Decimal):
    if value.is_finite() and value == value.to_integral_value():
      value = int(value)
    else:
      value = float(value)
  if whole is None:
    whole = name in _INTEGER_COLUMNS
  if whole and isinstance(value, int):
    nx.check_array(name, value, integer=True)
  return float(value)


def _number(name, raw):
  if raw is None:
    return None
  if isinstance(raw, bool):
    raise ValueError(f"{name} must be a number; found {raw!r}.")
  if isinstance(raw, str) and raw.strip() == "":
    return None
  if isinstance(raw, (int, float, str, decimal.Decimal)):
    return _exact(name, raw)
  raise ValueError(f"{name} must be a number; found {raw!r}.")


def _parse_row(raw):
  """One row → (unknown, values dict). Raises ValueError with a clear message."""
  from jaxdp._src.core import numerics as nx
  if not isinstance(raw, dict):
    raise ValueError(f"row must be an object of column: value; found {raw!r}.")
  if None in raw:
    raise ValueError("row has more cells than the header.")
  v = {k: _number(k, raw.get(k)) for k in _QUANTITIES + _HELPERS}
  ranges = dict(
      epsilon=dict(low=0.0), delta=dict(low=0.0, high=1.0, low_open=True, high_open=True),
      sigma=dict(low=0.0, low_open=True), steps=dict(low=0.0, integer=True),
      q=dict(low=0.0, high=1.0), batch_size=dict(low=1.0), dataset_size=dict(low=1.0),
      epochs=dict(low=0.0, low_open=True))
  for k, kw in ranges.items():
    if v[k] is not None:
      nx.check_array(k, v[k], **kw)
  b, n, e = v["batch_size"], v["dataset_size"], v["epochs"]
  if v["q"] is None and b is not None:
    if n is None:
      raise ValueError("batch_size needs dataset_size (q = batch_size / dataset_size).")
    if b > n:
      raise ValueError(f"batch_size must not exceed dataset_size; found {b:g} > {n:g}.")
    v["q"] = b / n
  if v["steps"] is None and e is not None and v["q"] is not None:
    # The one rule for epochs (jaxdp.sampling): E × round(1/q), Poisson sampling.
    from jaxdp._src.samplers import sampling  # pylint: disable=g-import-not-at-top
    k = sampling.poisson_steps_per_epoch(v["q"])
    v["steps"] = float(sampling.epochs_to_steps(e, k)) if k is not None else 0.0
    nx.check_array("steps (from epochs)", v["steps"], integer=True)
  missing = [k for k in _QUANTITIES if v[k] is None]
  if len(missing) != 1:
    if not missing:
      raise ValueError("nothing to compute: leave one of epsilon, delta, sigma, steps, q empty.")
    raise ValueError(f"exactly one of epsilon, delta, sigma, steps, q must be unknown; "
                     f"found {len(missing)} unknown ({', '.join(missing)}).")
  unknown = missing[0]
  if unknown == "epsilon" and v["delta"] is None:
    raise ValueError("delta is required.")
  if unknown != "delta" and unknown != "epsilon" and v["epsilon"] is None:
    raise ValueError("epsilon (the target budget) is required.")
  return unknown, v


# The unknown → (jaxdp.sweep function, its positional arguments in order).
_SOLVERS = {
    "epsilon": ("epsilon", ("q", "sigma", "steps", "delta")),
    "delta": ("delta", ("q", "sigma", "steps", "epsilon")),
    "sigma": ("sigma", ("epsilon", "delta", "q", "steps")),
    "steps": ("steps", ("epsilon", "delta", "q", "sigma")),
    "q": ("sampling_rate", ("epsilon", "delta", "sigma", "steps")),
}


def _solve_group(unknown, vals, acc, progress):
  from jaxdp._src.solvers import sweep
  col = lambda k: np.array([r[k] for r in vals], np.float64)
  accountant = acc["accountant"]
  orders = acc.get("orders")
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)
    fn, args = _SOLVERS[unknown]
    return getattr(sweep, fn)(*(col(k) for k in args), accountant=accountant, orders=orders,
                              progress=progress)


def _tuned_epsilon(vals, per_run, tuning, orders):
  """ε of the tuned release (repeat-and-select, :func:`jaxdp.tuning.epsilon`)
  for rows whose unknown was epsilon, never below the per-run ε."""
  from jaxdp._src import events
  from jaxdp._src.solvers import tuning as tuning_mod
  col = lambda k: np.array([r[k] for r in vals], np.float64)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)
    tuned = tuning_mod.epsilon(events.SampledGaussian(col("q"), col("sigma")), col("steps"),
                               col("delta"), *tuning, orders=orders).tuned
  # Both are upper bounds; the tuned release is never less private than one run.
  return np.maximum(np.asarray(tuned, np.float64).reshape(-1), per_run)


_EXTRA = "__extra__"   # a parsed row's other columns, copied to the output as read


def _json_value(k, x):
  if x is None:
    return None
  if k in _INTEGER_COLUMNS and math.isfinite(x):
    return int(x)
  return x if math.isfinite(x) else str(x)


def _json_extra(x):
  """A JSON value as read (numbers were parsed as Decimal: back to int/float)."""
  if isinstance(x, decimal.Decimal):
    return float(x)
  if isinstance(x, list):
    return [_json_extra(y) for y in x]
  if isinstance(x, dict):
    return {k: _json_extra(y) for k, y in x.items()}
  return x


def _write_rows(path, columns, rows):
  ext = os.path.splitext(path)[1].lower()
  if ext not in (".csv", ".json"):
    raise ValueError(f"--out must end in .csv or .json; found {path!r}.")
  try:
    with open(path, "w", newline="") as f:
      if ext == ".csv":
        w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        w.writeheader()
        for r in rows:
          extra = r.get(_EXTRA, {})
          w.writerow({k: (("" if extra[k] is None else extra[k]) if k in extra else
                          "" if r.get(k) is None else _fmt(r[k])) for k in columns})
      else:
        out = []
        for r in rows:
          extra = r.get(_EXTRA, {})
          out.append({k: (_json_extra(extra[k]) if k in extra else _json_value(k, r.get(k)))
                      for k in columns})
        json.dump(out, f, indent=1)
        f.write("\n")
  except OSError as e:
    raise ValueError(f"cannot write {path!r}: {e.strerror or e}.") from None


def _cmd_sweep(args) -> int:
  acc = _acc(args)
  if args.tuning is not None:
    if args.accountant != "rdp":
      raise ValueError("--tuning needs --accountant rdp (the tuning theorems are RDP bounds).")
    from jaxdp._src.solvers import tuning as tuning_mod
    tuning_mod._distribution(*args.tuning)  # a bad MEAN or SHAPE: exit 2 before any work
  rows, columns = _read_rows(args.grid)
  progress = sys.stderr.isatty() if args.progress is None else args.progress
  parsed = []
  failed = 0
  for label, raw in rows:
    try:
      unknown, vals = _parse_row(raw)
    except ValueError as e:
      print(f"{_PROG}: {args.grid}, {label}: {e} (row skipped)", file=sys.stderr)
      failed += 1
      continue
    # Columns jaxdp does not read (ids, notes, ...) go to the output unchanged.
    vals[_EXTRA] = {k: x for k, x in raw.items() if k not in _QUANTITIES + _HELPERS}
    parsed.append((label, unknown, vals))
  for unknown in _QUANTITIES:
    group = [p for p in parsed if p[1] == unknown]
    if not group:
      continue
    result = _solve_group(unknown, [g[2] for g in group], acc, progress)
    if unknown == "epsilon" and args.tuning is not None:
      tuned = _tuned_epsilon([g[2] for g in group], np.asarray(result, np.float64).reshape(-1),
                             args.tuning, acc.get("orders"))
      for (_, _, vals), value in zip(group, tuned):
        vals["epsilon_tuned"] = float(value)
    for (label, _, vals), value in zip(group, np.asarray(result).reshape(-1)):
      vals[unknown] = float(value)
      if unknown == "q" and vals["dataset_size"] is not None:
        vals["batch_size"] = float(math.floor(value * vals["dataset_size"] + 1e-9))
      if (unknown == "sigma" and math.isinf(value)) or (unknown == "q" and value == 0.0):
        print(f"{_PROG}: {args.grid}, {label}: the target epsilon cannot be met "
              f"({unknown} = {_fmt(value)})", file=sys.stderr)
        failed += 1
  out_cols = list(columns) + [k for k in _QUANTITIES if k not in columns]
  if any(p[1] == "q" and p[2]["dataset_size"] is not None for p in parsed) and \
      "batch_size" not in out_cols:
    out_cols.append("batch_size")
  if args.tuning is not None and "epsilon_tuned" not in out_cols:
    out_cols.insert(out_cols.index("epsilon") + 1, "epsilon_tuned")
  _write_rows(args.out, out_cols, [p[2] for p in parsed])
  print(f"{_PROG}: wrote {len(parsed)} row(s) to {args.out}"
        + (f"; {failed} row(s) failed" if failed else ""), file=sys.stderr)
  return 1 if failed else 0


# --------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------


def _enable_cache():
  """Persistent compilation cache for the command (``JAXDP_CACHE_DIR``, or
  ``off``); a process that already configured a JAX cache keeps its own."""
  import os  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  from jaxdp._src.core import cache as _cache  # pylint: disable=g-import-not-at-top
  if os.environ.get(_cache.ENV) is None and jax.config.jax_compilation_cache_dir:
    return
  try:
    _cache.enable_compilation_cache()
  except OSError:  # an unwritable cache directory only costs speed
    pass


def main(argv: Optional[List[str]] = None) -> int:
  """Runs the ``jaxdp`` command line; returns the exit status."""
  _enable_cache()
  parser = _build_parser()
  try:
    args = parser.parse_args(argv)
    if args.command is None:
      parser.print_help()
      return 2
    if args.command in ("epsilon", "delta"):
      return _cmd_forward(args)
    if args.command == "calibrate":
      return _cmd_calibrate(args)
    return _cmd_sweep(args)
  except (_UsageError, ValueError) as e:
    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    print(f"{_PROG}: error: {msg}", file=sys.stderr)
    return 2
  except KeyboardInterrupt:
    print(f"{_PROG}: interrupted", file=sys.stderr)
    return 130


if __name__ == "__main__":
  sys.exit(main())
