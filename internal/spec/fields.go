package spec

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
)

// synonyms are keys people write for a field the spec names otherwise (other launchers'
// and vLLM's own words), checked before spelling similarity.
var synonyms = map[string][]string{
	"name":     {"path"},
	"model":    {"path"},
	"id":       {"path"},
	"repo":     {"path"},
	"tp":       {"tensor"},
	"pp":       {"pipeline"},
	"gpu":      {"gpus"},
	"num_gpus": {"gpus"},
	"host":     {"docker_host"},
	"hostname": {"name"},
	"ifname":   {"interfaces"},
	"nics":     {"interfaces"},
	"args":     {"extra_args"},
	"flags":    {"extra_args"},
	"backend":  {"executor"},
	"env_vars": {"env"},
	"timeout":  {"serving"},
}

// unknownFields walks a decoded JSON value against the Go type it will be decoded into and
// reports every key that type has no field for, at its path, with the fields it most
// likely meant. Decoding itself stops at the first unknown key; this reports them all.
func unknownFields(v any, t reflect.Type, path string, out *[]FieldError) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			return // a type mismatch, reported by the decoder
		}
		fields := jsonFields(t)
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			p := joinPath(path, k)
			ft, ok := fields[k]
			if !ok {
				*out = append(*out, FieldError{Field: p, Message: "unknown field" + hint(k, path, fields)})
				continue
			}
			unknownFields(obj[k], ft, p, out)
		}
	case reflect.Slice:
		arr, ok := v.([]any)
		if !ok {
			return
		}
		for i, e := range arr {
			unknownFields(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i), out)
		}
	case reflect.Map:
		obj, ok := v.(map[string]any)
		if !ok {
			return
		}
		for k, e := range obj {
			unknownFields(e, t.Elem(), joinPath(path, k), out)
		}
	}
}

// jsonFields maps a struct's JSON names to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	m := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		m[name] = f.Type
	}
	return m
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// hint names the fields an unknown key most likely meant: synonyms first, then names that
// contain it or are a couple of edits away; nothing when none is close.
func hint(key, path string, fields map[string]reflect.Type) string {
	k := strings.ToLower(strings.ReplaceAll(key, "-", "_"))
	var picks []string
	add := func(name string) {
		if _, ok := fields[name]; ok && !slices.Contains(picks, name) {
			picks = append(picks, name)
		}
	}
	for _, s := range synonyms[k] {
		add(s)
	}
	names := make([]string, 0, len(fields))
	for name := range fields {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if name == k || strings.Contains(name, k) || (len(name) > 2 && strings.Contains(k, name)) || editDistance(k, name) <= max(1, len(name)/4) {
			add(name)
		}
	}
	for i, p := range picks {
		picks[i] = joinPath(path, p)
	}
	if len(picks) == 0 {
		// A field of another part of the spec, written in the wrong place.
		for _, s := range append([]string{k}, synonyms[k]...) {
			for _, p := range fieldPaths()[s] {
				if !slices.Contains(picks, p) {
					picks = append(picks, p)
				}
			}
		}
	}
	if len(picks) == 0 {
		return ""
	}
	return " (did you mean " + strings.Join(picks, " or ") + "?)"
}

// fieldPaths maps every field name of the spec to the paths it has (nodes[].gpus).
var fieldPaths = sync.OnceValue(func() map[string][]string {
	m := map[string][]string{}
	var walk func(t reflect.Type, path string)
	walk = func(t reflect.Type, path string) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
			if t.Kind() == reflect.Slice {
				path += "[]"
			}
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct {
			return
		}
		fields := jsonFields(t)
		names := make([]string, 0, len(fields))
		for name := range fields {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			p := joinPath(path, name)
			m[name] = append(m[name], p)
			walk(fields[name], p)
		}
	}
	walk(reflect.TypeFor[Cluster](), "")
	return m
})

// editDistance is the Levenshtein distance between two short strings.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
