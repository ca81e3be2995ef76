#!/usr/bin/env node
// llama-tok.mjs: llama.cpp's tokenizer (prebuilt, through node-llama-cpp
// 3.21.1) as the reference for mfc's runtime/tokenizer.
//
// usage:
//   node llama-tok.mjs gen --seed N --count N            random test strings, JSON array
//   node llama-tok.mjs ids --model V.gguf --in S.json [--special | --both]
//                                                        ids of each string, JSON array
//                                                        (--both: a line without, then
//                                                        a line with --special)
//   node llama-tok.mjs bench --model V.gguf --in TEXT [--seconds S] [--chunk N]
//                                                        {"bytes", "tokens", "mb_per_s"}
//                                                        (MB per CPU second of the process;
//                                                        --chunk: as texts of ~N characters)
// ids and bench tokenize with add_special = false (node-llama-cpp's
// model.tokenize), parse_special = --special; the model is loaded
// vocab-only. gen mixes the character classes that pre-tokenizers split on:
// letters of several scripts, digits, punctuation, contractions, runs of
// ASCII and Unicode whitespace, emoji with ZWJ, combining marks, and
// special-token spellings; the same seed gives the same strings.
// Exit status: 0, or 1 with the reason on stderr.
import {createRequire} from "node:module";
import fs from "node:fs";
import path from "node:path";
import {fileURLToPath, pathToFileURL} from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));

function parseArgs(argv) {
    const o = {mode: argv[0], seed: 1, count: 200, seconds: 3, special: false};
    for (let i = 1; i < argv.length; i++) {
        const a = argv[i], v = () => {
            if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
            return argv[++i];
        };
        if (a === "--model") o.model = v();
        else if (a === "--in") o.in = v();
        else if (a === "--seed") o.seed = Number(v());
        else if (a === "--count") o.count = Number(v());
        else if (a === "--seconds") o.seconds = Number(v());
        else if (a === "--special") o.special = true;
        else if (a === "--both") o.both = true;
        else if (a === "--chunk") o.chunk = Number(v());
        else throw new Error(`unknown argument ${a}`);
    }
    if (!["gen", "ids", "bench"].includes(o.mode)) throw new Error("mode must be gen, ids or bench");
    if (o.mode !== "gen" && (!o.model || !o.in)) throw new Error("--model and --in are required");
    return o;
}

// splitmix32: a small seeded generator, so test strings are reproducible.
function rng(seed) {
    let s = seed >>> 0;
    return () => {
        s = (s + 0x9e3779b9) >>> 0;
        let z = s;
        z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
        z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
        return ((z ^ (z >>> 16)) >>> 0) / 4294967296;
    };
}

const PIECES = [
    "Hello", "world", "the", "The", "DEEP", "llama", "Führer", "naïve", "café", "Cửa Việt",
    "нещо", "Български", "Ελληνικά", "ΐ", "ῼ", "Ω", "K", "שלום", "مرحبا", "हिन्दी", "ไทย",
    "我想在", "apple", "工作", "天～", "日本語", "カタカナ", "한국어", "កាន់តែ", "ᏣᎳᎩ",
    "0", "7", "33", "333", "1314151", "3.14", "½", "²", "٣", "Ⅻ", "①",
    "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "'Ve", "''", "'",
    "!", "?", "...", "!!!!!!", "------", "=======", "\"\"\"", "```", "(", ")", "{", "}", "[", "]",
    "$", "+", "<", "=", ">", "^", "~", "|", "`", "@", "#", "%", "&", "*", "_", "/", "\\", ",", ";", ":",
    "🦙", "🚀", "😁", "😶‍🌫️", "✅", "👍🏽", "🇫🇷", "e\u0301", "\u0300", "\u200d", "\ufeff",
    " ", "  ", "   ", "    ", "\t", "\n", "\n\n", "\r\n", "\r", " \n", "\t\t", "\u00a0", "\u3000",
    "\u2028", "\u0085", "\u2009", "\u000b", "\u000c", "\u001f",
    "<s>", "</s>", "<unk>", "<|endoftext|>", "<|begin_of_text|>", "<|eot_id|>", "<|user|>",
    "<|end|>", "<fim_prefix>", ">>TITLE<<", "[PAD49160]", "õ", "ü", "ÿ",
];

function gen(o) {
    const r = rng(o.seed), out = [];
    for (let i = 0; i < o.count; i++) {
        const n = 1 + Math.floor(r() * 12);
        let s = "";
        for (let j = 0; j < n; j++) {
            const p = PIECES[Math.floor(r() * PIECES.length)];
            s += p;
            if (r() < 0.4) s += " ".repeat(1 + Math.floor(r() * 2));
        }
        out.push(s);
    }
    return out;
}

async function loadModel(file) {
    const require = createRequire(path.join(here, "node", "package.json"));
    const {getLlama, LlamaLogLevel} = await import(pathToFileURL(require.resolve("node-llama-cpp")).href);
    const llama = await getLlama({gpu: false, logLevel: LlamaLogLevel.error, build: "never"});
    return llama.loadModel({modelPath: file, vocabOnly: true});
}

async function main() {
    const o = parseArgs(process.argv.slice(2));
    if (o.mode === "gen") {
        process.stdout.write(JSON.stringify(gen(o)) + "\n");
        return;
    }
    const model = await loadModel(o.model);
    if (o.mode === "ids") {
        const strings = JSON.parse(fs.readFileSync(o.in, "utf8"));
        for (const special of o.both ? [false, true] : [o.special]) {
            const ids = strings.map((s) => Array.from(model.tokenize(s, special)));
            process.stdout.write(JSON.stringify(ids) + "\n");
        }
        return;
    }
    const text = fs.readFileSync(o.in, "utf8");
    const bytes = Buffer.byteLength(text, "utf8");
    const pieces = [];
    for (let i = 0; i < text.length; i += o.chunk || text.length)
        pieces.push(text.slice(i, i + (o.chunk || text.length)));
    const encode = () => pieces.reduce((n, p) => n + model.tokenize(p, false).length, 0);
    let runs = 0, tokens = 0;
    encode(); /* warm-up */
    /* CPU time, not wall time: the build machines are shared */
    const cpu = () => {
        const u = process.cpuUsage();
        return (u.user + u.system) / 1e6;
    };
    const t0 = cpu();
    let el = 0;
    do {
        tokens = encode();
        runs++;
        el = cpu() - t0;
    } while (el < o.seconds);
    process.stdout.write(JSON.stringify({bytes, tokens, runs, mb_per_s: (bytes * runs) / el / 1e6}) + "\n");
}

main().then(() => process.exit(0), (e) => {
    process.stderr.write(`llama-tok: ${e.message}\n`);
    process.exit(1);
});
