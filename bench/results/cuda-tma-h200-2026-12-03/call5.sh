#!/bin/sh
# call 5: the token rows by tensor map in the 32-token Q4_K kernel too (B: QG_TMA_X_NN=4), the box
# rows cut to the step's tokens rounded to 8 (both builds), against the tree's default (b)
set -u
MFC_GPU_BUILD=/tmp/b tests/gpu/run --build-only > $OUT/build-b.txt 2>&1; tail -1 $OUT/build-b.txt
cflags="-std=c17 -O2 -g -D_GNU_SOURCE -Wall -Wno-unused-parameter -I. -I/tmp/b -I/tmp/b/shim"
libs="-L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lcudart -ldl -lstdc++ -lpthread -lm"
mkdir -p /tmp/B && cp /tmp/b/*.o /tmp/B/ && nvcc -O3 -std=c++17 -I. -I/tmp/b -DQG_TMA_X_NN=4 -gencode arch=compute_90a,code=sm_90a \
    -gencode arch=compute_90,code=compute_90 -Xcompiler -fPIC,-Wall -c kernels/qgemm.cu -o /tmp/B/kernels_qgemm.cu.o &&
  { cc $cflags bench/cuda_bench.c /tmp/B/*.o $libs -o /tmp/B/cuda_bench & cc $cflags tests/gpu/test_cuda.c /tmp/B/*.o $libs -o /tmp/B/test_cuda; wait; }
for v in b B; do /tmp/$v/test_cuda --qgemm q4_K > $OUT/test_cuda-qgemm-q4k-$v.txt 2>&1; echo "$v rc=$? ok=$(grep -c '^ok' $OUT/test_cuda-qgemm-q4k-$v.txt)"; grep "^FAIL" $OUT/test_cuda-qgemm-q4k-$v.txt | head -3; done
for v in b B; do echo "== $v"; /tmp/$v/cuda_bench qgemm q4_K 2>&1 | grep "qgemm |"; done > $OUT/qgemm-q4k-tables.txt
for r in 1 2 3; do for v in b B; do for n in 16 32; do echo "== $v run $r batch $n"; CUDA_BENCH_LONG=0 /tmp/$v/cuda_bench llama3-8b q4_k_m $n 2>&1 | grep "^| llama3"; done; done; done > $OUT/decode.txt
cat $OUT/decode.txt
