package bulk

// The campaign file: every object of a tsubame.CampaignSet in one JSON or
// YAML document, under the model's JSON names. YAML is turned into JSON
// first (campaigns_yaml.go), keeping every number's text, so that both
// formats take one decoding path (campaigns_decode.go) and amounts stay
// exact. A file is refused as a whole: ReadCampaigns and Resolve report
// every problem at once, each as FILE:LINE: PATH: MESSAGE.

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"tsubame"
)

// CampaignFormat is how a campaign file is written.
type CampaignFormat string

// Campaign file formats. CampaignsAuto reads JSON when the first byte that
// is not a space is '{', YAML otherwise.
const (
	CampaignsAuto CampaignFormat = ""
	CampaignsJSON CampaignFormat = "json"
	CampaignsYAML CampaignFormat = "yaml"
	// CampaignsCSV holds line items alone, a row each (campaigns_csv.go).
	CampaignsCSV CampaignFormat = "csv"
)

// ParseCampaignFormat accepts json, yaml or yml, csv, and "" or auto for
// CampaignsAuto.
func ParseCampaignFormat(s string) (CampaignFormat, error) {
	switch strings.ToLower(s) {
	case "", "auto":
		return CampaignsAuto, nil
	case "json":
		return CampaignsJSON, nil
	case "yaml", "yml":
		return CampaignsYAML, nil
	case "csv":
		return CampaignsCSV, nil
	}
	return "", fmt.Errorf("unknown campaign file format %q: want json, yaml or csv", s)
}

// CampaignFormatOf returns the format a file name's extension says (.json,
// .yaml, .yml, .csv), or CampaignsAuto.
func CampaignFormatOf(name string) CampaignFormat {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".json":
		return CampaignsJSON
	case ".yaml", ".yml":
		return CampaignsYAML
	case ".csv":
		return CampaignsCSV
	}
	return CampaignsAuto
}

// MaxCampaignProblems bounds how many problems one FileError lists; the
// rest are counted.
const MaxCampaignProblems = 1000

// FileProblem is one problem of a campaign file: where (a line, and a
// column for syntax errors, when known; a path into the file such as
// `line_items[3] (id "li-7").targeting.countries[0]`) and what.
type FileProblem struct {
	Line, Col int
	Path      string
	Message   string
}

// format writes the problem as FILE:LINE: PATH: MESSAGE, leaving out what
// is not known.
func (p FileProblem) format(b *strings.Builder, file string) {
	b.WriteString(file)
	if p.Line > 0 {
		fmt.Fprintf(b, ":%d", p.Line)
		if p.Col > 0 {
			fmt.Fprintf(b, ":%d", p.Col)
		}
	}
	b.WriteString(": ")
	if p.Path != "" {
		b.WriteString(p.Path)
		b.WriteString(": ")
	}
	b.WriteString(p.Message)
}

// FileError lists every problem of a campaign file (up to
// MaxCampaignProblems; More counts the others). Nothing of such a file
// should be written anywhere. The errors ReadCampaigns and Resolve return
// are EINVALID tsubame errors whose cause is a *FileError.
type FileError struct {
	File     string
	Problems []FileProblem
	More     int
	// Written says what did not happen ("nothing imported" when empty).
	Written string
}

func (e *FileError) Error() string {
	var b strings.Builder
	n := len(e.Problems) + e.More
	nothing := cmp.Or(e.Written, "nothing imported")
	if n == 1 {
		fmt.Fprintf(&b, "1 problem, %s:", nothing)
	} else {
		fmt.Fprintf(&b, "%d problems, %s:", n, nothing)
	}
	for _, p := range e.Problems {
		b.WriteByte('\n')
		p.format(&b, e.File)
	}
	if e.More > 0 {
		fmt.Fprintf(&b, "\n... and %d more", e.More)
	}
	return b.String()
}

// fileError returns nil, or an EINVALID error listing ps (sorted by line,
// problems without one last) whose cause is a *FileError.
func fileError(file string, ps []FileProblem) error {
	if len(ps) == 0 {
		return nil
	}
	slices.SortStableFunc(ps, func(a, b FileProblem) int {
		if (a.Line == 0) != (b.Line == 0) {
			return cmp.Compare(b.Line, a.Line) // the one with a line first
		}
		return cmp.Compare(a.Line, b.Line)
	})
	fe := &FileError{File: file, Problems: ps}
	if len(ps) > MaxCampaignProblems {
		fe.Problems, fe.More = ps[:MaxCampaignProblems], len(ps)-MaxCampaignProblems
	}
	return tsubame.WrapError(tsubame.EINVALID, fe, "%v", fe)
}

