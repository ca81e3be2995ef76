#!/usr/bin/env node
// structured-client.mjs: structured output and tool calls through the official
// `openai` and `ollama` npm clients, unchanged, against a running mfc-serve on
// a random tiny model at temperature 1 over many seeds: every answer to a
// json_schema, a forced (required or named) tool call, Ollama's format
// schema, parses and validates against its schema, streamed and not; JSON
// mode answers that end by themselves parse as objects; the bad requests get
// 400s naming the field. Prints TAP and exits 1 when a check fails. Driven by
// tests/cli/structured.bats.
//
// usage: node structured-client.mjs --base URL --model NAME [--seeds N]
//          [--only tools|errors|notools]
import {createRequire} from "node:module";
import path from "node:path";
import {fileURLToPath, pathToFileURL} from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const modules = process.env.MFC_NODE_MODULES || path.join(here, "node_modules");
const require = createRequire(path.join(modules, "..", "package.json"));
const load = async (name) => import(pathToFileURL(require.resolve(name)).href);
const OpenAI = (await load("openai")).default;
const {Ollama} = await load("ollama");

const o = {seeds: 6};
for (let i = 2; i < process.argv.length; i++) {
    const a = process.argv[i], v = process.argv[++i];
    if (a === "--base") o.base = v;
    else if (a === "--model") o.model = v;
    else if (a === "--seeds") o.seeds = Number(v);
    else if (a === "--only") o.only = v;
    else throw new Error(`unknown argument ${a}`);
}

let n = 0, failed = 0;
const assert = (c, what) => {
    if (!c) throw new Error(what);
};
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

// A validator for the keywords the schemas below use; returns an error or "".
function validate(root, s, v, at = "$") {
    if (s.$ref) return validate(root, root.$defs[s.$ref.replace("#/$defs/", "")], v, at);
    const type = (x) => (x === null ? "null" : Array.isArray(x) ? "array" : Number.isInteger(x) ? "integer" : typeof x);
    if (s.const !== undefined && JSON.stringify(s.const) !== JSON.stringify(v)) return `${at}: not the const`;
    if (s.enum && !s.enum.some((e) => JSON.stringify(e) === JSON.stringify(v))) return `${at}: not in enum`;
    if (s.anyOf && !s.anyOf.some((x) => !validate(root, x, v, at))) return `${at}: no anyOf branch`;
    if (s.type) {
        const ts = [].concat(s.type), t = type(v);
        if (!ts.some((x) => x === t || (x === "number" && t === "integer"))) return `${at}: ${t} is not ${ts}`;
    }
    if (typeof v === "number") {
        if (s.minimum !== undefined && v < s.minimum) return `${at}: below minimum`;
        if (s.maximum !== undefined && v > s.maximum) return `${at}: above maximum`;
    }
    if (typeof v === "string") {
        const len = [...v].length;
        if (s.maxLength !== undefined && len > s.maxLength) return `${at}: longer than maxLength`;
        if (s.minLength !== undefined && len < s.minLength) return `${at}: shorter than minLength`;
        if (s.pattern && !new RegExp(s.pattern, "u").test(v)) return `${at}: does not match ${s.pattern}`;
        if (s.format === "date" && !/^\d{4}-\d{2}-\d{2}$/.test(v)) return `${at}: not a date`;
    }
    if (Array.isArray(v)) {
        if (s.maxItems !== undefined && v.length > s.maxItems) return `${at}: too many items`;
        if (s.minItems !== undefined && v.length < s.minItems) return `${at}: too few items`;
        for (let i = 0; s.items && i < v.length; i++) {
            const e = validate(root, s.items, v[i], `${at}[${i}]`);
            if (e) return e;
        }
    }
    if (type(v) === "object" && s.properties) {
        for (const k of Object.keys(v)) {
            if (!s.properties[k]) return `${at}: unexpected property ${k}`;
            const e = validate(root, s.properties[k], v[k], `${at}.${k}`);
            if (e) return e;
        }
        for (const k of s.required ?? []) if (!(k in v)) return `${at}: missing ${k}`;
    }
    return "";
}

