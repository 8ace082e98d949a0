// Command release packs what make release ships so that two builds of one
// commit give the same bytes: archives whose entries carry the commit's
// time, fixed modes and no owner names, and an SBOM whose serial number and
// timestamp come from the commit instead of the clock and a random source.
// The time is SOURCE_DATE_EPOCH (the Makefile sets it to the commit time).
//
//	go run ./tools/release archive -o OUT.tar.gz -prefix DIR SRC[=DEST] ...
//	go run ./tools/release sbom [-commit HASH] FILE
//	go run ./tools/release source-url URL
//
// archive writes a gzipped tar of the named regular files under DIR/ (each
// at DEST, by default its own relative path), with the directories they
// imply: directories and files executable by their owner get mode 0755,
// others 0644, owner 0:0. sbom sets a CycloneDX JSON file's serialNumber (a
// name-based UUID of the commit and the rest of the file) and its
// metadata.timestamp, in place, and drops the hashes of the generator's
// executable, which depend on the machine that built it (its architecture)
// and not on what the SBOM describes. source-url prints a git remote as the
// https address of the repository, or nothing for a local path, so that an
// image label never names a directory of the build machine or carries a
// credential.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: release archive|sbom|source-url [flags] ...")
		os.Exit(2)
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "archive":
		err = archiveCmd(args)
	case "sbom":
		err = sbomCmd(args)
	case "source-url":
		if len(args) != 1 {
			err = errors.New("usage: release source-url URL")
			break
		}
		if u := sourceURL(args[0]); u != "" {
			fmt.Println(u)
		}
	default:
		err = fmt.Errorf("unknown command %q (archive, sbom, source-url)", cmd)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

// sourceDate is SOURCE_DATE_EPOCH: required, since a default would be
// either the clock (not reproducible) or a made-up date.
func sourceDate() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: want the commit time in seconds (git log -1 --format=%%ct)", s)
	}
	return time.Unix(n, 0).UTC(), nil
}

func archiveCmd(args []string) error {
	fs := flag.NewFlagSet("archive", flag.ContinueOnError)
	out := fs.String("o", "", "the `file` to write (.tar.gz)")
	prefix := fs.String("prefix", "", "the top `directory` of every entry")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || *prefix == "" || fs.NArg() == 0 {
		return errors.New("usage: release archive -o OUT.tar.gz -prefix DIR SRC[=DEST] (one or more)")
	}
	mtime, err := sourceDate()
	if err != nil {
		return err
	}
	files := map[string]string{}
	for _, spec := range fs.Args() {
		src, dest, ok := strings.Cut(spec, "=")
		if !ok {
			dest = filepath.ToSlash(src)
		}
		files[dest] = src
	}
	tmp := *out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	err = writeArchive(f, *prefix, files, mtime)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, *out)
}

