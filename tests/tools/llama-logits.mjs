#!/usr/bin/env node
// llama-logits.mjs: llama.cpp (node-llama-cpp 3.21.1, CPU) as the numerics
// reference for mfc's engine. Unlike llama-ref.mjs (top-K and text), this
// prints the whole distribution after a prompt of token ids, so
// tests/cli/engine-numerics.bats can compare every logit:
//   {"n_vocab", "logprobs": [...n_vocab...], "generated": [...]}
// logprobs[i] = log p(i) from llama.cpp's sampler at temperature 1 with no
// other transformation, i.e. logit[i] - logsumexp(logits): equal to mfc's
// log-softmax exactly when the logits agree up to a constant.
//
// Bench mode (--bench PP,TG) prints {"prefill_tps", "decode_tps"} measured
// the way mfc-eval --bench does: PP seeded-random tokens evaluated in one
// call (n_batch 512), then TG greedy tokens; also the CPU time of each
// phase (process.cpuUsage: every thread of the process).
//
// Jobs mode (--jobs FILE) runs one job per line of FILE, each a JSON object
// {"out": PATH, "args": [...the arguments above...]}, writing each result
// to its "out" file: one process (llama.cpp's backends load once, ~1 s)
// serves a whole test file.
//
// usage: node llama-logits.mjs --model M.gguf [--lora A.gguf [--lora-scale S]]
//          --tokens 1,2,3 [--n N] [--kv f16|f32] [--threads N] [--ctx N]
//          [--flash-attn on|off|auto]   (default auto, llama.cpp's own default)
//        node llama-logits.mjs --model M.gguf --bench PP,TG [--threads N]
//        node llama-logits.mjs --jobs FILE
import fs from "node:fs";
import {createRequire} from "node:module";
import path from "node:path";
import {fileURLToPath, pathToFileURL} from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const nodeModules = process.env.MFC_NODE_MODULES ?? path.join(here, "node", "node_modules");
const require = createRequire(path.join(nodeModules, "..", "package.json"));
const {getLlama, LlamaLogLevel} = await import(pathToFileURL(require.resolve("node-llama-cpp")).href);

function parseArgs(argv) {
    const o = {lora: [], loraScale: 1, n: 0, kv: "f16", threads: 2, ctx: 0, fa: "auto"};
    for (let i = 0; i < argv.length; i++) {
        const a = argv[i], v = () => {
            if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
            return argv[++i];
        };
        if (a === "--model") o.model = v();
        else if (a === "--lora") o.lora.push(v());
        else if (a === "--lora-scale") o.loraScale = Number(v());
        else if (a === "--tokens") o.tokens = v().split(",").filter(Boolean).map(Number);
        else if (a === "--n") o.n = Number(v());
        else if (a === "--kv") o.kv = v();
        else if (a === "--threads") o.threads = Number(v());
        else if (a === "--ctx") o.ctx = Number(v());
        else if (a === "--flash-attn") o.fa = {on: true, off: false}[v()] ?? "auto";
        else if (a === "--bench") o.bench = v().split(",").map(Number);
        else throw new Error(`unknown argument ${a}`);
    }
    if (!o.model) throw new Error("--model is required");
    if (!o.tokens && !o.bench) throw new Error("--tokens or --bench is required");
    return o;
}

// The same xorshift stream as mfc-eval --bench, so both see equal prompts.
function benchTokens(n, nVocab) {
    let r = 0x9e3779b97f4a7c15n;
    const mask = (1n << 64n) - 1n, out = [];
    for (let i = 0; i < n; i++) {
        r ^= (r << 13n) & mask; r ^= r >> 7n; r ^= (r << 17n) & mask;
        out.push(Number(r % BigInt(nVocab)));
    }
    return out;
}

// Rows of token_embd.weight: the vocabulary size as llama.cpp sees it.
function vocabSize(model) {
    const t = model.fileInfo.tensorInfo.find((x) => x.name === "token_embd.weight");
    return Number(t.dimensions[1]);
}

