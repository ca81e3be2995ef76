#!/bin/bash
# run.sh: the GPU-host half of the "one image for both worlds" proof (README.md here).
# Runs mfc-serve built on the build machine, with its ldd closure and glibc's loader
# carried in .gpuserve/, on a host that has none of its libraries; only libcuda.so.1
# (the driver) comes from the host. Serves the demo model (F32, then F16) with
# MFC_DEVICE=auto and sends requests.sh's requests; logs and answers go to $OUT.
set -u
G=.gpuserve
D=$(dirname "$0")
out=${OUT:-/tmp/out}
mkdir -p "$out"
exec > >(tee "$out/run.log") 2>&1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
ldd --version | head -1
drv=$(ldconfig -p | awk '/libcuda\.so\.1 / {print $NF; exit}')
[ -n "$drv" ] || drv=$(find / -name libcuda.so.1 -not -path '*/proc/*' 2>/dev/null | head -1)
echo "driver: $drv"
libpath=$G/lib:$(dirname "$drv")
for t in f32 f16; do
	MFC_DEVICE=auto MFC_KV_CACHE_GB=1 $G/lib/ld-linux-x86-64.so.2 --library-path "$libpath" \
		$G/mfc-serve --config $G/model/demo-$t.yaml --name demo --port 18431 > "$out/serve-$t.log" 2>&1 &
	pid=$!
	for i in $(seq 300); do
		$G/lib/ld-linux-x86-64.so.2 --library-path $G/lib $G/curl -sf http://127.0.0.1:18431/health > /dev/null && break
		kill -0 $pid 2> /dev/null || break
		sleep 0.2
	done
	CURL="$G/lib/ld-linux-x86-64.so.2 --library-path $G/lib $G/curl" "$D/requests.sh" 18431 "$out/$t"
	kill $pid; wait $pid
	echo "== $t"; cat "$out/serve-$t.log"; for f in "$out/$t"/*; do echo "-- $f"; head -c 1500 "$f"; echo; done
done
cd "$out" && tar czf gpu-answers.tar.gz f32 f16 && rm -rf f32 f16
