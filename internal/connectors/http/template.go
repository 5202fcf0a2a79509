package httpconn

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/onceflight/onceflight/connectors"
)

// A Template is text with placeholders over the command: {key} (the
// idempotency key), {entity}, {action}, {attempt}, {data} (the whole data
// as JSON) and {data.PATH} (a dotted path into the data). Only braces
// around a name are placeholders, so a JSON body template keeps its own
// braces: in `{"amount": {data.amount}}` the first brace is text.
//
// Values are escaped for where they go (expand's mode): in a URL as a path
// segment before the "?" and as a query value after it, so a key with "/"
// or "&" cannot change which resource is asked about (nor can an empty
// value in the path, which is refused); in a JSON template a
// string is JSON-escaped (write it inside quotes), so data cannot close the
// string and add fields; in a form template (content type
// application/x-www-form-urlencoded) every value is form-escaped, so data
// with "&" or "=" cannot add or replace a field.
type Template struct {
	src   string
	parts []tmplPart
}

type tmplPart struct {
	lit   string
	field []string // nil for literal text
	query bool     // after the URL's "?"
}

var placeholder = regexp.MustCompile(`\{([A-Za-z_][A-Za-z0-9_.\-]*)\}`)

// templateRoots are the names a placeholder may start with.
var templateRoots = []string{"key", "entity", "action", "attempt", "data"}

// ParseTemplate parses s. An unknown name ({dta.order_id}) or an empty
// path step ({data..id}) is an error, caught when the file is loaded.
func ParseTemplate(s string) (*Template, error) {
	t := &Template{src: s}
	last, query := 0, false
	for _, m := range placeholder.FindAllStringSubmatchIndex(s, -1) {
		lit := s[last:m[0]]
		t.parts = append(t.parts, tmplPart{lit: lit, query: query})
		query = query || strings.Contains(lit, "?")
		name := s[m[2]:m[3]]
		field := strings.Split(name, ".")
		if !slices.Contains(templateRoots, field[0]) {
			return nil, fmt.Errorf("unknown template field {%s}: want {key}, {entity}, {action}, {attempt}, {data} or {data.PATH}", name)
		}
		if len(field) > 1 && field[0] != "data" {
			return nil, fmt.Errorf("template field {%s}: only data has fields", name)
		}
		if slices.Contains(field, "") {
			return nil, fmt.Errorf("template field {%s} has an empty path step", name)
		}
		t.parts = append(t.parts, tmplPart{field: field, query: query})
		last = m[1]
	}
	t.parts = append(t.parts, tmplPart{lit: s[last:]})
	return t, nil
}

// String is the template as written.
func (t *Template) String() string { return t.src }

// HasPlaceholder reports whether anything in t comes from the command.
func (t *Template) HasPlaceholder() bool {
	return slices.ContainsFunc(t.parts, func(p tmplPart) bool { return p.field != nil })
}

// SearchesByQuery reports whether a placeholder sits in the query, after
// the "?": the request searches a collection (GET /refunds?key={key})
// rather than naming one object (GET /refunds/{key}).
func (t *Template) SearchesByQuery() bool {
	return slices.ContainsFunc(t.parts, func(p tmplPart) bool { return p.field != nil && p.query })
}

// DataPaths lists the data paths t reads, e.g. ["order_id"] for
// {data.order_id}; the loader checks them against the action's schema.
func (t *Template) DataPaths() [][]string {
	var out [][]string
	for _, p := range t.parts {
		if len(p.field) > 1 {
			out = append(out, p.field[1:])
		}
	}
	return out
}

// Sample is t with every placeholder replaced by "x", to check that the
// result is a well-formed URL at load time.
func (t *Template) Sample() string {
	var b strings.Builder
	for _, p := range t.parts {
		if p.field != nil {
			b.WriteString("x")
		} else {
			b.WriteString(p.lit)
		}
	}
	return b.String()
}

// expansion modes
const (
	modeURL  = iota // path segment / query value escaping
	modeJSON        // strings JSON-escaped
	modeText        // as is
	modeForm        // form-escaped (application/x-www-form-urlencoded)
)

