#!/bin/bash
# serve.sh: mfc-serve on the GPU, drawing on the device (MFC_CUDA_SAMPLING=1,
# the default) and then on the host (0), over the same seeded sampling
# requests: one at a time and 16 at once (one batch), Ollama's and OpenAI's
# APIs. The texts must be equal (same logits, same seeds, the same chain);
# /metrics must say where the tokens were drawn. Runs the mfc-serve in
# .gpuserve/ (built on the build machine, its ldd closure beside it; see
# ../cuda-serve-h200-2026-11-29/run.sh). Logs and answers under $OUT.
set -u
G=${G:-.gpuserve}
out=${OUT:-/tmp/out}
mkdir -p "$out"
drv=$(ldconfig -p | awk '/libcuda\.so\.1 / {print $NF; exit}')
[ -n "$drv" ] || drv=$(find / -name libcuda.so.1 -not -path '*/proc/*' 2>/dev/null | head -1)
C="$G/lib/ld-linux-x86-64.so.2 --library-path $G/lib $G/curl -sS"
u=http://127.0.0.1:18431
chat() { # SEED
	echo "{\"model\":\"demo\",\"stream\":false,\"messages\":[{\"role\":\"user\",\"content\":\"Tell me a story about Quabalar.\"}],\"options\":{\"temperature\":1.0,\"top_k\":40,\"top_p\":0.9,\"repeat_penalty\":1.1,\"seed\":$1,\"num_predict\":64}}"
}
compl() { # SEED
	echo "{\"model\":\"demo\",\"prompt\":\"Once upon a time\",\"temperature\":1.3,\"top_p\":0.95,\"frequency_penalty\":0.4,\"presence_penalty\":0.2,\"logit_bias\":{\"11\":-100,\"13\":5},\"seed\":$1,\"max_tokens\":64}"
}
for s in 1 0; do
	MFC_CUDA_SAMPLING=$s MFC_DEVICE=cuda MFC_KV_CACHE_GB=1 $G/lib/ld-linux-x86-64.so.2 \
		--library-path "$G/lib:$(dirname "$drv")" $G/mfc-serve --config $G/model/demo-f16.yaml \
		--name demo --port 18431 > "$out/serve-s$s.log" 2>&1 &
	pid=$!
	for i in $(seq 300); do
		$C -f "$u/health" > /dev/null 2>&1 && break
		sleep 0.2
	done
	for i in 1 2 3; do
		$C -d "$(chat $i)" "$u/api/chat" > "$out/s$s-chat$i.json"
		$C -d "$(compl $i)" "$u/v1/completions" > "$out/s$s-compl$i.json"
	done
	pids=
	for i in $(seq 10 25); do
		$C -d "$(chat $i)" "$u/api/chat" > "$out/s$s-par$i.json" &
		pids="$pids $!"
	done
	wait $pids
	sleep 0.5
	$C "$u/metrics" | grep -E 'tokens_sampled|generation_tokens_total' > "$out/s$s-metrics.txt"
	kill $pid
	wait $pid
done
python3 - "$out" <<'PY'
import json, sys, glob, os
out = sys.argv[1]
def text(p):
    j = json.load(open(p))
    if "message" in j:
        return j["message"]["content"]
    if "choices" in j:
        return j["choices"][0]["text"]
    return "ERROR " + json.dumps(j)
same = diff = 0
for p in sorted(glob.glob(os.path.join(out, "s1-*.json"))):
    q = p.replace("/s1-", "/s0-")
    a, b = text(p), text(q)
    if a == b:
        same += 1
    else:
        diff += 1
        print("DIFFER", os.path.basename(p), repr(a[:80]), repr(b[:80]))
print(f"answers equal on device and host: {same}, differ: {diff}")
print("sample:", repr(text(os.path.join(out, "s1-chat1.json"))[:200]))
PY
for s in 1 0; do echo "== MFC_CUDA_SAMPLING=$s"; cat "$out/s$s-metrics.txt"; grep -i "drawn" "$out/serve-s$s.log"; done
(cd "$out" && tar czf answers.tar.gz s[01]-*.json && rm -f s[01]-*.json)