// CampaignFile is a decoded campaign file, not yet checked: Resolve checks
// it alone or merged into a stored set.
type CampaignFile struct {
	// Name is the file's name in problems ("campaigns.yaml", "-").
	Name string
	// Set holds what the file gives; values that failed to decode are
	// left zero.
	Set *tsubame.CampaignSet

	problems []FileProblem // the decoding's
	lines    map[string]int
	// objects are the text of each object, and lineAt the line of an
	// offset: lineOf finds the lines of an object's fields from them
	// (the decoding keeps the lines of the objects only).
	objects map[string]span
	lineAt  func(off int) int
	walked  map[string]bool
	// lineItemsOnly: a CSV file, which only merges.
	lineItemsOnly bool
}

// ReadCampaigns reads a campaign file from r. A file that is not JSON or
// YAML at all fails here (an EINVALID error whose cause is a *FileError, a
// syntax error with its line and column); problems of its values (unknown
// fields, a string for a number) are kept for Resolve to report with the
// model's. Errors reading r are returned as they are.
func ReadCampaigns(r io.Reader, name string, format CampaignFormat) (*CampaignFile, error) {
	return ReadCampaignsContext(context.Background(), r, name, format)
}

// ReadCampaignsContext is ReadCampaigns for a request: it gives up, with
// an EUNAVAILABLE error whose cause is ctx's, once ctx is done (the client
// left), between its steps and while it expands a YAML file's aliases.
// The work a file costs is bounded by its size whatever ctx
// (MaxYAMLExpansion).
func ReadCampaignsContext(ctx context.Context, r io.Reader, name string, format CampaignFormat) (*CampaignFile, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, givenUp(err)
	}
	data = bytes.TrimPrefix(data, []byte("\ufeff"))
	if format == CampaignsAuto {
		format = sniffCampaigns(data)
	}
	var (
		text   []byte
		lineAt func(off int) int
		ps     []FileProblem
		cells  []FileProblem // a CSV's cells' forms: reported with the decoding's
	)
	switch format {
	case CampaignsJSON:
		text, ps = data, checkJSONSyntax(data)
		lineAt = newlines(data).line
	case CampaignsYAML:
		var marks lineMarks
		text, marks, ps, err = yamlToJSON(ctx, data)
		if err != nil {
			return nil, givenUp(err)
		}
		lineAt = marks.line
	case CampaignsCSV:
		var rows []int
		text, rows, cells, ps = csvToJSON(data)
		nl := newlines(text)
		lineAt = func(off int) int { return rows[min(nl.line(off), len(rows))-1] }
	default:
		return nil, fmt.Errorf("unknown campaign file format %q", format)
	}
	if err := fileError(name, ps); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, givenUp(err)
	}
	d := &decoder{lineAt: lineAt, lines: map[string]int{}, objects: map[string]span{}}
	set := &tsubame.CampaignSet{}
	d.value(leadingSpace(text), bytes.Trim(text, " \t\r\n"), valueOf(set), "")
	return &CampaignFile{Name: name, Set: set, problems: append(cells, d.problems...), lines: d.lines, objects: d.objects, lineAt: lineAt,
		lineItemsOnly: format == CampaignsCSV}, nil
}

// givenUp is the error of an import whose context ended.
func givenUp(err error) error {
	return tsubame.WrapError(tsubame.EUNAVAILABLE, err, "the campaign file was not read to the end: the request ended (%v)", err)
}

// DecodeStrict decodes one JSON value into v (a pointer to a model type)
// as a campaign file's values are decoded: unknown fields and values of the
// wrong type are errors, all of them reported at once (an EINVALID error
// whose cause is a *FileError naming the input name).
func DecodeStrict(data []byte, name string, v any) error {
	if err := fileError(name, checkJSONSyntax(data)); err != nil {
		return err
	}
	d := &decoder{lineAt: newlines(data).line, lines: map[string]int{}}
	d.value(leadingSpace(data), bytes.Trim(data, " \t\r\n"), valueOf(v), "")
	return fileError(name, d.problems)
}

