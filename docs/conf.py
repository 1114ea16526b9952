"""Sphinx configuration of the jaxdp documentation site.

Build (offline, warnings are errors)::

    pip install -e '.[docs]' && sphinx-build -W --keep-going -b html docs docs/_build/html

Some sources are written here at every build, so they always match the code
(all are git-ignored):

* ``docs/api/``: one page per submodule in ``jaxdp.__all__`` (``automodule``
  of the names in its ``__all__``) and an index with the top-level names;
* ``docs/_generated/help_*.txt``: ``jaxdp --help`` and each subcommand's help;
* ``docs/benchmark_results.md``: tables of ``benchmarks/results/*.json``;
* ``docs/notebooks/``: copies of ``notebooks/*.ipynb``, rendered from their
  stored outputs and never executed (``nb_execution_mode = "off"``).
"""

import contextlib
import importlib
import inspect
import io
import json
import os
import pathlib
import shutil
import sys
import textwrap

DOCS = pathlib.Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))

import jaxdp  # noqa: E402  (the package documented; installed editable)
import numpy as np  # noqa: E402
from sphinx.pycode import ModuleAnalyzer  # noqa: E402

# -- Project ------------------------------------------------------------------
project = "jaxdp"
author = "the jaxdp authors"
copyright = "the jaxdp authors"  # noqa: A001
release = jaxdp.__version__
version = release

# -- Extensions ---------------------------------------------------------------
extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",      # Google-style Args / Returns / Raises
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "myst_nb",                  # MyST Markdown pages + stored notebooks
    "sphinx-mathjax-offline",   # ships MathJax 3 into _static: math renders offline
]

source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "**.ipynb_checkpoints"]

# Cross-references to names outside this project (jax.Array, optax types, ...)
# are not resolvable offline; nitpicky mode stays off (Sphinx's default), so
# they render as plain text instead of failing the build.
nitpicky = False

# -- autodoc / napoleon -------------------------------------------------------
autodoc_default_options = {
    "members": True,
    "undoc-members": True,      # every name in a module's __all__ gets an entry
    # The public modules are facades over jaxdp._src (docs/architecture.md):
    # their names are imported, and each module's __all__ bounds its members.
    "imported-members": True,
    "member-order": "bysource",
}
autodoc_typehints = "signature"
autodoc_preserve_defaults = True   # show ``orders=DEFAULT_ORDERS``, not the array
autoclass_content = "both"
napoleon_google_docstring = True
napoleon_numpy_docstring = False   # the docstrings are Google style; "Title\n----"
                                   # blocks in module docstrings are RST sections
napoleon_use_rtype = False
napoleon_use_ivar = True          # Attributes: as a field list, not duplicate entries


def _skip_class_fields(app, what, name, obj, skip, options):
  """Inside a class, documents methods and properties but not data fields.

  ``undoc-members`` is on so that every module-level name of ``__all__`` gets
  an entry; for classes, the fields (NamedTuple / dataclass) are described by
  the class docstring's ``Attributes:`` section (a field list) and shown in
  the signature, so autodoc's bare "Alias for field number 0" entries are left
  out.
  """
  if what == "class" and not skip:
    if not (inspect.isroutine(obj) or isinstance(obj, (property, classmethod, staticmethod))):
      return True
  return None


def _drop_type_docstrings(app, what, name, obj, options, lines):
  """A data value has no docstring of its own: do not show its type's (ndarray, tuple)."""
  if what == "data" and lines and not (inspect.isroutine(obj) or inspect.isclass(obj)):
    own = inspect.cleandoc(getattr(obj, "__doc__", None) or "").splitlines()
    if own and lines[0].strip() == own[0].strip():   # the value's type docstring
      lines.clear()


def setup(app):
  app.connect("autodoc-skip-member", _skip_class_fields)
  app.connect("autodoc-process-docstring", _drop_type_docstrings)

# -- MyST / notebooks ---------------------------------------------------------
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3
nb_execution_mode = "off"          # render the stored outputs; never execute
nb_merge_streams = True

# -- HTML ---------------------------------------------------------------------
html_theme = "furo"
html_title = f"jaxdp {release}"
html_static_path = []
html_show_sourcelink = False

