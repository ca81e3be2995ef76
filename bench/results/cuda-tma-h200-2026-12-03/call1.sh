#!/bin/sh
# call 1: qgemm.cu weights by tensor map (tree) against HEAD (739e7af)
set -u
(MFC_GPU_BUILD=/tmp/b tests/gpu/run --build-only > $OUT/build-b.txt 2>&1) &
(cd .gpurun/head && MFC_GPU_BUILD=/tmp/h tests/gpu/run --build-only > $OUT/build-h.txt 2>&1) &
wait
tail -2 $OUT/build-b.txt $OUT/build-h.txt
/tmp/b/test_cuda --qgemm q4_K > $OUT/test_cuda-qgemm-q4k.txt 2>&1; echo "test rc=$?"; tail -3 $OUT/test_cuda-qgemm-q4k.txt
grep -c "^ok\|: ok\| ok " $OUT/test_cuda-qgemm-q4k.txt
for r in 1 2; do
  for v in b h; do echo "== $v run $r"; /tmp/$v/cuda_bench qgemm q4_K 2>&1 | grep "qgemm |"; done
done > $OUT/qgemm-table.txt
for r in 1 2; do
  for v in b h; do for n in 16 32 64; do echo "== $v run $r batch $n"; CUDA_BENCH_LONG=0 /tmp/$v/cuda_bench llama3-8b q4_k_m $n 2>&1 | grep "^| llama3"; done; done
done > $OUT/decode.txt
cat $OUT/decode.txt