// DecodeObject decodes one campaign object o of the given id from data as
// DecodeStrict decodes (an API's body, named name). When data is broken,
// it also checks the fields that did decode (tsubame.ObjectProblems), and
// reports every problem of both at once: an EINVALID error whose cause is
// a *FileError saying nothing was written, its paths from the object (cpm,
// targeting.countries[0]); a field that did not decode is not reported
// again by the rules its zero breaks. An object that decodes is left to
// CampaignSet.Put, which checks its fields and references at once. An id
// in data must be id; without one, o takes id.
func DecodeObject(data []byte, name, id string, o tsubame.CampaignObject) error {
	err := DecodeStrict(data, name, o)
	var ps []FileProblem
	if fe, ok := errors.AsType[*FileError](err); ok {
		ps = fe.Problems
	} else if err != nil {
		return err
	}
	switch got := o.ObjectID(); {
	case got == "":
		setID(o, id)
	case got != id:
		ps = append(ps, FileProblem{Path: "id", Message: fmt.Sprintf("%q differs from the path's %q", got, id)})
		setID(o, id)
	}
	if len(ps) == 0 {
		return nil // the fields are checked with the references (CampaignSet.Put), at once
	}
	for _, p := range tsubame.ObjectProblems(o, "") {
		if !coveredBy(p.Path, ps) {
			ps = append(ps, FileProblem{Path: p.Path, Message: p.Message})
		}
	}
	if err := fileError(name, ps); err != nil {
		fe, _ := errors.AsType[*FileError](err)
		fe.Written = "nothing written"
		return tsubame.WrapError(tsubame.EINVALID, fe, "%v", fe)
	}
	return nil
}

// setID sets o's id.
func setID(o tsubame.CampaignObject, id string) {
	switch o := o.(type) {
	case *tsubame.Advertiser:
		o.ID = id
	case *tsubame.Campaign:
		o.ID = id
	case *tsubame.Creative:
		o.ID = id
	case *tsubame.LineItem:
		o.ID = id
	}
}

func leadingSpace(data []byte) int { return len(data) - len(bytes.TrimLeft(data, " \t\r\n")) }

func sniffCampaigns(data []byte) CampaignFormat {
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) > 0 && t[0] == '{' {
		return CampaignsJSON
	}
	return CampaignsYAML
}

// Resolve returns the set an import of the file makes, checked as a whole:
// the file's set alone when replace is set, else the file's objects put
// into a copy of base (merge: an object of the file replaces the stored
// one with its id; stored objects the file does not name stay). Every
// problem is reported at once, the decoding's and the model's (each
// object's fields, ids, references), naming the file's lines; problems of
// stored objects the file broke (a creative moved to another advertiser
// that a stored line item uses) name them as stored. A merge refuses a
// file whose currency differs from the stored set's.
func (f *CampaignFile) Resolve(base *tsubame.CampaignSet, replace bool) (*tsubame.CampaignSet, error) {
	if replace && f.lineItemsOnly {
		return nil, errCSVReplace
	}
	ps := slices.Clone(f.problems)
	set, stored := f.Set, map[string]string(nil)
	if !replace && base != nil && base.Len() > 0 {
		set, stored = merge(f.Set, base)
		if f.Set.Currency != "" && currency(f.Set.Currency) != currency(base.Currency) {
			ps = append(ps, FileProblem{Line: f.lines["currency"], Path: "currency", Message: fmt.Sprintf(
				"%q differs from the stored set's %q: the stored amounts would change meaning (import with replace to change the currency)",
				f.Set.Currency, currency(base.Currency))})
		}
	}
	for _, p := range tsubame.ProblemsOf(set.Validate()) {
		if coveredBy(p.Path, f.problems) {
			continue // a value that did not decode: its zero breaks rules the decoding already reported
		}
		if item, ok := storedItem(p.Path, stored); ok {
			ps = append(ps, FileProblem{Path: stored[item] + p.Path[len(item):], Message: p.Message})
			continue
		}
		ps = append(ps, FileProblem{Line: f.lineOf(p.Path), Path: p.Path, Message: p.Message})
	}
	if err := fileError(f.Name, ps); err != nil {
		return nil, err
	}
	return set, nil
}

