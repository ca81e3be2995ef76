#!/usr/bin/env node
// api-client.mjs: the official `openai` (6.30.1) and `ollama` (0.6.4) npm
// clients, unchanged, against a running mfc-serve: chat, completions,
// streaming, the models list, error statuses (openai); generate, chat,
// streaming, list, show (ollama). Prints TAP ("ok N - ..." / "not ok N - ...")
// and exits 1 when any check fails. Driven by tests/cli/api-clients.bats.
//
// usage: node api-client.mjs --base http://127.0.0.1:PORT --model NAME
//          [--api-key KEY] [--adapter NAME] [--only openai|ollama]
import {createRequire} from "node:module";
import path from "node:path";
import {fileURLToPath, pathToFileURL} from "node:url";

// node_modules from $MFC_NODE_MODULES (make check sets it), else next to this script
const here = path.dirname(fileURLToPath(import.meta.url));
const modules = process.env.MFC_NODE_MODULES || path.join(here, "node_modules");
const require = createRequire(path.join(modules, "..", "package.json"));
const load = async (name) => import(pathToFileURL(require.resolve(name)).href);
const OpenAI = (await load("openai")).default;
const {Ollama} = await load("ollama");

function parseArgs(argv) {
    const o = {};
    for (let i = 0; i < argv.length; i++) {
        const a = argv[i], v = () => {
            if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
            return argv[++i];
        };
        if (a === "--base") o.base = v();
        else if (a === "--model") o.model = v();
        else if (a === "--api-key") o.apiKey = v();
        else if (a === "--adapter") o.adapter = v();
        else if (a === "--only") o.only = v();
        else throw new Error(`unknown argument ${a}`);
    }
    if (!o.base || !o.model) throw new Error("--base and --model are required");
    return o;
}

const o = parseArgs(process.argv.slice(2));
let n = 0, failed = 0;

function assert(cond, what) {
    if (!cond) throw new Error(what);
}

async function check(name, fn) {
    n++;
    try {
        await fn();
        console.log(`ok ${n} - ${name}`);
    } catch (e) {
        failed++;
        console.log(`not ok ${n} - ${name}`);
        for (const line of String(e?.stack ?? e).split("\n").slice(0, 6)) console.log(`# ${line}`);
    }
}

const MAX = 8;
const finish = (r) => r === "stop" || r === "length";

