package wire

import (
	"encoding/json"
	"testing"
)

func TestUniqueKey(t *testing.T) {
	paths := []string{"order_id", "line.sku"}
	k := func(data string) string {
		t.Helper()
		u, err := UniqueKey(paths, json.RawMessage(data))
		if err != nil {
			t.Fatalf("UniqueKey(%s): %v", data, err)
		}
		return u
	}
	a := k(`{"order_id":"o-1","line":{"sku":{"a":1,"b":2}},"amount":5}`)
	if b := k(`{"amount":9,"line":{"sku":{"b":2,"a":1.0}},"order_id":"o-1"}`); b != a {
		t.Errorf("same tuple, other spelling and other fields: %s != %s", b, a)
	}
	if c := k(`{"order_id":"o-2","line":{"sku":{"a":1,"b":2}}}`); c == a {
		t.Error("other order_id gave the same key")
	}
	// Framing: ("ab","c") and ("a","bc") differ.
	if k(`{"order_id":"ab","line":{"sku":"c"}}`) == k(`{"order_id":"a","line":{"sku":"bc"}}`) {
		t.Error("tuple values are not framed")
	}
	if _, err := UniqueKey(paths, json.RawMessage(`{"order_id":"o-1","line":{}}`)); err == nil {
		t.Error("missing field accepted")
	}
	if u, err := UniqueKey(nil, json.RawMessage(`{}`)); u != "" || err != nil {
		t.Errorf("no unique_by: %q, %v", u, err)
	}
}
