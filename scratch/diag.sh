set -x
rm -rf build; TORCH_CUDA_ARCH_LIST="9.0" DSMHIST_CUDA=1 MAX_JOBS=16 python -m pip install --no-build-isolation --no-deps -e . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
python scratch/repro.py 2>&1 | tail -20
cuda-gdb -batch -ex run -ex bt --args python scratch/repro.py 2>&1 | grep -v "^\[New Thread\|^\[Thread" | tail -40
cd tests && timeout 120 python sanitize_tiers.py 2>&1 | tail -8
