// Package bulk reads and writes placements in bulk: JSON lines (one
// {"id":"1","urls":[...]} per line), one JSON array of such objects, or CSV.
// Read validates everything before returning anything, and reports every bad
// line with its number, so a caller can refuse a bad file as a whole.
package bulk

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"tsubame"
)

// Format is a bulk file format.
type Format string

// Formats Read understands. Auto picks one from the first non-blank byte:
// '[' is a JSON array, '{' JSON lines, anything else CSV.
const (
	Auto      Format = "auto"
	JSONLines Format = "jsonl"
	JSONArray Format = "json"
	CSV       Format = "csv"
)

// ParseFormat accepts the names of the formats (and "ndjson" for JSON lines).
func ParseFormat(s string) (Format, error) {
	switch s {
	case "", "auto":
		return Auto, nil
	case "jsonl", "ndjson":
		return JSONLines, nil
	case "json":
		return JSONArray, nil
	case "csv":
		return CSV, nil
	}
	return "", fmt.Errorf("unknown format %q: want auto, jsonl, json or csv", s)
}

// MaxLine bounds one line (one placement) of input.
const MaxLine = 1 << 20

// maxProblems bounds how many bad lines one error lists.
const maxProblems = 50

// Problem is one bad line.
type Problem struct {
	Line int
	Msg  string
}

// Error lists the bad lines of an input. Nothing of such an input should be
// written anywhere.
type Error struct {
	Problems []Problem
	More     int // bad lines beyond those listed
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d bad line(s), nothing imported:", len(e.Problems)+e.More)
	for _, p := range e.Problems {
		fmt.Fprintf(&b, "\n  line %d: %s", p.Line, p.Msg)
	}
	if e.More > 0 {
		fmt.Fprintf(&b, "\n  ... and %d more", e.More)
	}
	return b.String()
}

type collector struct {
	out   []*tsubame.Placement
	lines map[string]int // id -> line of first appearance
	err   Error
}

func (c *collector) bad(line int, format string, args ...any) {
	if len(c.err.Problems) < maxProblems {
		c.err.Problems = append(c.err.Problems, Problem{Line: line, Msg: fmt.Sprintf(format, args...)})
	} else {
		c.err.More++
	}
}

func (c *collector) add(line int, p *tsubame.Placement) {
	if err := p.Validate(); err != nil {
		c.bad(line, "%s", tsubame.ErrorMessage(err))
		return
	}
	if first, dup := c.lines[p.ID]; dup {
		c.bad(line, "placement %q already given on line %d", p.ID, first)
		return
	}
	c.lines[p.ID] = line
	c.out = append(c.out, p)
}

// Read parses and validates every placement in r. On any bad line it returns
// an *Error listing them and no placements.
func Read(r io.Reader, format Format) ([]*tsubame.Placement, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	if format == Auto {
		format = sniff(br)
	}
	c := &collector{lines: make(map[string]int)}
	var err error
	switch format {
	case JSONLines:
		err = readJSONLines(br, c)
	case JSONArray:
		err = readJSONArray(br, c)
	case CSV:
		err = readCSV(br, c)
	default:
		return nil, fmt.Errorf("unknown format %q", format)
	}
	if err != nil {
		return nil, err
	}
	if len(c.err.Problems) > 0 {
		return nil, &c.err
	}
	return c.out, nil
}

func sniff(br *bufio.Reader) Format {
	for {
		b, err := br.Peek(1)
		if err != nil {
			return JSONLines
		}
		switch b[0] {
		case ' ', '\t', '\r', '\n':
			_, _ = br.ReadByte()
			continue
		case '\xef': // a UTF-8 byte order mark
			if bom, err := br.Peek(3); err == nil && string(bom) == "\ufeff" {
				_, _ = br.Discard(3)
				continue
			}
		case '[':
			return JSONArray
		case '{':
			return JSONLines
		}
		return CSV
	}
}

func decodeStrict(data []byte, p *tsubame.Placement) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(p); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("more than one JSON value on the line")
	}
	return nil
}

