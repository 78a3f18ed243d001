// Helm's template engine (helm.sh/helm/v3 pkg/engine, pkg/chartutil) on Debian's Go packages:
// text/template with missingkey=zero and "<no value>" removed from the output, sprig's TxtFuncMap
// without env/expandenv, and Helm's own functions (include, tpl, required, toYaml, fromYaml,
// fromYamlArray, toJson, fromJson, fromJsonArray, toToml-less, lookup returning an empty map).
// Templates are parsed into one set, deepest paths first, as Helm's sortTemplates does, so
// defines of a subchart cannot shadow the parent's; partials (_*) are parsed but not rendered.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"sort"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig" // Debian: /usr/share/gocode/src/github.com/Masterminds/sprig (v3.2.3)
	"sigs.k8s.io/yaml"
)

const recursionMaxNums = 1000

// funcOverrides replace functions after Helm's map is built (-unread: deterministic rand*).
var funcOverrides = template.FuncMap{}

// Helm wraps the messages of required/fail so that cleanupExecError can cut them out of Go's
// "template: x:1:2: executing ... error calling required:" text.
const warnStartDelim = "HELM_ERR_START"
const warnEndDelim = "HELM_ERR_END"

var warnRegex = regexp.MustCompile(warnStartDelim + `((?s).*)` + warnEndDelim)

func warnWrap(warn string) string { return warnStartDelim + warn + warnEndDelim }

// funcMap is pkg/engine/funcs.go's funcMap.
func funcMap() template.FuncMap {
	f := sprig.TxtFuncMap()
	delete(f, "env")
	delete(f, "expandenv")
	extra := template.FuncMap{
		"toYaml":        toYAML,
		"fromYaml":      fromYAML,
		"fromYamlArray": fromYAMLArray,
		"toJson":        toJSON,
		"fromJson":      fromJSON,
		"fromJsonArray": fromJSONArray,
		// Replaced per render (they need the template set).
		"include":  func(string, interface{}) string { return "not implemented" },
		"tpl":      func(string, interface{}) interface{} { return "not implemented" },
		"required": func(string, interface{}) (interface{}, error) { return "not implemented", nil },
		// No cluster: helm template's lookup answers an empty map.
		"lookup": func(string, string, string, string) (map[string]interface{}, error) {
			return map[string]interface{}{}, nil
		},
	}
	for k, v := range extra {
		f[k] = v
	}
	return f
}

func toYAML(v interface{}) string {
	data, err := yaml.Marshal(v)
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(data), "\n")
}

func fromYAML(str string) map[string]interface{} {
	m := map[string]interface{}{}
	if err := yaml.Unmarshal([]byte(str), &m); err != nil {
		m["Error"] = err.Error()
	}
	return m
}

func fromYAMLArray(str string) []interface{} {
	a := []interface{}{}
	if err := yaml.Unmarshal([]byte(str), &a); err != nil {
		a = []interface{}{err.Error()}
	}
	return a
}

func toJSON(v interface{}) string {
	data, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(data)
}

func fromJSON(str string) map[string]interface{} {
	m := make(map[string]interface{})
	if err := json.Unmarshal([]byte(str), &m); err != nil {
		m["Error"] = err.Error()
	}
	return m
}

func fromJSONArray(str string) []interface{} {
	a := []interface{}{}
	if err := json.Unmarshal([]byte(str), &a); err != nil {
		a = []interface{}{err.Error()}
	}
	return a
}

func includeFun(t *template.Template, includedNames map[string]int) func(string, interface{}) (string, error) {
	return func(name string, data interface{}) (string, error) {
		var buf strings.Builder
		if v, ok := includedNames[name]; ok {
			if v > recursionMaxNums {
				return "", fmt.Errorf("rendering template has a nested reference name: %s: unable to execute template", name)
			}
			includedNames[name]++
		} else {
			includedNames[name] = 1
		}
		err := t.ExecuteTemplate(&buf, name, data)
		includedNames[name]--
		return buf.String(), err
	}
}

