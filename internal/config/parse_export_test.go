package config

// Parse is ParseWith without registered connector kinds: the tests' way to
// parse a file they hold in memory.
func Parse(path string, data []byte) (*Config, error) { return ParseWith(path, data, nil) }