// expand fills t from req; data is req.Data decoded (decodeData).
func (t *Template) expand(req connectors.Request, data any, mode int) (string, error) {
	if len(t.parts) == 1 && t.parts[0].field == nil {
		// A URL without placeholders (every Execute of the default
		// protocol): the text itself, not a copy per request.
		return t.parts[0].lit, nil
	}
	var b strings.Builder
	for _, p := range t.parts {
		if p.field == nil {
			b.WriteString(p.lit)
			continue
		}
		v, err := fieldValue(p.field, req, data)
		if err != nil {
			return "", err
		}
		s, isString := v.(string)
		if !isString {
			raw, err := marshal(v)
			if err != nil {
				return "", fmt.Errorf("template field {%s}: %w", strings.Join(p.field, "."), err)
			}
			s = string(raw)
		}
		switch {
		case mode == modeURL && p.query:
			s = url.QueryEscape(s)
		case mode == modeURL && s == "":
			// An empty path value names another resource:
			// /v1/orders/{data.id} would be /v1/orders/, the
			// listing, whose 200 the default found rule reads as
			// "it happened". A query value names the same one.
			return "", fmt.Errorf("template field {%s} is empty: in a URL path it would name another resource", strings.Join(p.field, "."))
		case mode == modeURL && isDotSegment(s):
			return "", fmt.Errorf("template field {%s} is %q: in a URL path it would name another resource", strings.Join(p.field, "."), s)
		case mode == modeURL:
			s = escapeKey(s)
		case mode == modeForm:
			s = url.QueryEscape(s)
		case mode == modeJSON && isString:
			raw, _ := marshal(s) // a string always marshals
			s = string(raw[1 : len(raw)-1])
		}
		b.WriteString(s)
	}
	return b.String(), nil
}

// isDotSegment reports whether a path value is "." or "..", or has one
// between its slashes ("a/../.."): escaped as %2E%2E, or ..%2F..,
// (escapeKey) it is no dot-segment as written, but RFC 3986 §6.2.2.2 makes
// a percent-encoded unreserved character equal to the character, and a
// normalizing proxy or server (nginx, which decodes %2F as well) decodes
// it and removes the segment — GET /v1/refunds/%2E is then the listing,
// whose 200 the default found rule reads as "it happened". Such a value is
// refused as an empty one is.
func isDotSegment(s string) bool {
	for seg := range strings.SplitSeq(s, "/") {
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}

// marshal is json.Marshal without HTML escaping: "&" stays "&" in a
// template's output, as the data had it.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// fieldValue is one placeholder's value: a string, or a JSON value
// (json.Number, bool, map, slice) from the data.
func fieldValue(field []string, req connectors.Request, data any) (any, error) {
	switch field[0] {
	case "key":
		return req.Key, nil
	case "entity":
		return req.Entity, nil
	case "action":
		return req.Action, nil
	case "attempt":
		return json.Number(strconv.Itoa(req.Attempt)), nil
	}
	v := data
	for i, step := range field[1:] {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("template field {%s}: data.%s is not an object", strings.Join(field, "."), strings.Join(field[1:i+1], "."))
		}
		if v, ok = m[step]; !ok {
			return nil, fmt.Errorf("template field {%s}: the command's data has no %s", strings.Join(field, "."), strings.Join(field[1:i+2], "."))
		}
	}
	if v == nil {
		return nil, fmt.Errorf("template field {%s} is null in the command's data", strings.Join(field, "."))
	}
	return v, nil
}

// decodeData decodes command data for templates and forms, numbers kept
// exactly as written. Absent data is an empty object.
func decodeData(raw json.RawMessage) (any, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return map[string]any{}, nil
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, fmt.Errorf("command data is not JSON: %w", err)
	}
	return v, nil
}

// formEncode is data as application/x-www-form-urlencoded in the bracket
// style most form APIs read (Stripe, Rails, PHP): {"metadata":{"order":"7"},
// "items":["a"]} is metadata[order]=7&items[0]=a. Null fields are left out.
func formEncode(data any) (string, error) {
	m, ok := data.(map[string]any)
	if !ok {
		return "", fmt.Errorf("form body: the command's data must be a JSON object")
	}
	vals := url.Values{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch x := v.(type) {
		case nil:
		case map[string]any:
			keys := make([]string, 0, len(x))
			for k := range x {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				walk(prefix+"["+k+"]", x[k])
			}
		case []any:
			for i, e := range x {
				walk(prefix+"["+strconv.Itoa(i)+"]", e)
			}
		case string:
			vals.Add(prefix, x)
		default: // json.Number, bool
			vals.Add(prefix, fmt.Sprint(x))
		}
	}
	for k, v := range m {
		walk(k, v)
	}
	return vals.Encode(), nil
}
