package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// What a server learned of its traffic is written to data_dir at a stop
// and read at the next start; a file that cannot be read is reported and
// leaves pacing by the clock, and the server starts.
func TestTrafficFileAcrossRestarts(t *testing.T) {
	env := testEnv(t)
	var dir string
	for _, e := range env {
		if d, ok := strings.CutPrefix(e, "TSUBAME_DATA_DIR="); ok {
			dir = d
		}
	}
	path := filepath.Join(dir, TrafficFile)
	// A learned day: quarters 0 to 95, the second half three times the
	// first, seen on one day.
	var shape, seen []string
	for q := range 96 {
		v := "100"
		if q >= 48 {
			v = "300"
		}
		shape, seen = append(shape, v), append(seen, "1")
	}
	learned := `{"version":1,"all":{"shape":[` + strings.Join(shape, ",") + `],"seen":[` + strings.Join(seen, ",") + `],"last":1}` +
		`,"keys":{"li/li-x/imp":{"shape":[` + strings.Join(shape, ",") + `],"seen":[` + strings.Join(seen, ",") + `],"last":1}}}`
	if err := os.WriteFile(path, []byte(learned), 0o600); err != nil {
		t.Fatal(err)
	}
	m := openMain(t, env, false)
	var got bytes.Buffer
	if err := m.ads.ledger.WriteTraffic(&got); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got.String(), `"li/li-x/imp":{"shape":[100,`) || !strings.Contains(got.String(), `"all":{"shape":[100,`) {
		t.Fatalf("the ledger did not read the file: %s", got.String())
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("no traffic file written at the stop: %v", err)
	}
	if !strings.Contains(string(b), `"li/li-x/imp":{"shape":[100,`) {
		t.Fatalf("the file written at the stop: %s", b)
	}
	// A file that is not one: the server starts, by the clock.
	if err := os.WriteFile(path, []byte(`{"version":1,"all":{"shape":[-5]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	m = openMain(t, env, false)
	got.Reset()
	if err := m.ads.ledger.WriteTraffic(&got); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(got.String(), "li/li-x/imp") || strings.Contains(got.String(), "-5") {
		t.Fatalf("a refused file was read: %s", got.String())
	}
}
