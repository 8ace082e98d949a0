package bulk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"tsubame/internal/yamlpos"
)

// A YAML campaign file is turned into JSON text before decoding, so that
// YAML and JSON take one decoding path (the model's JSON names and
// decoders). Unlike a YAML-to-JSON conversion through Go values, a number
// keeps its text: an amount written 0.000001 or 12345678901.123456 reaches
// Money's decoder as written, never through a float. Each value's line is
// kept (lineMarks) for the problems.

// maxYAMLDepth bounds the nesting of a YAML document (the model's is 6).
const maxYAMLDepth = 64

// MaxYAMLExpansion bounds the work merge keys (<<: *a) may ask of a YAML
// campaign file's conversion: the mappings merged and the keys read from
// them, at most MaxYAMLExpansion or yamlMergesPerNode per node the file
// holds, whichever is more. A merge key takes a list of aliases, each of
// which may merge a list of its own: 400 bytes of `<<: [*a, *a, ...]` ask
// for ten million reads (seconds of CPU), a few bytes more for more than
// any CPU can make, while what they make stays small (a key merged twice is
// written once), so the bound on the bytes aliases make (8 times the file,
// and a MiB) is no bound on this. Such a file is refused after some 10,000
// reads, about a millisecond. Files that merge defaults into each object
// read a few keys per merge: they stay far below the bound.
const MaxYAMLExpansion = 10_000

// yamlMergesPerNode is the merge work a large file may ask per node it
// holds: less than parsing the node costs.
const yamlMergesPerNode = 8

// yamlCheckEvery is how many steps (nodes written, keys and mappings
// merged) apart the conversion looks at its context.
const yamlCheckEvery = 1024

// lineMarks maps offsets of the JSON text to lines of the YAML source: each
// mark is where a value starts, in increasing offsets.
type lineMarks []lineMark

type lineMark struct{ off, line int }

func (m lineMarks) line(off int) int {
	i := sort.Search(len(m), func(i int) bool { return m[i].off > off })
	if i == 0 {
		return 0
	}
	return m[i-1].line
}

type yamlConv struct {
	ctx      context.Context
	out      bytes.Buffer
	marks    lineMarks
	limit    int // bytes of JSON the aliases may expand to
	own      int // the nodes the file holds
	steps    int // nodes written, keys and mappings merged so far
	merges   int // keys and mappings merged so far
	maxMerge int // the most merges allowed
	problems []FileProblem
	badMerge map[int]bool // lines of merge sources reported as no mapping
	over     bool
	err      error // ctx's, once it is done
}

// step counts a step of the conversion and reports whether it may go on:
// false once it is over (a bound passed, ctx done).
func (c *yamlConv) step() bool {
	if c.over {
		return false
	}
	c.steps++
	if c.steps%yamlCheckEvery == 0 {
		if err := c.ctx.Err(); err != nil {
			c.over, c.err = true, err
			return false
		}
	}
	return true
}

// merge counts a step that a merge key asks for (n, for the problem's
// line): a mapping merged, or a key read from one. It reports whether the
// conversion may go on.
func (c *yamlConv) merge(n *yaml.Node) bool {
	if !c.step() {
		return false
	}
	c.merges++
	if c.merges > c.maxMerge {
		c.over = true
		c.bad(n.Line, "merge keys (<<) expand the file beyond %d merged mappings and keys: they may merge %d, or %d per node of the file (it holds %d) when that is more",
			c.maxMerge, MaxYAMLExpansion, yamlMergesPerNode, c.own)
		return false
	}
	return true
}

// countNodes returns the nodes of the tree at n, each once, without
// following aliases: what the file holds.
func countNodes(n *yaml.Node) int {
	total := 1
	for _, m := range n.Content {
		total += countNodes(m)
	}
	return total
}

func (c *yamlConv) bad(line int, format string, args ...any) {
	c.problems = append(c.problems, FileProblem{Line: line, Message: fmt.Sprintf(format, args...)})
}

var yamlErrLine = regexp.MustCompile(`^yaml: line (\d+)(?:, column (\d+))?: (.*)$`)

