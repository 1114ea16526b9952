"""Prints the architecture counts issue 36 is judged by (static, no imports).

  python tools/arch_metrics.py [package_dir]

Counts, over the package's modules (``jaxdp`` by default):

* modules over 500 lines;
* functions over 60 lines of code (docstrings, comments and blank lines not
  counted);
* private names imported across modules (``from jaxdp.x import _y`` and
  ``jaxdp.x._y`` attribute reads of another module), and how many of them
  cross a layer of ``jaxdp/_src`` or go through a public module;
* jaxdp-internal imports made inside functions;
* import cycles: strongly connected components of the module import graph,
  imports inside functions included (their sizes);
* root finders: functions whose names say they solve or bisect (a heuristic
  list, printed for review), and the bracketing loops themselves (a loop
  updating both ends of a bracket), those outside ``core/`` listed;
* test files (every ``.py`` under ``tests/`` beside the package) that import
  ``jaxdp._src`` instead of the public modules (for private names and
  monkeypatches of the module that reads them).
"""

from __future__ import annotations

import ast
import io
import os
import sys
import tokenize


def _modules(pkg_dir, pkg):
  out = {}
  for root, _, files in os.walk(pkg_dir):
    for f in files:
      if f.endswith(".py"):
        path = os.path.join(root, f)
        rel = os.path.relpath(path, os.path.dirname(pkg_dir))[:-3].replace(os.sep, ".")
        if rel.endswith(".__init__"):
          rel = rel[: -len(".__init__")]
        out[rel] = path
  return out


def _code_lines(src, node):
  """Lines of code of a function: its span minus blank, comment-only and
  docstring lines."""
  lines = set(range(node.lineno, node.end_lineno + 1))
  doc = ast.get_docstring(node, clean=False)
  if doc is not None and node.body and isinstance(node.body[0], ast.Expr):
    d = node.body[0]
    lines -= set(range(d.lineno, d.end_lineno + 1))
  text = src.splitlines()
  return sum(1 for i in lines if text[i - 1].strip() and not text[i - 1].strip().startswith("#"))


def _resolve(mod, level, name, pkg_of):
  if level == 0:
    return name
  base = pkg_of.split(".")
  base = base[: len(base) - level + 1] if level > 1 else base
  return ".".join(base + ([name] if name else []))


def analyse(pkg_dir):
  pkg = os.path.basename(os.path.normpath(pkg_dir))
  mods = _modules(pkg_dir, pkg)
  edges = {m: set() for m in mods}
  big_modules, big_functions, private, inner, finders, loops = [], [], [], 0, [], []
  for mod, path in sorted(mods.items()):
    src = open(path, encoding="utf-8").read()
    tree = ast.parse(src)
    n_lines = len(src.splitlines())
    if n_lines > 500:
      big_modules.append((mod, n_lines))
    is_pkg = path.endswith("__init__.py")
    pkg_of = mod if is_pkg else mod.rsplit(".", 1)[0]
    func_stack = []

    def visit(node, in_func):
      nonlocal inner
      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        loc = _code_lines(src, node)
        if loc > 60:
          big_functions.append((f"{mod}.{node.name}", loc))
        lname = node.name.lower()
        if any(k in lname for k in ("bisect", "solve", "bracket", "root", "secant",
                                    "golden", "newton", "boundary")):
          finders.append(f"{mod}.{node.name}")
        if _has_bracket_loop(node):
          loops.append(f"{mod}.{node.name}")
        for child in ast.iter_child_nodes(node):
          visit(child, True)
        return
      if isinstance(node, (ast.Import, ast.ImportFrom)):
        targets = []
        if isinstance(node, ast.Import):
          targets = [(a.name, None) for a in node.names]
        else:
          base = _resolve(mod, node.level, node.module or "", pkg_of)
          for a in node.names:
            sub = f"{base}.{a.name}"
            targets.append((sub if sub in mods else base, a.name))
        for target, name in targets:
          if target.split(".")[0] != pkg:
            continue
          if target in mods and target != mod:
            edges[mod].add(target)
            if in_func:
              inner += 1
          if name and name.startswith("_") and not name.startswith("__") and target != mod:
            private.append((mod, f"{target}.{name}"))
      if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
        base = node.value
        if isinstance(base, ast.Name) and base.id in _aliases.get(mod, {}):
          private.append((mod, f"{_aliases[mod][base.id]}.{node.attr}"))
      for child in ast.iter_child_nodes(node):
        visit(child, in_func)

    # module aliases: names bound to jaxdp modules by imports in this module
    _aliases[mod] = {}
    for node in ast.walk(tree):
      if isinstance(node, ast.ImportFrom):
        base = _resolve(mod, node.level, node.module or "", pkg_of)
        for a in node.names:
          sub = f"{base}.{a.name}"
          if sub in mods:
            _aliases[mod][a.asname or a.name] = sub
      elif isinstance(node, ast.Import):
        for a in node.names:
          if a.name in mods and a.asname:
            _aliases[mod][a.asname] = a.name
    visit(tree, False)
  cycles = _sccs(edges)
  return dict(modules=len(mods), big_modules=big_modules, big_functions=big_functions,
              private=sorted(set(private)), inner_imports=inner, cycles=cycles,
              finders=finders, loops=loops)


_aliases = {}

