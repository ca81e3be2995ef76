#!/usr/bin/env node
// ask.mjs: the official `openai` npm client, unchanged, asks a served demo
// image (modelfiles/demo) the recorded questions of modelfiles/demo/expected.json,
// once as the base model and once as the named adapter (the request's
// `model`), and compares each answer with what transformers produced for the
// Modelfile's context (SYSTEM + MESSAGE pair + the question:
// prompts[i].contexts.modelfile.{base,adapter}.answer). The request carries
// only the user's question: the image supplies the SYSTEM, the MESSAGEs, the
// TEMPLATE and the greedy PARAMETERs. Prints TAP and each answer; exits 1
// when any answer differs. Driven by tests/e2e/demo.bats.
//
// usage: node ask.mjs --base http://HOST:PORT --model NAME --adapter NAME
//          --expected modelfiles/demo/expected.json [--api-key KEY]
import {createRequire} from "node:module";
import fs from "node:fs";
import path from "node:path";
import {fileURLToPath, pathToFileURL} from "node:url";

// node_modules from $MFC_NODE_MODULES (make check sets it), else tests/tools/node
const here = path.dirname(fileURLToPath(import.meta.url));
const modules = process.env.MFC_NODE_MODULES || path.join(here, "..", "tools", "node", "node_modules");
const require = createRequire(path.join(modules, "..", "package.json"));
const OpenAI = (await import(pathToFileURL(require.resolve("openai")).href)).default;

const o = {};
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i += 2) {
    const k = argv[i].replace(/^--/, ""), v = argv[i + 1];
    if (!["base", "model", "adapter", "expected", "api-key"].includes(k) || v === undefined) {
        console.error(`ask.mjs: bad argument ${argv[i]}`);
        process.exit(2);
    }
    o[k] = v;
}
if (!o.base || !o.model || !o.adapter || !o.expected) {
    console.error("ask.mjs: --base, --model, --adapter and --expected are required");
    process.exit(2);
}

const expected = JSON.parse(fs.readFileSync(o.expected, "utf8"));
const client = new OpenAI({baseURL: `${o.base}/v1`, apiKey: o["api-key"] ?? "none",
                           maxRetries: 0, timeout: 60000});
let n = 0, failed = 0;

const ids = [];
for await (const m of client.models.list()) ids.push(m.id);
n++;
if (ids.includes(o.model) && ids.includes(o.adapter)) {
    console.log(`ok ${n} - models.list has ${o.model} and ${o.adapter}`);
} else {
    failed++;
    console.log(`not ok ${n} - models.list: ${JSON.stringify(ids)}`);
}

for (const p of expected.prompts) {
    const want = p.contexts.modelfile;
    for (const [model, key] of [[o.model, "base"], [o.adapter, "adapter"]]) {
        n++;
        let got;
        try {
            const r = await client.chat.completions.create({
                model, messages: [{role: "user", content: p.question}],
            });
            got = r.choices[0].message.content;
        } catch (e) {
            got = `error: ${e?.message ?? e}`;
        }
        const ok = got === want[key].answer;
        if (!ok) failed++;
        console.log(`${ok ? "ok" : "not ok"} ${n} - ${model}: ${JSON.stringify(p.question)} -> ${JSON.stringify(got)}`);
        if (!ok) console.log(`# expected ${JSON.stringify(want[key].answer)}`);
    }
}
console.log(`1..${n}`);
process.exit(failed ? 1 : 0);
