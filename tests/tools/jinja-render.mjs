// jinja-render.mjs: renders Hugging Face chat templates with a real Jinja
// engine (@huggingface/jinja, the one transformers.js uses), so tests can
// compare mfc's derived Ollama templates against the model's own template.
//
// usage: node jinja-render.mjs < request.json > reply.json
//   request: {"cases": [{"template": "<jinja source>", "messages": [{role, content}],
//             "vars": {...}}]}  (vars are extra globals such as date_string)
//   reply:   {"results": [{"text": "..."} | {"error": "..."}]}
// Every case gets bos_token, eos_token and add_generation_prompt (true) unless
// vars says otherwise. The package is found through $MFC_NODE_MODULES
// (default: tests/tools/node/node_modules beside this script).
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const modules = process.env.MFC_NODE_MODULES || join(here, "node", "node_modules");
const require = createRequire(join(modules, "noop.js"));
const entry = require.resolve("@huggingface/jinja").replace(/index\.cjs$/, "index.js");
const { Template } = await import(pathToFileURL(entry).href);

const request = JSON.parse(readFileSync(0, "utf8"));
const compiled = new Map(); // template source -> Template, parsed once
const results = request.cases.map((c) => {
    try {
        let t = compiled.get(c.template);
        if (!t) {
            t = new Template(c.template);
            compiled.set(c.template, t);
        }
        const vars = {
            bos_token: "<s>",
            eos_token: "</s>",
            add_generation_prompt: true,
            ...(c.vars || {}),
            messages: c.messages,
        };
        return { text: t.render(vars) };
    } catch (e) {
        return { error: String(e && e.message ? e.message : e) };
    }
});
process.stdout.write(JSON.stringify({ results }));
