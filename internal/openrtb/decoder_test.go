package openrtb

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// referenceDecode is what Decode did with a general decoder before the
// Decoder (encoding/json into the same types, their UnmarshalJSON methods,
// then the 2.5 extensions read as below): the Decoder must read every body
// as it does.
func referenceDecode(body []byte) (*BidRequest, error) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 || body[0] != '{' {
		return nil, errNotObject
	}
	r := &BidRequest{}
	if err := json.Unmarshal(body, r); err != nil {
		return nil, err
	}
	if err := r.check(); err != nil {
		return nil, err
	}
	referenceFromExt(r)
	return r, nil
}

func referenceFromExt(r *BidRequest) {
	if g := r.Regs; g != nil && len(g.Ext) > 0 {
		var ext struct {
			GDPR      Flag     `json:"gdpr"`
			USPrivacy Text     `json:"us_privacy"`
			GPP       Text     `json:"gpp"`
			GPPSID    Sections `json:"gpp_sid"`
		}
		if json.Unmarshal(g.Ext, &ext) != nil {
			ext.GDPR, ext.GPPSID = FlagUnreadable, Sections{Flag: FlagUnreadable}
			ext.USPrivacy, ext.GPP = Text{Unreadable: true}, Text{Unreadable: true}
		}
		g.GDPR = max(g.GDPR, ext.GDPR)
		g.USPrivacy = g.USPrivacy.merge(ext.USPrivacy)
		g.GPP = g.GPP.merge(ext.GPP)
		g.GPPSID = g.GPPSID.merge(ext.GPPSID)
	}
	if u := r.User; u != nil && len(u.Ext) > 0 {
		var ext struct {
			Consent Text `json:"consent"`
		}
		if json.Unmarshal(u.Ext, &ext) != nil {
			ext.Consent = Text{Unreadable: true}
		}
		u.Consent = u.Consent.merge(ext.Consent)
	}
	if s := r.Source; s != nil && len(s.Ext) > 0 && s.SChain == nil {
		var ext struct {
			SChain *SupplyChain `json:"schain"`
		}
		if json.Unmarshal(s.Ext, &ext) == nil {
			s.SChain = ext.SChain
		}
	}
}

// outsideContract reports whether body is one the Decoder reads
// differently from encoding/json by design: an object with a member
// repeated (the Decoder takes the last whole; encoding/json merges the
// two), or a name outside ASCII (encoding/json folds some, such as
// "ſite", onto ASCII names).
func outsideContract(body []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	type frame struct {
		object bool
		keys   map[string]bool
		key    bool // the next token is a name
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return false
		}
		if err != nil {
			return false // not JSON: both refuse it
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if k, ok := tok.(string); ok && top != nil && top.object && top.key {
			for i := range len(k) {
				if k[i] >= utf8.RuneSelf {
					return true
				}
			}
			k = strings.ToLower(k)
			if top.keys[k] {
				return true
			}
			top.keys[k] = true
			top.key = false
			continue
		}
		if top != nil && top.object {
			top.key = true
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, keys: map[string]bool{}, key: true})
		case json.Delim('['):
			stack = append(stack, &frame{})
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			if len(stack) > 0 && stack[len(stack)-1].object {
				stack[len(stack)-1].key = true
			}
		}
	}
}

// equalRequests compares as reflect.DeepEqual does, an empty list equal to
// none.
func equalRequests(a, b reflect.Value) bool {
	if a.Kind() != b.Kind() {
		return false
	}
	switch a.Kind() {
	case reflect.Pointer:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		return equalRequests(a.Elem(), b.Elem())
	case reflect.Struct:
		for i := range a.NumField() {
			if !equalRequests(a.Field(i), b.Field(i)) {
				return false
			}
		}
		return true
	case reflect.Slice:
		if a.Len() != b.Len() {
			return false
		}
		for i := range a.Len() {
			if !equalRequests(a.Index(i), b.Index(i)) {
				return false
			}
		}
		return true
	case reflect.String:
		return a.String() == b.String()
	case reflect.Bool:
		return a.Bool() == b.Bool()
	case reflect.Int, reflect.Int64:
		return a.Int() == b.Int()
	case reflect.Uint8:
		return a.Uint() == b.Uint()
	}
	panic("equalRequests: a field of kind " + a.Kind().String())
}