async function openaiChecks() {
    const client = new OpenAI({baseURL: `${o.base}/v1`, apiKey: o.apiKey ?? "none", maxRetries: 0, timeout: 60000});

    await check("openai: models.list names the model", async () => {
        const ids = [];
        for await (const m of client.models.list()) ids.push(m.id);
        assert(ids.includes(o.model), `models: ${JSON.stringify(ids)}`);
        if (o.adapter) assert(ids.includes(o.adapter), `no adapter ${o.adapter} in ${JSON.stringify(ids)}`);
    });

    await check("openai: chat.completions.create", async () => {
        const r = await client.chat.completions.create({
            model: o.model, max_tokens: MAX, temperature: 0,
            messages: [{role: "system", content: "Be brief."}, {role: "user", content: "Hello there"}],
        });
        assert(r.object === "chat.completion", `object ${r.object}`);
        assert(r.choices.length === 1, `choices ${r.choices.length}`);
        const c = r.choices[0];
        assert(c.message.role === "assistant", `role ${c.message.role}`);
        assert(typeof c.message.content === "string", "content not a string");
        assert(finish(c.finish_reason), `finish_reason ${c.finish_reason}`);
        assert(r.usage.prompt_tokens > 0 && r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= MAX,
            `usage ${JSON.stringify(r.usage)}`);
        assert(r.usage.total_tokens === r.usage.prompt_tokens + r.usage.completion_tokens, "total_tokens");
    });

    await check("openai: chat with the same seed is reproducible", async () => {
        const req = {model: o.model, max_tokens: MAX, temperature: 0.9, seed: 42,
            messages: [{role: "user", content: "Tell me a story"}]};
        const a = await client.chat.completions.create(req);
        const b = await client.chat.completions.create(req);
        assert(a.choices[0].message.content === b.choices[0].message.content,
            `${JSON.stringify(a.choices[0].message.content)} != ${JSON.stringify(b.choices[0].message.content)}`);
    });

    await check("openai: completions.create", async () => {
        const r = await client.completions.create({model: o.model, prompt: "Once upon a time", max_tokens: MAX, temperature: 0});
        assert(r.object === "text_completion", `object ${r.object}`);
        assert(typeof r.choices[0].text === "string", "text");
        assert(finish(r.choices[0].finish_reason), `finish_reason ${r.choices[0].finish_reason}`);
        assert(r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= MAX, `usage ${JSON.stringify(r.usage)}`);
    });

    await check("openai: streamed chat equals the non-streamed one, with usage", async () => {
        const req = {model: o.model, max_tokens: MAX, temperature: 0, messages: [{role: "user", content: "Count to five"}]};
        const whole = await client.chat.completions.create(req);
        const stream = await client.chat.completions.create({...req, stream: true, stream_options: {include_usage: true}});
        let text = "", role = null, reason = null, usage = null, chunks = 0;
        for await (const ch of stream) {
            chunks++;
            assert(ch.object === "chat.completion.chunk", `object ${ch.object}`);
            if (ch.usage) usage = ch.usage;
            for (const c of ch.choices) {
                if (c.delta.role) role = c.delta.role;
                if (c.delta.content) text += c.delta.content;
                if (c.finish_reason) reason = c.finish_reason;
            }
        }
        assert(chunks >= 2, `chunks ${chunks}`);
        assert(role === "assistant", `role ${role}`);
        assert(finish(reason), `finish_reason ${reason}`);
        assert(usage && usage.completion_tokens === whole.usage.completion_tokens, `usage ${JSON.stringify(usage)}`);
        assert(text === whole.choices[0].message.content,
            `stream ${JSON.stringify(text)} != ${JSON.stringify(whole.choices[0].message.content)}`);
    });

    await check("openai: streamed completion", async () => {
        const stream = await client.completions.create({model: o.model, prompt: "The sky is", max_tokens: MAX, temperature: 0, stream: true});
        let text = "", reason = null;
        for await (const ch of stream) {
            for (const c of ch.choices) {
                text += c.text ?? "";
                if (c.finish_reason) reason = c.finish_reason;
            }
        }
        assert(finish(reason), `finish_reason ${reason}`);
        const whole = await client.completions.create({model: o.model, prompt: "The sky is", max_tokens: MAX, temperature: 0});
        assert(text === whole.choices[0].text, `stream ${JSON.stringify(text)} != ${JSON.stringify(whole.choices[0].text)}`);
    });

    if (o.adapter) {
        await check("openai: the adapter is selected by the model field", async () => {
            const r = await client.chat.completions.create({model: o.adapter, max_tokens: MAX, temperature: 0,
                messages: [{role: "user", content: "Hello"}]});
            assert(r.model === o.adapter, `model ${r.model}`);
        });
    }

    await check("openai: an unknown model is NotFoundError (404)", async () => {
        let err = null;
        try {
            await client.chat.completions.create({model: "no-such-model", messages: [{role: "user", content: "x"}]});
        } catch (e) {
            err = e;
        }
        assert(err instanceof OpenAI.NotFoundError, `got ${err?.constructor?.name} ${err?.status}`);
        assert(err.status === 404 && typeof err.message === "string" && err.message.length > 0, `status ${err.status}`);
    });

    await check("openai: a bad field is BadRequestError (400)", async () => {
        let err = null;
        try {
            await client.chat.completions.create({model: o.model, temperature: "hot", messages: [{role: "user", content: "x"}]});
        } catch (e) {
            err = e;
        }
        assert(err instanceof OpenAI.BadRequestError, `got ${err?.constructor?.name} ${err?.status}`);
    });

    if (o.apiKey) {
        await check("openai: a wrong key is AuthenticationError (401)", async () => {
            const bad = new OpenAI({baseURL: `${o.base}/v1`, apiKey: "wrong", maxRetries: 0});
            let err = null;
            try {
                await bad.models.list();
            } catch (e) {
                err = e;
            }
            assert(err instanceof OpenAI.AuthenticationError, `got ${err?.constructor?.name} ${err?.status}`);
        });
    }
}

