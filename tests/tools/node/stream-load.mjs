#!/usr/bin/env node
// stream-load.mjs: N concurrent streaming clients against mfc-serve (plain
// fetch, no client library, so the wire framing itself is checked), for
// tests/cli/serve-load.bats and bench/serve.
//
// Each client POSTs /v1/chat/completions with "stream": true (SSE),
// /v1/completions (SSE, --api completions: the raw prompt, no template) or
// /api/chat (NDJSON, --api ollama) and checks the framing as it reads:
//   SSE: events separated by a blank line, each "data: " + one JSON chunk
//        (object chat.completion.chunk, one choice), the first delta carries
//        the role, exactly one finish_reason, then "data: [DONE]" and the end;
//   NDJSON: one JSON object per line, "done": true only on the last one.
// A 429 counts as rejected when --allow-429 is given (its Retry-After must
// be there), else as a failure; any other status, a framing error or a
// client timeout is a failure. --abort-after K drops the connection after K
// chunks (a client that goes away).
//
// Prints one JSON summary on stdout: {clients, ok, rejected, aborted, failed,
// errors[], statuses{}, tokens, wall_s, ttft_ms{p50,p90,max}, tok_s (all
// clients' tokens / wall), per_client_tok_s_p50}. Exit status 1 when any
// client failed.
//
// usage: node stream-load.mjs --base URL --model NAME [--clients N] [--max-tokens M]
//          [--api openai|completions|ollama] [--allow-429] [--abort-after K] [--timeout-ms T]
//          [--prompt TEXT] [--api-key KEY] [--seed S]
function parseArgs(argv) {
    const o = {clients: 8, maxTokens: 16, api: "openai", allow429: false, abortAfter: 0, timeoutMs: 60000,
        prompt: "Write a short story about a robot learning to paint.", seed: 1};
    for (let i = 0; i < argv.length; i++) {
        const a = argv[i], v = () => {
            if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
            return argv[++i];
        };
        if (a === "--base") o.base = v();
        else if (a === "--model") o.model = v();
        else if (a === "--clients") o.clients = Number(v());
        else if (a === "--max-tokens") o.maxTokens = Number(v());
        else if (a === "--api") o.api = v();
        else if (a === "--allow-429") o.allow429 = true;
        else if (a === "--abort-after") o.abortAfter = Number(v());
        else if (a === "--timeout-ms") o.timeoutMs = Number(v());
        else if (a === "--prompt") o.prompt = v();
        else if (a === "--api-key") o.apiKey = v();
        else if (a === "--seed") o.seed = Number(v());
        else throw new Error(`unknown argument ${a}`);
    }
    if (!o.base || !o.model) throw new Error("--base and --model are required");
    return o;
}

class Framing extends Error {}

// Splits a byte stream into records ending in sep; yields each record.
async function* records(body, sep) {
    const dec = new TextDecoder();
    let buf = "";
    for await (const chunk of body) {
        buf += dec.decode(chunk, {stream: true});
        let at;
        while ((at = buf.indexOf(sep)) >= 0) {
            yield buf.slice(0, at);
            buf = buf.slice(at + sep.length);
        }
    }
    buf += dec.decode();
    if (buf.length) yield {tail: buf};
}

// Reads an SSE chat stream; returns {tokens, ttft} or throws Framing.
async function readSSE(res, t0, o, ctl) {
    let chunks = 0, ttft = null, role = false, finish = 0, done = false, usageTokens = null, text = 0;
    for await (const ev of records(res.body, "\n\n")) {
        if (typeof ev === "object") throw new Framing(`bytes after the last event: ${JSON.stringify(ev.tail.slice(0, 80))}`);
        if (done) throw new Framing(`an event after [DONE]: ${JSON.stringify(ev.slice(0, 80))}`);
        const lines = ev.split("\n").filter((l) => !l.startsWith(":"));
        if (lines.length !== 1 || !lines[0].startsWith("data: ")) throw new Framing(`not one data line: ${JSON.stringify(ev.slice(0, 120))}`);
        const data = lines[0].slice(6);
        if (data === "[DONE]") {
            done = true;
            continue;
        }
        let c;
        try {
            c = JSON.parse(data);
        } catch {
            throw new Framing(`not JSON: ${JSON.stringify(data.slice(0, 120))}`);
        }
        const completions = o.api === "completions";
        if (c.object !== (completions ? "text_completion" : "chat.completion.chunk")) throw new Framing(`object ${c.object}`);
        if (c.usage) usageTokens = c.usage.completion_tokens;
        for (const ch of c.choices) {
            if (ch.index !== 0) throw new Framing(`choice index ${ch.index}`);
            if (ch.delta?.role) {
                if (role) throw new Framing("a second role delta");
                role = true;
            }
            if (completions && ch.text) {
                if (ttft === null) ttft = performance.now() - t0;
                text++;
            }
            if (ch.delta?.content) {
                if (ttft === null) ttft = performance.now() - t0;
                text++;
            }
            if (ch.finish_reason) {
                finish++;
                if (!["stop", "length"].includes(ch.finish_reason)) throw new Framing(`finish_reason ${ch.finish_reason}`);
            }
        }
        chunks++;
        if (o.abortAfter && chunks >= o.abortAfter) {
            ctl.deliberate = true;
            ctl.abort();
            return {aborted: true};
        }
    }
    if (!done) throw new Framing("the stream ended without data: [DONE]");
    if (!role && o.api !== "completions") throw new Framing("no delta with the role");
    if (finish !== 1) throw new Framing(`${finish} finish_reason chunks`);
    return {tokens: usageTokens ?? text, ttft: ttft ?? performance.now() - t0};
}

