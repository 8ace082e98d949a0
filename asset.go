package tsubame

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
)

// Asset is a creative's file (an image or a video) kept in the store and
// served by every node: named by the SHA-256 of its bytes, so that one
// file uploaded twice is kept once and a name never changes its bytes.
type Asset struct {
	// SHA256 is the lower-case hex SHA-256 of Data: the asset's name.
	SHA256 string
	// ContentType is the media type read from the bytes (image/png), never
	// one a client claimed.
	ContentType string
	Data        []byte
}

// Limits of an asset.
const (
	// MaxAssetBytes is the largest asset a store keeps: the configured
	// limits (ads.assets) may only be lower. A Redis value holds it in one
	// command.
	MaxAssetBytes = 64 << 20
	// MaxAssetTypeLength bounds an asset's content type.
	MaxAssetTypeLength = 64
)

// Assets keeps creatives' files, by name, for every node sharing the store.
// Implementations must be safe for concurrent use. An asset returned is
// the caller's: it may modify its Data.
type Assets interface {
	// PutAsset validates a (ValidateAsset) and keeps it. A name is its
	// bytes' hash, so a put of a name kept already changes nothing.
	PutAsset(ctx context.Context, a *Asset) error
	// GetAsset returns the asset of the given name, or an ENOTFOUND error
	// (an EINVALID one for a name that is no SHA-256).
	GetAsset(ctx context.Context, sum string) (*Asset, error)
}

// AssetSum is the name of an asset of data: its SHA-256, in lower-case hex.
func AssetSum(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// ValidAssetSum reports whether s is an asset's name: 64 lower-case hex
// digits.
func ValidAssetSum(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ValidateAsset checks an asset before a store keeps it: EINVALID unless
// its name is the SHA-256 of its data, its data is 1 to MaxAssetBytes
// bytes, and its content type is a type/subtype of token characters of at
// most MaxAssetTypeLength bytes.
func ValidateAsset(a *Asset) error {
	switch {
	case a == nil:
		return Errorf(EINVALID, "no asset")
	case len(a.Data) == 0:
		return Errorf(EINVALID, "an asset has at least one byte")
	case len(a.Data) > MaxAssetBytes:
		return Errorf(ETOOLARGE, "an asset has at most %d bytes (got %d)", MaxAssetBytes, len(a.Data))
	case !validAssetType(a.ContentType):
		return Errorf(EINVALID, "asset content type %q is not a type/subtype of at most %d bytes", a.ContentType, MaxAssetTypeLength)
	case !ValidAssetSum(a.SHA256):
		return Errorf(EINVALID, "asset name %q is not a SHA-256 in lower-case hex", a.SHA256)
	case AssetSum(a.Data) != a.SHA256:
		return Errorf(EINVALID, "asset name %s is not the SHA-256 of its bytes", a.SHA256)
	}
	return nil
}

// validAssetType reports whether t is type/subtype, each of letters,
// digits and .+-, without parameters.
func validAssetType(t string) bool {
	if len(t) == 0 || len(t) > MaxAssetTypeLength {
		return false
	}
	slash := 0
	for i := 0; i < len(t); i++ {
		c := t[i]
		switch {
		case c == '/':
			if slash++; slash > 1 || i == 0 || i == len(t)-1 {
				return false
			}
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '+', c == '-':
		default:
			return false
		}
	}
	return slash == 1
}

// AppendAssetRecord appends a's stored form to dst: its content type, a
// newline, its bytes. The stores keep this one value per name.
func AppendAssetRecord(dst []byte, a *Asset) []byte {
	dst = append(dst, a.ContentType...)
	dst = append(dst, '\n')
	return append(dst, a.Data...)
}

// ParseAssetRecord is the asset of the given name a stored form holds
// (AppendAssetRecord); its Data shares rec's memory.
func ParseAssetRecord(sum string, rec []byte) (*Asset, error) {
	for i := 0; i < len(rec) && i <= MaxAssetTypeLength; i++ {
		if rec[i] == '\n' {
			return &Asset{SHA256: sum, ContentType: string(rec[:i]), Data: rec[i+1:]}, nil
		}
	}
	return nil, Errorf(EINTERNAL, "corrupt asset record %s", sum)
}
