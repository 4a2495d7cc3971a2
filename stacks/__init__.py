"""Stack adapters, one module per serving stack. Importing the package imports every module of it, so each
adapter registers itself by `kind` (stacks.base.register): nothing central lists the stacks by name."""

import importlib
import pkgutil

from stacks.base import REGISTRY, Stack, get_stack

for _mod in pkgutil.iter_modules(__path__):
    if not _mod.ispkg:
        importlib.import_module(f"{__name__}.{_mod.name}")

__all__ = ["REGISTRY", "Stack", "get_stack"]
