// Two checks of values.yaml against the templates, which Helm itself does not make (it renders
// a missing key as nothing):
//   - missingValues: every .Values.a.b path a template names (through ., $ or any variable)
//     exists in values.yaml, up to the first list or empty map on the way.
//   - unreadValues: every leaf of values.yaml changes the rendered output (or makes it fail)
//     when it changes; a leaf that does not is dead configuration.
package main

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"text/template"
	"text/template/parse"
)

// text/template's own functions, for parse.Parse.
var builtins = map[string]interface{}{}

func init() {
	for _, f := range strings.Fields("and or not len index slice print printf println html js urlquery call eq ne lt le gt ge") {
		builtins[f] = true
	}
}

func missingValues(c *Chart) ([]string, error) {
	found := map[string]bool{}
	for name, src := range c.Templates {
		trees, err := parse.Parse(name, src, "", "", funcMap(), builtins)
		if err != nil {
			return nil, fmt.Errorf("parse error in %s: %w", name, err)
		}
		for _, t := range trees {
			walk(t.Root, func(idents []string) {
				for i := 0; i+1 < len(idents); i++ {
					if idents[i] == "Values" {
						found[strings.Join(idents[i+1:], ".")] = true
						return
					}
				}
			})
		}
	}
	var missing []string
	for p := range found {
		if !hasPath(c.Values, strings.Split(p, ".")) {
			missing = append(missing, p)
		}
	}
	sort.Strings(missing)
	return missing, nil
}

func hasPath(v interface{}, p []string) bool {
	if len(p) == 0 {
		return true
	}
	m, ok := v.(map[string]interface{})
	if !ok {
		return true // a list or scalar on the way: the template indexes into user data
	}
	if len(m) == 0 {
		return true // an empty map of user entries (passwords: {}, keys: {})
	}
	child, ok := m[p[0]]
	return ok && hasPath(child, p[1:])
}

// walk calls f with the identifier chain of every field access under n.
func walk(n parse.Node, f func([]string)) {
	if n == nil || reflect.ValueOf(n).IsNil() {
		return
	}
	switch x := n.(type) {
	case *parse.ListNode:
		for _, c := range x.Nodes {
			walk(c, f)
		}
	case *parse.ActionNode:
		walk(x.Pipe, f)
	case *parse.PipeNode:
		for _, d := range x.Decl {
			walk(d, f)
		}
		for _, c := range x.Cmds {
			walk(c, f)
		}
	case *parse.CommandNode:
		for _, a := range x.Args {
			walk(a, f)
		}
	case *parse.FieldNode:
		f(x.Ident)
	case *parse.VariableNode:
		f(x.Ident)
	case *parse.ChainNode:
		walk(x.Node, f)
	case *parse.IfNode:
		walk(&x.BranchNode, f)
	case *parse.RangeNode:
		walk(&x.BranchNode, f)
	case *parse.WithNode:
		walk(&x.BranchNode, f)
	case *parse.BranchNode:
		walk(x.Pipe, f)
		walk(x.List, f)
		walk(x.ElseList, f)
	case *parse.TemplateNode:
		walk(x.Pipe, f)
	}
}

// leaf is a path into the values (map keys and list indexes) and how to change what is there.
type leaf struct {
	path []interface{}
	name string
}

func leaves(v interface{}, path []interface{}, name string, out *[]leaf) {
	switch x := v.(type) {
	case map[string]interface{}:
		if len(x) == 0 {
			*out = append(*out, leaf{append([]interface{}{}, path...), name})
		}
		for k, c := range x {
			leaves(c, append(path, k), strings.TrimPrefix(name+"."+k, "."), out)
		}
	case []interface{}:
		if len(x) == 0 {
			*out = append(*out, leaf{append([]interface{}{}, path...), name})
		}
		for i, c := range x {
			leaves(c, append(path, i), fmt.Sprintf("%s[%d]", name, i), out)
		}
	default:
		*out = append(*out, leaf{append([]interface{}{}, path...), name})
	}
}

func changed(v interface{}) interface{} {
	switch x := v.(type) {
	case string:
		return x + "z"
	case float64:
		return x + 1
	case bool:
		return !x
	case map[string]interface{}:
		return map[string]interface{}{"probe": "probe"}
	case []interface{}:
		return []interface{}{"probe"}
	case nil:
		return "probe"
	}
	return nil
}

// deepCopy of JSON-shaped values.
func deepCopy(v interface{}) interface{} {
	switch x := v.(type) {
	case map[string]interface{}:
		m := make(map[string]interface{}, len(x))
		for k, c := range x {
			m[k] = deepCopy(c)
		}
		return m
	case []interface{}:
		l := make([]interface{}, len(x))
		for i, c := range x {
			l[i] = deepCopy(c)
		}
		return l
	}
	return v
}

func setPath(root interface{}, path []interface{}, f func(interface{}) interface{}) {
	cur := root
	for i, k := range path {
		last := i == len(path)-1
		switch c := cur.(type) {
		case map[string]interface{}:
			if last {
				c[k.(string)] = f(c[k.(string)])
			}
			cur = c[k.(string)]
		case []interface{}:
			if last {
				c[k.(int)] = f(c[k.(int)])
			}
			cur = c[k.(int)]
		}
	}
}

func unreadValues(c *Chart, o options, user map[string]interface{}) ([]string, error) {
	funcOverrides = template.FuncMap{
		"randAlphaNum": func(n int) string { return strings.Repeat("r", n) },
		"randAlpha":    func(n int) string { return strings.Repeat("r", n) },
		"randNumeric":  func(n int) string { return strings.Repeat("1", n) },
		"randAscii":    func(n int) string { return strings.Repeat("r", n) },
	}
	merged := coalesce(c.Values, user)
	base, err := renderChart(c, o, user)
	if err != nil {
		return nil, fmt.Errorf("the unchanged values do not render: %w", err)
	}
	var all []leaf
	leaves(c.Values, nil, "", &all)
	var unread []string
	for _, l := range all {
		if !pathExists(merged, l.path) {
			continue // overridden away by the user's values
		}
		// The changed values as user values: the whole merged tree, so a list stays a list.
		mod := deepCopy(merged).(map[string]interface{})
		setPath(mod, l.path, changed)
		out, err := renderChart(c, o, mod)
		if err == nil && reflect.DeepEqual(out, base) {
			unread = append(unread, l.name)
		}
	}
	sort.Strings(unread)
	return unread, nil
}

func pathExists(v interface{}, path []interface{}) bool {
	cur := v
	for _, k := range path {
		switch c := cur.(type) {
		case map[string]interface{}:
			s, ok := k.(string)
			if !ok {
				return false
			}
			if cur, ok = c[s]; !ok {
				return false
			}
		case []interface{}:
			i, ok := k.(int)
			if !ok || i >= len(c) {
				return false
			}
			cur = c[i]
		default:
			return false
		}
	}
	return true
}
