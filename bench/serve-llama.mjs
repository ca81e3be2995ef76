#!/usr/bin/env node
// serve-llama.mjs: the llama.cpp side of bench/serve: node-llama-cpp 3.21.1
// (prebuilt CPU backend) serving C concurrent streaming completions on the
// same GGUF the way llama.cpp's server does, one context with C sequences
// decoded together (LlamaCompletion per context sequence). For each client
// count it prints one JSON line shaped like stream-load.mjs's summary:
// {clients, ok, tokens, wall_s, ttft_ms{p50,p90,max}, tok_s, per_client_tok_s_p50}.
//
// usage: node serve-llama.mjs --model M.gguf [--clients 1,8,32] [--max-tokens N]
//          [--threads N] [--ctx-per-seq N] [--prompt TEXT]
import {createRequire} from "node:module";
import path from "node:path";
import {fileURLToPath, pathToFileURL} from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const modules = process.env.MFC_NODE_MODULES || path.join(here, "..", "tests", "tools", "node", "node_modules");
const require = createRequire(path.join(modules, "..", "package.json"));
const {getLlama, LlamaLogLevel, LlamaCompletion} = await import(pathToFileURL(require.resolve("node-llama-cpp")).href);

function parseArgs(argv) {
    const o = {clients: [1, 8, 32], maxTokens: 64, threads: 2, ctxPerSeq: 256,
        prompt: "Write a short story about a robot learning to paint."};
    for (let i = 0; i < argv.length; i++) {
        const a = argv[i], v = () => argv[++i];
        if (a === "--model") o.model = v();
        else if (a === "--clients") o.clients = v().split(",").map(Number);
        else if (a === "--max-tokens") o.maxTokens = Number(v());
        else if (a === "--threads") o.threads = Number(v());
        else if (a === "--ctx-per-seq") o.ctxPerSeq = Number(v());
        else if (a === "--prompt") o.prompt = v();
        else throw new Error(`unknown argument ${a}`);
    }
    if (!o.model) throw new Error("--model is required");
    return o;
}

function pct(xs, p) {
    if (!xs.length) return null;
    const s = [...xs].sort((a, b) => a - b);
    return Math.round(s[Math.min(s.length - 1, Math.floor(p * (s.length - 1) + 0.5))] * 10) / 10;
}

const o = parseArgs(process.argv.slice(2));
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath: o.model, gpuLayers: 0});
for (const n of o.clients) {
    const context = await model.createContext({contextSize: n * o.ctxPerSeq, sequences: n, threads: o.threads, batchSize: 512});
    const seqs = Array.from({length: n}, () => context.getSequence());
    // warm-up (threads, buffers), as bench/serve warms mfc-serve up; then a clean history
    await new LlamaCompletion({contextSequence: seqs[0]}).generateCompletion("Hello", {maxTokens: 4});
    await seqs[0].clearHistory();
    const t0 = performance.now();
    const results = await Promise.all(seqs.map(async (seq, i) => {
        const comp = new LlamaCompletion({contextSequence: seq});
        const start = performance.now();
        let first = null, tokens = 0;
        await comp.generateCompletion(`${o.prompt} (${i})`, {
            maxTokens: o.maxTokens, temperature: 0.8, seed: 1 + i,
            onToken: (t) => {
                if (first === null) first = performance.now() - start;
                tokens += t.length;
            },
        });
        return {ttft: first ?? performance.now() - start, tokens, wall: performance.now() - start};
    }));
    const wall = (performance.now() - t0) / 1000;
    const tokens = results.reduce((a, r) => a + r.tokens, 0);
    console.log(JSON.stringify({
        clients: n, ok: results.length, tokens, wall_s: Math.round(wall * 1000) / 1000,
        ttft_ms: {p50: pct(results.map((r) => r.ttft), 0.5), p90: pct(results.map((r) => r.ttft), 0.9),
            max: pct(results.map((r) => r.ttft), 1)},
        tok_s: Math.round(tokens / wall * 10) / 10,
        per_client_tok_s_p50: pct(results.map((r) => r.tokens / (r.wall / 1000)), 0.5),
    }));
    await context.dispose();
}
await model.dispose();
await llama.dispose();
