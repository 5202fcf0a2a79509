package kafkaconf

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"unicode"
)

// maxLine bounds one line of a properties file; no connection property is
// anywhere near it, and a binary file fed by mistake fails fast.
const maxLine = 64 << 10

// parseProperties reads a properties file: one `key=value` or `key: value`
// per line, blank lines, and comment lines starting with # or !. Keys and
// values are trimmed of surrounding white space; control characters other
// than tab are refused. name is used in Sources
// ("name:line") and messages; r is read to its end.
//
// This is the subset of the Java format that connection settings use, and
// it is parsed here rather than with a full properties library because
// every error, including New's "unknown property", must point at its line.
// Line continuations and escapes are refused instead of half supported: a
// value ending in a backslash is an error, so a password is never silently
// cut or joined with the next line.
func parseProperties(name string, r io.Reader) ([]Property, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxLine)
	var out []Property
	line := 0
	for sc.Scan() {
		line++
		src := fmt.Sprintf("%s:%d", name, line)
		text := sc.Bytes()
		if line == 1 {
			text = bytes.TrimPrefix(text, []byte("\ufeff"))
		}
		s := strings.TrimSpace(string(text))
		if s == "" || s[0] == '#' || s[0] == '!' {
			continue
		}
		if strings.ContainsFunc(s, func(r rune) bool { return unicode.IsControl(r) && r != '\t' }) {
			return nil, &Error{Source: src, Msg: "control character in line (only a line break may end a line)"}
		}
		// A byte-order mark is dropped only as the file's first bytes;
		// anywhere else it would hide inside a key that then matches no
		// property (and reads differently once the file is rewritten).
		if strings.ContainsRune(s, '\ufeff') {
			return nil, &Error{Source: src, Msg: "byte-order mark (U+FEFF) inside the line: only the file's very first bytes may be one"}
		}
		i := strings.IndexAny(s, "=:")
		if i < 0 {
			return nil, &Error{Source: src, Msg: "expected key=value or key: value"}
		}
		key, value := strings.TrimSpace(s[:i]), strings.TrimSpace(s[i+1:])
		if key == "" {
			return nil, &Error{Source: src, Msg: "missing property name before " + string(s[i])}
		}
		if strings.ContainsFunc(key, unicode.IsSpace) {
			return nil, &Error{Source: src, Msg: fmt.Sprintf("property name %q contains white space (write key=value)", key)}
		}
		if strings.HasSuffix(value, `\`) {
			return nil, &Error{Source: src, Property: key, Msg: "line continuations (a trailing backslash) are not supported"}
		}
		out = append(out, Property{Key: key, Value: value, Source: src})
	}
	if err := sc.Err(); err != nil {
		return nil, &Error{Source: fmt.Sprintf("%s:%d", name, line+1), Msg: fmt.Sprintf("read: %v", err)}
	}
	return out, nil
}

// parseFlag parses one `-X key=value` argument. The value may contain '='
// (passwords do).
func parseFlag(arg string) (Property, error) {
	key, value, ok := strings.Cut(arg, "=")
	key = strings.TrimSpace(key)
	if !ok || key == "" {
		return Property{}, &Error{Source: "-X", Msg: fmt.Sprintf("%q is not key=value", redact(arg))}
	}
	return Property{Key: key, Value: strings.TrimSpace(value), Source: "-X"}, nil
}

// redact hides what may be a password in a malformed flag.
func redact(arg string) string {
	if strings.Contains(strings.ToLower(arg), "password") {
		return "sasl.password=…"
	}
	return arg
}

// Load reads the properties file (when file is not "") and then the -X
// flags, which override it, and builds their Config: what the
// --kafka-config and -X flags of every command mean.
func Load(file string, flags []string) (*Config, error) {
	var props []Property
	if file != "" {
		f, err := os.Open(file)
		if err != nil {
			return nil, fmt.Errorf("--kafka-config: %w", err)
		}
		defer f.Close()
		if props, err = parseProperties(file, f); err != nil {
			return nil, err
		}
	}
	for _, arg := range flags {
		p, err := parseFlag(arg)
		if err != nil {
			return nil, err
		}
		props = append(props, p)
	}
	return New(props)
}

// FromMap builds a Config from properties held in a map, the way Go code
// (or a configuration system) usually has them, as confluent-kafka-go's
// ConfigMap does. Keys are checked in sorted order, so messages are stable.
func FromMap(m map[string]string) (*Config, error) {
	props := make([]Property, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		props = append(props, Property{Key: k, Value: m[k]})
	}
	return New(props)
}
