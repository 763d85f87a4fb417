"""Build torch_dsmhist.

By default (auto) the CUDA sources are built only when they can be used or are asked for: a CUDA GPU is visible
(then for that GPU's architecture, as torch does when TORCH_CUDA_ARCH_LIST is unset), or TORCH_CUDA_ARCH_LIST is set;
and a CUDA toolkit (nvcc) and a CUDA build of torch are present. Otherwise the extension is CPU-only: nvcc on a
machine without a GPU would spend minutes on kernels nobody there can run. Environment variables:

  DSMHIST_CUDA=1 | 0       force the CUDA build on (failing if it is impossible; e.g. a wheel built on a GPU-less
                           host) or off; default: auto
  TORCH_CUDA_ARCH_LIST     GPU targets, honoured as torch does; with DSMHIST_CUDA=1 and no GPU visible the default
                           is "8.0;9.0+PTX" (the cluster tier needs 9.0)
  MAX_JOBS                 parallel compile jobs (ninja)

The CPU sources are compiled and linked with OpenMP: ATen's parallel_for is a header template that forks only in a
translation unit compiled with OpenMP (torch's OpenMP backend); without it the CPU path runs on one thread.
"""

import os
import re
import subprocess

import torch
import torch.utils.cpp_extension as cpp_extension
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_ARCH_LIST = "8.0;9.0+PTX"
# The torch this build compiles against. A compiled extension links torch's C++ symbols, which change between
# releases (an import under another torch fails with "undefined symbol"), so the package requires this release
# exactly, and records the full version for the import-time check in torch_dsmhist/__init__.py.
TORCH_RELEASE = torch.__version__.split("+")[0]
BUILD_INFO = os.path.join(HERE, "torch_dsmhist", "_build_info.py")


def write_build_info() -> None:
    text = (
        '"""Written by setup.py at build time (not in git): what this build of the extension was compiled against."""\n'
        f"TORCH_VERSION = {torch.__version__!r}\n"
    )
    current = open(BUILD_INFO).read() if os.path.exists(BUILD_INFO) else None
    if current != text:
        with open(BUILD_INFO, "w") as f:
            f.write(text)


def find_cuda_home():
    """The CUDA toolkit to build with: the first candidate holding both nvcc and the runtime headers.

    torch guesses the parent folder of the first `nvcc` on PATH, which is wrong when that nvcc is a wrapper script
    (seen: /usr/local/bin/nvcc exec'ing /usr/local/cuda-13.0/bin/nvcc gave CUDA_HOME=/usr/local, with no headers).
    """
    candidates = [cpp_extension.CUDA_HOME, os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    for home in candidates:
        if home and all(
            os.path.isfile(os.path.join(home, *part)) for part in (("bin", "nvcc"), ("include", "cuda_runtime_api.h"))
        ):
            return home
    return None


CUDA_HOME = find_cuda_home()
cpp_extension.CUDA_HOME = CUDA_HOME  # torch's build helpers read it from there when they run


def nvcc_major_version():
    try:
        out = subprocess.run(
            [os.path.join(CUDA_HOME, "bin", "nvcc"), "--version"], capture_output=True, text=True
        ).stdout
        return int(re.search(r"release (\d+)\.", out).group(1))
    except (OSError, AttributeError, TypeError):
        return None


def gpu_visible() -> bool:
    try:
        return torch.version.cuda is not None and torch.cuda.is_available() and torch.cuda.device_count() > 0
    except RuntimeError:  # a broken driver counts as no GPU
        return False


def want_cuda() -> bool:
    setting = os.environ.get("DSMHIST_CUDA", "auto").strip().lower()
    possible = CUDA_HOME is not None and torch.version.cuda is not None
    if setting in ("0", "off", "false", "no"):
        print("torch_dsmhist: DSMHIST_CUDA=0, building the CPU-only extension")
        return False
    if setting in ("1", "on", "true", "yes"):
        if not possible:
            raise RuntimeError(
                "DSMHIST_CUDA=1 but a CUDA build is impossible: "
                f"CUDA_HOME={CUDA_HOME!r}, torch.version.cuda={torch.version.cuda!r}"
            )
        return True
    asked = bool(os.environ.get("TORCH_CUDA_ARCH_LIST", "").strip())
    if not (asked or gpu_visible()):
        print(
            "torch_dsmhist: no CUDA GPU visible, building the CPU-only extension "
            "(DSMHIST_CUDA=1 or TORCH_CUDA_ARCH_LIST builds the CUDA kernels anyway)"
        )
        return False
    if not possible:
        print("torch_dsmhist: no CUDA toolkit or a CPU build of torch, building the CPU-only extension")
        return False
    nvcc_major, torch_major = nvcc_major_version(), int(torch.version.cuda.split(".")[0])
    if nvcc_major != torch_major:
        # torch refuses to build against a toolkit of another major version: build the CPU extension instead.
        print(
            f"torch_dsmhist: nvcc's CUDA major version ({nvcc_major}) differs from torch's "
            f"({torch.version.cuda}); building CPU-only (set DSMHIST_CUDA=1 to insist)"
        )
        return False
    return True


def sources(*folders: str, suffix: str) -> list:
    found = []
    for folder in folders:
        path = os.path.join("csrc", folder)
        found += sorted(
            os.path.join(path, name) for name in os.listdir(os.path.join(HERE, path)) if name.endswith(suffix)
        )
    return found


def extension():
    cpu_sources = sources("", "cpu", suffix=".cpp")
    # -g0: Python's flags add -g, which doubles the compile time of the template-heavy CPU file.
    cxx_flags = ["-O3", "-g0", "-fopenmp"]
    link_flags = ["-fopenmp"]
    if not want_cuda():
        return CppExtension(
            "torch_dsmhist._C", cpu_sources, extra_compile_args={"cxx": cxx_flags}, extra_link_args=link_flags
        )
    if not os.environ.get("TORCH_CUDA_ARCH_LIST", "").strip():
        if gpu_visible():
            targets = "the visible GPU's architecture"  # torch's default when the list is unset
        else:
            os.environ["TORCH_CUDA_ARCH_LIST"] = DEFAULT_ARCH_LIST
            targets = f"TORCH_CUDA_ARCH_LIST={DEFAULT_ARCH_LIST}"
    else:
        targets = f"TORCH_CUDA_ARCH_LIST={os.environ['TORCH_CUDA_ARCH_LIST']}"
    print(f"torch_dsmhist: building with CUDA ({CUDA_HOME}) for {targets}")
    return CUDAExtension(
        "torch_dsmhist._C",
        cpu_sources + sources("cuda", suffix=".cpp") + sources("kernels", suffix=".cu"),
        define_macros=[("DSMHIST_WITH_CUDA", None)],
        extra_compile_args={"cxx": cxx_flags, "nvcc": ["-O3", "-lineinfo"]},
        extra_link_args=link_flags,
    )


write_build_info()
setup(
    # Everything else is in pyproject.toml; the torch pin is here because it is the build's own torch.
    ext_modules=[extension()],
    cmdclass={"build_ext": BuildExtension},
    install_requires=[f"torch=={TORCH_RELEASE}"],
)
