package api

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"

	"github.com/onceflight/onceflight/schemas"
)

// Redacted replaces every value a redact path names.
const Redacted = "[redacted]"

// minSecret is the shortest redacted text also scrubbed from the result
// and the error message: shorter ones ("EU", "1") occur everywhere by
// chance, and hiding them there would garble the record.
const minSecret = 4

// RedactRecord returns rec with the data fields paths names
// (config.Action.Redact; dotted, a step that meets a list applies to each
// of its items) replaced by "[redacted]". The text of those fields is also
// scrubbed where it is quoted elsewhere in the record: in the result's
// strings (an external system echoing an IBAN), the error message (a
// schema error quoting the value), the evidence details and an
// operator's reasons. Data that cannot be read is hidden
// whole: with paths to hide, showing it would risk the very fields.
func RedactRecord(rec schemas.Record, paths []string) schemas.Record {
	if len(paths) == 0 {
		return rec
	}
	var secrets []string
	rec.Data, secrets = redactData(rec.Data, paths)
	if len(secrets) == 0 {
		return rec
	}
	if len(rec.Result) > 0 {
		rec.Result = scrubJSON(rec.Result, secrets)
	}
	if rec.Error != nil {
		e := *rec.Error
		e.Message = scrub(e.Message, secrets)
		rec.Error = &e
	}
	// Evidence details quote the external system's answers, which may
	// echo the data.
	if len(rec.Evidence) > 0 {
		evs := make([]schemas.Evidence, len(rec.Evidence))
		for i, ev := range rec.Evidence {
			ev.Detail = scrub(ev.Detail, secrets)
			evs[i] = ev
		}
		rec.Evidence = evs
	}
	// An operator's reason may quote the data too ("refund to DE89…").
	for _, res := range []**schemas.Resolution{&rec.Resolution, &rec.Release} {
		if *res != nil {
			r := **res
			r.Reason = scrub(r.Reason, secrets)
			*res = &r
		}
	}
	return rec
}

// redactData hides paths in data and returns the texts it hid.
func redactData(data json.RawMessage, paths []string) (json.RawMessage, []string) {
	if len(bytes.TrimSpace(data)) == 0 {
		return data, nil
	}
	root, ok := decode(data)
	if !ok {
		return json.RawMessage(`"` + Redacted + `"`), nil
	}
	var secrets []string
	hid := false
	for _, p := range paths {
		hid = hide(root, strings.Split(p, "."), &secrets) || hid
	}
	if !hid {
		return data, nil
	}
	out, err := json.Marshal(root)
	if err != nil {
		return json.RawMessage(`"` + Redacted + `"`), secrets
	}
	return out, secrets
}

func decode(raw json.RawMessage) (any, bool) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // 12345678901234567890 stays as written
	if err := dec.Decode(&v); err != nil || dec.More() {
		return nil, false
	}
	return v, true
}

// hide replaces the value at steps below v, collecting its texts, and
// reports whether there was one.
func hide(v any, steps []string, secrets *[]string) bool {
	switch v := v.(type) {
	case map[string]any:
		child, ok := v[steps[0]]
		if !ok {
			return false
		}
		if len(steps) == 1 {
			texts(child, secrets)
			v[steps[0]] = Redacted
			return true
		}
		return hide(child, steps[1:], secrets)
	case []any:
		hid := false
		for _, e := range v {
			hid = hide(e, steps, secrets) || hid
		}
		return hid
	}
	return false
}

// texts collects the strings and numbers in v long enough to scrub.
func texts(v any, out *[]string) {
	switch v := v.(type) {
	case string:
		if len(v) >= minSecret {
			*out = append(*out, v)
		}
	case json.Number:
		if len(v) >= minSecret {
			*out = append(*out, string(v))
		}
	case map[string]any:
		for _, e := range v {
			texts(e, out)
		}
	case []any:
		for _, e := range v {
			texts(e, out)
		}
	}
}

// scrubJSON scrubs the secrets from every string of a JSON value.
func scrubJSON(raw json.RawMessage, secrets []string) json.RawMessage {
	v, ok := decode(raw)
	if !ok {
		if s := scrub(string(raw), secrets); s != string(raw) {
			return json.RawMessage(`"` + Redacted + `"`)
		}
		return raw
	}
	changed := false
	var walk func(v any) any
	walk = func(v any) any {
		switch t := v.(type) {
		case string:
			if s := scrub(t, secrets); s != t {
				changed = true
				return s
			}
		case json.Number:
			if slices.Contains(secrets, string(t)) {
				changed = true
				return Redacted
			}
		case map[string]any:
			for k, e := range t {
				t[k] = walk(e)
			}
		case []any:
			for i, e := range t {
				t[i] = walk(e)
			}
		}
		return v
	}
	v = walk(v)
	if !changed {
		return raw
	}
	out, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage(`"` + Redacted + `"`)
	}
	return out
}

func scrub(s string, secrets []string) string {
	for _, sec := range secrets {
		s = strings.ReplaceAll(s, sec, Redacted)
	}
	return s
}
