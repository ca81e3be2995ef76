#!/bin/sh
# call 5 (twentieth session): the final tree's test_cuda on every model
set -u
t0=$(date +%s)
MFC_GPU_BUILD=/tmp/b tests/gpu/run --build-only > $OUT/build-b.txt 2>&1
echo "built $(( $(date +%s) - t0 )) s"
/tmp/b/test_cuda .gpumodels/*.gguf > $OUT/test_cuda-all.txt 2>&1; echo "all rc=$? ok=$(grep -c '^ok' $OUT/test_cuda-all.txt)"; grep "^FAIL\|tie(s)\|margin" $OUT/test_cuda-all.txt | grep -v "model .*CPU's\|CPU [0-9]" | head -20; tail -1 $OUT/test_cuda-all.txt
echo "done $(( $(date +%s) - t0 )) s"
