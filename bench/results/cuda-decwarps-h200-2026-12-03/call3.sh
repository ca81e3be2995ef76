#!/bin/sh
# call 3 (twentieth session): longer contexts, where 3-warp blocks lose k_flash_dec's stash
# (past ~1530 positions at 4 heads) and 4-warp ones keep it: tree (b) against 4ce1d9f (h), both
# with the tree's cuda_bench.c (CUDA_BENCH_CTX)
set -u
t0=$(date +%s)
(MFC_GPU_BUILD=/tmp/b tests/gpu/run --build-only > $OUT/build-b.txt 2>&1) &
(cd .gpurun/head && MFC_GPU_BUILD=/tmp/h tests/gpu/run --build-only > $OUT/build-h.txt 2>&1) &
wait
echo "built $(( $(date +%s) - t0 )) s"
for c in 2000 1536 1024; do
for r in 1 2; do
  for v in b h; do echo "== $v ctx $c run $r"; CUDA_BENCH_CTX=$c CUDA_BENCH_LONG=0 timeout 120 /tmp/$v/cuda_bench llama3-8b q4_k_m 24 32 48 56 64 2>&1 | grep "^| llama3\|rror"; done
  echo "ctx $c run $r $(( $(date +%s) - t0 )) s"
  [ $(( $(date +%s) - t0 )) -gt 480 ] && break 2
done
done > $OUT/decode-ctx.txt
cat $OUT/decode-ctx.txt
echo "done $(( $(date +%s) - t0 )) s"
