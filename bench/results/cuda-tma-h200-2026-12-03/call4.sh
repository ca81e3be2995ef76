#!/bin/sh
# call 4: why the Q6_K tensor-map variant (QG_TMA_Q6K=1) faults: memcheck of its qgemm test
set -u
sed -i 's/^#define QG_TMA_Q6K 0/#define QG_TMA_Q6K 1/' kernels/qgemm.cu
MFC_GPU_BUILD=/tmp/C tests/gpu/run --build-only > $OUT/build-C.txt 2>&1; tail -1 $OUT/build-C.txt
timeout 200 compute-sanitizer --tool memcheck /tmp/C/test_cuda --qgemm q6_K > $OUT/memcheck-qgemm-q6k-C.txt 2>&1; echo "rc=$?"
grep -v "^ok" $OUT/memcheck-qgemm-q6k-C.txt | head -40