const SCHEMA = {
    type: "object",
    properties: {
        name: {type: "string", maxLength: 6},
        age: {type: "integer", minimum: 0, maximum: 120},
        score: {type: "number", minimum: -1, maximum: 1},
        tags: {type: "array", items: {enum: ["a", "b", 3]}, minItems: 1, maxItems: 3},
        ok: {type: "boolean"},
        day: {type: "string", format: "date"},
        code: {type: "string", pattern: "^[A-Z]{2}[0-9]{2}$"},
        pick: {anyOf: [{type: "null"}, {$ref: "#/$defs/pt"}]},
    },
    required: ["name", "age", "score", "tags", "ok", "day", "code", "pick"],
    additionalProperties: false,
    $defs: {pt: {type: "object", properties: {x: {type: "integer", minimum: -5, maximum: 5}}, required: ["x"], additionalProperties: false}},
};

const TOOLS = [
    {type: "function", function: {name: "get_weather", description: "The weather in a city",
        parameters: {type: "object", properties: {city: {enum: ["Paris", "Oslo", "Lima"]}, days: {type: "integer", minimum: 1, maximum: 7}},
            required: ["city", "days"], additionalProperties: false}}},
    {type: "function", function: {name: "add", description: "Adds two numbers",
        parameters: {type: "object", properties: {a: {type: "integer", minimum: -99, maximum: 99}, b: {type: "integer", minimum: -99, maximum: 99}},
            required: ["a", "b"], additionalProperties: false}}},
];
const toolSchema = (name) => TOOLS.find((t) => t.function.name === name).function.parameters;

const openai = new OpenAI({baseURL: `${o.base}/v1`, apiKey: "none", maxRetries: 0});
const ollama = new Ollama({host: o.base});
const seeds = [...Array(o.seeds).keys()].map((i) => 1000 + i * 7);
const base = {model: o.model, temperature: 1, max_tokens: 1500};

async function oaiText(stream, body) {
    if (!stream) {
        const r = await openai.chat.completions.create(body);
        return {text: r.choices[0].message.content, finish: r.choices[0].finish_reason, msg: r.choices[0].message};
    }
    const s = await openai.chat.completions.create({...body, stream: true});
    let text = "", finish = null;
    const calls = [];
    for await (const c of s) {
        const ch = c.choices[0];
        if (!ch) continue;
        if (ch.delta?.content) text += ch.delta.content;
        for (const d of ch.delta?.tool_calls ?? []) {
            if (!calls[d.index]) {
                assert(d.id && d.function?.name, "the first delta of a call carries its id and name");
                calls[d.index] = {id: d.id, name: d.function.name, arguments: d.function.arguments ?? ""};
            } else {
                assert(!d.function?.name, "a call's name comes once");
                calls[d.index].arguments += d.function?.arguments ?? "";
            }
        }
        if (ch.finish_reason) finish = ch.finish_reason;
    }
    return {text, finish, msg: {tool_calls: calls.length ? calls.map((c) => ({id: c.id, type: "function", function: {name: c.name, arguments: c.arguments}})) : undefined}};
}

function checkCalls(msg, finish, only) {
    assert(finish === "tool_calls", `finish_reason ${finish}, expected tool_calls`);
    assert(msg.tool_calls?.length >= 1, "no tool_calls");
    for (const c of msg.tool_calls) {
        assert(/^call_/.test(c.id) && c.type === "function", "a call has an id and type function");
        assert(!only || c.function.name === only, `called ${c.function.name}, not ${only}`);
        const args = JSON.parse(c.function.arguments);
        const e = validate(toolSchema(c.function.name), toolSchema(c.function.name), args);
        assert(!e, `${c.function.name}(${c.function.arguments}): ${e}`);
    }
}