async function logprobsAfter(seq, tokens, nVocab) {
    const sampling = {temperature: 1, topK: 0, topP: 1, minP: 0};
    const input = [...tokens.slice(0, -1), [tokens.at(-1), {generateNext: {probabilities: true, options: sampling}}]];
    const out = await seq.controlledEvaluate(input);
    const probs = out.at(-1).next.probabilities;
    const lp = new Array(nVocab).fill(-Infinity);
    for (const [t, p] of probs.entries()) lp[t] = Math.log(p);
    return lp;
}

async function greedy(seq, tokens, n) {
    const generated = [];
    await seq.clearHistory();
    for await (const t of seq.evaluate(tokens, {temperature: 0})) {
        generated.push(t);
        if (generated.length >= n) break;
    }
    return generated;
}

async function bench(model, seq, pp, tg) {
    const toks = benchTokens(pp, vocabSize(model));
    const cpu = () => { const u = process.cpuUsage(); return (u.user + u.system) / 1e6; };
    const t0 = performance.now(), c0 = cpu();
    await seq.evaluateWithoutGeneratingNewTokens(toks);
    const t1 = performance.now(), c1 = cpu();
    await seq.clearHistory();
    // decode: evaluate() generates token by token after a prompt; time only the generation
    let n = 0, tStart = 0, cStart = 0;
    for await (const _ of seq.evaluate(toks, {temperature: 0})) {
        if (n === 0) {
            tStart = performance.now();
            cStart = cpu();
        }
        if (++n > tg) break;
    }
    const t2 = performance.now(), c2 = cpu();
    return {pp, tg, prefill_tps: pp / ((t1 - t0) / 1000), decode_tps: tg / ((t2 - tStart) / 1000),
            prefill_s: (t1 - t0) / 1000, decode_s: (t2 - tStart) / 1000,
            prefill_cpu_s: c1 - c0, decode_cpu_s: c2 - cStart};
}

async function run(llama, o) {
    const model = await llama.loadModel({modelPath: o.model, gpuLayers: 0});
    const kvType = o.kv === "f32" ? "F32" : "F16";
    const need = o.bench ? o.bench[0] + o.bench[1] + 8 : o.tokens.length + o.n + 8;
    const context = await model.createContext({
        contextSize: o.ctx || Math.max(need, 64), threads: o.threads, sequences: 1, batchSize: 512,
        flashAttention: o.fa,
        experimentalKvCacheKeyType: kvType, experimentalKvCacheValueType: kvType,
        lora: o.lora.length ? {adapters: o.lora.map((filePath) => ({filePath, scale: o.loraScale}))} : undefined,
    });
    const seq = context.getSequence();
    let result;
    if (o.bench) {
        result = await bench(model, seq, o.bench[0], o.bench[1]);
    } else {
        const logprobs = await logprobsAfter(seq, o.tokens, vocabSize(model));
        const generated = o.n > 0 ? await greedy(seq, o.tokens, o.n) : [];
        result = {n_vocab: logprobs.length, logprobs, generated};
    }
    await context.dispose();
    await model.dispose();
    return JSON.stringify(result) + "\n";
}

async function main() {
    const argv = process.argv.slice(2);
    const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
    if (argv[0] === "--jobs") {
        const lines = fs.readFileSync(argv[1], "utf8").split("\n").filter((l) => l.trim());
        for (const line of lines) {
            const job = JSON.parse(line);
            fs.writeFileSync(job.out, await run(llama, parseArgs(job.args)));
        }
    } else {
        process.stdout.write(await run(llama, parseArgs(argv)));
    }
    await llama.dispose();
}

try {
    await main();
} catch (e) {
    process.stderr.write(`llama-logits: ${e?.stack ?? e}\n`);
    process.exit(1);
}
