#!/usr/bin/env node
// embed-client.mjs: the official `openai` and `ollama` npm clients, unchanged,
// calling mfc-serve's embeddings endpoints once each: openai
// embeddings.create (which asks for encoding_format "base64" and decodes it
// itself), ollama embed (/api/embed) and ollama embeddings (the legacy
// /api/embeddings). Prints one JSON line {"openai": {embedding, index,
// usage}, "ollama": {embeddings, prompt_eval_count}, "legacy": {embedding}}
// for tests/cli/serve-embed.bats to compare with what curl gets.
//
// usage: node embed-client.mjs --base http://127.0.0.1:PORT --model NAME --text TEXT
import {createRequire} from "node:module";
import path from "node:path";
import {fileURLToPath, pathToFileURL} from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const modules = process.env.MFC_NODE_MODULES || path.join(here, "node", "node_modules");
const require = createRequire(path.join(modules, "..", "package.json"));
const load = async (name) => import(pathToFileURL(require.resolve(name)).href);
const OpenAI = (await load("openai")).default;
const {Ollama} = await load("ollama");

const o = {};
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
    const a = argv[i], v = () => {
        if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
        return argv[++i];
    };
    if (a === "--base") o.base = v();
    else if (a === "--model") o.model = v();
    else if (a === "--text") o.text = v();
    else throw new Error(`unknown argument ${a}`);
}
if (!o.base || !o.model || o.text === undefined) throw new Error("--base, --model and --text are required");

const openai = new OpenAI({baseURL: `${o.base}/v1`, apiKey: "unused", maxRetries: 0});
const r = await openai.embeddings.create({model: o.model, input: o.text});
const ollama = new Ollama({host: o.base});
const e = await ollama.embed({model: o.model, input: [o.text]});
const l = await ollama.embeddings({model: o.model, prompt: o.text});
process.stdout.write(JSON.stringify({
    openai: {object: r.object, n: r.data.length, embedding: Array.from(r.data[0].embedding),
             index: r.data[0].index, usage: r.usage},
    ollama: {embeddings: e.embeddings, prompt_eval_count: e.prompt_eval_count, model: e.model},
    legacy: {embedding: l.embedding},
}) + "\n");
