package httpconn

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/onceflight/onceflight/connectors"
)

// Rules over an API's answer are CEL expressions (the expression language
// Kubernetes uses for admission rules) over these variables:
//
//	status   int                  the HTTP status
//	headers  map(string, string)  response headers, names in lower case, first value
//	body     dyn                  the body parsed as JSON; the text when it is not JSON; {} when empty
//	key      string               the command's idempotency key
//	entity   string               the command's entity
//
// key and entity let a lookup check that what it found is the attempt it
// asked about (body.data.exists(r, r.client_ref == key)): an API that
// ignores an unknown filter answers with a list of other objects, which
// "size(body.data) > 0" would read as found.
//
// A CEL expression cannot loop or call out, and its cost is bounded
// (celCostLimit), so a rule can neither hang the executor nor reach
// anything but the answer. An expression that fails at run time (body.data
// on an HTML error page) has no answer: for a confirmation that means
// "unknown", never "not found".

// celCostLimit bounds one evaluation; comprehensions over a 64 KiB body
// stay far below it.
const celCostLimit = 1_000_000

var (
	celEnvOnce sync.Once
	celEnv     *cel.Env
	celEnvErr  error
)

func answerEnv() (*cel.Env, error) {
	celEnvOnce.Do(func() {
		celEnv, celEnvErr = cel.NewEnv(
			cel.Variable("status", cel.IntType),
			cel.Variable("headers", cel.MapType(cel.StringType, cel.StringType)),
			cel.Variable("body", cel.DynType),
			cel.Variable("key", cel.StringType),
			cel.Variable("entity", cel.StringType),
		)
	})
	return celEnv, celEnvErr
}

// Rule is a compiled expression over an answer.
type Rule struct {
	src  string
	prg  cel.Program
	bool bool // a predicate: must evaluate to a bool
	// readsBody: the expression refers to body. On a body cut short
	// (broken off, or longer than the connector reads) such a predicate
	// has no answer: what it says of the part may be false of the whole
	// (!has(body.id) holds on a body cut before its id).
	readsBody bool
}

// String is the expression as written.
func (r *Rule) String() string { return r.src }

// CompilePredicate compiles a CEL expression that must be true or false
// (found, not_found, rejected_when). The error is CEL's, with the column.
func CompilePredicate(expr string) (*Rule, error) { return compileRule(expr, true) }

// CompileMapping compiles a CEL expression whose value, as JSON, becomes the
// record's result (result, confirm.result).
func CompileMapping(expr string) (*Rule, error) { return compileRule(expr, false) }

func compileRule(expr string, predicate bool) (*Rule, error) {
	if strings.TrimSpace(expr) == "" {
		return nil, errors.New("empty expression")
	}
	env, err := answerEnv()
	if err != nil {
		return nil, fmt.Errorf("CEL environment: %w", err)
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, fmt.Errorf("CEL: %s", strings.ReplaceAll(iss.Err().Error(), "\n", " "))
	}
	if predicate {
		if t := ast.OutputType(); !t.IsExactType(types.BoolType) && !t.IsExactType(types.DynType) {
			return nil, fmt.Errorf("CEL: %q is a %s, want true or false", expr, t)
		}
	}
	prg, err := env.Program(ast, cel.CostLimit(celCostLimit))
	if err != nil {
		return nil, fmt.Errorf("CEL: %w", err)
	}
	r := &Rule{src: expr, prg: prg, bool: predicate}
	for _, ref := range ast.NativeRep().ReferenceMap() {
		// A comprehension's variable named body counts too: the safe side.
		r.readsBody = r.readsBody || ref.Name == "body"
	}
	return r, nil
}

// answer is an HTTP answer as rules see it; vars are its CEL variables,
// built once for all the rules evaluated on it (the body is parsed once).
type answer struct {
	status  int
	headers http.Header
	body    []byte
	vars    map[string]any
}

func newAnswer(req connectors.Request, status int, headers http.Header, body []byte) answer {
	a := answer{status: status, headers: headers, body: body}
	a.vars = a.activation(req)
	return a
}

func (a answer) activation(req connectors.Request) map[string]any {
	h := make(map[string]string, len(a.headers))
	for k, vs := range a.headers {
		if len(vs) > 0 {
			h[strings.ToLower(k)] = vs[0]
		}
	}
	var body any = map[string]any{}
	if t := bytes.TrimSpace(a.body); len(t) > 0 {
		if json.Unmarshal(t, &body) != nil {
			body = string(a.body)
		}
	}
	return map[string]any{"status": int64(a.status), "headers": h, "body": body, "key": req.Key, "entity": req.Entity}
}

// holds evaluates a predicate.
func (r *Rule) holds(a answer) (bool, error) {
	v, _, err := r.prg.Eval(a.vars)
	if err != nil {
		return false, fmt.Errorf("%s: %w", r.src, err)
	}
	b, ok := v.Value().(bool)
	if !ok {
		return false, fmt.Errorf("%s: evaluated to %v, not true or false", r.src, v.Value())
	}
	return b, nil
}

// json evaluates a mapping to JSON.
func (r *Rule) json(a answer) (json.RawMessage, error) {
	v, _, err := r.prg.Eval(a.vars)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.src, err)
	}
	pv, err := v.ConvertToNative(reflect.TypeFor[*structpb.Value]())
	if err != nil {
		return nil, fmt.Errorf("%s: the value is not JSON: %w", r.src, err)
	}
	b, err := protojson.Marshal(pv.(*structpb.Value))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.src, err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, b); err != nil {
		return nil, fmt.Errorf("%s: %w", r.src, err)
	}
	return compact.Bytes(), nil
}