# -- Generated sources --------------------------------------------------------


def _write_if_changed(path: pathlib.Path, text: str) -> None:
  path.parent.mkdir(parents=True, exist_ok=True)
  if not path.exists() or path.read_text(encoding="utf-8") != text:
    path.write_text(text, encoding="utf-8")


def _public_modules():
  """The submodules listed in ``jaxdp.__all__`` (loaded lazily by jaxdp)."""
  out = []
  for name in jaxdp.__all__:
    obj = getattr(jaxdp, name)
    if isinstance(obj, type(jaxdp)):
      out.append(name)
  return out


def _first_line(module) -> str:
  doc = (module.__doc__ or "").strip().splitlines()
  return doc[0].rstrip(".") if doc else module.__name__


def _undocumented_data(mod):
  """Explicit ``autodata`` entries for the data names of ``__all__`` without a doc comment.

  ``automodule :members:`` documents module-level data only when it has a
  ``#:`` comment or a docstring after the assignment (Sphinx >= 9 skips the
  others even with ``:undoc-members:``, older versions do not), so those are
  excluded from ``automodule`` and get their own entry, the same in every
  Sphinx version. Returns ``(names, rst_lines)``.
  """
  analyzer = ModuleAnalyzer.for_module(mod.__name__)
  analyzer.analyze()
  names, lines = [], []
  for name in mod.__all__:
    obj = getattr(mod, name)
    if inspect.isroutine(obj) or inspect.isclass(obj) or ("", name) in analyzer.attr_docs:
      continue
    names.append(name)
    lines += [f".. autodata:: {mod.__name__}.{name}"]
    if isinstance(obj, np.ndarray):
      lines += ["   :no-value:", "",
                f"   NumPy array of shape ``{obj.shape}``, from ``{obj.min():g}`` to ``{obj.max():g}``."]
    lines += [""]
  return names, lines


def _directive(obj) -> str:
  """The autodoc directive for a top-level name of ``jaxdp.__all__``."""
  if inspect.isclass(obj):
    return "autoexception" if issubclass(obj, BaseException) else "autoclass"
  return "autofunction" if inspect.isroutine(obj) else "autodata"


def _generate_api() -> None:
  api = DOCS / "api"
  modules = _public_modules()
  top_funcs = [n for n in jaxdp.__all__ if n not in modules]   # functions, classes, data
  lines = [
      "API reference", "=============", "",
      "Every public name: the top-level names of :mod:`jaxdp` and one page per",
      "submodule listed in ``jaxdp.__all__`` (submodules are imported lazily on first",
      "access, ``import jaxdp`` stays cheap). Each page documents the names in that",
      "module's ``__all__``.", "",
      ".. module:: jaxdp", "",
  ]
  for n in top_funcs:
    directive = _directive(getattr(jaxdp, n))
    lines += [f".. {directive}:: jaxdp.{n}"]
    lines += ["   :show-inheritance:", ""] if directive == "autoexception" else [""]
  lines += ["Submodules", "----------", "", ".. toctree::", "   :maxdepth: 1", "   :hidden:", ""]
  lines += [f"   {m}" for m in modules] + [""]
  lines += ["", ".. list-table::", "   :header-rows: 0", ""]
  for m in modules:
    mod = importlib.import_module(f"jaxdp.{m}")
    lines += [f"   * - :mod:`jaxdp.{m}`", f"     - {_first_line(mod)}"]
  lines += [""]
  _write_if_changed(api / "index.rst", "\n".join(lines))
  for m in modules:
    mod = importlib.import_module(f"jaxdp.{m}")
    title = f"``jaxdp.{m}``"
    data_names, data_lines = _undocumented_data(mod)
    page = [title, "=" * len(title), "", f".. automodule:: jaxdp.{m}",
            "   :members:", "   :undoc-members:"]
    if data_names:
      page += [f"   :exclude-members: {', '.join(data_names)}"]
    page += [""] + data_lines
    _write_if_changed(api / f"{m}.rst", "\n".join(page))
  for stale in api.glob("*.rst"):
    if stale.stem not in modules and stale.stem != "index":
      stale.unlink()


