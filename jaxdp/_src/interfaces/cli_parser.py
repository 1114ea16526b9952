"""Argument parsing of the ``jaxdp`` command line (:mod:`jaxdp._src.interfaces.cli`).

The subcommands' parsers (``add_*_command``) and their argument types
(counts, orders, FPR lists, tuning distributions, whole numbers read exactly
by :func:`exact_number`), the one-line :class:`UsageError`, the number
format of the printed answers (:func:`format_number`) and the accountant
keyword arguments every command passes on (:func:`accountant_kwargs`): the
names :mod:`jaxdp._src.interfaces.cli` and
:mod:`jaxdp._src.interfaces.cli_sweep` share. Split out of
:mod:`jaxdp._src.interfaces.cli` (moves only).
"""

from __future__ import annotations

import argparse
import decimal
import math

import numpy as np


PROG = "jaxdp"
# Sweep columns: the five DP-SGD quantities (one is the unknown) and helpers.
QUANTITIES = ("epsilon", "delta", "sigma", "steps", "q")
HELPERS = ("batch_size", "dataset_size", "epochs")


class UsageError(Exception):
  pass


class Parser(argparse.ArgumentParser):
  """ArgumentParser whose errors are one line on stderr and exit status 2."""

  def error(self, message):
    raise UsageError(f"{message} (see '{self.prog} --help')")


def format_number(x) -> str:
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
                 "balls-in-bins epsilon/delta default to pld too (random allocation's "
                 "certified PLD); "
                 "rdp: Renyi DP (the default of the other samplers, of balls-in-bins "
                 "calibrate, and with --orders or --tuning)")
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
      return exact_number(name, text, whole=True)
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


def add_epsilon_command(sub) -> None:
  """The ``epsilon`` subcommand's parser."""
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


def add_delta_command(sub) -> None:
  """The ``delta`` subcommand's parser."""
  p = sub.add_parser("delta", help="delta of a DP-SGD run at a given epsilon",
                     description="Print the delta (an upper bound) of a DP-SGD run at the "
                     "given epsilon.")
  _add_mechanism(p)
  p.add_argument("--epsilon", type=float, required=True, help="epsilon >= 0")


def add_calibrate_command(sub) -> None:
  """The ``calibrate`` subcommand's parser."""
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


def add_sweep_command(sub) -> None:
  """The ``sweep`` subcommand's parser."""
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


# Columns and options holding whole numbers: parsed exactly (never through a
# float, which rounds 2**53 + 1 to 2**53) and refused beyond 2**53.
INTEGER_COLUMNS = ("steps", "batch_size", "dataset_size")


def exact_number(name, value, whole=None):
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
    whole = name in INTEGER_COLUMNS
  if whole and isinstance(value, int):
    nx.check_array(name, value, integer=True)
  return float(value)


def accountant_kwargs(args):
  """accountant/orders keyword arguments (orders only for RDP)."""
  if args.orders is not None and args.accountant == "pld":
    raise ValueError("--orders applies to --accountant rdp only.")
  kw = dict(accountant=args.accountant)
  if args.orders is not None:
    kw["orders"] = np.asarray(args.orders)
  return kw


_SAMPLER_CHOICES = ("poisson", "truncated-poisson", "fixed", "balls-in-bins", "shuffle")
