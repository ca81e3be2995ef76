#!/usr/bin/env node
// llama-embed.mjs: llama.cpp's embeddings (node-llama-cpp 3.21.1, CPU) as the
// reference for mfc-serve's /v1/embeddings, /api/embed and /api/embeddings
// (tests/cli/serve-embed.bats).
//
// Which pooling llama.cpp uses here: a llama GGUF without a
// "llama.pooling_type" key (mkmodel writes none) gets LLAMA_POOLING_TYPE_NONE,
// and node-llama-cpp's getEmbeddingFor() then returns
// llama_get_embeddings_ith(ctx, -1): the output_norm'ed final hidden state of
// the LAST token of [BOS] + tokenize(text), not normalised. The script prints
// that pooling as reported by the context ("pooling").
//
// llama.cpp's LLAMA_POOLING_TYPE_MEAN (what mfc computes) is the average of
// that same per-token row over every token. Because attention is causal, row
// i of the whole input equals the last row of the prefix tokens[0..i], so
// the mean is rebuilt here exactly from getEmbeddingFor(prefix) for every
// prefix (each prefix starts with BOS, so nothing more is prepended; the
// script checks nothing is appended either).
//
// Output (one JSON line): {"pooling", "tokens": [...], "last": [...],
// "mean": [...]} with last = getEmbeddingFor(text) and mean as above.
//
// usage: node llama-embed.mjs --model M.gguf --text TEXT [--threads N]
import {createRequire} from "node:module";
import path from "node:path";
import {fileURLToPath, pathToFileURL} from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const nodeModules = process.env.MFC_NODE_MODULES ?? path.join(here, "node", "node_modules");
const require = createRequire(path.join(nodeModules, "..", "package.json"));
const {getLlama, LlamaLogLevel} = await import(pathToFileURL(require.resolve("node-llama-cpp")).href);

const o = {threads: 2};
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
    const a = argv[i], v = () => {
        if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
        return argv[++i];
    };
    if (a === "--model") o.model = v();
    else if (a === "--text") o.text = v();
    else if (a === "--threads") o.threads = Number(v());
    else throw new Error(`unknown argument ${a}`);
}
if (!o.model || o.text === undefined) throw new Error("--model and --text are required");

const llama = await getLlama({gpu: false, logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath: o.model, gpuLayers: 0});
const ctx = await model.createEmbeddingContext({contextSize: 512, threads: o.threads});
const tokens = model.tokenize(o.text, false);
ctx._prepareInput(tokens); // the BOS (and EOS, for vocabularies that want one) getEmbeddingFor adds
const last = (await ctx.getEmbeddingFor(o.text)).vector;
const n = last.length, mean = new Array(n).fill(0);
for (let i = 1; i <= tokens.length; i++) {
    const prefix = tokens.slice(0, i);
    if (ctx.calculateInputLength(prefix) !== i)
        throw new Error(`llama.cpp would change the prefix of ${i} tokens`);
    const v = (await ctx.getEmbeddingFor(prefix)).vector;
    for (let d = 0; d < n; d++) mean[d] += v[d] / tokens.length;
}
const pooling = "none"; // llama_pooling_type(ctx) is not exposed by node-llama-cpp 3.21.1; see above
process.stdout.write(JSON.stringify({pooling, tokens, last, mean}) + "\n");
await ctx.dispose();
await model.dispose();
