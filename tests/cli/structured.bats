#!/usr/bin/env bats
# structured.bats: structured output and tool calls through the official
# `openai` and `ollama` npm clients (tests/tools/node/structured-client.mjs)
# against mfc-serve on a random tiny model at temperature 1: json_schema,
# JSON mode, Ollama format, GBNF, forced and named tool calls (streamed and
# not) parse and validate; bad schemas, grammars and tool choices are 400s;
# a model whose template has no .Tools refuses tools. Loopback only.
load helpers
load serve_helpers

setup_file() {
    D="$BATS_FILE_TMPDIR"
    serve_model "$D/toy.gguf" --ctx 2048
    # an Ollama TEMPLATE that renders .Tools and assistant .ToolCalls
    cat >"$D/model.yaml" <<'YAML'
schema: "mfc.config/v1"
model:
  path: "toy.gguf"
template: "{{- if .Tools }}<tools>{{ range .Tools }}{{ . }}{{ end }}</tools>{{ end }}{{ range .Messages }}<|{{ .Role }}|>{{ if .ToolCalls }}{{ range .ToolCalls }}<tool_call>{\"name\": \"{{ .Function.Name }}\", \"arguments\": {{ .Function.Arguments }}}</tool_call>{{ end }}{{ else }}{{ .Content }}{{ end }}{{ end }}<|assistant|>"
YAML
}

teardown() {
    serve_stop || true
}

structured_client() {
    MFC_NODE_MODULES="$NODE_MODULES" run node "$NODE_TOOLS/structured-client.mjs" --base "$SERVE_URL" "$@"
    echo "$output"
}

@test "structured output and tool calls validate over many seeds (openai, ollama clients)" {
    require_node_clients
    serve_start "$BATS_FILE_TMPDIR" toy.gguf --config "$BATS_FILE_TMPDIR/model.yaml" --name toy
    structured_client --model toy --seeds 8
    [ "$status" -eq 0 ]
    [ "$(grep -c '^ok ' <<<"$output")" -ge 17 ]
    [ -z "$(grep '^not ok' <<<"$output")" ]
}

@test "tools on a model whose template does not render them: 400" {
    require_node_clients
    serve_start "$BATS_FILE_TMPDIR" toy.gguf --name toy
    structured_client --model toy --only errors
    [ "$status" -eq 0 ]
    grep -q '^ok .* cannot render them: 400' <<<"$output"
}