func tplFun(parent *template.Template, includedNames map[string]int) func(string, interface{}) (string, error) {
	return func(tpl string, vals interface{}) (string, error) {
		t, err := parent.Clone()
		if err != nil {
			return "", fmt.Errorf("cannot clone template: %w", err)
		}
		t.Option("missingkey=zero")
		t.Funcs(template.FuncMap{"include": includeFun(t, includedNames), "tpl": tplFun(t, includedNames)})
		t, err = t.New(parent.Name()).Parse(tpl)
		if err != nil {
			return "", fmt.Errorf("cannot parse template %q: %w", tpl, err)
		}
		var buf strings.Builder
		if err := t.Execute(&buf, vals); err != nil {
			return "", fmt.Errorf("error during tpl function execution for %q: %w", tpl, err)
		}
		return strings.ReplaceAll(buf.String(), "<no value>", ""), nil
	}
}

func initFunMap(t *template.Template) {
	f := funcMap()
	includedNames := make(map[string]int)
	f["include"] = includeFun(t, includedNames)
	f["tpl"] = tplFun(t, includedNames)
	f["required"] = func(warn string, val interface{}) (interface{}, error) {
		if val == nil {
			return val, errors.New(warnWrap(warn))
		} else if s, ok := val.(string); ok && s == "" {
			return val, errors.New(warnWrap(warn))
		}
		return val, nil
	}
	f["fail"] = func(msg string) (string, error) { return "", errors.New(warnWrap(msg)) }
	for k, v := range funcOverrides {
		f[k] = v
	}
	t.Funcs(f)
}

// byPathLen: deeper paths first, then by name (pkg/engine sortTemplates, reversed).
type byPathLen []string

func (p byPathLen) Len() int      { return len(p) }
func (p byPathLen) Swap(i, j int) { p[i], p[j] = p[j], p[i] }
func (p byPathLen) Less(i, j int) bool {
	a, b := p[i], p[j]
	ca, cb := strings.Count(a, "/"), strings.Count(b, "/")
	if ca == cb {
		return strings.Compare(a, b) == -1
	}
	return ca < cb
}

// cleanupExecError turns Go's execution error into Helm's "execution error at (FILE:L:C): MSG".
func cleanupExecError(filename string, err error) error {
	var ee template.ExecError
	if !errors.As(err, &ee) {
		return err
	}
	tokens := strings.SplitN(err.Error(), ": ", 3)
	if len(tokens) != 3 {
		return fmt.Errorf("execution error at (%s): %s", filename, err)
	}
	if parts := warnRegex.FindStringSubmatch(tokens[2]); len(parts) >= 2 {
		return fmt.Errorf("execution error at (%s): %s", tokens[1], parts[1])
	}
	return err
}

// render executes every non-partial template of templates (name -> source) with top as its
// data (plus .Template), as Helm's Engine.render does.
func render(templates map[string]string, top map[string]interface{}, basePath string) (out map[string]string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("rendering template failed: %v", r)
		}
	}()
	t := template.New("gotpl")
	t.Option("missingkey=zero")
	initFunMap(t)
	keys := make([]string, 0, len(templates))
	for k := range templates {
		keys = append(keys, k)
	}
	sort.Sort(sort.Reverse(byPathLen(keys)))
	for _, name := range keys {
		if _, err := t.New(name).Parse(templates[name]); err != nil {
			return nil, fmt.Errorf("parse error in %s: %w", name, err)
		}
	}
	out = make(map[string]string, len(keys))
	for _, name := range keys {
		if strings.HasPrefix(path.Base(name), "_") {
			continue
		}
		vals := make(map[string]interface{}, len(top)+1)
		for k, v := range top {
			vals[k] = v
		}
		vals["Template"] = map[string]interface{}{"Name": name, "BasePath": basePath}
		var buf strings.Builder
		if err := t.ExecuteTemplate(&buf, name, vals); err != nil {
			return nil, cleanupExecError(name, err)
		}
		out[name] = strings.ReplaceAll(buf.String(), "<no value>", "")
	}
	return out, nil
}
