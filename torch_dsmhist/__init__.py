"""torch_dsmhist: a histogram operator for PyTorch, fast on Hopper through thread block clusters and distributed
shared memory, with CPU and pre-Hopper fallbacks.

The op is ``torch.ops.dsmhist.histogram``; this package loads it and adds a typed Python API:

* :func:`histogram` — the op, with docstring and type hints;
* :func:`histogram_add_` — add into an existing histogram (running histograms over a dataset);
* :func:`batched_histogram` — one histogram per row of ``[..., N]``;
* :func:`bincount`, :func:`histc` — drop-ins for ``torch.bincount`` / ``torch.histc`` (the README's table says
  where they differ);
* :func:`histogram_edges`, :func:`histogramdd` — histograms over sorted bin edges, 1-D and N-D;
* :mod:`torch_dsmhist.dropins` — every drop-in by torch's name: ``bincount``, ``histc``, ``histogram``,
  ``histogramdd`` (for ``torch.histogram`` / ``torch.histogramdd``, whose names the package's own ops use);
* :func:`moe_align_block_size`, :func:`moe_routing` — mixture-of-experts routing: token ids grouped by expert (in
  a deterministic order), padded to whole blocks;
* :func:`plan` — the strategy the op would use on a device; :func:`force_tier` — force one (tests, benchmarks).

:mod:`torch_dsmhist.distributed` (imported on use) gives global histograms of data sharded across processes through
``torch.distributed``.
"""

import torch  # noqa: F401  (loads libtorch, which _C links against)

from ._install import load_extension as _load_extension

_C = _load_extension()  # registers torch.ops.dsmhist.*; an ImportError naming both torch versions on a mismatch
# After the extension: _fake registers the fake kernels (torch.compile, meta tensors) of the ops it defines, _vmap
# their batching rules (torch.vmap).
from . import _fake, _vmap, dropins  # noqa: E402, F401
from ._api import (  # noqa: E402
    Plan,
    batched_histogram,
    built_with_cuda,
    force_tier,
    histogram,
    histogram_add_,
    plan,
)
from ._dropins import bincount, histc  # noqa: E402
from ._edges_api import histogram_edges, histogramdd  # noqa: E402
from ._moe import MoeRouting, moe_align_block_size, moe_routing  # noqa: E402
from ._version import __version__  # noqa: E402

# Written out (not built from the submodules' lists) so that type checkers see what the package exports.
__all__ = [
    "MoeRouting",
    "Plan",
    "__version__",
    "batched_histogram",
    "bincount",
    "built_with_cuda",
    "dropins",
    "force_tier",
    "histc",
    "histogram",
    "histogram_add_",
    "histogram_edges",
    "histogramdd",
    "moe_align_block_size",
    "moe_routing",
    "plan",
]
