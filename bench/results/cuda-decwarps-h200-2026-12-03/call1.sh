#!/bin/sh
# call 1 (twentieth session): k_flash_dec in 3, 4, 6 or 8 warps by waves (tree, b) against
# HEAD 4ce1d9f (h: 4 or 8); attention tests, decode alternating, then ncu of k_flash_dec / k_qgemm
set -u
t0=$(date +%s)
(MFC_GPU_BUILD=/tmp/b tests/gpu/run --build-only > $OUT/build-b.txt 2>&1) &
(cd .gpurun/head && MFC_GPU_BUILD=/tmp/h tests/gpu/run --build-only > $OUT/build-h.txt 2>&1) &
wait
tail -1 $OUT/build-b.txt $OUT/build-h.txt
echo "built $(( $(date +%s) - t0 )) s"
/tmp/b/test_cuda --only att-f16,att-q8,long > $OUT/test_cuda-att.txt 2>&1; echo "att rc=$? ok=$(grep -c '^ok' $OUT/test_cuda-att.txt)"; grep "^FAIL" $OUT/test_cuda-att.txt | head -5; grep "decode tiles" $OUT/test_cuda-att.txt | head -3; tail -1 $OUT/test_cuda-att.txt
echo "tests $(( $(date +%s) - t0 )) s"
for r in 1 2 3; do
  for v in b h; do echo "== $v run $r"; CUDA_BENCH_LONG=0 /tmp/$v/cuda_bench llama3-8b q4_k_m 16 24 32 40 48 56 64 2>&1 | grep "^| llama3"; done
  echo "run $r $(( $(date +%s) - t0 )) s"
done > $OUT/decode.txt
cat $OUT/decode.txt
echo "bench $(( $(date +%s) - t0 )) s"
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for v in b h; do
CUDA_BENCH_STEPS=2 CUDA_BENCH_LONG=0 timeout 100 $ncu --set full --kernel-name regex:k_flash_dec --launch-skip 40 --launch-count 1 /tmp/$v/cuda_bench llama3-8b q4_k_m 64 > $OUT/ncu-flash-dec-$v.txt 2>&1
grep -E "k_flash_dec|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Warp Cycles Per Issued|Issue Slots Busy|Registers Per|Grid Size|Block Size|Waves Per SM|Block Limit" $OUT/ncu-flash-dec-$v.txt | head -30
echo "ncu $v $(( $(date +%s) - t0 )) s"
done
left=$(( 590 - ($(date +%s) - t0) ))
CUDA_BENCH_STEPS=2 CUDA_BENCH_LONG=0 timeout $left $ncu --set full --kernel-name regex:k_qgemm --launch-skip 300 --launch-count 2 /tmp/b/cuda_bench llama3-8b q4_k_m 64 > $OUT/ncu-qgemm-b.txt 2>&1
grep -E "k_qgemm|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Warp Cycles Per Issued|Issue Slots Busy|Grid Size|Waves Per SM" $OUT/ncu-qgemm-b.txt | head -30
echo "done $(( $(date +%s) - t0 )) s"
