#!/bin/sh
# call 2 (twentieth session): the tree's checks: test_cuda on every model, racecheck and memcheck
# of the attention parts (k_flash_dec in 3 and 6 warps new), BF16 decode alternating against HEAD
set -u
t0=$(date +%s)
(MFC_GPU_BUILD=/tmp/b tests/gpu/run --build-only > $OUT/build-b.txt 2>&1) &
(cd .gpurun/head && MFC_GPU_BUILD=/tmp/h tests/gpu/run --build-only > $OUT/build-h.txt 2>&1) &
wait
echo "built $(( $(date +%s) - t0 )) s"
/tmp/b/test_cuda .gpumodels/*.gguf > $OUT/test_cuda-all.txt 2>&1; echo "all rc=$? ok=$(grep -c '^ok' $OUT/test_cuda-all.txt)"; grep "^FAIL" $OUT/test_cuda-all.txt | head; tail -1 $OUT/test_cuda-all.txt
echo "tests $(( $(date +%s) - t0 )) s"
for r in 1 2; do
  for v in b h; do echo "== $v run $r"; CUDA_BENCH_LONG=0 /tmp/$v/cuda_bench llama3-8b bf16 24 32 56 64 2>&1 | grep "^| llama3"; done
done > $OUT/decode-bf16.txt
cat $OUT/decode-bf16.txt
echo "bench $(( $(date +%s) - t0 )) s"
left=$(( 570 - ($(date +%s) - t0) ))
timeout $(( left / 2 )) compute-sanitizer --tool racecheck /tmp/b/test_cuda --only att-f16 > $OUT/racecheck-att-f16.txt 2>&1; echo "racecheck rc=$?"; grep -c "^ok" $OUT/racecheck-att-f16.txt; tail -2 $OUT/racecheck-att-f16.txt
left=$(( 585 - ($(date +%s) - t0) ))
timeout $left compute-sanitizer --tool memcheck /tmp/b/test_cuda --only att-q8 > $OUT/memcheck-att-q8.txt 2>&1; echo "memcheck rc=$?"; grep -c "^ok" $OUT/memcheck-att-q8.txt; tail -2 $OUT/memcheck-att-q8.txt
echo "done $(( $(date +%s) - t0 )) s"
