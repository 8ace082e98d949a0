// Package report builds the delivery and billing reports from the access
// log's files: the lines that are the invoice, read as the Kafka shipper
// reads them (accesslog.FileKey, OpenLines, WholeLines), so a report counts
// exactly what the log holds.
//
// A Roller adds each file's new event lines to rollups: counters (Counts)
// per minute and per combination of the dimensions (Dims: advertiser,
// campaign, line item, creative, placement, site, exchange, deal, country,
// device, and the currency an amount is in). It keeps them in a bbolt file
// of its own (reports.db in the data directory), and writes each file's
// read position in the same transaction as the counts that reading added:
// a crash or a kill -9 between two transactions loses nothing and counts
// nothing twice, since the next start reads on from the position the counts
// belong to. Minutes older than a window are folded into quarter-hours,
// which every time zone's hours and days are made of (some zones are 30 or
// 45 minutes off UTC).
//
// Queries (Query) group the rollups by any dimensions and by minute, hour
// or day in a time zone; Verify recounts the files and compares.
//
// It owns its database file; it must not import the listeners, config, the
// stores or cmd (arch_test.go).
package report