// agree fails t unless d reads body as referenceDecode does.
func agree(t *testing.T, d *Decoder, body []byte) {
	t.Helper()
	want, werr := referenceDecode(body)
	got, gerr := d.Decode(body)
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("%q:\nencoding/json: %v\nDecoder:       %v", body, werr, gerr)
	}
	if werr != nil {
		if got != nil {
			t.Fatalf("%q: a request returned with the error %v", body, gerr)
		}
		return
	}
	if !equalRequests(reflect.ValueOf(want), reflect.ValueOf(got)) {
		w, _ := json.Marshal(want)
		g, _ := json.Marshal(got)
		t.Fatalf("%q:\nencoding/json: %s %+v\nDecoder:       %s %+v", body, w, want, g, got)
	}
}

var decoderCases = []string{
	`{"id":"1","imp":[{"id":"1"}]}`,
	` {"id":"1","imp":[{"id":"1"}]} ` + "\n",
	`{"ID":"1","Imp":[{"Id":"1","TAGID":"x"}]}`,
	`{"id":"a\"b\\c\/d\u00e9\ud83d\ude00\ud800x\udc00","imp":[{"id":"1"}]}`,
	"{\"id\":\"\xff\xfe ok\",\"imp\":[{\"id\":\"1\"}],\"site\":{\"ref\":\"\xff\",\"name\":\"\\u00e9\xff\"}}",
	`{"id":"1","imp":[{"id":"1","bidfloor":"1.5","bidfloorcur":"JPY","secure":"1","exp":"30","instl":1.0}]}`,
	`{"id":"1","imp":[{"id":"1","bidfloor":-1}]}`,
	`{"id":"1","imp":[{"id":"1","bidfloor":"x"}]}`,
	`{"id":"1","imp":[{"id":"1","bidfloor":null,"tagid":null}]}`,
	`{"id":null,"imp":[{"id":"1"}]}`,
	`{"id":1,"imp":[{"id":"1"}]}`,
	`{"id":"1","imp":{"id":"1"}}`,
	`{"id":"1","imp":[null,{"id":"1"}]}`,
	`{"id":"1","imp":[{"id":"1"},{"id":"1"}]}`,
	`{"id":"1","imp":[]}`,
	`{"id":"1","imp":null}`,
	`{"id":"1","imp":[{"id":"1","banner":{"w":300,"h":"250","format":[{"w":1,"h":2},null,{"w":"3"}]}}]}`,
	`{"id":"1","imp":[{"id":"1","banner":null,"video":{"mimes":["video/mp4",null],"protocols":[2,"3",null,"x"],"plcmt":1,"linearity":2,"minduration":5,"maxduration":30,"w":640,"h":480}}]}`,
	`{"id":"1","imp":[{"id":"1","video":{"mimes":["video/mp4",1]}}]}`,
	`{"id":"1","imp":[{"id":"1","pmp":{"private_auction":1,"deals":[{"id":"d","bidfloor":2,"bidfloorcur":"USD","wseat":["a"]},null]}}]}`,
	`{"id":"1","imp":[{"id":"1"}],"site":{"id":5,"name":null,"domain":"a.example","page":"https:\/\/a.example\/","ref":{},"publisher":{"id":"p","name":[1],"domain":"d"}}}`,
	`{"id":"1","imp":[{"id":"1"}],"site":5}`,
	`{"id":"1","imp":[{"id":"1"}],"site":{"domain":5}}`,
	`{"id":"1","imp":[{"id":"1"}],"app":{"id":"a","bundle":"com.x","storeurl":"u","domain":1,"publisher":null}}`,
	`{"id":"1","imp":[{"id":"1"}],"device":{"ua":"UA","geo":{"country":"JPN","region":"13"},"dnt":"true","lmt":2,"ip":"192.0.2.1","ipv6":"::1","devicetype":"4","os":"iOS","language":"ja","ifa":"x"}}`,
	`{"id":"1","imp":[{"id":"1"}],"device":{"geo":null}}`,
	`{"id":"1","imp":[{"id":"1"}],"user":{"id":"u","buyeruid":"b","consent":"C","ext":{"consent":"C"}}}`,
	`{"id":"1","imp":[{"id":"1"}],"user":{"consent":"A","ext":{"consent":"B"}}}`,
	`{"id":"1","imp":[{"id":"1"}],"user":{"consent":1,"ext":"x"}}`,
	`{"id":"1","imp":[{"id":"1"}],"user":{"ext":null}}`,
	`{"id":"1","imp":[{"id":"1"}],"regs":{"coppa":true,"gdpr":"1","us_privacy":"1YNN","gpp":"DBA","gpp_sid":[-1,"7"],"ext":{"us_privacy":1,"gdpr":0,"gpp_sid":[2]}}}`,
	`{"id":"1","imp":[{"id":"1"}],"regs":{"ext":[1]}}`,
	`{"id":"1","imp":[{"id":"1"}],"regs":{"ext":{"GDPR":1,"US_Privacy":"1Y\u002dN"}}}`,
	`{"id":"1","imp":[{"id":"1"}],"regs":{"gpp_sid":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33]}}`,
	`{"id":"1","imp":[{"id":"1"}],"source":{"fd":1,"tid":"t","schain":{"complete":1,"ver":"1.0","nodes":[{"asi":"a.example","sid":"1","hp":1,"rid":"r","name":"n","domain":"d"},null]}}}`,
	`{"id":"1","imp":[{"id":"1"}],"source":{"fd":null,"tid":7,"ext":{"schain":{"complete":1,"nodes":[{"asi":"a","sid":"1"}]}}}}`,
	`{"id":"1","imp":[{"id":"1"}],"source":{"ext":{"schain":{"nodes":[{"asi":1}]}}}}`,
	`{"id":"1","imp":[{"id":"1"}],"source":{"ext":{"schain":null}}}`,
	`{"id":"1","imp":[{"id":"1"}],"source":{"schain":{"nodes":[{"asi":1}]}}}`,
	`{"id":"1","imp":[{"id":"1"}],"source":{"schain":{"ver":"1"},"ext":{"schain":{"ver":"2"}}}}`,
	`{"id":"1","imp":[{"id":"1"}],"test":1,"at":"2","tmax":120.0,"wseat":["a"],"bseat":[],"cur":["USD","JPY"],"bcat":["IAB1"],"badv":["x.example"],"bapp":["com.y"]}`,
	`{"id":"1","imp":[{"id":"1"}],"cur":"USD"}`,
	`{"id":"1","imp":[{"id":"1"}],"unknown":{"deep":[1,{"a":[true,false,null,-0.5e+3]}]},"ext":{"x":"\u0000"}}`,
	`{"id":"1","imp":[{"id":"1"}],}`,
	`{"id":"1","imp":[{"id":"1"}]}x`,
	`{"id":"1","imp":[{"id":"1"}]}{}`,
	`{"id":"1","imp":[{"id":"1",}]}`,
	`{"id":"1" "imp":[{"id":"1"}]}`,
	`{"id":"1","imp":[{"id":"1"}],"x":01}`,
	`{"id":"1","imp":[{"id":"1"}],"x":1.}`,
	`{"id":"1","imp":[{"id":"1"}],"x":-}`,
	`{"id":"1","imp":[{"id":"1"}],"x":"\x"}`,
	"{\"id\":\"1\",\"imp\":[{\"id\":\"1\"}],\"x\":\"\t\"}",
	`{"id":"1","imp":[{"id":"1"}],"x":tru}`,
	`{"id":"1","imp":[{"id":"1"}],"x":[1 2]}`,
	`{"id":"1","imp":[{"id":"1"}],"x":{"a" 1}}`,
	`{"id":"1","imp":[{"id":"1"}],"x":{1:1}}`,
	`{"id":"1","imp":[{"id":"1"}]`,
	`{"id":"1","imp":[{"id":"1"}],"\u0069d":"2"}`,
	`{"id":"1","imp":[{"id":"1"}],"averyveryveryveryverylongnamewithmorethan32bytes":1}`,
	`{"id":"1","imp":[{"id":"1"}],"x":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`,
	`{"id":"1","imp":[{"id":"1"}],"x":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`,
	`[]`,
	``,
	`{}`,
	`{"id":"` + strings.Repeat("x", 129) + `","imp":[{"id":"1"}]}`,
}