async function readNDJSON(res, t0, o, ctl) {
    let ttft = null, done = null, lines = 0;
    for await (const l of records(res.body, "\n")) {
        if (typeof l === "object") throw new Framing(`a last line without a newline: ${JSON.stringify(l.tail.slice(0, 80))}`);
        if (done) throw new Framing("a line after done");
        let c;
        try {
            c = JSON.parse(l);
        } catch {
            throw new Framing(`not JSON: ${JSON.stringify(l.slice(0, 120))}`);
        }
        if (c.error) throw new Framing(`error line: ${c.error}`);
        if (c.message?.content && ttft === null) ttft = performance.now() - t0;
        if (c.done) done = c;
        lines++;
        if (o.abortAfter && lines >= o.abortAfter) {
            ctl.deliberate = true;
            ctl.abort();
            return {aborted: true};
        }
    }
    if (!done) throw new Framing("no done line");
    if (!["stop", "length"].includes(done.done_reason)) throw new Framing(`done_reason ${done.done_reason}`);
    return {tokens: done.eval_count, ttft: ttft ?? performance.now() - t0};
}

async function client(o, i) {
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(new Error("client timeout")), o.timeoutMs);
    const t0 = performance.now();
    const messages = [{role: "user", content: `${o.prompt} (${i})`}];
    const body = o.api === "completions"
        ? {model: o.model, prompt: `${o.prompt} (${i})`, stream: true, max_tokens: o.maxTokens, temperature: 0.8,
            seed: o.seed + i, stream_options: {include_usage: true}}
        : o.api === "ollama"
        ? {model: o.model, messages, stream: true, options: {num_predict: o.maxTokens, temperature: 0.8, seed: o.seed + i}}
        : {model: o.model, messages, stream: true, max_tokens: o.maxTokens, temperature: 0.8, seed: o.seed + i,
            stream_options: {include_usage: true}};
    const headers = {"Content-Type": "application/json"};
    if (o.apiKey) headers.Authorization = `Bearer ${o.apiKey}`;
    try {
        const route = {ollama: "/api/chat", completions: "/v1/completions"}[o.api] ?? "/v1/chat/completions";
        const res = await fetch(`${o.base}${route}`,
            {method: "POST", headers, body: JSON.stringify(body), signal: ctl.signal});
        if (res.status === 429) {
            const ra = res.headers.get("retry-after");
            await res.text();
            if (!o.allow429) return {status: 429, error: "429"};
            if (!ra) return {status: 429, error: "429 without Retry-After"};
            return {status: 429, rejected: true};
        }
        if (res.status !== 200) return {status: res.status, error: `status ${res.status}: ${(await res.text()).slice(0, 200)}`};
        const ct = res.headers.get("content-type") ?? "";
        const want = o.api === "ollama" ? "application/x-ndjson" : "text/event-stream";
        if (!ct.startsWith(want)) return {status: 200, error: `content-type ${ct}`};
        const r = await (o.api === "ollama" ? readNDJSON : readSSE)(res, t0, o, ctl);
        return {status: 200, ...r, wall: performance.now() - t0};
    } catch (e) {
        if (ctl.deliberate) return {status: 200, aborted: true}; // our own --abort-after
        if (e instanceof Framing) return {status: 200, error: `framing: ${e.message}`};
        return {status: 0, error: String(e?.cause?.message ?? e?.message ?? e)};
    } finally {
        clearTimeout(timer);
    }
}

function pct(xs, p) {
    if (!xs.length) return null;
    const s = [...xs].sort((a, b) => a - b);
    return Math.round(s[Math.min(s.length - 1, Math.floor(p * (s.length - 1) + 0.5))] * 10) / 10;
}

const o = parseArgs(process.argv.slice(2));
const t0 = performance.now();
const results = await Promise.all(Array.from({length: o.clients}, (_, i) => client(o, i)));
const wall = (performance.now() - t0) / 1000;
const ok = results.filter((r) => r.status === 200 && !r.error && !r.aborted);
const statuses = {};
for (const r of results) statuses[r.status] = (statuses[r.status] ?? 0) + 1;
const tokens = ok.reduce((a, r) => a + r.tokens, 0);
const summary = {
    clients: o.clients, ok: ok.length,
    rejected: results.filter((r) => r.rejected).length,
    aborted: results.filter((r) => r.aborted).length,
    failed: results.filter((r) => r.error).length,
    errors: [...new Set(results.filter((r) => r.error).map((r) => r.error))].slice(0, 10),
    statuses, tokens, wall_s: Math.round(wall * 1000) / 1000,
    ttft_ms: {p50: pct(ok.map((r) => r.ttft), 0.5), p90: pct(ok.map((r) => r.ttft), 0.9), max: pct(ok.map((r) => r.ttft), 1)},
    tok_s: Math.round(tokens / wall * 10) / 10,
    per_client_tok_s_p50: pct(ok.map((r) => r.tokens / (r.wall / 1000)), 0.5),
};
console.log(JSON.stringify(summary));
process.exit(summary.failed ? 1 : 0);