_BRACKET_NAMES = {"lo", "hi", "a", "b", "left", "right", "lower", "upper", "y_lo", "y_hi",
                  "ylo", "yhi", "x_lo", "x_hi", "low", "high", "s_lo", "s_hi", "t_lo", "t_hi",
                  "yi", "yf", "feas", "infeas"}


def _has_bracket_loop(func):
  """A loop (``while``/``for``, or a ``lax.while_loop`` body) of this very
  function that updates both ends of a bracket (two of the usual names)."""
  for node in ast.walk(func):
    if isinstance(node, (ast.While, ast.For)):
      assigned = set()
      for sub in ast.walk(node):
        targets = []
        if isinstance(sub, ast.Assign):
          targets = sub.targets
        elif isinstance(sub, (ast.AugAssign, ast.AnnAssign)):
          targets = [sub.target]
        for t in targets:
          for leaf in ast.walk(t):
            if isinstance(leaf, ast.Name):
              assigned.add(leaf.id)
            elif isinstance(leaf, ast.Subscript) and isinstance(leaf.value, ast.Name):
              assigned.add(leaf.value.id)
      if len(assigned & _BRACKET_NAMES) >= 2:
        return True
  return False


def _sccs(edges):
  """Strongly connected components with more than one module (Tarjan)."""
  index, low, stack, on, out = {}, {}, [], set(), []
  counter = [0]
  sys.setrecursionlimit(10000)

  def strong(v):
    index[v] = low[v] = counter[0]
    counter[0] += 1
    stack.append(v)
    on.add(v)
    for w in edges.get(v, ()):
      if w not in index:
        strong(w)
        low[v] = min(low[v], low[w])
      elif w in on:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      comp = []
      while True:
        w = stack.pop()
        on.discard(w)
        comp.append(w)
        if w == v:
          break
      if len(comp) > 1:
        out.append(sorted(comp))

  for v in sorted(edges):
    if v not in index:
      strong(v)
  return out


def _imports_src(tree):
  """Whether a module imports ``jaxdp._src`` (anywhere, inside functions too)
  or reads it as ``jaxdp._src``."""
  for node in ast.walk(tree):
    if isinstance(node, ast.Import) and any(
        a.name == "jaxdp._src" or a.name.startswith("jaxdp._src.") for a in node.names):
      return True
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and (
        node.module == "jaxdp._src" or node.module.startswith("jaxdp._src.")
        or (node.module == "jaxdp" and any(a.name == "_src" for a in node.names))):
      return True
    if (isinstance(node, ast.Attribute) and node.attr == "_src"
        and isinstance(node.value, ast.Name) and node.value.id == "jaxdp"):
      return True
  return False


def _tests_importing_src(tests_dir):
  """The test files (every ``.py`` under ``tests_dir``) that import the
  implementation ``jaxdp._src`` rather than the public modules, and how many
  files there are."""
  users, total = [], 0
  for root, _, files in os.walk(tests_dir):
    for f in sorted(files):
      if f.endswith(".py"):
        total += 1
        path = os.path.join(root, f)
        if _imports_src(ast.parse(open(path, encoding="utf-8").read())):
          users.append(os.path.relpath(path, tests_dir))
  return sorted(users), total


def _layer(module):
  """The layer of a module: ``jaxdp._src.<layer>...``, or ``public`` above them."""
  parts = module.split(".")
  return parts[2] if len(parts) > 2 and parts[1] == "_src" else "public"


def main(argv):
  pkg_dir = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "jaxdp")
  r = analyse(os.path.normpath(pkg_dir))
  print(f"modules: {r['modules']}")
  print(f"modules over 500 lines: {len(r['big_modules'])}  "
        + ", ".join(f"{m} ({n})" for m, n in sorted(r['big_modules'], key=lambda x: -x[1])))
  print(f"functions over 60 lines of code: {len(r['big_functions'])}  "
        + ", ".join(f"{m} ({n})" for m, n in sorted(r['big_functions'], key=lambda x: -x[1])[:15])
        + (" ..." if len(r['big_functions']) > 15 else ""))
  users = {}
  for user, name in r["private"]:
    users.setdefault(name, set()).add(user)
  print(f"private names imported across modules: {len(users)} names, {len(r['private'])} uses")
  crossing = {(u, n) for u, n in r["private"] if _layer(u) != _layer(n.rsplit(".", 1)[0])}
  print(f"  of which across layers (or through a public module): {len({n for _, n in crossing})} "
        f"names, {len(crossing)} uses")
  print(f"jaxdp imports inside functions: {r['inner_imports']}")
  print(f"import cycles: {len(r['cycles'])} " + "; ".join(
      f"{len(c)} modules ({', '.join(x.split('.')[-1] for x in c)})" for c in r["cycles"]))
  print(f"root-finder candidates (by name): {len(r['finders'])}  " + ", ".join(r["finders"]))
  outside = [f for f in r["loops"] if ".core." not in f]
  print(f"bracketing loops (a loop updating both ends of a bracket): {len(r['loops'])}, "
        f"{len(outside)} outside core/  " + ", ".join(outside))
  tests_dir = os.path.join(os.path.dirname(os.path.normpath(pkg_dir)), "tests")
  if os.path.isdir(tests_dir):
    private_users, n_files = _tests_importing_src(tests_dir)
    print(f"test files importing jaxdp._src: {len(private_users)} of {n_files} (tests/**/*.py)")


if __name__ == "__main__":
  main(sys.argv)