func TestDecoderAgreesWithEncodingJSON(t *testing.T) {
	var d Decoder // one for every case: each reuses the last's memory
	for _, c := range decoderCases {
		agree(t, &d, []byte(c))
	}
	files, _ := filepath.Glob("testdata/*.json")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		agree(t, &d, b)
		agree(t, new(Decoder), b)
	}
}

// TestDecoderStringsOutliveTheBody: the strings of a request decoded are
// views of the Decoder's own copy of the body: the caller may reuse its
// body's buffer at once (a server's request buffer), and they stay what
// they were until the Decoder's next Decode.
func TestDecoderStringsOutliveTheBody(t *testing.T) {
	var d Decoder
	body := []byte(`{"id":"first","imp":[{"id":"imp-1","tagid":"a\/b"}],"site":{"domain":"one.example"}}`)
	r, err := d.Decode(body)
	if err != nil {
		t.Fatal(err)
	}
	for i := range body {
		body[i] = 'z'
	}
	if r.ID != "first" || r.Imp[0].TagID != "a/b" || r.Site.Domain != "one.example" {
		t.Fatalf("the request's strings changed with the caller's buffer: %q %q %q", r.ID, r.Imp[0].TagID, r.Site.Domain)
	}
	r, err = d.Decode([]byte(`{"id":"second","imp":[{"id":"imp-2","tagid":"c\/d"}],"site":{"domain":"two.example"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if r.ID != "second" || r.Imp[0].TagID != "c/d" || r.Site.Domain != "two.example" {
		t.Fatalf("the second request reads %q %q %q", r.ID, r.Imp[0].TagID, r.Site.Domain)
	}
}

// A large request's buffers are not kept for the next: the Decoder's
// memory goes back to its usual size.
func TestDecoderDropsLargeBuffers(t *testing.T) {
	var d Decoder
	large := []byte(`{"id":"big","imp":[{"id":"1","tagid":"` + strings.Repeat(`\u0041`, maxKeptBytes) + `"}]}`)
	if _, err := d.Decode(large); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Decode([]byte(`{"id":"small","imp":[{"id":"1","tagid":"a\/b"}]}`)); err != nil {
		t.Fatal(err)
	}
	if cap(d.body) > maxKeptBytes || cap(d.esc) > maxKeptBytes {
		t.Fatalf("after a small request the Decoder keeps %d and %d bytes, want at most %d each", cap(d.body), cap(d.esc), maxKeptBytes)
	}
	// Cleared (pooled idle), it keeps neither a large request's buffers
	// nor a small one's text.
	if _, err := d.Decode(large); err != nil {
		t.Fatal(err)
	}
	d.Clear()
	if d.body != nil || d.esc != nil {
		t.Fatalf("cleared after a large request, the Decoder keeps %d and %d bytes", cap(d.body), cap(d.esc))
	}
	small := []byte(`{"id":"visitor-secret","imp":[{"id":"1","tagid":"a\/b"}]}`)
	if _, err := d.Decode(small); err != nil {
		t.Fatal(err)
	}
	d.Clear()
	if kept := d.body[:cap(d.body)]; bytes.Contains(kept, []byte("visitor-secret")) || bytes.Contains(d.esc[:cap(d.esc)], []byte("a/b")) {
		t.Fatalf("cleared, the Decoder still holds the request's text: %q", kept)
	}
}

// TestDecoderAllocations: in steady state a request costs no allocation,
// escaped strings or not. CI gates on this.
func TestDecoderAllocations(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.json")
	for _, f := range files {
		body, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		const want = 0.0
		var d Decoder
		if _, err := d.Decode(body); err != nil {
			t.Fatal(err)
		}
		if got := testing.AllocsPerRun(100, func() {
			if _, err := d.Decode(body); err != nil {
				t.Fatal(err)
			}
		}); got > want {
			t.Errorf("%s: %v allocations a request, want at most %v", filepath.Base(f), got, want)
		}
	}
}

// FuzzDecoderAgreesWithEncodingJSON: whatever the body, one Decoder reused
// reads it as encoding/json does, outside the contract's two exceptions.
func FuzzDecoderAgreesWithEncodingJSON(f *testing.F) {
	for _, c := range decoderCases {
		f.Add([]byte(c))
	}
	files, _ := filepath.Glob("testdata/*.json")
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	var d Decoder
	f.Fuzz(func(t *testing.T, body []byte) {
		if outsideContract(body) {
			return
		}
		agree(t, &d, body)
	})
}
