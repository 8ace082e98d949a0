package ssp

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The journal keeps the notices not done, in order, through compactions;
// a live process's journal is not taken over; a dead one's is, once, with
// a last line cut short left out; a process stopped with nothing pending
// leaves no file.
func TestJournalKeepsWhatIsNotDone(t *testing.T) {
	dir := t.TempDir()
	j, err := openJournal(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	j.compactAt = 200 // a few lines
	var seqs []uint64
	for i := range 40 {
		seqs = append(seqs, j.add("https://dsp.example/win?id="+strings.Repeat("x", i%3)+string(rune('a'+i%26))))
	}
	for i, seq := range seqs {
		if i%4 != 1 {
			j.done(seq)
		}
	}
	if j.add("https://dsp.example/two\nlines") != 0 {
		t.Fatal("a URL of two lines was journaled")
	}
	if st, err := os.Stat(j.path); err != nil || st.Size() > 400 {
		t.Fatalf("the journal was not compacted: %v %v", st.Size(), err)
	}

	// A live process's journal is its own.
	other, err := openJournal(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if urls, remove := other.orphans(); len(urls) != 0 {
		t.Fatalf("a live journal taken over: %v", urls)
	} else {
		remove()
	}

	// The process dies (its lock goes with its descriptor), in the middle
	// of a line.
	if _, err := j.f.WriteString("+999 https://dsp.example/cut-sh"); err != nil {
		t.Fatal(err)
	}
	j.f.Close()
	urls, remove := other.orphans()
	var want []string
	for i := range 40 {
		if i%4 == 1 {
			want = append(want, "https://dsp.example/win?id="+strings.Repeat("x", i%3)+string(rune('a'+i%26)))
		}
	}
	if !slices.Equal(urls, want) {
		t.Fatalf("taken over:\n%q\nwant\n%q", urls, want)
	}
	remove()
	if _, err := os.Stat(j.path); !os.IsNotExist(err) {
		t.Fatalf("the dead journal is still there: %v", err)
	}
	if urls, _ := other.orphans(); len(urls) != 0 {
		t.Fatalf("taken over twice: %v", urls)
	}
	other.close()
	if m, _ := filepath.Glob(filepath.Join(dir, "*")); len(m) != 0 {
		t.Fatalf("files left: %v", m)
	}
}
