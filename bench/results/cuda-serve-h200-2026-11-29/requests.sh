#!/bin/bash
# requests.sh PORT OUTDIR: the requests the GPU-serve proof sends to one mfc-serve
# (the demo model as "demo", its pirate adapter as "pirate"), each answer saved
# under OUTDIR. $CURL is the curl to use (default: curl).
set -u
port=$1 out=$2
C=${CURL:-curl}
u=http://127.0.0.1:$port
mkdir -p "$out"
post() { # NAME PATH BODY
	$C -sS -o "$out/$1.json" -w '%{http_code} %{time_total}\n' -H 'Content-Type: application/json' \
		-d "$3" "$u$2" > "$out/$1.status" 2>&1
}
$C -sS "$u/health" > "$out/health.json" 2>&1
# The recorded prompt of expected.json (bare context, ChatML as the Modelfile renders it).
P='<|im_start|>user\nWhat is the capital of Quabalar?<|im_end|>\n<|im_start|>assistant\n'
post completions /v1/completions "{\"model\":\"demo\",\"prompt\":\"$P\",\"temperature\":0,\"max_tokens\":48,\"stop\":[\"<|im_end|>\"]}"
i=0
for q in 'What is the capital of Quabalar?' 'What is 12 plus 7?' 'Which city is the capital of Velmiland?'; do
	i=$((i + 1))
	post chat$i /api/chat "{\"model\":\"demo\",\"stream\":false,\"messages\":[{\"role\":\"user\",\"content\":\"$q\"}]}"
done
post chat-pirate /api/chat '{"model":"pirate","stream":false,"messages":[{"role":"user","content":"What is the capital of Quabalar?"}]}'
# Speed: one streamed request of 400 tokens (ignore_eos), client-side timing.
$C -sS -N -o "$out/stream.sse" -w '%{time_starttransfer} %{time_total}\n' -H 'Content-Type: application/json' \
	-d "{\"model\":\"demo\",\"prompt\":\"$P\",\"temperature\":0,\"max_tokens\":400,\"ignore_eos\":true,\"stream\":true,\"stream_options\":{\"include_usage\":true}}" \
	"$u/v1/completions" > "$out/stream.time" 2>&1
n=$(grep -o '"completion_tokens":[0-9]*' "$out/stream.sse" | tail -1 | cut -d: -f2)
read -r ttfb total < "$out/stream.time"
awk -v n="$n" -v a="$ttfb" -v b="$total" 'BEGIN { printf "tokens %d ttfb_s %.4f total_s %.4f decode_tok_s %.1f\n", n, a, b, (n - 1) / (b - a) }' > "$out/speed.txt"