async function ollamaChecks() {
    const headers = o.apiKey ? {Authorization: `Bearer ${o.apiKey}`} : undefined;
    const client = new Ollama({host: o.base, headers});
    const opts = {num_predict: MAX, temperature: 0};

    await check("ollama: list names the model", async () => {
        const r = await client.list();
        const names = r.models.map((m) => m.name);
        assert(names.some((x) => x === o.model || x === `${o.model}:latest`), `models ${JSON.stringify(names)}`);
        const m = r.models[0];
        assert(typeof m.digest === "string" && typeof m.size === "number" && m.details, `entry ${JSON.stringify(m)}`);
    });

    await check("ollama: show", async () => {
        const r = await client.show({model: o.model});
        assert(typeof r.template === "string", "template");
        assert(typeof r.modelfile === "string" && r.modelfile.length > 0, "modelfile");
        assert(r.details && typeof r.details.family === "string", `details ${JSON.stringify(r.details)}`);
        assert(r.model_info && typeof r.model_info === "object", "model_info");
    });

    await check("ollama: generate", async () => {
        const r = await client.generate({model: o.model, prompt: "Why is the sky blue?", options: opts});
        assert(r.done === true, "done");
        assert(typeof r.response === "string", "response");
        assert(finish(r.done_reason), `done_reason ${r.done_reason}`);
        assert(r.eval_count >= 1 && r.eval_count <= MAX, `eval_count ${r.eval_count}`);
        assert(r.prompt_eval_count > 0, `prompt_eval_count ${r.prompt_eval_count}`);
        assert(Array.isArray(r.context) && r.context.length > 0, "context");
    });

    await check("ollama: streamed generate equals the non-streamed one", async () => {
        const req = {model: o.model, prompt: "Name three colours", options: opts};
        const whole = await client.generate(req);
        let text = "", parts = 0, last = null;
        for await (const p of await client.generate({...req, stream: true})) {
            parts++;
            text += p.response;
            last = p;
        }
        assert(parts >= 2, `parts ${parts}`);
        assert(last.done === true && last.eval_count === whole.eval_count, `last ${JSON.stringify(last)}`);
        assert(text === whole.response, `stream ${JSON.stringify(text)} != ${JSON.stringify(whole.response)}`);
    });

    await check("ollama: chat", async () => {
        const r = await client.chat({model: o.model, messages: [{role: "user", content: "Hi"}], options: opts});
        assert(r.done === true, "done");
        assert(r.message.role === "assistant" && typeof r.message.content === "string", `message ${JSON.stringify(r.message)}`);
        assert(r.eval_count >= 1 && r.eval_count <= MAX, `eval_count ${r.eval_count}`);
    });

    await check("ollama: streamed chat with history equals the non-streamed one", async () => {
        const req = {model: o.model, options: opts, messages: [
            {role: "system", content: "You are terse."},
            {role: "user", content: "Hi"}, {role: "assistant", content: "Hello."},
            {role: "user", content: "How are you?"}]};
        const whole = await client.chat(req);
        let text = "", last = null;
        for await (const p of await client.chat({...req, stream: true})) {
            text += p.message.content;
            last = p;
        }
        assert(last.done === true && finish(last.done_reason), `last ${JSON.stringify(last)}`);
        assert(text === whole.message.content, `stream ${JSON.stringify(text)} != ${JSON.stringify(whole.message.content)}`);
    });

    await check("ollama: an unknown model is a ResponseError with status 404", async () => {
        let err = null;
        try {
            await client.generate({model: "no-such-model", prompt: "x"});
        } catch (e) {
            err = e;
        }
        assert(err && err.name === "ResponseError" && err.status_code === 404, `got ${err?.name} ${err?.status_code}`);
    });
}

if (o.only !== "ollama") await openaiChecks();
if (o.only !== "openai") await ollamaChecks();
console.log(`1..${n}`);
process.exit(failed ? 1 : 0);
