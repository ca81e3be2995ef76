#!/bin/sh
# call 4 (twentieth session): cuda_plan_dec_warps counting k_flash_dec's stash (tree, b: batch 56/64
# of 1536-2000 tokens on 6 warps, two waves) against 4ce1d9f (h: 4 warps); 512 tokens as before
set -u
t0=$(date +%s)
(MFC_GPU_BUILD=/tmp/b tests/gpu/run --build-only > $OUT/build-b.txt 2>&1) &
(cd .gpurun/head && MFC_GPU_BUILD=/tmp/h tests/gpu/run --build-only > $OUT/build-h.txt 2>&1) &
wait
echo "built $(( $(date +%s) - t0 )) s"
for c in 2000 1536 512; do
for r in 1 2; do
  for v in b h; do echo "== $v ctx $c run $r"; CUDA_BENCH_CTX=$c CUDA_BENCH_LONG=0 timeout 120 /tmp/$v/cuda_bench llama3-8b q4_k_m 24 48 56 64 2>&1 | grep "^| llama3\|rror"; done
  echo "ctx $c run $r $(( $(date +%s) - t0 )) s"
done
done > $OUT/decode-ctx.txt
cat $OUT/decode-ctx.txt
/tmp/b/test_cuda --only att-f16,models .gpumodels/*.gguf > $OUT/test_cuda-att-f16.txt 2>&1; echo "att rc=$? ok=$(grep -c '^ok' $OUT/test_cuda-att-f16.txt)"; tail -1 $OUT/test_cuda-att-f16.txt
echo "done $(( $(date +%s) - t0 )) s"
