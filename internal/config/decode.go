package config

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/token"
)

// decoder fills the tagged structs of parse.go (fileDoc) from a parsed file.
//
// It does the job of goccy/go-yaml's strict decoder (yaml.Strict, which
// reads the same tags: TestTagsMatchStrictDecoder) but goes on after a
// problem: that decoder returns one error per run, an ill-typed value
// hiding even the unknown keys, where an operator wants every mistake of
// the file at once, each with its line and column. It also decodes scalars
// strictly where goccy converts (1.5 into an int as 1, "5" as 5, null as
// ""), since a lenient reading of a safeguard is a silently different
// safeguard.
//
// Every key it meets is recorded in index with its key and value nodes, so
// that the validation rules can point at what they reject.
type decoder struct {
	file    string
	aliases map[*ast.AliasNode]ast.Node // see linkAliases
	index   map[loc]written
	bad     map[loc]bool // places with an error, not to be checked further
	budget  int          // mapping entries left; see maxMergeEntries
	errs    []error
}

// loc names a place in the file the way errors do: the action ("" outside
// actions) and the dotted field path inside it.
type loc struct{ action, field string }

// locOf maps a key path to its loc: ["actions", "x", "kafka", "brokers"]
// is action "x", field "kafka.brokers".
func locOf(path []string) loc {
	if len(path) >= 2 && path[0] == "actions" {
		return loc{path[1], strings.Join(path[2:], ".")}
	}
	return loc{"", strings.Join(path, ".")}
}

// written is a key as it appears in the file.
type written struct{ key, value ast.Node }

// maxMergeEntries bounds the key/value pairs one mapping may expand to
// through merge keys: aliases make nested merges exponential (a "billion
// laughs" file), and no real actions file comes near the bound.
const maxMergeEntries = 10000

// maxMergeDepth bounds merge keys inside merged mappings.
const maxMergeDepth = 8

// linkAliases maps every alias under root to the value it names: the most
// recent anchor of that name before it in the document, as YAML specifies
// (an anchor may be redefined). An anchor is registered only after its own
// value, so an alias inside it names an earlier anchor or none, and
// following aliases cannot loop.
func linkAliases(root ast.Node) map[*ast.AliasNode]ast.Node {
	l := aliasLinker{anchors: map[string]ast.Node{}, targets: map[*ast.AliasNode]ast.Node{}}
	ast.Walk(&l, root)
	return l.targets
}

type aliasLinker struct {
	anchors map[string]ast.Node
	targets map[*ast.AliasNode]ast.Node
}

func (l *aliasLinker) Visit(n ast.Node) ast.Visitor {
	switch n := n.(type) {
	case *ast.AnchorNode:
		if n.Value != nil {
			ast.Walk(l, n.Value)
		}
		if n.Name != nil {
			l.anchors[n.Name.GetToken().Value] = n.Value
		}
		return nil
	case *ast.AliasNode:
		if n.Value != nil {
			if t, ok := l.anchors[n.Value.GetToken().Value]; ok {
				l.targets[n] = t
			}
		}
		return nil
	}
	return l
}

func (d *decoder) errAt(n ast.Node, l loc, format string, args ...any) {
	d.bad[l] = true
	var tk *token.Token
	if n != nil {
		tk = n.GetToken()
	}
	d.errs = append(d.errs, d.errorAt(tk, l, fmt.Sprintf(format, args...)))
}

func (d *decoder) errorAt(tk *token.Token, l loc, msg string) *Error {
	e := &Error{File: d.file, Action: l.action, Field: l.field, Msg: msg}
	if tk != nil && tk.Position != nil {
		e.Line, e.Column = tk.Position.Line, tk.Position.Column
	}
	return e
}

// resolve strips anchors and tags and follows aliases, so callers see the
// value itself; an alias naming no anchor is returned as is (and refused
// by whoever expected a value). The bound is a second guard next to
// linkAliases' ordering.
func (d *decoder) resolve(n ast.Node) ast.Node {
	for range 64 {
		switch v := n.(type) {
		case *ast.AnchorNode:
			n = v.Value
		case *ast.TagNode:
			n = v.Value
		case *ast.AliasNode:
			t, ok := d.aliases[v]
			if !ok {
				return v
			}
			n = t
		default:
			return n
		}
	}
	return nil
}

// entry is one key of a mapping after merge keys have been expanded.
type entry struct {
	key        string
	keyNd, val ast.Node // val is resolved
}

// entries returns the keys of a mapping with merge keys (<<) expanded;
// explicit keys win over merged ones, as YAML specifies. A null value is
// an empty mapping; anything else is reported (msg).
func (d *decoder) entries(n ast.Node, l loc, msg string) []entry {
	d.budget = maxMergeEntries
	es, _ := d.mergeEntries(n, l, msg, 0)
	return es
}

