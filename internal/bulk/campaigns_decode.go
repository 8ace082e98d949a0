package bulk

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"

	"tsubame"
)

// decoder decodes JSON text into the campaign model field by field, so
// that one pass reports every problem with its path rather than the first
// one encoding/json meets: unknown fields (also inside values with their
// own decoding, such as a pacing object), fields given twice, values of
// the wrong type. Values with their own decoding (Money, Duration,
// time.Time, Pacing) are decoded by it, so amounts are read from their text,
// never through a float. Names match exactly (encoding/json would also take
// "ID" for "id"): the file is a contract.
//
// The text must be valid JSON (checkJSONSyntax, or yamlToJSON's output).
type decoder struct {
	lineAt func(off int) int // the input's line of an offset into the text
	// lines maps paths to the lines of their values: those of the set's
	// fields and objects only (a million line items would otherwise keep
	// tens of millions of paths), or every path with all set.
	lines map[string]int
	all   bool
	depth int // of the value being decoded: 0 the set, 1 a kind's list, 2 an object
	// objects are the text of each object (path -> offset and JSON), so
	// that the lines of its fields can be found when a problem names one
	// (CampaignFile.lineOf).
	objects  map[string]span
	problems []FileProblem
}

// span is a JSON value and its offset into the text.
type span struct {
	off int
	raw []byte
}

func (d *decoder) bad(off int, path, format string, args ...any) {
	d.problems = append(d.problems, FileProblem{Line: d.lineAt(off), Path: path, Message: fmt.Sprintf(format, args...)})
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
	campaignObject  = reflect.TypeFor[tsubame.CampaignObject]()
	timeType        = reflect.TypeFor[time.Time]()
)

// valueOf returns the value v (a non-nil pointer) points to.
func valueOf(v any) reflect.Value {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		panic("bulk: decoding into a non-pointer")
	}
	return rv.Elem()
}

// value decodes raw, found at offset off of the text, into v (settable).
func (d *decoder) value(off int, raw []byte, v reflect.Value, path string) {
	if path != "" && (d.all || d.depth <= 2) {
		d.lines[path] = d.lineAt(off)
	}
	if d.depth == 2 && d.objects != nil {
		d.objects[path] = span{off, raw}
	}
	d.depth++
	defer func() { d.depth-- }()
	if string(raw) == "null" {
		return // as encoding/json: null leaves the value as it is
	}
	t := v.Type()
	if t.Kind() == reflect.Pointer {
		if v.IsNil() {
			v.Set(reflect.New(t.Elem()))
		}
		d.value(off, raw, v.Elem(), path)
		return
	}
	if pt := reflect.PointerTo(t); pt.Implements(jsonUnmarshaler) || pt.Implements(textUnmarshaler) {
		if err := json.Unmarshal(raw, v.Addr().Interface()); err != nil {
			var fe *tsubame.FieldError
			if errors.As(err, &fe) && t.Kind() == reflect.Struct {
				// One field of an object that decodes itself (Budget): named
				// by its path, as the fields of others are.
				index, ok := fieldsOf(t)[fe.Field]
				if !ok {
					d.bad(off, join(path, fe.Field), "unknown field")
					return
				}
				d.bad(off, join(path, fe.Field), "%s", leafMessage(fe.Err, t.FieldByIndex(index).Type, fe.Raw))
				return
			}
			d.bad(off, path, "%s", leafMessage(err, t, raw))
			return
		}
		// Its own decoding reads an object without refusing unknown fields
		// (Pacing): refuse them here.
		if t.Kind() == reflect.Struct && raw[0] == '{' && len(fieldsOf(t)) > 0 {
			d.members(off, raw, path, t, func(key string, off int, _ []byte) {
				if _, ok := fieldsOf(t)[key]; !ok {
					d.bad(off, join(path, key), "unknown field")
				}
			})
		}
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		fields := fieldsOf(t)
		d.members(off, raw, path, t, func(key string, off int, raw []byte) {
			index, ok := fields[key]
			if !ok {
				d.bad(off, join(path, key), "unknown field")
				return
			}
			d.value(off, raw, field(v, index), join(path, key))
		})
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			d.leaf(off, raw, v, path)
			return
		}
		d.members(off, raw, path, t, func(key string, off int, raw []byte) {
			if v.IsNil() {
				v.Set(reflect.MakeMap(t))
			}
			e := reflect.New(t.Elem()).Elem()
			d.value(off, raw, e, fmt.Sprintf("%s[%q]", path, clip(key, 64)))
			v.SetMapIndex(reflect.ValueOf(key).Convert(t.Key()), e)
		})
	case reflect.Slice:
		if raw[0] != '[' {
			d.bad(off, path, "must be %s, not %s", want(t), jsonKind(raw))
			return
		}
		items := elements(raw)
		s := reflect.MakeSlice(t, len(items), len(items))
		// The model's objects are named as CampaignSet.Validate names them.
		named := t.Elem().Implements(campaignObject)
		for i, it := range items {
			p := fmt.Sprintf("%s[%d]", path, i)
			if named {
				p += fmt.Sprintf(" (id %q)", clip(peekID(it.raw), tsubame.MaxIDLength))
			}
			d.value(off+it.off, it.raw, s.Index(i), p)
		}
		v.Set(s)
	default:
		d.leaf(off, raw, v, path)
	}
}

