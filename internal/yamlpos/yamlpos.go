// Package yamlpos names where in a YAML text a line is, by its keys and
// list items, for a text that does not parse: a parser's error names a
// line only, and an indentation mistake is easier to fix knowing it is
// read as under campaigns[0].advertiser.
package yamlpos

import (
	"bytes"
	"strconv"
	"strings"
)

// frame is one level of the path: a key, or a list's item.
type frame struct {
	indent int
	key    string // "" for a list
	index  int    // a list's current item
}

// PathAt is the path of the keys and list items enclosing line (1-based)
// of data, as indentation gives it: "campaigns[0].advertiser", or "" at
// the top. It reads block style only, as a hand-written file is; a flow
// collection ({...}, [...]) or a multi-line scalar on the way may make it
// less exact, never wrong in a way that misleads more than a line number.
func PathAt(data []byte, line int) string {
	var stack []frame
	target := -1
	for i, raw := range bytes.Split(data, []byte("\n")) {
		if i+1 > line {
			break
		}
		text := strings.TrimRight(string(raw), " \t\r")
		content := strings.TrimLeft(text, " ")
		if content == "" || strings.HasPrefix(content, "#") {
			continue
		}
		indent := len(text) - len(content)
		if i+1 == line {
			target = indent
			if strings.HasPrefix(content, "-") {
				// An item of a list: under the list's key.
				for len(stack) > 0 && stack[len(stack)-1].indent > indent {
					stack = stack[:len(stack)-1]
				}
				if n := len(stack); n > 0 && stack[n-1].key == "" && stack[n-1].indent == indent {
					stack = stack[:n-1]
				}
				target = -1
			}
			break
		}
		for strings.HasPrefix(content, "- ") || content == "-" {
			// A list item: the next of the list at this indent, or a new
			// list (of the key above it, which may share its indent).
			for len(stack) > 0 && stack[len(stack)-1].indent > indent {
				stack = stack[:len(stack)-1]
			}
			if n := len(stack); n > 0 && stack[n-1].key == "" && stack[n-1].indent == indent {
				stack[n-1].index++
			} else {
				stack = append(stack, frame{indent: indent})
			}
			rest := strings.TrimLeft(strings.TrimPrefix(content, "-"), " ")
			indent += len(content) - len(rest)
			content = rest
		}
		key, _, ok := strings.Cut(content, ":")
		if !ok || key == "" || strings.ContainsAny(key, "\"'{[#") {
			continue
		}
		for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
			stack = stack[:len(stack)-1]
		}
		stack = append(stack, frame{indent: indent, key: strings.TrimSpace(key)})
	}
	for target >= 0 && len(stack) > 0 && stack[len(stack)-1].indent >= target {
		stack = stack[:len(stack)-1]
	}
	var b strings.Builder
	for _, f := range stack {
		if f.key == "" {
			b.WriteString("[" + strconv.Itoa(f.index) + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(f.key)
	}
	return b.String()
}
