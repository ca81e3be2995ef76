#!/usr/bin/env node
// llama-ref.mjs: llama.cpp (prebuilt, through node-llama-cpp 3.21.1) as the
// reference runtime for mfc's tests: loads a GGUF (and optionally LoRA
// adapters), tokenizes a prompt, evaluates it on the CPU and prints one JSON
// object on stdout:
//   {"model", "lora", "n_vocab", "vocab_type", "n_embd", "n_ctx_train",
//    "prompt_tokens": [...],
//    "top": [[token, logprob], ...]   log-softmax of the logits after the
//                                      last prompt token (temperature 1, no
//                                      top-k/p), the K most likely first,
//    "generated": [...], "text"}       greedy continuation of N tokens
// logprob = logit - logsumexp(logits), so two runtimes agree on it exactly
// when their logits agree up to a constant.
//
// usage: node llama-ref.mjs --model M.gguf [--lora A.gguf [--lora-scale S]]
//          [--prompt TEXT | --tokens 1,2,3] [--no-bos] [--n N] [--top K]
//          [--ctx N] [--threads N (default 1: tiny models lose more to thread
//          hand-offs on a shared machine than they gain)]
// Exit status: 0, or 1 with the reason on stderr (llama.cpp refused the file).
// Run it from anywhere: node_modules is found next to this script (node/).
import {createRequire} from "node:module";
import path from "node:path";
import {fileURLToPath, pathToFileURL} from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "node", "package.json"));
const {getLlama, LlamaLogLevel} = await import(pathToFileURL(require.resolve("node-llama-cpp")).href);

function parseArgs(argv) {
    const o = {lora: [], loraScale: 1, prompt: "Hello world", n: 8, top: 10, ctx: 256, threads: 1, bos: true};
    for (let i = 0; i < argv.length; i++) {
        const a = argv[i], v = () => {
            if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
            return argv[++i];
        };
        if (a === "--model") o.model = v();
        else if (a === "--lora") o.lora.push(v());
        else if (a === "--lora-scale") o.loraScale = Number(v());
        else if (a === "--prompt") o.prompt = v();
        else if (a === "--tokens") o.tokens = v().split(",").filter(Boolean).map(Number);
        else if (a === "--no-bos") o.bos = false;
        else if (a === "--n") o.n = Number(v());
        else if (a === "--top") o.top = Number(v());
        else if (a === "--ctx") o.ctx = Number(v());
        else if (a === "--threads") o.threads = Number(v());
        else throw new Error(`unknown argument ${a}`);
    }
    if (!o.model) throw new Error("--model is required");
    return o;
}

// The top K [token, logprob] pairs from node-llama-cpp's probability map.
function topLogprobs(probs, k) {
    return [...probs.entries()]
        .sort((a, b) => b[1] - a[1] || a[0] - b[0])
        .slice(0, k)
        .map(([t, p]) => [t, Math.log(p)]);
}

async function main() {
    const o = parseArgs(process.argv.slice(2));
    const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
    const model = await llama.loadModel({modelPath: o.model, gpuLayers: 0});
    const adapters = o.lora.map((filePath) => ({filePath, scale: o.loraScale}));
    const context = await model.createContext({
        contextSize: o.ctx, threads: o.threads, sequences: 1,
        lora: adapters.length ? {adapters} : undefined,
    });
    const seq = context.getSequence();
    let tokens = o.tokens ?? model.tokenize(o.prompt);
    if (!o.tokens && o.bos && model.tokens.bos != null) tokens = [model.tokens.bos, ...tokens];
    if (tokens.length === 0) throw new Error("the prompt has no tokens");
    const sampling = {temperature: 1, topK: 0, topP: 1, minP: 0};
    const input = [...tokens.slice(0, -1), [tokens.at(-1), {generateNext: {probabilities: true, options: sampling}}]];
    const out = await seq.controlledEvaluate(input);
    const probs = out.at(-1).next.probabilities;
    const top = topLogprobs(probs, o.top);
    await seq.clearHistory();
    const generated = [];
    if (o.n > 0) {
        for await (const t of seq.evaluate(tokens, {temperature: 0})) {
            generated.push(t);
            if (generated.length >= o.n) break;
        }
    }
    const result = {
        model: o.model, lora: o.lora, n_vocab: probs.size, vocab_type: model.vocabularyType,
        n_embd: model.embeddingVectorSize, n_ctx_train: model.trainContextSize,
        prompt_tokens: tokens, top, generated, text: model.detokenize(generated),
    };
    process.stdout.write(JSON.stringify(result) + "\n");
    await context.dispose();
    await model.dispose();
    await llama.dispose();
}

try {
    await main();
} catch (e) {
    process.stderr.write(`llama-ref: ${e?.message ?? e}\n`);
    process.exit(1);
}
