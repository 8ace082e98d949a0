//go:build race

package device_test

const raceEnabled = true