if (!o.only || o.only === "tools" || o.only === "notools") {
    for (const stream of [false, true]) {
        const how = stream ? "streamed" : "whole";
        await check(`openai json_schema (strict): ${o.seeds} answers at temperature 1 validate, ${how}`, async () => {
            for (const seed of seeds) {
                const r = await oaiText(stream, {...base, seed, messages: [{role: "user", content: "a person"}],
                    response_format: {type: "json_schema", json_schema: {name: "person", strict: true, schema: SCHEMA}}});
                assert(r.finish === "stop", `seed ${seed}: finish_reason ${r.finish}`);
                const e = validate(SCHEMA, SCHEMA, JSON.parse(r.text));
                assert(!e, `seed ${seed}: ${e} in ${r.text}`);
            }
        });
        await check(`openai json_object: answers that end parse as objects, ${how}`, async () => {
            let ended = 0;
            for (const seed of seeds.concat(seeds.map((s) => s + 1))) {
                const r = await oaiText(stream, {...base, max_tokens: 300, seed, messages: [{role: "user", content: "json"}],
                    response_format: {type: "json_object"}});
                assert(r.text.trimStart().startsWith("{"), `seed ${seed}: ${r.text.slice(0, 40)}`);
                if (r.finish !== "stop") continue;
                ended++;
                const v = JSON.parse(r.text);
                assert(v && typeof v === "object" && !Array.isArray(v), `seed ${seed}: not an object`);
            }
            assert(ended > 0, "no answer ended within max_tokens");
        });
        await check(`ollama chat format schema: ${o.seeds} answers validate, ${how}`, async () => {
            for (const seed of seeds) {
                let text = "";
                const req = {model: o.model, messages: [{role: "user", content: "a person"}], format: SCHEMA,
                    options: {temperature: 1, seed, num_predict: 1500}};
                if (stream) {
                    for await (const part of await ollama.chat({...req, stream: true})) text += part.message.content;
                } else {
                    const r = await ollama.chat(req);
                    assert(r.done_reason === "stop", `seed ${seed}: done_reason ${r.done_reason}`);
                    text = r.message.content;
                }
                const e = validate(SCHEMA, SCHEMA, JSON.parse(text));
                assert(!e, `seed ${seed}: ${e}`);
            }
        });
    }
    await check("ollama generate format schema and format json", async () => {
        for (const seed of seeds) {
            const r = await ollama.generate({model: o.model, prompt: "p", format: SCHEMA, options: {temperature: 1, seed, num_predict: 1500}});
            assert(!validate(SCHEMA, SCHEMA, JSON.parse(r.response)), `seed ${seed}: ${r.response}`);
            const j = await ollama.generate({model: o.model, prompt: "p", format: "json", options: {temperature: 1, seed, num_predict: 300}});
            assert(j.response.trimStart().startsWith("{"), "format json starts an object");
            if (j.done_reason === "stop") assert(typeof JSON.parse(j.response) === "object", "format json parses");
        }
    });
    await check("llama-server grammar field (GBNF) on completions", async () => {
        for (const seed of seeds) {
            const r = await fetch(`${o.base}/v1/completions`, {method: "POST", headers: {"content-type": "application/json"},
                body: JSON.stringify({prompt: "x", seed, temperature: 1, max_tokens: 40, grammar: 'root ::= ("yes" | "no") " " [0-9]{1,3}'})});
            const j = await r.json();
            assert(/^(yes|no) [0-9]{1,3}$/.test(j.choices[0].text), `grammar answer ${JSON.stringify(j.choices[0].text)}`);
        }
    });
}

