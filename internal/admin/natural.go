package admin

import (
	"cmp"
	"context"
	"slices"
	"strings"

	"tsubame"
)

// NaturalCompare orders ids as people number them: runs of digits compare
// by their value (2 before 10, p9 before p10), other runs byte by byte;
// ids equal that way (p01, p1) fall back to byte order, so the order is
// total.
func NaturalCompare(a, b string) int {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		if isDigit(a[i]) && isDigit(b[j]) {
			ei, ej := digitsEnd(a, i), digitsEnd(b, j)
			// Without leading zeros, the longer run is the larger number.
			x, y := strings.TrimLeft(a[i:ei], "0"), strings.TrimLeft(b[j:ej], "0")
			if len(x) != len(y) {
				return cmp.Compare(len(x), len(y))
			}
			if c := strings.Compare(x, y); c != 0 {
				return c
			}
			i, j = ei, ej
			continue
		}
		if a[i] != b[j] {
			return cmp.Compare(int(a[i]), int(b[j]))
		}
		i++
		j++
	}
	if c := cmp.Compare(len(a)-i, len(b)-j); c != 0 {
		return c
	}
	return strings.Compare(a, b)
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func digitsEnd(s string, i int) int {
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	return i
}

// afterIndex is the index in ids (in natural order) of the first id after
// the given one.
func afterIndex(ids []string, after string) int {
	i, found := slices.BinarySearchFunc(ids, after, NaturalCompare)
	if found {
		i++
	}
	return i
}

// maxSearch bounds the text of a placement search.
const maxSearch = 128

// searchPlacements reads every placement and returns those whose id or
// name holds text, ignoring case.
func (s *Server) searchPlacements(ctx context.Context, text string) ([]*tsubame.Placement, error) {
	text = strings.ToLower(text)
	var out []*tsubame.Placement
	after := ""
	for {
		page, err := s.opt.Placements.List(ctx, after, maxPageSize)
		if err != nil {
			return nil, err
		}
		for _, p := range page {
			if strings.Contains(strings.ToLower(p.ID), text) || strings.Contains(strings.ToLower(p.Name), text) {
				out = append(out, p)
			}
		}
		if len(page) < maxPageSize {
			return out, nil
		}
		after = page[len(page)-1].ID
	}
}
