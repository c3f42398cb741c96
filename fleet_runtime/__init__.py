"""Embedded StackStorm-compatible runtime and the `fleet-rollout` CLI.

Runs the pack's own metadata, actions and Orquesta workflows on one machine. The pack never
imports this package.

Importing the package makes PyPI's orquesta 1.2.0 (and its networkx 1.11) importable on
Python 3.11 (`fractions.gcd`, `collections.<ABC>` aliases); `fleet_runtime.compat` applies the
rest of the fixes and registers st2's expression functions.
"""
import collections as _collections
import collections.abc as _abc
import fractions as _fractions
import math as _math

if not hasattr(_fractions, "gcd"):
    _fractions.gcd = _math.gcd  # type: ignore[attr-defined]
for _name in ("Mapping", "MutableMapping", "Sequence", "MutableSequence", "Iterable",
              "Iterator", "Callable", "Hashable", "Set", "MutableSet", "Sized", "Container"):
    if not hasattr(_collections, _name):
        setattr(_collections, _name, getattr(_abc, _name))
