"""Loading the compiled extension, with an error a user can act on when it was built against another torch.

A torch extension links torch's C++ symbols, which change from release to release: built against one torch and
imported under another, it fails with a bare "undefined symbol" (or worse, loads and misbehaves). setup.py records
the torch it compiled against (``_build_info.py``) and requires that release exactly; this module compares it with
the torch being imported before loading anything.
"""

import importlib
from types import ModuleType
from typing import Optional

import torch

REBUILD_HINT = (
    "rebuild torch_dsmhist against the installed torch: pip install --no-build-isolation --force-reinstall "
    "--no-deps . (from the source tree), or install the torch it was built with"
)


def _release(version: str) -> str:
    """'2.13.0' of '2.13.0+cpu': the part of a version the C++ ABI follows (the local build tag does not)."""
    return version.split("+")[0]


def built_against() -> Optional[str]:
    """The torch version this build of the extension was compiled against; None in a source tree never built."""
    try:
        from ._build_info import TORCH_VERSION
    except ImportError:
        return None
    return str(TORCH_VERSION)


def check_torch_version(running: str, built: Optional[str]) -> None:
    """Raise ImportError naming both versions and the fix when ``running`` is another torch release than ``built``."""
    if built is not None and _release(running) != _release(built):
        raise ImportError(
            f"torch_dsmhist was built against torch {built} but torch {running} is installed; its compiled "
            f"extension only works with the torch it was built against. To fix: {REBUILD_HINT}."
        )


def load_extension() -> ModuleType:
    """Import ``torch_dsmhist._C`` after the version check; an ImportError from the loader gets the same hint."""
    check_torch_version(torch.__version__, built_against())
    try:
        return importlib.import_module("torch_dsmhist._C")
    except ImportError as error:
        raise ImportError(
            f"torch_dsmhist's compiled extension could not be loaded under torch {torch.__version__} "
            f"(built against {built_against() or 'an unknown torch'}): {error}. If it is an undefined symbol, "
            f"{REBUILD_HINT}."
        ) from error
