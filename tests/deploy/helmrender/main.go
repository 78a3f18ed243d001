// helmrender: `helm template` for the project's tests, built from Debian's Go packages (Helm
// itself is not packaged).  It renders a chart with Helm's engine semantics (engine.go), splits
// the output into documents as Helm does, and prints them.
//
//	helmrender -chart DIR [-name RELEASE] [-namespace NS] [-f VALUES.yaml]... [-o yaml|json]
//	helmrender ... -unread     # values.yaml leaves whose change does not change the output
//	helmrender ... -missing    # .Values paths the templates name that values.yaml lacks
//
// -o json prints {"documents": [{"source": FILE, "object": {...}}]}, each document parsed
// strictly (a duplicate key is an error, as the API server's decoder reports it).  Errors go to
// stderr as "Error: ..." with exit status 1, like helm's.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

type valueFiles []string

func (v *valueFiles) String() string     { return strings.Join(*v, ",") }
func (v *valueFiles) Set(s string) error { *v = append(*v, s); return nil }

type options struct {
	chart, name, namespace string
	values                 valueFiles
}

// Helm's releaseutil.SplitManifests separator.
var sep = regexp.MustCompile(`(?:^|\s*\n)---\s*`)

type document struct {
	Source string                 `json:"source"`
	Object map[string]interface{} `json:"object"`
	raw    string
}

func userValues(files []string) (map[string]interface{}, error) {
	merged := map[string]interface{}{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		m := map[string]interface{}{}
		if err := yaml.Unmarshal(data, &m); err != nil {
			return nil, fmt.Errorf("failed to parse %s: %w", f, err)
		}
		merged = coalesce(merged, m)
	}
	return merged, nil
}

// renderChart is `helm template NAME CHART -n NS -f ...` up to the split documents.
func renderChart(c *Chart, o options, user map[string]interface{}) (map[string]string, error) {
	if err := validateReleaseName(o.name); err != nil {
		return nil, err
	}
	top := map[string]interface{}{
		"Values": coalesce(c.Values, user),
		"Release": map[string]interface{}{
			"Name": o.name, "Namespace": o.namespace, "Revision": 1,
			"IsUpgrade": false, "IsInstall": true, "Service": "Helm",
		},
		"Chart":        &c.Metadata,
		"Files":        c.Files,
		"Capabilities": &defaultCapabilities,
	}
	templates := map[string]string{}
	for name, src := range c.Templates {
		templates[name] = src
	}
	return render(templates, top, c.Metadata.Name+"/templates")
}

// documents splits the rendered files (NOTES.txt skipped, as helm template does) and parses each
// non-empty document.
func documents(out map[string]string) ([]document, error) {
	names := make([]string, 0, len(out))
	for n := range out {
		names = append(names, n)
	}
	sort.Strings(names)
	var docs []document
	for _, n := range names {
		if strings.HasSuffix(n, "NOTES.txt") {
			continue
		}
		for _, part := range sep.Split(out[n], -1) {
			if strings.TrimSpace(part) == "" {
				continue
			}
			j, err := yaml.YAMLToJSONStrict([]byte(part))
			if err != nil {
				return nil, fmt.Errorf("YAML parse error on %s: %w", n, err)
			}
			var obj map[string]interface{}
			if err := json.Unmarshal(j, &obj); err != nil {
				return nil, fmt.Errorf("%s: a document that is not an object: %w", n, err)
			}
			if obj == nil {
				continue // only comments
			}
			docs = append(docs, document{Source: n, Object: obj, raw: part})
		}
	}
	return docs, nil
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "Error: %s\n", err)
	os.Exit(1)
}

func main() {
	var o options
	var format string
	var unread, missing bool
	flag.StringVar(&o.chart, "chart", "", "chart directory")
	flag.StringVar(&o.name, "name", "release-name", "release name")
	flag.StringVar(&o.namespace, "namespace", "default", "release namespace")
	flag.Var(&o.values, "f", "values file (repeatable; later ones win)")
	flag.StringVar(&format, "o", "yaml", "yaml (as helm template) or json")
	flag.BoolVar(&unread, "unread", false, "print the values.yaml leaves no template output depends on")
	flag.BoolVar(&missing, "missing", false, "print the .Values paths templates name that values.yaml lacks")
	flag.Parse()
	if o.chart == "" {
		fail(fmt.Errorf("-chart is required"))
	}
	c, err := loadChart(o.chart)
	if err != nil {
		fail(err)
	}
	user, err := userValues(o.values)
	if err != nil {
		fail(err)
	}
	if missing {
		paths, err := missingValues(c)
		if err != nil {
			fail(err)
		}
		printJSON(paths)
		return
	}
	if unread {
		leaves, err := unreadValues(c, o, user)
		if err != nil {
			fail(err)
		}
		printJSON(leaves)
		return
	}
	out, err := renderChart(c, o, user)
	if err != nil {
		fail(err)
	}
	docs, err := documents(out)
	if err != nil {
		fail(err)
	}
	if format == "json" {
		printJSON(map[string]interface{}{"documents": docs})
		return
	}
	for _, d := range docs {
		fmt.Printf("---\n# Source: %s\n%s\n", d.Source, strings.TrimSpace(d.raw))
	}
}

func printJSON(v interface{}) {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", " ")
	if err := enc.Encode(v); err != nil {
		fail(err)
	}
}
