set -uo pipefail
source bench/env_cudabin.sh
export PATH=/usr/local/cuda/bin:$PATH CUDA_CACHE_MAXSIZE=4294967296
L=$OUT/log.txt
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nproc; } >$L 2>&1
s=$(date +%s)
make -j16 CUDA=1 BUILD=build/p80 CUDA_ARCH="-gencode arch=compute_80,code=compute_80" build/p80/redlite $(ls tests/cuda/test_cuda_*.c | sed 's|tests/cuda/|build/p80/tests/|; s|\.c$||') >$OUT/build.txt 2>&1; echo "build p80 rc=$? $(( $(date +%s)-s ))s" >>$L
for t in test_cuda_engine test_cuda_verify test_cuda_spec test_cuda_vram test_cuda_ops; do
  s=$(date +%s); RL_CUDA_PDL=0 timeout 200 build/p80/tests/$t >$OUT/$t.txt 2>&1; echo "$t (compute_80 PTX JIT on this GPU, PDL off) rc=$? $(( $(date +%s)-s ))s: $(tail -1 $OUT/$t.txt)" >>$L
done
cat $L
