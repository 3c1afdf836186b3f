set -uo pipefail
source bench/env_cudabin.sh
export PATH=/usr/local/cuda/bin:$PATH
S=$OUT/summary.txt
ARCH="-gencode arch=compute_90,code=sm_90"
t=$(date +%s)
make -s -j16 CUDA=1 BUILD=build/cuda OBJ=build/obj-cuda CUDA_ARCH="$ARCH" build/cuda/redlite build/cuda/tests/test_cuda_{ops,engine,vram,verify,spec} >$OUT/build.txt 2>&1; echo "build rc=$? $(( $(date +%s)-t ))s" >>$S
for tp in test_cuda_engine test_cuda_ops test_cuda_verify test_cuda_spec test_cuda_vram; do
  t=$(date +%s); timeout 150 build/cuda/tests/$tp >$OUT/$tp.txt 2>&1; rc=$?
  echo "$tp rc=$rc $(( $(date +%s)-t ))s: $(grep -E 'passed' $OUT/$tp.txt | tail -1)" >>$S
done
grep -h -i -B3 -A3 'fail' $OUT/test_cuda_*.txt | grep -v ' 0 failed' | head -40 >$OUT/fails.txt
python3 -c 'import pytest, gguf' >>$S 2>&1 && { timeout 200 python3 -m pytest -q tests/cuda/test_cuda_fixtures.py -k "qwen35 or mxfp4" >$OUT/fixtures.txt 2>&1; echo "fixtures rc=$?: $(tail -1 $OUT/fixtures.txt)" >>$S; }
cat $S