def _wrap(text: str, width: int) -> str:
  """Wraps the lines argparse leaves long (raw descriptions), keeping their indent."""
  out = []
  for line in text.splitlines():
    if len(line) <= width:
      out.append(line)
      continue
    indent = line[:len(line) - len(line.lstrip())]
    out += textwrap.wrap(line.strip(), width, initial_indent=indent, subsequent_indent=indent,
                         break_long_words=False, break_on_hyphens=False)
  return "\n".join(out) + "\n"


def _generate_cli_help() -> None:
  """``jaxdp --help`` and each subcommand's help, as the user sees them."""
  from jaxdp import cli
  os.environ["COLUMNS"] = "88"     # argparse wraps to the terminal width
  out = DOCS / "_generated"
  for cmd in ("", "epsilon", "delta", "calibrate", "sweep"):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.suppress(SystemExit):
      cli.main(([cmd] if cmd else []) + ["--help"])
    _write_if_changed(out / f"help_{cmd or 'main'}.txt", _wrap(buf.getvalue(), 88))


def _fmt_value(v) -> str:
  if isinstance(v, bool) or v is None:
    text = str(v)
  elif isinstance(v, float):
    text = f"{v:.4g}"
  elif isinstance(v, (list, dict)):
    text = "`" + json.dumps(v, separators=(", ", ": ")) + "`"
  else:
    text = str(v)
  return text.replace("|", "\\|").replace("\n", " ") or "–"


def _flatten(d, prefix=""):
  """Nested dicts as one level of ``a.b.c`` keys (lists are kept as they are)."""
  out = {}
  for k, v in d.items():
    if isinstance(v, dict) and v:
      out.update(_flatten(v, f"{prefix}{k}."))
    else:
      out[f"{prefix}{k}"] = v
  return out


def _generate_benchmark_tables() -> None:
  """The page ``benchmark_results``: per ``benchmarks/results/*.json`` its fields and rows."""
  out = ["<!-- generated by docs/conf.py from benchmarks/results/*.json -->", "",
         "# Stored results: `benchmarks/results/*.json`", "",
         "Each benchmark script writes `benchmarks/results/NAME.json` (machine, jax version,",
         "device, all figures); the tables below are generated from those files when this",
         "site is built. Times are in seconds (`_s`) or milliseconds (`_ms`); `quick: True`",
         "marks a smoke-test run on small grids.", ""]
  for path in sorted((ROOT / "benchmarks" / "results").glob("*.json")):
    data = json.loads(path.read_text(encoding="utf-8"))
    out += [f"## `{path.name}`", ""]
    if not isinstance(data, dict):
      out += ["```json", json.dumps(data, indent=1), "```", ""]
      continue
    scalars = {k: v for k, v in _flatten(data).items()
               if not (isinstance(v, list) and v and all(isinstance(r, dict) for r in v))}
    out += ["| field | value |", "|---|---|"]
    out += [f"| `{k}` | {_fmt_value(v)} |" for k, v in scalars.items()] + [""]
    for key, rows in _flatten(data).items():
      if key in scalars:
        continue
      cols = []
      for r in rows:
        cols += [c for c in r if c not in cols]
      out += [f"`{key}`:", "", "| " + " | ".join(f"`{c}`" for c in cols) + " |",
              "|" + "---|" * len(cols)]
      out += ["| " + " | ".join(_fmt_value(r.get(c, "")) for c in cols) + " |" for r in rows]
      out += [""]
  _write_if_changed(DOCS / "benchmark_results.md", "\n".join(out))


def _link_notebooks() -> None:
  """Copies notebooks/*.ipynb (stored outputs included) to docs/notebooks/."""
  dst = DOCS / "notebooks"
  dst.mkdir(exist_ok=True)
  sources = sorted((ROOT / "notebooks").glob("*.ipynb"))
  for nb in sources:
    target = dst / nb.name
    if not target.exists() or target.read_bytes() != nb.read_bytes():
      shutil.copyfile(nb, target)
  for stale in dst.glob("*.ipynb"):
    if stale.name not in {nb.name for nb in sources}:
      stale.unlink()


_generate_api()
_generate_cli_help()
_generate_benchmark_tables()
_link_notebooks()
