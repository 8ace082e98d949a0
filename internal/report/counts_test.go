package report

import "testing"

// dimOf names every dimension a line carries by its name, and the node,
// which is the roller's, none.
func TestDimOfEveryDimension(t *testing.T) {
	for d := range numDims {
		got, ok := dimOf([]byte(dimNames[d]))
		if d == DimNode {
			if ok {
				t.Errorf("the node is read from the line as %v", got)
			}
			continue
		}
		if !ok || got != d {
			t.Errorf("%s: %v %v", dimNames[d], got, ok)
		}
	}
}
