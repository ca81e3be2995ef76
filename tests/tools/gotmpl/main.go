// gotmpl: fills in the expected results of tests/data/template/conformance.json
// by running each case through Go's own text/template, the engine Ollama uses
// (with Ollama's options: missingkey=zero and its json function).
//
// usage (from the repository root, with a Go toolchain):
//
//	go run tests/tools/gotmpl/main.go tests/data/template/conformance.json \
//	    tests/data/template/data.json
//
// The file is rewritten in place: each case gets "out" (the text) or "err"
// (Go's message). Cases marked "manual" keep their hand-written expectation:
// they use features newer than the Go that generated the file (range over an
// int, else with) or mfc's deliberate limits. test_template reads the result;
// make check never needs Go.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"text/template"
)

type testCase struct {
	Name   string  `json:"name"`
	Tmpl   string  `json:"tmpl"`
	Out    *string `json:"out,omitempty"`
	Err    *string `json:"err,omitempty"`
	Loose  bool    `json:"loose,omitempty"`
	Manual bool    `json:"manual,omitempty"`
	Why    string  `json:"why,omitempty"`
}

// ints turns json.Number into int, as templates see Go ints.
func ints(v any) any {
	switch x := v.(type) {
	case json.Number:
		i, err := x.Int64()
		if err != nil {
			panic(err)
		}
		return int(i)
	case []any:
		for i := range x {
			x[i] = ints(x[i])
		}
	case map[string]any:
		for k := range x {
			x[k] = ints(x[k])
		}
	}
	return v
}

func main() {
	raw, err := os.ReadFile(os.Args[1])
	if err != nil {
		panic(err)
	}
	var cases []testCase
	if err := json.Unmarshal(raw, &cases); err != nil {
		panic(err)
	}
	dataRaw, err := os.ReadFile(os.Args[2])
	if err != nil {
		panic(err)
	}
	dec := json.NewDecoder(bytes.NewReader(dataRaw))
	dec.UseNumber()
	var data any
	if err := dec.Decode(&data); err != nil {
		panic(err)
	}
	data = ints(data)
	funcs := template.FuncMap{"json": func(v any) string {
		b, _ := json.Marshal(v)
		return string(b)
	}}
	for i := range cases {
		c := &cases[i]
		if c.Manual {
			continue
		}
		c.Out, c.Err = nil, nil
		t, err := template.New("t").Option("missingkey=zero").Funcs(funcs).Parse(c.Tmpl)
		var b bytes.Buffer
		if err == nil {
			err = t.Execute(&b, data)
		}
		if err != nil {
			s := err.Error()
			c.Err = &s
		} else {
			s := b.String()
			c.Out = &s
		}
	}
	out, err := json.MarshalIndent(cases, "", " ")
	if err != nil {
		panic(err)
	}
	if err := os.WriteFile(os.Args[1], append(out, '\n'), 0o644); err != nil {
		panic(err)
	}
	fmt.Fprintf(os.Stderr, "%d cases\n", len(cases))
}
