"""How the public facades (``jaxdp.rdp``, ``jaxdp.pld``, ...) adopt their names.

The implementation lives in ``jaxdp._src``; each public module re-exports the
names of one implementation module and calls :func:`adopt`, so that classes
and functions defined there report the public module as their ``__module__``
(stable reprs, pickles and documentation), as jax and optax do.
"""

from __future__ import annotations

__all__ = ["adopt"]


def adopt(public_name: str, impls, namespace: dict, names) -> None:
  """Sets ``__module__ = public_name`` on the objects of ``names`` that the
  implementation module(s) ``impls`` define (an object defined elsewhere keeps
  its module: it belongs to the facade of its own implementation module).

  Args:
    public_name: the facade's ``__name__``.
    impls: the implementation module the facade mirrors, or a tuple of them.
    namespace: the facade's ``globals()``.
    names: the facade's ``__all__``.
  """
  owners = {m.__name__ for m in (impls if isinstance(impls, tuple) else (impls,))}
  for name in names:
    obj = namespace[name]
    if getattr(obj, "__module__", None) in owners:
      try:
        obj.__module__ = public_name
      except (AttributeError, TypeError):   # builtins and C-level wrappers
        pass