func (d *decoder) leaf(off int, raw []byte, v reflect.Value, path string) {
	if err := json.Unmarshal(raw, v.Addr().Interface()); err != nil {
		d.bad(off, path, "%s", leafMessage(err, v.Type(), raw))
	}
}

// members calls each with every member of the JSON object raw, in order,
// and the offset of its value; it reports a non-object and keys given
// twice. raw is valid JSON (the decoder's input is checked first).
func (d *decoder) members(off int, raw []byte, path string, t reflect.Type, each func(key string, off int, raw []byte)) {
	if raw[0] != '{' {
		d.bad(off, path, "must be %s, not %s", want(t), jsonKind(raw))
		return
	}
	var seen map[string]bool
	eachMember(raw, func(key string, voff int, val []byte) {
		if seen == nil {
			seen = map[string]bool{}
		}
		if seen[key] {
			d.bad(off+voff, join(path, key), "given twice")
			return
		}
		seen[key] = true
		each(key, off+voff, val)
	})
}

// eachMember calls each with every member of the valid JSON object raw:
// its key (unescaped), the offset of its value in raw, and the value.
func eachMember(raw []byte, each func(key string, off int, val []byte)) {
	i := skipSpace(raw, 1)
	for i < len(raw) && raw[i] == '"' {
		kend := skipValue(raw, i)
		key := unquote(raw[i:kend])
		i = skipSpace(raw, kend)
		i = skipSpace(raw, i+1) // the colon
		vend := skipValue(raw, i)
		each(key, i, raw[i:vend])
		i = skipSpace(raw, vend)
		if i < len(raw) && raw[i] == ',' {
			i = skipSpace(raw, i+1)
		}
	}
}

type element struct {
	off int
	raw []byte
}

// elements splits the valid JSON array raw into its elements.
func elements(raw []byte) []element {
	var out []element
	i := skipSpace(raw, 1)
	for i < len(raw) && raw[i] != ']' {
		end := skipValue(raw, i)
		out = append(out, element{off: i, raw: raw[i:end]})
		i = skipSpace(raw, end)
		if i < len(raw) && raw[i] == ',' {
			i = skipSpace(raw, i+1)
		}
	}
	return out
}

// peekID returns the string under the key "id" of the JSON object raw, or "".
func peekID(raw []byte) string {
	if raw[0] != '{' {
		return ""
	}
	id := ""
	eachMember(raw, func(key string, _ int, val []byte) {
		if key == "id" && id == "" && val[0] == '"' {
			id = unquote(val)
		}
	})
	return id
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the end of the valid JSON value that starts at b[i].
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		for i++; i < len(b); i++ {
			switch b[i] {
			case '\\':
				i++
			case '"':
				return i + 1
			}
		}
		return len(b)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				i = skipValue(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return len(b)
	}
	for i < len(b) && !strings.ContainsRune(",]} \t\r\n", rune(b[i])) {
		i++ // a number, true, false or null
	}
	return i
}