if (!o.only || o.only === "tools") {
    for (const stream of [false, true]) {
        const how = stream ? "streamed" : "whole";
        await check(`openai tool_choice required: every answer is valid calls, ${how}`, async () => {
            for (const seed of seeds) {
                const r = await oaiText(stream, {...base, seed, messages: [{role: "user", content: "weather?"}], tools: TOOLS, tool_choice: "required"});
                checkCalls(r.msg, r.finish);
            }
        });
        await check(`openai tool_choice named: every answer calls that function, ${how}`, async () => {
            for (const seed of seeds) {
                const r = await oaiText(stream, {...base, seed, messages: [{role: "user", content: "add"}], tools: TOOLS,
                    tool_choice: {type: "function", function: {name: "add"}}, parallel_tool_calls: false});
                checkCalls(r.msg, r.finish, "add");
                assert(r.msg.tool_calls.length === 1, "parallel_tool_calls false: one call");
            }
        });
    }
    await check("openai: a conversation with tool calls and tool results goes on", async () => {
        const first = await openai.chat.completions.create({...base, seed: 5, messages: [{role: "user", content: "add"}], tools: TOOLS, tool_choice: "required"});
        const m = first.choices[0].message;
        const r = await openai.chat.completions.create({...base, max_tokens: 8, seed: 6, tools: TOOLS, messages: [
            {role: "user", content: "add"}, m,
            ...m.tool_calls.map((c) => ({role: "tool", tool_call_id: c.id, content: "42"}))]});
        assert(["stop", "length", "tool_calls"].includes(r.choices[0].finish_reason), "answered");
    });
    await check("openai tool_choice none: plain text, no calls", async () => {
        const r = await openai.chat.completions.create({...base, max_tokens: 8, seed: 1, messages: [{role: "user", content: "hi"}], tools: TOOLS, tool_choice: "none"});
        assert(!r.choices[0].message.tool_calls && r.choices[0].finish_reason !== "tool_calls", "no calls");
    });
    await check("ollama chat with tools and a tool result in the history", async () => {
        const r = await ollama.chat({model: o.model, tools: TOOLS, options: {temperature: 1, seed: 3, num_predict: 8}, messages: [
            {role: "user", content: "add 1 and 2"},
            {role: "assistant", content: "", tool_calls: [{function: {name: "add", arguments: {a: 1, b: 2}}}]},
            {role: "tool", content: "3", tool_name: "add"}]});
        assert(r.done, "answered");
        for (const c of r.message.tool_calls ?? []) assert(typeof c.function.arguments === "object", "arguments are an object");
    });
    await check("ollama show: capabilities include tools", async () => {
        const r = await ollama.show({model: o.model});
        assert(r.capabilities.includes("tools"), JSON.stringify(r.capabilities));
    });
}

async function status400(fn, needle) {
    try {
        await fn();
    } catch (e) {
        assert(e.status === 400 || e.status_code === 400, `status ${e.status ?? e.status_code}: ${e.message}`);
        assert(String(e.message).includes(needle), `message "${e.message}" lacks "${needle}"`);
        return;
    }
    throw new Error("no error");
}

if (!o.only || o.only === "errors" || o.only === "tools") {
    await check("bad schema, keyword, grammar and tool_choice are 400s naming the field", async () => {
        const m = [{role: "user", content: "x"}];
        await status400(() => openai.chat.completions.create({...base, messages: m,
            response_format: {type: "json_schema", json_schema: {name: "x", schema: {type: "object", properties: {a: {not: {}}}}}}}),
        "keyword 'not' is not supported");
        await status400(() => openai.chat.completions.create({...base, messages: m,
            response_format: {type: "json_schema", json_schema: {name: "x", schema: {$ref: "#/$defs/none"}}}}), "response_format.json_schema.schema");
        await status400(() => openai.chat.completions.create({...base, messages: m, tools: TOOLS,
            tool_choice: {type: "function", function: {name: "nope"}}}), "'tool_choice' names function \"nope\"");
        await status400(() => openai.chat.completions.create({...base, messages: m, tool_choice: "required"}), "'tools' is empty");
        await status400(() => openai.chat.completions.create({...base, messages: m, response_format: {type: "xml"}}), "response_format.type");
        await status400(() => openai.completions.create({model: o.model, prompt: "x", grammar: "root ::= undefined-rule"}), "'grammar'");
        await status400(() => ollama.chat({model: o.model, messages: m, format: "yaml"}), "'format'");
        await status400(() => ollama.generate({model: o.model, prompt: "x", format: {type: "string", format: "email"}}), "format 'email'");
    });
}

if (o.only === "notools" || o.only === "errors") {
    await check("tools on a model whose template cannot render them: 400", async () => {
        await status400(() => openai.chat.completions.create({...base, messages: [{role: "user", content: "x"}], tools: TOOLS}),
            "does not render tools");
        await status400(() => ollama.chat({model: o.model, messages: [{role: "user", content: "x"}], tools: TOOLS}), "does not render tools");
        const r = await ollama.show({model: o.model});
        assert(!r.capabilities.includes("tools"), "no tools capability");
    });
}

console.log(`1..${n}`);
process.exit(failed ? 1 : 0);