func readJSONLines(br *bufio.Reader, c *collector) error {
	sc := bufio.NewScanner(br)
	sc.Buffer(make([]byte, 0, 64<<10), MaxLine)
	line := 0
	for sc.Scan() {
		line++
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 {
			continue
		}
		var p tsubame.Placement
		if err := decodeStrict(text, &p); err != nil {
			c.bad(line, "invalid JSON: %v", err)
			continue
		}
		c.add(line, &p)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("line %d: longer than %d bytes", line+1, MaxLine)
		}
		return err
	}
	return nil
}

func readJSONArray(br *bufio.Reader, c *collector) error {
	data, err := io.ReadAll(br)
	if err != nil {
		return err
	}
	lineAt := func(off int64) int { return 1 + bytes.Count(data[:min(int(off), len(data))], []byte("\n")) }
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return fmt.Errorf("line %d: expected a JSON array", lineAt(dec.InputOffset()))
	}
	for dec.More() {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return fmt.Errorf("line %d: invalid JSON: %v", lineAt(dec.InputOffset()), err)
		}
		start := dec.InputOffset() - int64(len(raw))
		var p tsubame.Placement
		if err := decodeStrict(raw, &p); err != nil {
			c.bad(lineAt(start), "invalid placement: %v", err)
			continue
		}
		c.add(lineAt(start), &p)
	}
	if _, err := dec.Token(); err != nil {
		return fmt.Errorf("line %d: unterminated JSON array", lineAt(dec.InputOffset()))
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("line %d: data after the JSON array", lineAt(dec.InputOffset()))
	}
	return nil
}

// readCSV reads either positional rows "id,url,url,..." or, when the first
// row is a header naming an "id" and a "urls" column, rows with the columns
// id, urls, name and deps in any order, urls and deps separated by spaces.
func readCSV(br *bufio.Reader, c *collector) error {
	r := csv.NewReader(br)
	r.FieldsPerRecord = -1
	r.ReuseRecord = false
	var cols map[string]int
	for first := true; ; first = false {
		rec, err := r.Read()
		if err == io.EOF {
			return nil
		}
		line, _ := r.FieldPos(0)
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				c.bad(pe.StartLine, "invalid CSV: %v", pe.Err)
				if errors.Is(pe.Err, csv.ErrQuote) || errors.Is(pe.Err, csv.ErrBareQuote) {
					return nil // the reader cannot resynchronise after a broken quote
				}
				continue
			}
			return err
		}
		if first && slices.Contains(rec, "id") && slices.Contains(rec, "urls") {
			cols = make(map[string]int)
			for i, name := range rec {
				switch name {
				case "id", "urls", "name", "deps":
					cols[name] = i
				default:
					return fmt.Errorf("line %d: unknown CSV column %q (want id, urls, name, deps)", line, name)
				}
			}
			continue
		}
		if len(rec) == 1 && strings.TrimSpace(rec[0]) == "" {
			continue
		}
		p := &tsubame.Placement{}
		if cols == nil {
			p.ID, p.URLs = rec[0], slices.Clone(rec[1:])
		} else {
			get := func(col string) string {
				if i, ok := cols[col]; ok && i < len(rec) {
					return rec[i]
				}
				return ""
			}
			p.ID, p.Name = get("id"), get("name")
			p.URLs, p.Deps = strings.Fields(get("urls")), strings.Fields(get("deps"))
		}
		c.add(line, p)
	}
}

// Write exports every placement of s to w as JSON lines, in id order.
func Write(ctx context.Context, w io.Writer, s tsubame.Store) (int, error) {
	bw := bufio.NewWriterSize(w, 64<<10)
	enc := json.NewEncoder(bw)
	n, after := 0, ""
	for {
		page, err := s.List(ctx, after, 1000)
		if err != nil {
			return n, err
		}
		if len(page) == 0 {
			break
		}
		for _, p := range page {
			if err := enc.Encode(p); err != nil {
				return n, err
			}
			n++
		}
		after = page[len(page)-1].ID
	}
	return n, bw.Flush()
}