// unquote returns the string of the valid JSON string literal q.
func unquote(q []byte) string {
	if bytes.IndexByte(q, '\\') < 0 {
		return string(q[1 : len(q)-1])
	}
	var s string
	_ = json.Unmarshal(q, &s)
	return s
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// field returns v's field at index (of fieldsOf), allocating embedded
// pointers on the way.
func field(v reflect.Value, index []int) reflect.Value {
	for i, x := range index {
		if i > 0 && v.Kind() == reflect.Pointer {
			if v.IsNil() {
				v.Set(reflect.New(v.Type().Elem()))
			}
			v = v.Elem()
		}
		v = v.Field(x)
	}
	return v
}

var fieldCache sync.Map // reflect.Type -> map[string][]int

// fieldsOf returns the JSON names of a struct type's fields, with the
// fields of embedded structs promoted, as encoding/json names them.
func fieldsOf(t reflect.Type) map[string][]int {
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string][]int)
	}
	m := map[string][]int{}
	var walk func(t reflect.Type, index []int)
	walk = func(t reflect.Type, index []int) {
		for i := range t.NumField() {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, _, _ := strings.Cut(tag, ",")
			idx := append(index[:len(index):len(index)], i)
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if f.Anonymous && name == "" && ft.Kind() == reflect.Struct {
				walk(ft, idx)
				continue
			}
			if !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			if old, dup := m[name]; !dup || len(idx) < len(old) { // the shallower field wins
				m[name] = idx
			}
		}
	}
	walk(t, nil)
	fieldCache.Store(t, m)
	return m
}

// leafMessage says what is wrong with a value of type t that failed to
// decode with err, without Go's type names.
func leafMessage(err error, t reflect.Type, raw []byte) string {
	var te *json.UnmarshalTypeError
	var de *tsubame.Error
	switch {
	case errors.As(err, &te):
		return fmt.Sprintf("must be %s, not %s", want(t), jsonKind(raw))
	case errors.As(err, &de):
		return tsubame.ErrorMessage(de)
	case t == timeType:
		return "must be a time as RFC 3339 writes it, such as \"2026-04-01T00:00:00+09:00\""
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

// want describes the values a type takes.
func want(t reflect.Type) string {
	switch t {
	case reflect.TypeFor[tsubame.Pacing]():
		return "a pacing mode (asap, even, frontloaded) or an object with mode and hour_weights"
	case reflect.TypeFor[tsubame.Money]():
		return "an amount (a decimal such as \"1.25\" or 1.25)"
	case reflect.TypeFor[tsubame.Duration]():
		return "a duration such as \"24h\""
	case timeType:
		return "a time such as \"2026-04-01T00:00:00+09:00\""
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return "a " + t.Kind().String()
}

// jsonKind names the kind of the JSON value raw.
func jsonKind(raw []byte) string {
	switch raw[0] {
	case '{':
		return "an object"
	case '[':
		return "a list"
	case '"':
		return "a string"
	case 't', 'f':
		return "true or false"
	case 'n':
		return "null"
	}
	return "the number " + clip(string(raw), 40)
}

// checkJSONSyntax reports where data is not one JSON value, with its line
// and column.
func checkJSONSyntax(data []byte) []FileProblem {
	nl := newlines(data)
	at := func(off int, msg string) []FileProblem {
		line, col := nl.position(off)
		return []FileProblem{{Line: line, Col: col, Message: msg}}
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return []FileProblem{{Message: "empty: no JSON value"}}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	var v json.RawMessage
	if err := dec.Decode(&v); err != nil {
		var se *json.SyntaxError
		switch {
		case errors.As(err, &se): // Offset is just after the offending byte
			return at(max(int(se.Offset)-1, 0), "invalid JSON: "+strings.TrimPrefix(se.Error(), "json: "))
		case errors.Is(err, io.ErrUnexpectedEOF):
			return at(len(data), "invalid JSON: the input ends inside a value")
		}
		return at(int(dec.InputOffset()), "invalid JSON: "+err.Error())
	}
	end := int(dec.InputOffset())
	if _, err := dec.Token(); err != io.EOF {
		return at(end+leadingSpace(data[end:]), "data after the JSON value")
	}
	return nil
}

// newlineTable holds the offsets of an input's newlines.
type newlineTable []int

func newlines(data []byte) newlineTable {
	var t newlineTable
	for i, c := range data {
		if c == '\n' {
			t = append(t, i)
		}
	}
	return t
}

// position returns the 1-based line and column (in bytes) of offset off.
func (t newlineTable) position(off int) (line, col int) {
	n := sort.SearchInts(t, off) // newlines before off
	start := 0
	if n > 0 {
		start = t[n-1] + 1
	}
	return n + 1, off - start + 1
}

func (t newlineTable) line(off int) int {
	l, _ := t.position(off)
	return l
}