// Write resolves the file against cs's set (Resolve) and writes the result
// at the version it read, so that it never undoes a write it did not see.
// On a store that carries writes into a replace (tsubame.CampaignRebases),
// the writes other processes make while a large file is checked and
// written are kept: they are applied to the resolved set, which is written
// (the store checks its references), unless one of them changed an object
// the file names; a replace keeps only
// deletes of objects the file does not name (any other write would be
// undone by it). Either conflict is ECONFLICT, naming the objects, and
// nothing is written; so is any write meanwhile on other stores. It returns
// the set written.
func (f *CampaignFile) Write(ctx context.Context, cs tsubame.CampaignStore, replace bool) (*tsubame.CampaignSet, error) {
	base, version, err := cs.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	set, err := f.Resolve(base, replace)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil { // the caller left: it would not learn of the write either
		return nil, tsubame.WrapError(tsubame.EUNAVAILABLE, err, "the import ended before %s was written: nothing imported", f.Name)
	}
	var (
		named  map[tsubame.CampaignKind]map[string]bool // on the first rebase: a million ids are not free
		undone error
	)
	rebase := func(changes []tsubame.CampaignChange) (*tsubame.CampaignSet, error) {
		if named == nil {
			named = f.names()
		}
		var both []string
		for _, c := range changes {
			if named[c.Kind][c.ID] || replace && c.Object != nil {
				both = append(both, fmt.Sprintf("%s %q", c.Kind, c.ID))
			}
		}
		if len(both) > 0 {
			undone = tsubame.Errorf(tsubame.ECONFLICT, "another process wrote %s while %s was checked, and the import would undo it: nothing was imported; import it again",
				clipList(both, 10), f.Name)
			return nil, undone
		}
		// The resolved set with the writes applied: the file's objects are
		// checked, and so is each write (by the store); the store checks
		// the references of the whole. Resolving the file again would take
		// seconds at a million line items, during which more writes come.
		set = set.Apply(changes)
		return set, nil
	}
	err = tsubame.ReplaceAllRebasing(ctx, cs, set, version, rebase)
	if tsubame.ErrorCode(err) == tsubame.ECONFLICT && (undone == nil || !errors.Is(err, undone)) {
		err = tsubame.WrapError(tsubame.ECONFLICT, err, "the stored campaigns changed while %s was checked, and nothing was imported: import it again", f.Name)
	}
	return set, err
}

// names is every object the file names, by kind and id.
func (f *CampaignFile) names() map[tsubame.CampaignKind]map[string]bool {
	out := map[tsubame.CampaignKind]map[string]bool{}
	for _, k := range tsubame.CampaignKinds {
		ids := map[string]bool{}
		for _, o := range f.Set.Objects(k) {
			ids[o.ObjectID()] = true
		}
		out[k] = ids
	}
	return out
}

// clipList joins the first max of items, saying how many more there are.
func clipList(items []string, max int) string {
	if len(items) <= max {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:max], ", "), len(items)-max)
}

func currency(c string) string { return cmp.Or(c, tsubame.DefaultCurrency) }

// merge returns file's objects put into base: per kind, the file's objects
// first, in its order (so that problems name the file's indexes), then
// base's objects the file does not name. stored maps the item path each of
// base's objects has in the result to how problems name it.
func merge(file, base *tsubame.CampaignSet) (*tsubame.CampaignSet, map[string]string) {
	stored := map[string]string{}
	return &tsubame.CampaignSet{
		Currency:    cmp.Or(file.Currency, base.Currency),
		Advertisers: mergeKind(file.Advertisers, base.Advertisers, stored),
		Campaigns:   mergeKind(file.Campaigns, base.Campaigns, stored),
		Creatives:   mergeKind(file.Creatives, base.Creatives, stored),
		LineItems:   mergeKind(file.LineItems, base.LineItems, stored),
	}, stored
}

func mergeKind[T any, P interface {
	*T
	tsubame.CampaignObject
}](file, base []*T, stored map[string]string) []*T {
	out := slices.Clone(file) // nil entries too: Validate reports them where the file has them
	named := make(map[string]bool, len(file))
	for _, o := range file {
		if o != nil {
			named[P(o).ObjectID()] = true
		}
	}
	for _, o := range base {
		if o == nil || named[P(o).ObjectID()] {
			continue
		}
		k, id := P(o).Kind(), P(o).ObjectID()
		stored[itemPath(k, len(out), id)] = fmt.Sprintf("stored %s (id %q)", k.Plural(), id)
		out = append(out, o)
	}
	return out
}