// writeArchive writes files (destination → source path) under prefix as a
// gzipped tar whose bytes depend only on the files' contents, their owner's
// execute bit, the names and mtime.
func writeArchive(w io.Writer, prefix string, files map[string]string, mtime time.Time) error {
	entries := map[string]string{} // name in the archive → source; "" for a directory
	addDirs := func(name string) {
		for d := path.Dir(name); d != "."; d = path.Dir(d) {
			entries[d+"/"] = ""
		}
	}
	for dest, src := range files {
		clean := path.Clean(dest)
		if dest == "" || path.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, "../") {
			return fmt.Errorf("%q: the destination must be a relative path inside the archive", dest)
		}
		name := path.Join(prefix, clean)
		entries[name] = src
		addDirs(name)
	}
	names := make([]string, 0, len(entries))
	for name := range entries {
		names = append(names, name)
	}
	slices.Sort(names)

	zw, err := gzip.NewWriterLevel(w, gzip.BestCompression)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(zw)
	for _, name := range names {
		h := &tar.Header{Name: name, ModTime: mtime, Mode: 0o755, Typeflag: tar.TypeDir, Format: tar.FormatPAX}
		src := entries[name]
		var data []byte
		if src != "" {
			info, err := os.Lstat(src)
			if err != nil {
				return err
			}
			if !info.Mode().IsRegular() {
				return fmt.Errorf("%s: not a regular file (%s)", src, info.Mode().Type())
			}
			if data, err = os.ReadFile(src); err != nil {
				return err
			}
			h.Typeflag, h.Size = tar.TypeReg, int64(len(data))
			if info.Mode().Perm()&0o100 == 0 {
				h.Mode = 0o644
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if _, err := tw.Write(data); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}

func sbomCmd(args []string) error {
	fs := flag.NewFlagSet("sbom", flag.ContinueOnError)
	commit := fs.String("commit", "", "the `hash` of the commit the SBOM describes")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("usage: release sbom [-commit HASH] FILE")
	}
	ts, err := sourceDate()
	if err != nil {
		return err
	}
	name := fs.Arg(0)
	data, err := os.ReadFile(name)
	if err != nil {
		return err
	}
	out, err := stampSBOM(data, *commit, ts)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return os.WriteFile(name, out, 0o644)
}

// member is one member of a JSON object, kept in the order of the file.
type member struct {
	key   string
	value json.RawMessage
}

// stampSBOM sets a CycloneDX JSON document's serialNumber and
// metadata.timestamp, keeping every other member and the order of all.
// The serial is a version 5 UUID of the commit and of the document without
// serial and timestamp: the same for the same SBOM, different for another.
func stampSBOM(data []byte, commit string, ts time.Time) ([]byte, error) {
	top, err := members(data)
	if err != nil {
		return nil, err
	}
	var format string
	if i := index(top, "bomFormat"); i < 0 || json.Unmarshal(top[i].value, &format) != nil || format != "CycloneDX" {
		return nil, errors.New("not a CycloneDX JSON document")
	}
	top = remove(top, "serialNumber")
	mi := index(top, "metadata")
	if mi < 0 {
		top = append(top, member{"metadata", json.RawMessage("{}")})
		mi = len(top) - 1
	}
	meta, err := members(top[mi].value)
	if err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	meta = remove(meta, "timestamp")
	if ti := index(meta, "tools"); ti >= 0 {
		if meta[ti].value, err = withoutToolHashes(meta[ti].value); err != nil {
			return nil, fmt.Errorf("metadata.tools: %w", err)
		}
	}
	top[mi].value = object(meta)

	sum := sha256.Sum256(object(top))
	serial := "urn:uuid:" + uuid.NewSHA1(uuid.NameSpaceURL, []byte("tsubame-sbom:"+commit+":"+hex.EncodeToString(sum[:]))).String()
	stamp, _ := json.Marshal(ts.UTC().Format(time.RFC3339))
	top[mi].value = object(slices.Insert(meta, 0, member{"timestamp", stamp}))
	serialJSON, _ := json.Marshal(serial)
	at := index(top, "specVersion") + 1 // where CycloneDX puts it; 0 without a specVersion
	top = slices.Insert(top, at, member{"serialNumber", serialJSON})

	var out bytes.Buffer
	if err := json.Indent(&out, object(top), "", "  "); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// withoutToolHashes drops "hashes" from each tool of metadata.tools, in
// either of its forms: an array of tools (CycloneDX 1.4), or an object
// whose "components" and "services" are arrays of them (1.5 and later).
func withoutToolHashes(tools json.RawMessage) (json.RawMessage, error) {
	dropHashes := func(list json.RawMessage) (json.RawMessage, error) {
		var items []json.RawMessage
		if err := json.Unmarshal(list, &items); err != nil {
			return nil, err
		}
		for i, item := range items {
			ms, err := members(item)
			if err != nil {
				return nil, err
			}
			items[i] = object(remove(ms, "hashes"))
		}
		return json.Marshal(items)
	}
	if t := bytes.TrimSpace(tools); len(t) > 0 && t[0] == '[' {
		return dropHashes(t)
	}
	ms, err := members(tools)
	if err != nil {
		return nil, err
	}
	for i, m := range ms {
		if m.key == "components" || m.key == "services" {
			if ms[i].value, err = dropHashes(m.value); err != nil {
				return nil, err
			}
		}
	}
	return object(ms), nil
}

// members reads a JSON object's members in order.
func members(data []byte) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, errors.New("not a JSON object")
	}
	var ms []member
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		ms = append(ms, member{key, v})
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the JSON object")
	}
	return ms, nil
}

// object writes members as a compact JSON object.
func object(ms []member) []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range ms {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(m.key)
		b.Write(k)
		b.WriteByte(':')
		_ = json.Compact(&b, m.value) // valid: it came from the decoder or json.Marshal
	}
	b.WriteByte('}')
	return b.Bytes()
}

func index(ms []member, key string) int {
	return slices.IndexFunc(ms, func(m member) bool { return m.key == key })
}

func remove(ms []member, key string) []member {
	return slices.DeleteFunc(ms, func(m member) bool { return m.key == key })
}

// sourceURL turns a git remote into the https address of the repository:
// https, ssh and scp-style remotes lose their user, password and .git;
// local paths and file URLs, which name a directory of this machine, give
// "".
func sourceURL(remote string) string {
	remote = strings.TrimSpace(remote)
	var host, p string
	switch {
	case strings.Contains(remote, "://"):
		u, err := url.Parse(remote)
		if err != nil || u.Host == "" {
			return ""
		}
		switch u.Scheme {
		case "https", "http", "ssh", "git", "git+ssh", "ssh+git":
		default:
			return ""
		}
		host, p = u.Hostname(), u.Path
		if u.Scheme == "http" || u.Scheme == "https" {
			host = u.Host // a port of a web address is part of it
		}
	case strings.HasPrefix(remote, "/") || strings.HasPrefix(remote, "."):
		return ""
	default:
		// scp-style [user@]host:path; a colon after a slash is a local path.
		h, rest, ok := strings.Cut(remote, ":")
		if !ok || strings.Contains(h, "/") {
			return ""
		}
		if _, after, ok := strings.Cut(h, "@"); ok {
			h = after
		}
		host, p = h, "/"+strings.TrimPrefix(rest, "/")
	}
	p = strings.TrimSuffix(strings.TrimSuffix(p, "/"), ".git")
	if host == "" || p == "" || p == "/" {
		return ""
	}
	return "https://" + host + p
}
