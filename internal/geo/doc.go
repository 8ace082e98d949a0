// Package geo places a client address in a country and region, offline,
// from a MaxMind-format database the operator provides (GeoLite2 or GeoIP2
// Country or City, or any database with their country.iso_code and
// subdivisions[].iso_code layout). Nothing is downloaded: Open reads the
// file, checks that it holds country data, and DB.Lookup answers from
// memory.
//
// A lookup walks the database's search tree to the record of the address's
// network, then reads the record's Location from a cache keyed by the
// record's offset: networks share records (a Country database has a few
// hundred of them for millions of networks), so each record is decoded
// once, into a struct of just the two fields read, and the country and
// region strings are interned. A lookup that finds its record cached
// allocates nothing (BenchmarkLookup).
//
// The geotest package writes real databases of this layout for tests.
//
// It imports the domain (for error kinds) only: never the listeners
// (server, admin), config, the store backends or cmd (arch_test.go).
package geo
