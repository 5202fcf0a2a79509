package wire

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/onceflight/onceflight/internal/jcs"
)

// UniqueKey is the identity of a command's unique_by tuple (docs/configuration.md):
// "sha256:" + hex SHA-256 over the RFC 8785 canonical JSON of each path's
// value, each framed, in the order of paths. Paths are dotted ("order.id"
// is data.order.id). Values compare as canonical JSON, so {"a":1,"b":2}
// and {"b":2,"a":1} are one value, and 1 and 1.0 are one number.
//
// A path that names nothing is an error: a tuple with a hole cannot say
// whether two commands describe the same business change, and taking the
// hole as null would make every command without the field a duplicate of
// the first one.
func UniqueKey(paths []string, data json.RawMessage) (string, error) {
	if len(paths) == 0 {
		return "", nil
	}
	var root any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&root); err != nil {
		return "", fmt.Errorf("unique_by: data is not JSON: %w", err)
	}
	h := sha256.New()
	jcs.WriteFramed(h, []byte("onceflight/unique-by/v1"))
	for _, path := range paths {
		v, ok := root, true
		for _, step := range strings.Split(path, ".") {
			obj, isObj := v.(map[string]any)
			if !isObj {
				ok = false
				break
			}
			if v, ok = obj[step]; !ok {
				break
			}
		}
		if !ok {
			return "", fmt.Errorf("unique_by field %q is missing from the data", path)
		}
		raw, err := json.Marshal(v)
		if err != nil {
			return "", fmt.Errorf("unique_by field %q: %w", path, err)
		}
		canon, err := jcs.Canonical(raw)
		if err != nil {
			return "", fmt.Errorf("unique_by field %q: %w", path, err)
		}
		jcs.WriteFramed(h, canon)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}
