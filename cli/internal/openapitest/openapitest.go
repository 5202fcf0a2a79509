// Package openapitest checks real HTTP answers against the executor's
// OpenAPI document (internal/api/openapi.json): the tests of every package
// that serves an endpoint in it run their requests through Check, so that a
// handler whose answer changes shape without the document fails a test.
package openapitest

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
)

var (
	once   sync.Once
	spec   []byte
	shared validator.Validator
	errs   []error
)

// specPath is openapi.json beside the api package's source, found from
// this file's own path so that the tests of any package read it.
func specPath() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "api", "openapi.json")
}

func load() (validator.Validator, []error) {
	once.Do(func() {
		var err error
		if spec, err = os.ReadFile(specPath()); err != nil {
			errs = []error{err}
			return
		}
		doc, err := libopenapi.NewDocument(spec)
		if err != nil {
			errs = []error{err}
			return
		}
		shared, errs = validator.NewValidator(doc)
	})
	return shared, errs
}

// Spec is the OpenAPI document serve embeds and answers at
// /openapi.json (cli/internal/api/openapi.json), for tests that walk it.
func Spec(t testing.TB) []byte {
	t.Helper()
	if _, errs := load(); len(errs) > 0 {
		t.Fatalf("openapi.json: %v", errs)
	}
	return spec
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