// yamlToJSON converts one YAML document to JSON text, with the lines of its
// values. It reports syntax errors, several documents, tags JSON cannot
// carry (binary, custom), non-finite numbers, keys that are not scalars,
// and aliases and merge keys that expand beyond bounds. It stops, with
// ctx's error, when ctx is done.
func yamlToJSON(ctx context.Context, data []byte) ([]byte, lineMarks, []FileProblem, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil, []FileProblem{{Message: "empty: no YAML document"}}, nil
		}
		return nil, nil, []FileProblem{yamlSyntax(data, err)}, nil
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, nil, []FileProblem{yamlSyntax(data, err)}, nil
	default:
		return nil, nil, []FileProblem{{Line: extra.Line, Message: "a second YAML document: a campaign file is one document"}}, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, nil, err
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	own := countNodes(root)
	c := &yamlConv{ctx: ctx, limit: 8*len(data) + 1<<20, own: own, maxMerge: max(MaxYAMLExpansion, yamlMergesPerNode*own)}
	c.node(root, 0)
	if c.err != nil {
		return nil, nil, nil, c.err
	}
	if len(c.problems) > 0 {
		return nil, nil, c.problems, nil
	}
	return c.out.Bytes(), c.marks, nil, nil
}

// yamlSyntax is the problem of a syntax error of data, at its line and
// under the keys that line is in (yamlpos), where the parser names one.
func yamlSyntax(data []byte, err error) FileProblem {
	m := yamlErrLine.FindStringSubmatch(err.Error())
	if m == nil {
		return FileProblem{Message: "invalid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	line, _ := strconv.Atoi(m[1])
	col, _ := strconv.Atoi(m[2])
	return FileProblem{Line: line, Col: col, Path: yamlpos.PathAt(data, line), Message: "invalid YAML: " + m[3]}
}

// node writes n as JSON. Every call writes a byte at least, so the bound on
// the bytes (c.limit) bounds the calls, through aliases too.
func (c *yamlConv) node(n *yaml.Node, depth int) {
	if !c.step() {
		return
	}
	if c.out.Len() > c.limit {
		c.over = true
		c.bad(n.Line, "aliases expand the file beyond %d bytes", c.limit)
		return
	}
	if depth > maxYAMLDepth {
		c.over = true
		c.bad(n.Line, "nested deeper than %d levels", maxYAMLDepth)
		return
	}
	c.marks = append(c.marks, lineMark{c.out.Len(), n.Line})
	switch n.Kind {
	case yaml.AliasNode:
		c.node(n.Alias, depth+1)
	case yaml.MappingNode:
		c.out.WriteByte('{')
		for i, m := range c.pairs(n, depth, false) {
			if i > 0 {
				c.out.WriteByte(',')
			}
			c.marks = append(c.marks, lineMark{c.out.Len(), m.key.Line})
			c.string(m.name)
			c.out.WriteByte(':')
			c.node(m.value, depth+1)
		}
		c.out.WriteByte('}')
	case yaml.SequenceNode:
		c.out.WriteByte('[')
		for i, e := range n.Content {
			if i > 0 {
				c.out.WriteByte(',')
			}
			c.node(e, depth+1)
		}
		c.out.WriteByte(']')
	case yaml.ScalarNode:
		c.scalar(n)
	default:
		c.bad(n.Line, "an unexpected YAML node")
		c.out.WriteString("null")
	}
}

type yamlPair struct {
	name       string
	key, value *yaml.Node
}

// pairs returns a mapping's members: its own, then those its merge keys
// (<<: *anchor) bring that it does not give itself. merged says n is a
// merge's source: its keys are merge work (c.merge), whether written or not.
func (c *yamlConv) pairs(n *yaml.Node, depth int, merged bool) []yamlPair {
	if c.over {
		return nil
	}
	if depth > maxYAMLDepth {
		c.bad(n.Line, "merge keys nested deeper than %d levels", maxYAMLDepth)
		return nil
	}
	var own, brought []yamlPair
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if merged && !c.merge(k) || !merged && !c.step() {
			return nil
		}
		if k.Kind == yaml.AliasNode {
			k = k.Alias
		}
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			for _, m := range c.mergeSources(v) {
				brought = append(brought, c.pairs(m, depth+1, true)...)
			}
			continue
		}
		if k.Kind != yaml.ScalarNode {
			c.bad(k.Line, "a key must be a plain name, not a list or mapping")
			continue
		}
		own = append(own, yamlPair{k.Value, k, v})
	}
	given := make(map[string]bool, len(own))
	for _, p := range own {
		given[p.name] = true
	}
	for _, p := range brought {
		if !given[p.name] {
			given[p.name] = true
			own = append(own, p)
		}
	}
	return own
}

