// A chart directory as Helm's loader sees it (pkg/chart/loader, pkg/chartutil): Chart.yaml's
// metadata, values.yaml coalesced with the user's values files, the templates, and every other
// file (minus .helmignore's patterns) as .Files.
package main

import (
	"encoding/base64"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// Metadata is chart.Metadata: templates read .Chart.Name, .Chart.Version, .Chart.AppVersion.
type Metadata struct {
	Name         string            `json:"name,omitempty"`
	Home         string            `json:"home,omitempty"`
	Sources      []string          `json:"sources,omitempty"`
	Version      string            `json:"version,omitempty"`
	Description  string            `json:"description,omitempty"`
	Keywords     []string          `json:"keywords,omitempty"`
	Icon         string            `json:"icon,omitempty"`
	APIVersion   string            `json:"apiVersion,omitempty"`
	Condition    string            `json:"condition,omitempty"`
	Tags         string            `json:"tags,omitempty"`
	AppVersion   string            `json:"appVersion,omitempty"`
	Deprecated   bool              `json:"deprecated,omitempty"`
	Annotations  map[string]string `json:"annotations,omitempty"`
	KubeVersion  string            `json:"kubeVersion,omitempty"`
	Type         string            `json:"type,omitempty"`
	Dependencies []interface{}     `json:"dependencies,omitempty"`
	Maintainers  []interface{}     `json:"maintainers,omitempty"`
}

// Files is pkg/engine's files type.
type Files map[string][]byte

func (f Files) GetBytes(name string) []byte { return f[name] }
func (f Files) Get(name string) string      { return string(f[name]) }

func (f Files) Glob(pattern string) Files {
	nf := Files{}
	for name, contents := range f {
		if ok, _ := path.Match(pattern, name); ok {
			nf[name] = contents
		}
	}
	return nf
}

func (f Files) sortedNames() []string {
	names := make([]string, 0, len(f))
	for n := range f {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func (f Files) AsConfig() string {
	m := make(map[string]string)
	for _, n := range f.sortedNames() {
		m[path.Base(n)] = string(f[n])
	}
	return toYAML(m)
}

func (f Files) AsSecrets() string {
	m := make(map[string]string)
	for _, n := range f.sortedNames() {
		m[path.Base(n)] = base64.StdEncoding.EncodeToString(f[n])
	}
	return toYAML(m)
}

func (f Files) Lines(p string) []string {
	if f == nil || f[p] == nil {
		return []string{}
	}
	s := string(f[p])
	if s[len(s)-1] == '\n' {
		s = s[:len(s)-1]
	}
	return strings.Split(s, "\n")
}

// VersionSet and Capabilities are chartutil's (helm template's defaults).
type VersionSet []string

func (v VersionSet) Has(apiVersion string) bool {
	for _, x := range v {
		if x == apiVersion {
			return true
		}
	}
	return false
}

type KubeVersion struct {
	Version string
	Major   string
	Minor   string
}

func (k KubeVersion) String() string     { return k.Version }
func (k KubeVersion) GitVersion() string { return k.Version }

type Capabilities struct {
	KubeVersion KubeVersion
	APIVersions VersionSet
}

var defaultCapabilities = Capabilities{
	KubeVersion: KubeVersion{Version: "v1.30.0", Major: "1", Minor: "30"},
	APIVersions: VersionSet{"v1", "apps/v1", "batch/v1", "policy/v1", "networking.k8s.io/v1",
		"rbac.authorization.k8s.io/v1", "autoscaling/v2", "storage.k8s.io/v1"},
}

type Chart struct {
	Dir       string
	Metadata  Metadata
	Values    map[string]interface{}
	Templates map[string]string // "<name>/templates/x.yaml" -> source
	Files     Files
}

// helmignore: the patterns of .helmignore (shell globs on the base name or the relative path,
// a trailing "/" for directories), enough for the patterns the chart has.
func helmignore(dir string) ([]string, error) {
	data, err := os.ReadFile(filepath.Join(dir, ".helmignore"))
	if os.IsNotExist(err) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	var pats []string
	for _, l := range strings.Split(string(data), "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "#") {
			pats = append(pats, l)
		}
	}
	return pats, nil
}

func ignored(pats []string, rel string, isDir bool) bool {
	for _, p := range pats {
		if strings.HasSuffix(p, "/") {
			if !isDir {
				continue
			}
			p = strings.TrimSuffix(p, "/")
		}
		if ok, _ := path.Match(p, path.Base(rel)); ok {
			return true
		}
		if ok, _ := path.Match(p, rel); ok {
			return true
		}
	}
	return false
}

func loadChart(dir string) (*Chart, error) {
	c := &Chart{Dir: dir, Templates: map[string]string{}, Files: Files{}}
	meta, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		return nil, fmt.Errorf("Chart.yaml: %w", err)
	}
	if err := yaml.Unmarshal(meta, &c.Metadata); err != nil {
		return nil, fmt.Errorf("Chart.yaml: %w", err)
	}
	if c.Metadata.Name == "" || c.Metadata.Version == "" {
		return nil, fmt.Errorf("Chart.yaml: name and version are required")
	}
	c.Values = map[string]interface{}{}
	if data, err := os.ReadFile(filepath.Join(dir, "values.yaml")); err == nil {
		if err := yaml.Unmarshal(data, &c.Values); err != nil {
			return nil, fmt.Errorf("values.yaml: %w", err)
		}
	}
	pats, err := helmignore(dir)
	if err != nil {
		return nil, err
	}
	err = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		if rel == "." {
			return nil
		}
		if ignored(pats, rel, info.IsDir()) {
			if info.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if info.IsDir() {
			if rel == "charts" {
				return fmt.Errorf("subcharts (charts/) are not supported by this renderer")
			}
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		switch {
		case strings.HasPrefix(rel, "templates/"):
			c.Templates[c.Metadata.Name+"/"+rel] = string(data)
		case rel == "Chart.yaml" || rel == "values.yaml" || rel == "values.schema.json" || rel == "Chart.lock":
		default:
			c.Files[rel] = data
		}
		return nil
	})
	return c, err
}

// coalesce merges src (the user's values) over dst (the chart's), as chartutil.CoalesceValues:
// maps merge key by key, anything else is replaced, and a null in src deletes the key.
func coalesce(dst, src map[string]interface{}) map[string]interface{} {
	out := make(map[string]interface{}, len(dst))
	for k, v := range dst {
		out[k] = v
	}
	for k, sv := range src {
		if sv == nil {
			delete(out, k)
			continue
		}
		sm, sIsMap := sv.(map[string]interface{})
		dm, dIsMap := out[k].(map[string]interface{})
		if sIsMap && dIsMap {
			out[k] = coalesce(dm, sm)
		} else {
			out[k] = sv
		}
	}
	return out
}

// Helm's release name rule (chartutil.ValidateReleaseName).
var releaseNameRe = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

func validateReleaseName(name string) error {
	if name == "" || len(name) > 53 || !releaseNameRe.MatchString(name) {
		return fmt.Errorf("invalid release name %q: names must be at most 53 characters and match %s", name, releaseNameRe)
	}
	return nil
}
