// Package openapitest checks real HTTP answers against the executor's
// OpenAPI document (internal/api/openapi.json): the tests of every package
// that serves an endpoint in it run their requests through Check, so that a
// handler whose answer changes shape without the document fails a test.
package openapitest

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"

	"github.com/onceflight/onceflight/cli/internal/api"
)

var (
	once   sync.Once
	shared validator.Validator
	errs   []error
)

func load() (validator.Validator, []error) {
	once.Do(func() {
		doc, err := libopenapi.NewDocument(api.OpenAPI())
		if err != nil {
			errs = []error{err}
			return
		}
		shared, errs = validator.NewValidator(doc)
	})
	return shared, errs
}

// Document fails the test unless the document itself is a valid OpenAPI
// 3.1 document.
func Document(t testing.TB) {
	t.Helper()
	v, errs := load()
	if len(errs) > 0 {
		t.Fatalf("openapi.json: %v", errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		for _, e := range verrs {
			t.Errorf("openapi.json: %s: %s", e.Message, e.Reason)
		}
	}
}

// Check fails the test unless the answer resp (whose body was read into
// body) to req is one the document describes: a documented status for the
// path and method, a documented content type, and a body that matches the
// schema.
func Check(t testing.TB, req *http.Request, resp *http.Response, body []byte) {
	t.Helper()
	v, errs := load()
	if len(errs) > 0 {
		t.Fatalf("openapi.json: %v", errs)
	}
	// The validator reads the bodies; the caller has read them already.
	r := req.Clone(req.Context())
	r.Body = io.NopCloser(strings.NewReader(""))
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if ok, verrs := v.ValidateHttpResponse(r, resp); !ok {
		for _, e := range verrs {
			t.Errorf("%s %s -> %d: not as openapi.json says: %s: %s\n%s", req.Method, req.URL.Path, resp.StatusCode, e.Message, e.Reason, body)
			for _, se := range e.SchemaValidationErrors {
				t.Errorf("  at %s: %s", se.FieldPath, se.Reason)
			}
		}
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
}
