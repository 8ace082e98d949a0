package geo

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oschwald/maxminddb-golang/v2"

	"tsubame"
)

// Location is where an address is: Country is an ISO 3166-1 alpha-2 code
// ("JP"), Region an ISO 3166-2 code ("JP-13"). Either is empty when the
// database does not know it; Region is set only with Country.
type Location struct {
	Country, Region string
}

// Metadata describes an open database, for a startup log line.
type Metadata struct {
	Type      string    // database_type, e.g. "GeoLite2-Country"
	Built     time.Time // build_epoch, UTC
	Nodes     uint      // node_count of the search tree
	IPVersion uint      // 4: IPv4 only; 6: IPv4 and IPv6
}

// String reads as: GeoLite2-City built 2026-01-02T03:04:05Z, 3900000 nodes, IPv6.
func (m Metadata) String() string {
	return fmt.Sprintf("%s built %s, %d nodes, IPv%d", m.Type, m.Built.Format(time.RFC3339), m.Nodes, m.IPVersion)
}

// maxCached bounds the record cache: a City database has some hundred
// thousand distinct records; past the bound, lookups of records not yet
// cached decode them each time.
const maxCached = 1 << 18

// probeRecords is how many records Open decodes, at most, looking for one
// with a country before it calls the database one without country data.
const probeRecords = 1000

// DB answers Lookups from one MaxMind-format database. It is safe for
// concurrent use, Close included.
type DB struct {
	r      *maxminddb.Reader
	meta   Metadata
	closed atomic.Bool

	// records caches the Location of each data record, keyed by its offset
	// (uintptr): networks share records, so a lookup that finds one already
	// decoded costs the tree walk and one map read, and allocates nothing.
	records sync.Map
	cached  atomic.Int64
	// strs interns country and region codes (string -> string), so every
	// Location of one country shares its strings.
	strs sync.Map
}

// Open reads the database at path into memory. It is read rather than
// mapped so that a file copied over in place (rather than renamed into
// place) cannot crash the server, and so that Close is safe while lookups
// run. It fails with tsubame.EINVALID when the file is missing, is not a
// MaxMind DB, or has no country data in the GeoIP2 Country/City layout
// (country.iso_code, subdivisions[].iso_code).
func Open(path string) (*DB, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, tsubame.WrapError(tsubame.EINVALID, err, "geo database %q does not exist", path)
	}
	if err == nil && !fi.Mode().IsRegular() {
		return nil, tsubame.Errorf(tsubame.EINVALID, "geo database %q is not a regular file", path)
	}
	var buf []byte
	if err == nil {
		buf, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, tsubame.WrapError(tsubame.EINVALID, err, "cannot read geo database %q", path)
	}
	r, err := maxminddb.OpenBytes(buf)
	if err != nil {
		return nil, tsubame.WrapError(tsubame.EINVALID, err, "geo database %q is not a MaxMind DB file", path)
	}
	db := &DB{r: r, meta: Metadata{
		Type:      r.Metadata.DatabaseType,
		Built:     r.Metadata.BuildTime().UTC(),
		Nodes:     r.Metadata.NodeCount,
		IPVersion: r.Metadata.IPVersion,
	}}
	if err := db.probe(); err != nil {
		return nil, tsubame.WrapError(tsubame.EINVALID, err, "geo database %q (%s) has no country data", path, db.meta.Type)
	}
	return db, nil
}

// probe decodes the first records until one has a country: an ASN or ISP
// database decodes without error but has none, a database of another
// layout ("country" a string) fails to decode.
func (db *DB) probe() error {
	n := 0
	for res := range db.r.Networks() {
		if err := res.Err(); err != nil {
			return err
		}
		loc, err := db.decode(res)
		if err != nil {
			return fmt.Errorf("record of %s: %w", res.Prefix(), err)
		}
		if loc.Country != "" {
			return nil
		}
		if n++; n == probeRecords {
			break
		}
	}
	if n == 0 {
		return errors.New("it has no networks")
	}
	return fmt.Errorf("none of its first %d records has country.iso_code", n)
}

// Metadata returns the database's metadata.
func (db *DB) Metadata() Metadata { return db.meta }

// Lookup returns the location of addr, the zero Location when the database
// does not know it. An IPv4-mapped IPv6 address is looked up as IPv4;
// loopback, private, link-local, multicast and unspecified addresses are
// never looked up (no database places them). The strings returned are
// shared between calls.
func (db *DB) Lookup(addr netip.Addr) Location {
	addr = addr.Unmap()
	if !addr.IsValid() || addr.IsLoopback() || addr.IsPrivate() || addr.IsUnspecified() ||
		addr.IsLinkLocalUnicast() || addr.IsMulticast() || db.closed.Load() {
		return Location{}
	}
	res := db.r.Lookup(addr)
	if !res.Found() {
		return Location{}
	}
	off := res.Offset()
	if v, ok := db.records.Load(off); ok {
		return v.(Location)
	}
	// A record that does not decode places nobody: Open checked the layout,
	// so this is a stray record, cached like any other.
	loc, _ := db.decode(res)
	if db.cached.Load() < maxCached {
		if _, loaded := db.records.LoadOrStore(off, loc); !loaded {
			db.cached.Add(1)
		}
	}
	return loc
}

// record is the part of a GeoIP2 Country or City record that is read; the
// other fields are skipped without being decoded.
type record struct {
	Country struct {
		ISOCode string `maxminddb:"iso_code"`
	} `maxminddb:"country"`
	Subdivisions []struct {
		ISOCode string `maxminddb:"iso_code"`
	} `maxminddb:"subdivisions"`
}

func (db *DB) decode(res maxminddb.Result) (Location, error) {
	var rec record
	if err := res.Decode(&rec); err != nil {
		return Location{}, err
	}
	if rec.Country.ISOCode == "" {
		return Location{}, nil
	}
	// MaxMind's codes are upper case already; other vendors' may not be,
	// and targeting compares codes as they are.
	loc := Location{Country: db.intern(strings.ToUpper(rec.Country.ISOCode))}
	if len(rec.Subdivisions) > 0 && rec.Subdivisions[0].ISOCode != "" {
		loc.Region = db.intern(loc.Country + "-" + strings.ToUpper(rec.Subdivisions[0].ISOCode))
	}
	return loc, nil
}

func (db *DB) intern(s string) string {
	v, _ := db.strs.LoadOrStore(s, s)
	return v.(string)
}

// Close marks the database closed: later lookups return the zero Location.
// Lookups running meanwhile finish normally; the memory is released with
// the DB once nothing refers to it.
func (db *DB) Close() error {
	db.closed.Store(true)
	return nil
}
