#!/usr/bin/env bash
# Everything that needs a GPU, in one go: build, the whole test suite with CUDA tests, compute-sanitizer on every
# tier, the benchmark, and the pre-sm_90 path (a TORCH_CUDA_ARCH_LIST="8.0+PTX" build run on this device).
#
#   bash benchmarks/device_run.sh [main|ptx|all|dist|suite|perf|edges]     (default: all)
#
# main: sm_80/sm_90 build, tests (DSMHIST_EXPECT_CLUSTER=1 on sm_90, slow ones included), the fuzz suite's device
#       profile, sanitizers (tools/run_sanitizers.py; SKIP_SANITIZERS=1 skips them), benchmarks (tiers, batched, then
#       range binning; SKIP_BENCH=1 skips them).
# ptx:  8.0+PTX build, tests (DSMHIST_EXPECT_CLUSTER=0: the cluster tier must be unavailable).
# dist: (a 2-GPU machine) sm_90 build, the distributed tests (NCCL and gloo+NCCL), the 2-GPU parts of the other
#       tests, the scale-out benchmark under torchrun, then the rest of the suite (not slow).
# suite: sm_90 build, then benchmarks/bench_suite.py (SUITE_ARGS, e.g. --quick) with its plots.
# perf: sm_90 build, the CUDA tests of the tiers (PERF_TESTS), benchmarks/bench_plan.py, then the suite (SKIP_SUITE).
# edges: sm_90 build, the bin-edges tests (ops, drop-ins, the histogram2d example), then benchmarks/bench_edges.py
#       (EDGES_ARGS, e.g. --quick) with its plots.
# Logs go to $OUT (or ./device_logs), at most 8 files; the last lines printed summarise every step.
set -uo pipefail
cd "$(dirname "$0")/.."
stage=${1:-all}
OUT=${OUT:-$PWD/device_logs}
mkdir -p "$OUT"
rm -f "$OUT"/{gpu.txt,build.log,tests_sm90.log,tests_ptx80.log,sanitizer.log,bench.log,dist.log}
export PYTHONUNBUFFERED=1 MAX_JOBS=${MAX_JOBS:-16}
# NVLink multicast stays off on the shared multi-GPU hosts (their rule; harmless elsewhere).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
summary=()
run() {  # run NAME LOG COMMAND...: append to LOG, record pass/fail and the log's last line
  local name=$1 log=$2
  shift 2
  local start=$SECONDS
  echo "===== $name" >>"$OUT/$log"
  "$@" >>"$OUT/$log" 2>&1
  local rc=$?
  summary+=("$(printf '%-28s rc=%-3s %4ss  %s' "$name" "$rc" "$((SECONDS - start))" "$(tail -n 1 "$OUT/$log")")")
  return $rc
}
# The lab image's default compiler (/opt/gcc) was seen to link libstdc++ statically into the extension, which then
# crashed formatting torch error messages against torch's own (shared) libstdc++. The system g++ links it shared.
if [[ -x /usr/bin/g++ && -x /usr/bin/gcc ]]; then export CC=/usr/bin/gcc CXX=/usr/bin/g++; fi
build() {  # build ARCH_LIST
  rm -rf build torch_dsmhist/_C*.so
  echo "CC=${CC:-} CXX=${CXX:-}; $(${CXX:-c++} --version | head -n 1)"
  TORCH_CUDA_ARCH_LIST="$1" DSMHIST_CUDA=1 python -m pip install --no-build-isolation --no-deps -e . -v || return 1
  # A private copy of libstdc++ inside the extension is the failure described above: refuse it.
  local private
  private=$(nm -C --defined-only torch_dsmhist/_C*.so | grep -c "std::basic_ostream<char, std::char_traits<char> >::_M_insert") || true
  echo "libstdc++ stream code defined inside _C.so: $private symbols"
  [[ $private == 0 ]]
}
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  echo "CC=${CC:-} CXX=${CXX:-}"
  ls -la /opt/gcc/bin 2>/dev/null | head -5
  for c in /opt/gcc/bin/g++ /usr/bin/g++; do [[ -x $c ]] && echo "$c: $($c --version | head -n 1); libstdc++.so -> $($c -print-file-name=libstdc++.so)"; done
} >"$OUT/gpu.txt" 2>&1