// mergeSources returns the mappings a merge key's value names: one, or a
// list of them. Each element is merge work of its own: an empty mapping
// merged a million times is a million steps.
func (c *yamlConv) mergeSources(v *yaml.Node) []*yaml.Node {
	if v.Kind == yaml.AliasNode {
		v = v.Alias
	}
	switch v.Kind {
	case yaml.MappingNode:
		if !c.merge(v) {
			return nil
		}
		return []*yaml.Node{v}
	case yaml.SequenceNode:
		var out []*yaml.Node
		for _, e := range v.Content {
			if !c.merge(e) {
				return nil
			}
			if e.Kind == yaml.AliasNode {
				e = e.Alias
			}
			if e.Kind != yaml.MappingNode {
				c.badSource(e)
				continue
			}
			out = append(out, e)
		}
		return out
	}
	c.badSource(v)
	return nil
}

// badSource reports a merge source that is no mapping, once a line however
// often aliases merge it.
func (c *yamlConv) badSource(n *yaml.Node) {
	if c.badMerge[n.Line] {
		return
	}
	if c.badMerge == nil {
		c.badMerge = map[int]bool{}
	}
	c.badMerge[n.Line] = true
	c.bad(n.Line, "a merge key (<<) takes a mapping or a list of mappings")
}

var jsonNumber = regexp.MustCompile(`^-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?$`)

// scalar writes a scalar as JSON: strings and timestamps as strings,
// numbers with the text they were written with.
func (c *yamlConv) scalar(n *yaml.Node) {
	v := n.Value
	switch n.ShortTag() {
	case "!!str", "!!timestamp":
		c.string(v)
	case "!!null":
		c.out.WriteString("null")
	case "!!bool":
		b, _ := strconv.ParseBool(strings.ToLower(v))
		c.out.WriteString(strconv.FormatBool(b))
	case "!!int":
		v = strings.TrimPrefix(strings.ReplaceAll(v, "_", ""), "+")
		if jsonNumber.MatchString(v) {
			c.out.WriteString(v)
			return
		}
		base := 10 // 010 is ten, as in YAML 1.2
		if d := strings.TrimPrefix(v, "-"); len(d) > 2 && d[0] == '0' && strings.ContainsRune("xXoObB", rune(d[1])) {
			base = 0 // 0x1f, 0o17, 0b101
		}
		i, err := strconv.ParseInt(v, base, 64)
		if err != nil {
			c.bad(n.Line, "%q is not a whole number the file can hold", clip(n.Value, 40))
			c.out.WriteString("null")
			return
		}
		c.out.WriteString(strconv.FormatInt(i, 10))
	case "!!float":
		v = strings.TrimPrefix(v, "+")
		if jsonNumber.MatchString(v) {
			c.out.WriteString(v)
			return
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f-f != 0 { // not a number, or infinite
			c.bad(n.Line, "%q is not a finite number", clip(n.Value, 40))
			c.out.WriteString("null")
			return
		}
		c.out.WriteString(strconv.FormatFloat(f, 'f', -1, 64))
	default:
		c.bad(n.Line, "the tag %s is not supported: write a plain value", clip(n.Tag, 40))
		c.out.WriteString("null")
	}
}

func (c *yamlConv) string(s string) {
	b, _ := json.Marshal(s)
	c.out.Write(b)
}

// jsonToYAML turns JSON text into a YAML document node keeping the order of
// the members and the text of numbers.
func jsonToYAML(data []byte) (*yaml.Node, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	n, err := yamlValue(dec)
	if err != nil {
		return nil, err
	}
	return &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{n}}, nil
}

func flat(ns []*yaml.Node) bool {
	for _, n := range ns {
		if n.Kind != yaml.ScalarNode || strings.Contains(n.Value, "\n") {
			return false
		}
	}
	return true
}

func yamlValue(dec *json.Decoder) (*yaml.Node, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		if t == '{' {
			n = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		}
		for dec.More() {
			if t == '{' {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				key, _ := k.(string)
				n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key})
			}
			v, err := yamlValue(dec)
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, v)
		}
		if _, err := dec.Token(); err != nil { // the closing delimiter
			return nil, err
		}
		if n.Kind == yaml.SequenceNode && flat(n.Content) {
			n.Style = yaml.FlowStyle // [JP, US]: a list of values on one line
		}
		return n, nil
	case string:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: t}, nil
	case json.Number:
		tag := "!!int"
		if strings.ContainsAny(string(t), ".eE") {
			tag = "!!float"
		}
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: string(t)}, nil
	case bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(t)}, nil
	case nil:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}, nil
	}
	return nil, fmt.Errorf("unexpected JSON token %v", tok)
}
