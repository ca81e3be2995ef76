#!/bin/sh
# call 2: qgemm.cu tensor-map variants (A: tree default, B: tokens by map in both Q4_K kernels,
# C: Q6_K weights (and 64-token inputs) by map too, D: C + B) against HEAD (739e7af)
set -u
(MFC_GPU_BUILD=/tmp/b tests/gpu/run --build-only > $OUT/build-b.txt 2>&1) &
(cd .gpurun/head && MFC_GPU_BUILD=/tmp/h tests/gpu/run --build-only > $OUT/build-h.txt 2>&1) &
wait
cflags="-std=c17 -O2 -g -D_GNU_SOURCE -Wall -Wno-unused-parameter -I. -I/tmp/b -I/tmp/b/shim"
libs="-L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lcudart -ldl -lstdc++ -lpthread -lm"
mk() { # variant dir, flags
  mkdir -p /tmp/$1 && cp /tmp/b/*.o /tmp/$1/ && nvcc -O3 -std=c++17 -I. -I/tmp/b $2 -gencode arch=compute_90a,code=sm_90a \
    -gencode arch=compute_90,code=compute_90 -Xcompiler -fPIC,-Wall -c kernels/qgemm.cu -o /tmp/$1/kernels_qgemm.cu.o &&
  cc $cflags bench/cuda_bench.c /tmp/$1/*.o $libs -o /tmp/$1/cuda_bench && cc $cflags tests/gpu/test_cuda.c /tmp/$1/*.o $libs -o /tmp/$1/test_cuda
}
mk B "-DQG_TMA_X_NN=4" & mk C "-DQG_TMA_Q6K=1" & mk D "-DQG_TMA_Q6K=1 -DQG_TMA_X_NN=4" & wait
ls -la /tmp/B/cuda_bench /tmp/C/cuda_bench /tmp/D/cuda_bench
for v in b D; do for t in q4_K q6_K; do /tmp/$v/test_cuda --qgemm $t > $OUT/test_cuda-qgemm-$t-$v.txt 2>&1; echo "$v $t rc=$?"; grep -c "^ok" $OUT/test_cuda-qgemm-$t-$v.txt; grep "^FAIL\|^not ok" $OUT/test_cuda-qgemm-$t-$v.txt | head -5; done; done
for v in b B C D h; do echo "== $v"; for t in q4_K q6_K; do /tmp/$v/cuda_bench qgemm $t 2>&1 | grep "qgemm |"; done; done > $OUT/qgemm-tables.txt
for r in 1 2; do
  for v in b B C D h; do for n in 16 32 64; do echo "== $v run $r batch $n"; CUDA_BENCH_LONG=0 /tmp/$v/cuda_bench llama3-8b q4_k_m $n 2>&1 | grep "^| llama3"; done; done
done > $OUT/decode.txt
cat $OUT/decode.txt
