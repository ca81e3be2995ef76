#!/bin/sh
# call 1 (nineteenth session): Q6_K stages by tensor map, boxes from the 16-byte boundary below the
# stage (tree, b) against HEAD cf367dc (h); tests, decode, then sanitizers of --qgemm q6_K
set -u
t0=$(date +%s)
(MFC_GPU_BUILD=/tmp/b tests/gpu/run --build-only > $OUT/build-b.txt 2>&1) &
(cd .gpurun/head && MFC_GPU_BUILD=/tmp/h tests/gpu/run --build-only > $OUT/build-h.txt 2>&1) &
wait
tail -1 $OUT/build-b.txt $OUT/build-h.txt
echo "built $(( $(date +%s) - t0 )) s"
for q in q6_K q4_K; do /tmp/b/test_cuda --qgemm $q > $OUT/test_cuda-qgemm-$q.txt 2>&1; echo "$q rc=$? ok=$(grep -c '^ok' $OUT/test_cuda-qgemm-$q.txt)"; grep "^FAIL" $OUT/test_cuda-qgemm-$q.txt | head -5; tail -1 $OUT/test_cuda-qgemm-$q.txt; done
for v in b h; do echo "== $v"; /tmp/$v/cuda_bench qgemm q6_K 2>&1 | grep "qgemm |"; done > $OUT/qgemm-q6k-tables.txt
cat $OUT/qgemm-q6k-tables.txt
echo "qgemm $(( $(date +%s) - t0 )) s"
for r in 1 2; do
  for v in b h; do for n in 8 16 32 64; do echo "== $v run $r batch $n"; CUDA_BENCH_LONG=0 /tmp/$v/cuda_bench llama3-8b q4_k_m $n 2>&1 | grep "^| llama3"; done; done
done > $OUT/decode.txt
cat $OUT/decode.txt
echo "bench $(( $(date +%s) - t0 )) s"
/tmp/b/test_cuda .gpumodels/*.gguf > $OUT/test_cuda-all.txt 2>&1; echo "all rc=$? ok=$(grep -c '^ok' $OUT/test_cuda-all.txt)"; grep "^FAIL" $OUT/test_cuda-all.txt | head; tail -1 $OUT/test_cuda-all.txt
echo "tests $(( $(date +%s) - t0 )) s"
left=$(( 570 - ($(date +%s) - t0) ))
timeout $(( left / 2 )) compute-sanitizer --tool racecheck /tmp/b/test_cuda --qgemm q6_K > $OUT/racecheck-qgemm-q6k.txt 2>&1; echo "racecheck rc=$?"; tail -2 $OUT/racecheck-qgemm-q6k.txt
left=$(( 585 - ($(date +%s) - t0) ))
timeout $left compute-sanitizer --tool memcheck /tmp/b/test_cuda --qgemm q6_K > $OUT/memcheck-qgemm-q6k.txt 2>&1; echo "memcheck rc=$?"; tail -2 $OUT/memcheck-qgemm-q6k.txt
