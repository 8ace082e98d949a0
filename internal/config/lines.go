package config

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"tsubame/internal/yamlpos"
)

// Problems name the line of the configuration file that set their key,
// as a compiler does ("tsubame.yaml:12: ads.reservation: ..."), and an
// unknown key the known one it was likely meant for.

// fileLines is where a configuration file sets each key.
type fileLines struct {
	name  string         // the file's base name, for messages
	lines map[string]int // dotted key path -> line
}

// readLines maps the keys of the YAML file at path to their lines; nil
// when it does not parse (Load reports why).
func readLines(path string) *fileLines {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil || len(doc.Content) == 0 {
		return nil
	}
	fl := &fileLines{name: filepath.Base(path), lines: map[string]int{}}
	var walk func(n *yaml.Node, prefix string)
	walk = func(n *yaml.Node, prefix string) {
		if n.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			key := prefix + n.Content[i].Value
			fl.lines[key] = n.Content[i].Line
			walk(n.Content[i+1], key+".")
		}
	}
	walk(doc.Content[0], "")
	return fl
}

// problemKey takes the key a problem starts with ("ads.reservation: ...").
var problemKey = regexp.MustCompile(`^([a-z0-9_]+(?:\.[A-Za-z0-9_-]+)*):`)

// locate prefixes each problem whose key (or the nearest key above it) the
// file sets with the file's name and that line.
func (fl *fileLines) locate(errs []error) []error {
	if fl == nil {
		return errs
	}
	out := make([]error, len(errs))
	for i, err := range errs {
		out[i] = err
		m := problemKey.FindStringSubmatch(err.Error())
		if _, done := err.(*locatedError); done || m == nil {
			continue
		}
		for key := m[1]; key != ""; key = parentKey(key) {
			if line, ok := fl.lines[key]; ok {
				out[i] = &locatedError{fmt.Sprintf("%s:%d", fl.name, line), err}
				break
			}
		}
	}
	return out
}

// locatedError is a problem with the file and line of its key.
type locatedError struct {
	where string
	err   error
}

func (e *locatedError) Error() string { return e.where + ": " + e.err.Error() }

func (e *locatedError) Unwrap() error { return e.err }

func parentKey(key string) string {
	i := strings.LastIndexByte(key, '.')
	if i < 0 {
		return ""
	}
	return key[:i]
}

// unknownKeys are the problems of the keys under parent ("" the top)
// that the configuration does not take, one each, with the known key of
// the same level a slip of the keyboard away, when there is one.
func unknownKeys(parent string, names []string) []error {
	siblings := knownKeys(parent)
	var errs []error
	for _, name := range names {
		key := name
		if parent != "" {
			key = parent + "." + name
		}
		msg := key + ": unknown key"
		if near := nearest(name, siblings); near != "" {
			msg += "; did you mean " + near + "?"
		}
		errs = append(errs, errorString(msg))
	}
	return errs
}

// knownKeys are the keys Config takes under parent (a map's level takes
// any name: endpoints.<name>).
func knownKeys(parent string) []string {
	t := reflect.TypeFor[Config]()
	if parent != "" {
	segs:
		for _, seg := range strings.Split(parent, ".") {
			for t.Kind() == reflect.Pointer {
				t = t.Elem()
			}
			switch t.Kind() {
			case reflect.Map:
				t = t.Elem() // seg names an entry
				continue
			case reflect.Struct:
				for i := range t.NumField() {
					if tag, _, _ := strings.Cut(t.Field(i).Tag.Get("koanf"), ","); tag == seg {
						t = t.Field(i).Type
						continue segs
					}
				}
			}
			return nil
		}
	}
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	var keys []string
	for i := range t.NumField() {
		if tag, _, _ := strings.Cut(t.Field(i).Tag.Get("koanf"), ","); tag != "" && tag != "-" {
			keys = append(keys, tag)
		}
	}
	return keys
}

type errorString string

func (e errorString) Error() string { return string(e) }

// nearest is the word of words within two edits of w (one for words of
// four letters or fewer), the closest, the first of equals; or "".
func nearest(w string, words []string) string {
	best, bestD := "", 3
	if len(w) <= 4 {
		bestD = 2
	}
	for _, c := range words {
		if d := editDistance(w, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the Damerau–Levenshtein distance (optimal string
// alignment) between a and b, in bytes: a swap of two neighbours is one
// edit.
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
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
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// yamlLine finds the line a YAML parser's error names.
var yamlLine = regexp.MustCompile(`\bline (\d+)\b`)

// yamlError is err, a YAML syntax error of the file at path, with the
// keys its line is under: "tsubame.yaml:5: under server.listen: ...".
func yamlError(path string, err error) error {
	m := yamlLine.FindStringSubmatch(err.Error())
	data, rerr := os.ReadFile(path)
	if m == nil || rerr != nil {
		return err
	}
	line, _ := strconv.Atoi(m[1])
	where := fmt.Sprintf("%s:%d", filepath.Base(path), line)
	if under := yamlpos.PathAt(data, line); under != "" {
		where += ": under " + under
	}
	return fmt.Errorf("%s: %w", where, err)
}

// mapKey is a decoder's name of a key ("endpoints[x].cache") as the
// configuration writes it ("endpoints.x.cache").
func mapKey(name string) string {
	return strings.NewReplacer("[", ".", "]", "").Replace(name)
}