if [[ $stage == main || $stage == all ]]; then
  if run "build 8.0;9.0+PTX" build.log build "8.0;9.0+PTX"; then
    cuobjdump --dump-resource-usage torch_dsmhist/_C*.so 2>/dev/null | grep -E "Function|REG" >>"$OUT/build.log"
    run "pytest (sm_90 build)" tests_sm90.log env DSMHIST_EXPECT_CLUSTER=1 python -m pytest tests -q -rs
    run "demo" bench.log python -m torch_dsmhist
    run "fuzz (device profile)" tests_sm90.log env DSMHIST_FUZZ_PROFILE=device python -m pytest tests/test_fuzz.py -q
    if [[ -n ${SKIP_SANITIZERS:-} ]]; then
      summary+=("sanitizers: skipped (SKIP_SANITIZERS set)")
    else
      run "sanitizers" sanitizer.log python tools/run_sanitizers.py
    fi
    if [[ -n ${SKIP_BENCH:-} ]]; then
      summary+=("benchmarks: skipped (SKIP_BENCH set)")
    else
      run "benchmark" bench.log python benchmarks/bench_tiers.py --out-dir "$OUT" ${BENCH_ARGS:-}
      run "batched benchmark" bench.log python benchmarks/bench_batched.py --out-dir "$OUT"
      run "range benchmark" bench.log python benchmarks/bench_range.py --out-dir "$OUT"
    fi
  fi
fi

if [[ $stage == ptx || $stage == all ]]; then
  if run "build 8.0+PTX" build.log build "8.0+PTX"; then
    run "pytest (8.0+PTX build)" tests_ptx80.log env DSMHIST_EXPECT_CLUSTER=0 python -m pytest tests -q -rs
  fi
fi

if [[ $stage == suite ]]; then
  if run "build 9.0" build.log build "9.0"; then
    # SUITE_TIMEOUT (s) cuts a long sweep short; the script rewrites RESULTS.md after every case, so the figures
    # measured by then come back. The plots travel as one archive (the device tool returns a few files only).
    run "bench_suite ${SUITE_ARGS:-}" bench.log timeout "${SUITE_TIMEOUT:-3600}" python benchmarks/bench_suite.py \
      ${SUITE_ARGS:-}
    cp benchmarks/RESULTS.md "$OUT/"
    tar czf "$OUT/suite_plots.tgz" -C benchmarks plots
  fi
fi

if [[ $stage == perf ]]; then
  # Kernel work in one call: build, the CUDA tests of the tiers (PERF_TESTS), the plan's measurements, then the suite
  # (SUITE_ARGS, e.g. --quick; SKIP_SUITE=1 leaves it out).
  if run "build 9.0" build.log build "9.0"; then
    cuobjdump --dump-resource-usage torch_dsmhist/_C*.so 2>/dev/null | grep -E "Function|REG" >>"$OUT/build.log"
    run "pytest ${PERF_TESTS:-tests/test_cuda.py}" tests_sm90.log env DSMHIST_EXPECT_CLUSTER=1 python -m pytest \
      ${PERF_TESTS:-tests/test_cuda.py} -q -rs -x
    run "bench_plan" bench.log python benchmarks/bench_plan.py
    if [[ -z ${SKIP_SUITE:-} ]]; then
      run "bench_suite ${SUITE_ARGS:-}" bench.log timeout "${SUITE_TIMEOUT:-3600}" python benchmarks/bench_suite.py \
        ${SUITE_ARGS:-}
      tar czf "$OUT/suite_plots.tgz" -C benchmarks plots
    fi
    cp benchmarks/RESULTS.md "$OUT/"
  fi
fi

if [[ $stage == edges ]]; then
  if run "build 9.0" build.log build "9.0"; then
    run "pytest edges" tests_sm90.log python -m pytest tests/test_edges.py tests/test_dropins_edges.py \
      tests/test_benchmarks.py -q -rs
    run "pytest histogram2d example" tests_sm90.log python -m pytest tests/test_examples.py -q -rs -k histogram2d
    run "bench_edges ${EDGES_ARGS:-}" bench.log python benchmarks/bench_edges.py --out-dir "$OUT" ${EDGES_ARGS:-}
  fi
fi

if [[ $stage == dist ]]; then
  if run "build 9.0" build.log build "9.0"; then
    run "pytest distributed + 2-GPU" dist.log python -m pytest tests/test_distributed.py tests/test_concurrency.py \
      tests/test_examples.py -q -rs
    run "bench_distributed" dist.log python -m torch.distributed.run --standalone --nproc-per-node=2 \
      benchmarks/bench_distributed.py --out-dir "$OUT"
    run "pytest rest (not slow)" tests_sm90.log env DSMHIST_EXPECT_CLUSTER=1 python -m pytest tests -q -rs \
      -m "not slow" --ignore tests/test_distributed.py --ignore tests/test_concurrency.py \
      --ignore tests/test_examples.py --ignore tests/test_fuzz.py
  fi
fi

echo "== device:"; cat "$OUT/gpu.txt"
printf '%s\n' "${summary[@]}"
