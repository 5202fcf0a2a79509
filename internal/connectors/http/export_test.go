package httpconn

// SetDefaultClient makes name the client of a Transport that names none,
// so that the whole test suite runs on either client (client_test.go).
func SetDefaultClient(name string) { defaultClient = name }
