//go:build !race

package decision_test

const raceEnabled = false