// itemPath names the i-th object of kind k as CampaignSet.Validate does.
func itemPath(k tsubame.CampaignKind, i int, id string) string {
	return fmt.Sprintf("%s[%d] (id %q)", k.Plural(), i, clip(id, tsubame.MaxIDLength))
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// storedItem returns the item path of stored that path starts with.
func storedItem(path string, stored map[string]string) (string, bool) {
	i := strings.Index(path, "\")")
	if i < 0 || len(stored) == 0 {
		return "", false
	}
	item := path[:i+2]
	_, ok := stored[item]
	return item, ok
}

// coveredBy reports whether path is at or under the path of a problem in ps.
func coveredBy(path string, ps []FileProblem) bool {
	for _, p := range ps {
		if under(path, p.Path) {
			return true
		}
	}
	return false
}

func under(path, prefix string) bool {
	if prefix == "" || !strings.HasPrefix(path, prefix) {
		return false
	}
	rest := path[len(prefix):]
	return rest == "" || rest[0] == '.' || rest[0] == '[' || rest[0] == ' '
}

// lineOf returns the line of the value at path, or of the nearest value
// holding it that the file gave (a missing field is reported on its
// object's line); 0 when none is known.
func (f *CampaignFile) lineOf(path string) int {
	if l, ok := f.lines[path]; ok {
		return l
	}
	f.walkObjectOf(path)
	if l, ok := f.lines[path]; ok {
		return l
	}
	for i := len(path) - 1; i > 0; i-- {
		if c := path[i]; c == '.' || c == '[' {
			if l, ok := f.lines[path[:i]]; ok {
				return l
			}
		}
	}
	return 0
}

// walkObjectOf notes the lines of every field of the object that holds
// path, decoding it again (once).
func (f *CampaignFile) walkObjectOf(path string) {
	for i := len(path); i > 0; i-- {
		if i < len(path) && path[i] != '.' && path[i] != '[' {
			continue
		}
		obj, ok := f.objects[path[:i]]
		if !ok {
			continue
		}
		if f.walked[path[:i]] {
			return
		}
		if f.walked == nil {
			f.walked = map[string]bool{}
		}
		f.walked[path[:i]] = true
		kind, _, _ := strings.Cut(path, "[")
		for _, k := range tsubame.CampaignKinds {
			if k.Plural() == kind {
				d := &decoder{lineAt: f.lineAt, lines: f.lines, all: true, depth: 2}
				d.value(obj.off, obj.raw, reflect.New(reflect.TypeOf(tsubame.NewCampaignObject(k)).Elem()).Elem(), path[:i])
			}
		}
		return
	}
}

// CampaignCounts returns the number of objects of each kind of set, under
// the kinds' plural names.
func CampaignCounts(set *tsubame.CampaignSet) map[string]int {
	out := make(map[string]int, len(tsubame.CampaignKinds))
	for _, k := range tsubame.CampaignKinds {
		out[k.Plural()] = len(set.Objects(k))
	}
	return out
}

// DescribeCounts writes counts as "2 advertisers, 3 campaigns, ...", in
// the order of tsubame.CampaignKinds.
func DescribeCounts(counts map[string]int) string {
	parts := make([]string, 0, len(tsubame.CampaignKinds))
	for _, k := range tsubame.CampaignKinds {
		parts = append(parts, fmt.Sprintf("%d %s", counts[k.Plural()], k.Plural()))
	}
	return strings.Join(parts, ", ")
}

// WriteCampaigns writes set to w as a campaign file: each kind sorted by
// id, indented JSON or YAML. The output is a function of the set alone, and
// ReadCampaigns reads it back to the same set.
func WriteCampaigns(w io.Writer, set *tsubame.CampaignSet, format CampaignFormat) error {
	c := set.Clone()
	c.Sort()
	// Empty kinds are written as empty lists, not null.
	nonNil(&c.Advertisers)
	nonNil(&c.Campaigns)
	nonNil(&c.Creatives)
	nonNil(&c.LineItems)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // creatives' HTML stays readable
	enc.SetIndent("", "  ")
	if err := enc.Encode(c); err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	if format == CampaignsCSV {
		if err := writeCSV(bw, c); err != nil {
			return err
		}
		return bw.Flush()
	}
	switch format {
	case CampaignsJSON, CampaignsAuto:
		if _, err := bw.Write(buf.Bytes()); err != nil {
			return err
		}
	case CampaignsYAML:
		doc, err := jsonToYAML(buf.Bytes())
		if err != nil {
			return err
		}
		ye := yaml.NewEncoder(bw)
		ye.SetIndent(2)
		if err := ye.Encode(doc); err != nil {
			return err
		}
		if err := ye.Close(); err != nil {
			return err
		}
	default:
		return fmt.Errorf("unknown campaign file format %q", format)
	}
	return bw.Flush()
}

func nonNil[T any](s *[]T) {
	if *s == nil {
		*s = []T{}
	}
}
