package openrtb

import (
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"tsubame"
)

// The SupplyChain object outside OpenRTB: the string an ad tag or a VAST
// URL carries in its schain parameter (supplychainobject.md, "SupplyChain
// for Non-OpenRTB Requests"):
//
//	ver,complete!asi,sid,hp,rid,name,domain,ext!asi,sid,hp,...
//
// "1.0,1!exchange1.com,1234,1,bid-request-1,publisher,publisher.com" is a
// complete chain of one node. Each value is URL-encoded (RFC 3986): a
// comma or a bang inside one is %2C or %21. Optional values may be empty,
// and trailing commas left out.

// Bounds and version of a serialized SupplyChain.
const (
	SupplyChainVersion  = "1.0" // the only version there is
	MaxSupplyChainNodes = 16    // nodes in one chain
	MaxSupplyChainValue = 256   // bytes of one value, decoded (ext as written)
)

// ParseSupplyChain reads a SupplyChain from its serialized form. s is the
// string as the specification writes it, its values still URL-encoded:
// the schain parameter's value once its own encoding as a query parameter
// is undone (when the tag encoded the whole string, %2C in a value arrives
// as %252C); a caller that reads the parameter with url.Values.Get from a
// tag that pasted the string unencoded, as the specification's examples
// do, has already decoded the values, and a comma inside one then splits
// it.
//
// Values are percent-decoded as a URL path's are (url.PathUnescape): '+'
// is a plus, not a space, as RFC 3986 has it. The version must be
// SupplyChainVersion; complete 0 or 1; every node needs an asi and a sid,
// and an hp of 0 or 1, which supplychainobject.md requires be sent ("it
// is explicitly required to be included"): a node without it is refused,
// not read as 1. A node's ext, whose serialization the specification
// leaves to each exchange, is read past (bounded, not kept); a chain
// without a node is refused, as is one of more than MaxSupplyChainNodes
// nodes or with a value over MaxSupplyChainValue bytes or not UTF-8
// once decoded (an OpenRTB request could not carry it). Errors are
// EINVALID, saying what is wrong and in which node; a caller that cannot
// use the chain passes the inventory on with one of its own, incomplete
// (complete 0), as the specification says for inventory that came
// without one.
func ParseSupplyChain(s string) (*SupplyChain, error) {
	head, nodes, found := strings.Cut(s, "!")
	ver, complete, ok := strings.Cut(head, ",")
	switch {
	case !ok || strings.Contains(complete, ","):
		return nil, errSChainHead
	case ver != SupplyChainVersion:
		return nil, errSChainVersion
	case complete != "0" && complete != "1":
		return nil, errSChainComplete
	case !found:
		return nil, errSChainNoNode
	}
	c := &SupplyChain{Ver: SupplyChainVersion, Complete: Int(complete[0] - '0')}
	for i := 1; ; i++ {
		if i > MaxSupplyChainNodes {
			return nil, errSChainTooMany
		}
		node, rest, more := strings.Cut(nodes, "!")
		n, err := parseNode(node, i)
		if err != nil {
			return nil, err
		}
		c.Nodes = append(c.Nodes, n)
		if !more {
			return c, nil
		}
		nodes = rest
	}
}

var (
	errSChainHead     = tsubame.Errorf(tsubame.EINVALID, "schain: does not begin with ver,complete")
	errSChainVersion  = tsubame.Errorf(tsubame.EINVALID, "schain: the version is not %s", SupplyChainVersion)
	errSChainComplete = tsubame.Errorf(tsubame.EINVALID, "schain: complete is not 0 or 1")
	errSChainNoNode   = tsubame.Errorf(tsubame.EINVALID, "schain: no node")
	errSChainTooMany  = tsubame.Errorf(tsubame.EINVALID, "schain: more than %d nodes", MaxSupplyChainNodes)
)

// nodeFields are the values of a serialized node, in their order; ext, the
// seventh, is the rest of the node.
var nodeFields = [6]string{"asi", "sid", "hp", "rid", "name", "domain"}

// parseNode reads the i-th node (from 1) of a serialized chain.
func parseNode(s string, i int) (SupplyChainNode, error) {
	var v [len(nodeFields)]string
	rest, more := s, true
	for k, name := range nodeFields {
		var raw string
		if more {
			raw, rest, more = strings.Cut(rest, ",")
		}
		if len(raw) > 3*MaxSupplyChainValue { // longer than any encoding of a value in bounds
			return SupplyChainNode{}, nodeError(i, "%s is longer than %d bytes", name, MaxSupplyChainValue)
		}
		d, err := url.PathUnescape(raw)
		switch {
		case err != nil:
			return SupplyChainNode{}, nodeError(i, "%s is not URL-encoded", name)
		case len(d) > MaxSupplyChainValue:
			return SupplyChainNode{}, nodeError(i, "%s is longer than %d bytes", name, MaxSupplyChainValue)
		case !utf8.ValidString(d):
			return SupplyChainNode{}, nodeError(i, "%s is not UTF-8", name) // JSON could not carry it as it is
		}
		v[k] = d
	}
	if more && len(rest) > MaxSupplyChainValue {
		return SupplyChainNode{}, nodeError(i, "ext is longer than %d bytes", MaxSupplyChainValue)
	}
	n := SupplyChainNode{ASI: v[0], SID: v[1], RID: String(v[3]), Name: String(v[4]), Domain: String(v[5])}
	switch {
	case n.ASI == "":
		return n, nodeError(i, "no asi")
	case n.SID == "":
		return n, nodeError(i, "no sid")
	case v[2] == "0":
		n.HP = new(Int)
	case v[2] == "1":
		one := Int(1)
		n.HP = &one
	default:
		return n, nodeError(i, "hp is not 0 or 1")
	}
	return n, nil
}

func nodeError(i int, format string, args ...any) error {
	return tsubame.Errorf(tsubame.EINVALID, "schain: node %d: "+format, append([]any{i}, args...)...)
}

// AppendSupplyChain appends c in its serialized form, which
// ParseSupplyChain reads: the version (SupplyChainVersion when c has
// none), complete, and each node's six values, empty ones included
// ("exchange1.com,1234,1,,,"), each URL-encoded but for the characters
// RFC 3986 leaves unreserved (letters, digits, '-', '.', '_', '~'); an
// absent hp is written empty. A node's ext is not written. The result may
// be put in a URL as it is.
func AppendSupplyChain(dst []byte, c *SupplyChain) []byte {
	ver := string(c.Ver)
	if ver == "" {
		ver = SupplyChainVersion
	}
	dst = appendEscaped(dst, ver)
	dst = strconv.AppendInt(append(dst, ','), int64(c.Complete), 10)
	for i := range c.Nodes {
		n := &c.Nodes[i]
		dst = appendEscaped(append(dst, '!'), n.ASI)
		dst = appendEscaped(append(dst, ','), n.SID)
		dst = append(dst, ',')
		if n.HP != nil {
			dst = strconv.AppendInt(dst, int64(*n.HP), 10)
		}
		dst = appendEscaped(append(dst, ','), string(n.RID))
		dst = appendEscaped(append(dst, ','), string(n.Name))
		dst = appendEscaped(append(dst, ','), string(n.Domain))
	}
	return dst
}

// appendEscaped appends s with every byte but RFC 3986's unreserved
// characters percent-encoded.
func appendEscaped(dst []byte, s string) []byte {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' {
			dst = append(dst, c)
		} else {
			dst = append(dst, '%', hex[c>>4], hex[c&0xf])
		}
	}
	return dst
}
