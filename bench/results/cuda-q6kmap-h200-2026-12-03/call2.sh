#!/bin/sh
# call 2: where a batch-16 / batch-64 Q4_K_M step's kernel time goes on the tree (9c92c59)
set -u
t0=$(date +%s)
MFC_GPU_BUILD=/tmp/b tests/gpu/run --build-only > $OUT/build-b.txt 2>&1; tail -1 $OUT/build-b.txt
echo "built $(( $(date +%s) - t0 )) s"
command -v nsys || ls /usr/local/cuda/bin | grep -i nsys
MFC_GPU_BUILD=/tmp/b timeout 480 tests/gpu/profile llama3-8b q4_k_m 64 16 > $OUT/profile.txt 2>&1
cat $OUT/profile.txt
echo "done $(( $(date +%s) - t0 )) s"