func (d *decoder) mergeEntries(n ast.Node, l loc, msg string, depth int) ([]entry, bool) {
	orig := n
	var values []*ast.MappingValueNode
	switch v := d.resolve(n).(type) {
	case nil, *ast.NullNode:
		return nil, true
	case *ast.MappingNode:
		values = v.Values
	case *ast.MappingValueNode:
		values = []*ast.MappingValueNode{v}
	default:
		d.errAt(orig, l, "%s", msg)
		return nil, false
	}
	var out, merged []entry
	seen := map[string]bool{}
	for _, mv := range values {
		if mv == nil || mv.Key == nil {
			continue
		}
		if d.budget--; d.budget < 0 {
			d.errAt(mv.Key, l, "merge keys expand to more than %d entries", maxMergeEntries)
			return nil, false
		}
		if mv.Key.IsMergeKey() {
			if depth >= maxMergeDepth {
				d.errAt(mv.Key, l, "merge keys nested too deeply")
				return nil, false
			}
			srcs := []ast.Node{mv.Value}
			if seq, isSeq := d.resolve(mv.Value).(*ast.SequenceNode); isSeq {
				srcs = seq.Values
			}
			for _, s := range srcs {
				es, ok := d.mergeEntries(s, l, msg, depth+1)
				if !ok {
					return nil, false
				}
				merged = append(merged, es...)
			}
			continue
		}
		key, ok := scalarText(d.resolve(mv.Key))
		if !ok {
			d.errAt(mv.Key, l, "keys must be strings")
			continue
		}
		// The parser rejects duplicate keys; this guards merges of the
		// same mapping.
		if !seen[key] {
			seen[key] = true
			out = append(out, entry{key, mv.Key, d.resolve(mv.Value)})
		}
	}
	for _, e := range merged {
		if !seen[e.key] {
			seen[e.key] = true
			out = append(out, e)
		}
	}
	return out, true
}

// scalarText returns the text of a string, number or boolean scalar; YAML
// types numbers, but a topic or an action may well be named "2024".
func scalarText(n ast.Node) (string, bool) {
	switch v := n.(type) {
	case *ast.StringNode:
		return v.Value, true
	case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode, *ast.InfinityNode, *ast.NanNode:
		return v.GetToken().Value, true
	}
	return "", false
}

// decode stores node n, found at path, in v. The shape comes from v's type:
// a struct is a mapping whose keys are its fields' yaml tags, a map a
// mapping of any keys, a slice a sequence of strings (or of another leaf); other leaves are
// strings, booleans, ints and types with their own UnmarshalYAML
// (Duration, Days).
func (d *decoder) decode(n ast.Node, v reflect.Value, path []string) {
	l := locOf(path)
	if v.Kind() != reflect.Struct && v.Kind() != reflect.Map {
		n = d.resolve(n)
	}
	fail := func(format string, args ...any) { d.errAt(n, l, format, args...) }
	if u, ok := v.Addr().Interface().(yaml.NodeUnmarshaler); ok {
		if err := u.UnmarshalYAML(n); err != nil {
			fail("%v", err)
		}
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		msg := "must be a mapping"
		if len(path) == 0 {
			msg = `the file must be a mapping with an "actions" key`
		}
		for _, e := range d.entries(n, l, msg) {
			f, ok := fieldByTag(v, e.key)
			if !ok {
				// x- keys are free for anchors shared by several
				// actions, the convention Docker Compose uses.
				if len(path) > 0 || !strings.HasPrefix(e.key, "x-") {
					d.errAt(e.keyNd, loc{l.action, ""}, "unknown field %q", locOf(append(path, e.key)).field)
				}
				continue
			}
			d.field(e, f, path)
		}
	case reflect.Map:
		es := d.entries(n, l, "must be a mapping")
		v.Set(reflect.MakeMapWithSize(v.Type(), len(es)))
		for _, e := range es {
			elem := reflect.New(v.Type().Elem()).Elem()
			d.field(e, elem, path)
			v.SetMapIndex(reflect.ValueOf(e.key), elem)
		}
	case reflect.Slice:
		switch s := n.(type) {
		case nil, *ast.NullNode:
		case *ast.SequenceNode:
			v.Set(reflect.MakeSlice(v.Type(), 0, len(s.Values)))
			if et := v.Type().Elem(); et.Kind() != reflect.String {
				// A list of another leaf (statuses' status codes): each
				// item decoded as that leaf, with its message.
				for _, item := range s.Values {
					elem := reflect.New(et).Elem()
					d.decode(item, elem, path)
					v.Set(reflect.Append(v, elem))
				}
				return
			}
			for _, item := range s.Values {
				text, ok := scalarText(d.resolve(item))
				if !ok {
					d.errAt(item, l, "items must be strings")
					continue
				}
				v.Set(reflect.Append(v, reflect.ValueOf(text)))
			}
		default:
			if v.Type().Elem().Kind() == reflect.Int {
				fail("must be a list of integers")
				return
			}
			fail("must be a list of strings")
		}
	case reflect.String:
		text, ok := scalarText(n)
		if !ok {
			fail("must be a string")
		}
		v.SetString(text)
	case reflect.Bool:
		b, ok := n.(*ast.BoolNode)
		if !ok {
			fail("must be true or false")
			return
		}
		v.SetBool(b.Value)
	case reflect.Int:
		i, ok := n.(*ast.IntegerNode)
		if !ok {
			fail("must be an integer")
			return
		}
		// i.Value is an int64 or, past its range, a uint64; no count in
		// the file needs more than 32 bits.
		x, err := strconv.ParseInt(fmt.Sprint(i.Value), 10, 32)
		if err != nil {
			fail("%s is out of range", i.Token.Value)
			return
		}
		v.SetInt(x)
	default:
		panic(fmt.Sprintf("config: no decoding for %s", v.Type()))
	}
}

// field records entry e, a key under path, in the index and decodes its
// value into v.
func (d *decoder) field(e entry, v reflect.Value, path []string) {
	path = append(path[:len(path):len(path)], e.key)
	d.index[locOf(path)] = written{e.keyNd, e.val}
	d.decode(e.val, v, path)
}

// fieldByTag returns the field of struct v whose yaml tag is key.
func fieldByTag(v reflect.Value, key string) (reflect.Value, bool) {
	for i := range v.NumField() {
		if tag, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("yaml"), ","); tag == key {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}
