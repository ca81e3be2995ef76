#!/bin/sh
# call 3: the tree (b: Q4_K weights by tensor map, 64-token inputs too) and C (Q6_K by map too,
# the tx-count fix) against HEAD (h, 739e7af); tests, decode, sanitizers last
set -u
t0=$(date +%s)
(MFC_GPU_BUILD=/tmp/b tests/gpu/run --build-only > $OUT/build-b.txt 2>&1) &
(cd .gpurun/head && MFC_GPU_BUILD=/tmp/h tests/gpu/run --build-only > $OUT/build-h.txt 2>&1) &
wait
cflags="-std=c17 -O2 -g -D_GNU_SOURCE -Wall -Wno-unused-parameter -I. -I/tmp/b -I/tmp/b/shim"
libs="-L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lcudart -ldl -lstdc++ -lpthread -lm"
mkdir -p /tmp/C && cp /tmp/b/*.o /tmp/C/ && nvcc -O3 -std=c++17 -I. -I/tmp/b -DQG_TMA_Q6K=1 -gencode arch=compute_90a,code=sm_90a \
    -gencode arch=compute_90,code=compute_90 -Xcompiler -fPIC,-Wall -c kernels/qgemm.cu -o /tmp/C/kernels_qgemm.cu.o &&
  cc $cflags bench/cuda_bench.c /tmp/C/*.o $libs -o /tmp/C/cuda_bench && cc $cflags tests/gpu/test_cuda.c /tmp/C/*.o $libs -o /tmp/C/test_cuda
echo "built $(( $(date +%s) - t0 )) s"
/tmp/b/test_cuda .gpumodels/*.gguf > $OUT/test_cuda-all.txt 2>&1; echo "b all rc=$?"; grep -c "^ok" $OUT/test_cuda-all.txt; grep "^FAIL" $OUT/test_cuda-all.txt | head; tail -1 $OUT/test_cuda-all.txt
/tmp/C/test_cuda --qgemm q6_K > $OUT/test_cuda-qgemm-q6_K-C.txt 2>&1; echo "C q6 rc=$?"; grep -c "^ok" $OUT/test_cuda-qgemm-q6_K-C.txt; grep "^FAIL" $OUT/test_cuda-qgemm-q6_K-C.txt | grep -v taken | head; tail -2 $OUT/test_cuda-qgemm-q6_K-C.txt
echo "tests $(( $(date +%s) - t0 )) s"
for v in b C h; do echo "== $v"; /tmp/$v/cuda_bench qgemm q6_K 2>&1 | grep "qgemm |"; done > $OUT/qgemm-q6k-tables.txt
for r in 1 2; do
  for v in b C h; do for n in 16 32 64; do echo "== $v run $r batch $n"; CUDA_BENCH_LONG=0 /tmp/$v/cuda_bench llama3-8b q4_k_m $n 2>&1 | grep "^| llama3"; done; done
done > $OUT/decode.txt
for v in b h; do echo "== $v batch 1 8 128"; CUDA_BENCH_LONG=0 /tmp/$v/cuda_bench llama3-8b q4_k_m 1 8 128 2>&1 | grep "^| llama3"; done >> $OUT/decode.txt
cat $OUT/decode.txt
echo "bench $(( $(date +%s) - t0 )) s"
left=$(( 560 - ($(date +%s) - t0) ))
timeout $(( left / 2 )) compute-sanitizer --tool racecheck /tmp/b/test_cuda --qgemm q4_K > $OUT/racecheck-qgemm-q4k.txt 2>&1; echo "racecheck rc=$?"; tail -3 $OUT/racecheck-qgemm-q4k.txt
left=$(( 580 - ($(date +%s) - t0) ))
timeout $left compute-sanitizer --tool memcheck /tmp/b/test_cuda --qgemm q4_K > $OUT/memcheck-qgemm-q4k.txt 2>&1; echo "memcheck rc=$?"; tail -3 $OUT/memcheck-qgemm-q4k.txt
