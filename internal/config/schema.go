package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// maxSchemaBytes bounds schema files; a schema is small, and the bound
// keeps a path like /dev/zero from hanging start-up.
const maxSchemaBytes = 4 << 20

// compileSchema compiles the JSON Schema at path (relative to the config
// file's directory). Compiling at load means a broken schema stops start-up
// instead of rejecting every command at run time.
func (p *loader) compileSchema(path string) (*jsonschema.Schema, error) {
	if path == "" {
		return nil, errors.New("must not be empty")
	}
	full := path
	if !filepath.IsAbs(full) {
		full = filepath.Join(p.dir, full)
	}
	full, err := filepath.Abs(full)
	if err != nil {
		return nil, err
	}
	if err := checkSchemaFile(full); err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(jsonschema.SchemeURLLoader{"file": boundedFileLoader{}})
	sch, err := c.Compile(full)
	if err != nil {
		return nil, fmt.Errorf("invalid schema %s: %v", path, err)
	}
	return sch, nil
}

func checkSchemaFile(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("schema file %s not found", path)
		}
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("schema %s is not a regular file", path)
	}
	if fi.Size() > maxSchemaBytes {
		return fmt.Errorf("schema %s is larger than %d bytes", path, maxSchemaBytes)
	}
	return nil
}

// boundedFileLoader is jsonschema's file loader with checkSchemaFile applied
// to every file, including those reached through $ref.
type boundedFileLoader struct{}

func (boundedFileLoader) Load(u string) (any, error) {
	path, err := jsonschema.FileLoader{}.ToFile(u)
	if err != nil {
		return nil, err
	}
	if err := checkSchemaFile(path); err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return jsonschema.UnmarshalJSON(f)
}
